#!/bin/bash
# Cost of job_submit/dynmig inside slurmctld, next to no plugin and job_submit/lua doing the
# same rewrite (slurm/bench/job_submit.lua). Submits N held jobs (nothing runs) per variant
# on the throwaway cluster of slurm/bench/cluster.sh and reads slurmctld's own timing of
# each submit RPC ("_slurm_rpc_submit_batch_job: JobId=.. InitPrio=.. usec=N", info level).
# That timer restarts after the job_submit plugins ran (22.05 to 26.05): it measures the job's
# creation with the request the plugin wrote, not the plugin itself (slurm/bench/lib.sh;
# slurm/bench/load.sh reads the plugin's own time and sdiag's means as well).
#
#   slurm/bench/submit_cost.sh [DIR] [N]     # default /tmp/dmb-cost 500; run as root
#   VARIANTS="dynmig lua none typed" changes the order (the first run pays for warm-up).
set -euo pipefail
D=${1:-/tmp/dmb-cost}
N=${2:-500}
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"
export SLURM_CONF=$D/slurm.conf
trap '"$here/cluster.sh" stop "$D"' EXIT

stats() { # reads numbers, prints n median p95 mean
	sort -n | awk '{a[NR]=$1; s+=$1} END {
		if (NR == 0) { print "no samples"; exit }
		m = a[int((NR + 1) / 2)]; p = a[int(NR * 0.95 + 0.999)];
		printf "n=%d median=%d p95=%d mean=%.0f usec\n", NR, m, p, s / NR }'
}

# "typed" is a control: no plugin, and the job asks the typed GRES itself
# (--gres=gpu:1g.10gb:1), so slurmctld does the same GRES work as after a rewrite; the
# difference between dynmig and typed is the plugin's own cost.
for variant in ${VARIANTS:-none typed dynmig lua}; do
	plugin=$variant
	request=(--gres=gpu:1 --mig-mem=9G)
	if [ "$variant" = typed ]; then
		plugin=none
		request=(--gres=gpu:1g.10gb:1)
	fi
	"$here/cluster.sh" start "$D" "$plugin" >/dev/null
	from=$(wc -l <"$D/slurmctld.log")
	start=$(date +%s.%N)
	for _ in $(seq "$N"); do
		sbatch --hold "${request[@]}" --wrap true >/dev/null
	done
	end=$(date +%s.%N)
	sleep 1
	tail -n +"$from" "$D/slurmctld.log" | rpc_submit_usec | cut -d' ' -f2 >"$D/usec.$variant"
	last=$(squeue -h -o %i | sort -n | tail -1)
	printf '%-7s %s  (last job: %s; wall %.1fs for %d sbatch)\n' "$variant" \
		"$(stats <"$D/usec.$variant")" \
		"$(scontrol show job "$last" | grep -o 'TresPerNode=[^ ]*')" \
		"$(echo "$end - $start" | bc)" "$N"
	scancel -u root
	"$here/cluster.sh" stop "$D"
done
# Ratios of the medians within this run (the absolute figures move with the machine's load).
median() { sort -n "$D/usec.$1" | awk '{a[NR]=$1} END {print (NR ? a[int((NR + 1) / 2)] : 0)}'; }
ratio() {
	local a b
	[ -s "$D/usec.$1" ] && [ -s "$D/usec.$2" ] || return 0
	a=$(median "$1")
	b=$(median "$2")
	if [ "$b" -gt 0 ]; then
		printf 'ratio %s/%s = %.2f (medians %d/%d usec)\n' "$1" "$2" "$(echo "$a / $b" | bc -l)" "$a" "$b"
	fi
}
echo "Slurm $(slurmctld -V | awk '{print $2}'):"
ratio dynmig none
ratio lua none
ratio dynmig lua
ratio dynmig typed
