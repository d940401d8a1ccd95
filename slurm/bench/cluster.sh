#!/bin/bash
# Throwaway single-host Slurm (any release of slurm/releases.sh) for trying job_submit/dynmig and the SPANK plugin:
# its own munged, slurmctld and slurmd, all as root, all files under DIR, ports 17817/17818
# (so it does not clash with slurm/cluster.sh's cluster).
#
#   slurm/bench/cluster.sh start DIR [none|dynmig|lua]   # default dynmig
#   slurm/bench/cluster.sh stop DIR
#   SLURM_CONF=DIR/slurm.conf sbatch ...
#
# Needs: cargo build --release -p job-submit-dynmig -p spank-dynmig (or PLUGIN_LIB_DIR=...,
# or DYNMIG_PLUGIN_DIR=... with the versioned builds of slurm/releases.sh plugins SUITE).
# With another release's Slurm: slurm/releases.sh bench SUITE (its daemons and clients).
set -euo pipefail
cmd=${1:?start|stop}
D=${2:?directory}
plugin=${3:-dynmig}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
libdir=${PLUGIN_LIB_DIR:-$root/target/release}
debian_plugins=/usr/lib/x86_64-linux-gnu/slurm-wlm

stop_pidfile() {
	local f=$1
	[ -s "$f" ] || return 0
	local pid
	pid=$(cat "$f")
	if kill -0 "$pid" 2>/dev/null; then
		kill "$pid"
		for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	fi
	rm -f "$f"
}

if [ "$cmd" = stop ]; then
	stop_pidfile "$D/slurmd.pid"
	stop_pidfile "$D/slurmctld.pid"
	stop_pidfile "$D/munged.pid"
	exit 0
fi
[ "$cmd" = start ] || { echo "usage: $0 start|stop DIR [none|dynmig|lua]" >&2; exit 2; }

mkdir -p "$D"/{state,spool,plugins}
touch "$D"/mig{0..6}
# slurmctld looks for job_submit_<name>.so in PluginDir; cargo builds lib<name>.so.
if [ -n "${DYNMIG_PLUGIN_DIR:-}" ]; then
	cp "$DYNMIG_PLUGIN_DIR/job_submit_dynmig.so" "$D/plugins/job_submit_dynmig.so"
	cp "$DYNMIG_PLUGIN_DIR/spank_dynmig.so" "$D/plugins/libspank_dynmig.so"
else
	cp "$libdir/libjob_submit_dynmig.so" "$D/plugins/job_submit_dynmig.so"
	cp "$libdir/libspank_dynmig.so" "$D/plugins/libspank_dynmig.so"
fi
# 24.05+ slurmd needs a cgroup plugin it can use; nothing here uses cgroups.
rm -f "$D/cgroup.conf"
v=$(slurmctld -V | awk '{print $2}')
if [ "$(printf '%d%02d' "${v%%.*}" "$(echo "$v" | cut -d. -f2)")" -ge 2405 ]; then
	echo "CgroupPlugin=disabled" >"$D/cgroup.conf"
fi
cp "$here/job_submit.lua" "$D/job_submit.lua"

if [ ! -s "$D/munged.pid" ] || ! kill -0 "$(cat "$D/munged.pid")" 2>/dev/null; then
	[ -f "$D/munge.key" ] || { dd if=/dev/urandom of="$D/munge.key" bs=1 count=1024 status=none; chmod 400 "$D/munge.key"; }
	munged --force --socket="$D/munge.sock" --key-file="$D/munge.key" \
		--pid-file="$D/munged.pid" --log-file="$D/munged.log" --seed-file="$D/munge.seed"
fi

case $plugin in
none) jsp="" ;;
dynmig) jsp="JobSubmitPlugins=dynmig" ;;
lua) jsp="JobSubmitPlugins=lua" ;;
*) echo "unknown plugin $plugin" >&2; exit 2 ;;
esac

cat > "$D/slurm.conf" <<CONF
ClusterName=dmbench
SlurmctldHost=$(hostname)(127.0.0.1)
SlurmctldPort=17817
SlurmdPort=17818
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$D/munge.sock
CredType=cred/munge
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool
SlurmctldPidFile=$D/slurmctld.pid
SlurmdPidFile=$D/slurmd.pid
SlurmctldLogFile=$D/slurmctld.log
SlurmdLogFile=$D/slurmd.log
SlurmctldDebug=info
# Debian's plugins and ours: PluginDir takes a colon-separated list.
PluginDir=$debian_plugins:$D/plugins
PlugStackConfig=$D/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
MpiDefault=none
ReturnToService=2
MaxJobCount=100000
$jsp
NodeName=dmb1 NodeHostname=$(hostname) NodeAddr=127.0.0.1 CPUs=2 RealMemory=1000 Gres=gpu:1g.10gb:7 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
cat > "$D/gres.conf" <<CONF
NodeName=dmb1 Name=gpu Type=1g.10gb File=$D/mig[0-6]
CONF
echo "optional $D/plugins/libspank_dynmig.so" > "$D/plugstack.conf"

export SLURM_CONF=$D/slurm.conf
# -c: start with no jobs, so each run starts from the same state.
slurmctld -c -f "$D/slurm.conf"
slurmd -f "$D/slurm.conf" -N dmb1
for _ in $(seq 100); do
	sinfo -h -o %T 2>/dev/null | grep -q idle && break
	sleep 0.2
done
sinfo -h -o "%N %T %G"
