#!/usr/bin/env bash
# The install test (docs/install.md, "What the install test does"): in a fresh Debian 12
# chroot, install the packages of target/debian/ with docs/install.md's own apt-get command,
# follow its steps on the local test cluster (slurm/cluster.sh, simulated GPUs), start the
# daemons with their installed units' ExecStart lines, and run a job that must get a MIG
# profile at submit and run after a repartition.
#
#   packaging/install-test.sh [DEB_DIR]     (as root; DEB_DIR default target/debian (or
#                                             $CARGO_TARGET_DIR/debian), made by
#                                             packaging/build-debs.sh)
#   packaging/install-test.sh chroot        only build (or find) the cached chroot
#
# The chroot (debootstrap minbase + Slurm's packages) is built once and cached in
# DYNMIG_INSTALL_TEST_CACHE (default /var/cache/dynmig/install-test/<suite>, ~1-2 min the first
# time); each run mounts a fresh overlay on it, in mount, network, UTS and PID namespaces of
# its own, so nothing it starts or mounts outlives it and it never meets a cluster on the host.
# Logs: .run/install-test/ (the cluster's logs, the daemons' output, the steps' times).
# Environment: DYNMIG_INSTALL_TEST_SUITE (bookworm, the default; trixie; sid),
# DYNMIG_DEBIAN_MIRROR (default http://deb.debian.org/debian),
# DYNMIG_INSTALL_TEST_TIMEOUT (seconds the job may take to complete, default 180),
# DYNMIG_INSTALL_TEST_LIMIT (seconds the whole run in the chroot may take, default 900),
# DYNMIG_INSTALL_TEST_KEEP=1 keeps the run's overlay (under the cache) for a look.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SELF=$ROOT/packaging/install-test.sh
CACHE=${DYNMIG_INSTALL_TEST_CACHE:-/var/cache/dynmig/install-test}
# bookworm (Slurm 22.05, docs/install.md's own packages) or trixie / sid (24.11 / 26.05: the
# same steps with that release's plugin package, from packaging/build-debs.sh trixie / sid).
SUITE=${DYNMIG_INSTALL_TEST_SUITE:-bookworm}
BASE=$CACHE/$SUITE
MIRROR=${DYNMIG_DEBIAN_MIRROR:-http://deb.debian.org/debian}
# What the chroot holds: a site's Slurm (the packages' dependencies come from here, so the
# test itself needs no network) and what slurm/cluster.sh runs. Changing it rebuilds.
PKGS="slurmctld slurmd slurm-client munge iproute2 procps util-linux file man-db"
KEY="v1 $PKGS"
# Inside the chroot: the repository (read-only), the packages, the cluster.
SRC=/src/dynmig
DEBS=/root/debs
DIR=/var/lib/dynmig-test/cluster
NODES="n1 n2"
PLUGIN_DIR=/usr/lib/x86_64-linux-gnu/slurm-wlm

log() { echo "install-test: $*" >&2; }
die() {
    log "FAILED: $*"
    exit 1
}

# ---- on the host ----

# The cached chroot: debootstrap + Slurm, built in a temporary directory and renamed when
# complete (an interrupted build is never used). Package scripts may not start daemons.
base_chroot() {
    case "$SUITE" in bookworm | trixie | sid) ;; *) die "DYNMIG_INSTALL_TEST_SUITE: bookworm, trixie or sid, not '$SUITE'" ;; esac
    if [ -f "$BASE/etc/dynmig-install-test" ] && [ "$(cat "$BASE/etc/dynmig-install-test")" = "$KEY" ]; then
        return 0
    fi
    command -v debootstrap >/dev/null || {
        log "installing debootstrap"
        DEBIAN_FRONTEND=noninteractive timeout 300 apt-get install -y -qq debootstrap >/dev/null
    }
    local tmp=$CACHE/.$SUITE.tmp t0
    t0=$(date +%s)
    mkdir -p "$CACHE"
    rm -rf "$tmp"
    log "debootstrap $SUITE into $tmp (once; cached)"
    timeout 900 debootstrap --variant=minbase "$SUITE" "$tmp" "$MIRROR" >"$CACHE/.$SUITE.debootstrap.log" 2>&1 ||
        die "debootstrap $SUITE failed: see $CACHE/.$SUITE.debootstrap.log"
    printf '#!/bin/sh\nexit 101\n' >"$tmp/usr/sbin/policy-rc.d"
    chmod +x "$tmp/usr/sbin/policy-rc.d"
    # As on an installed system: updates and security (bookworm: Slurm 22.05.8-4+deb12u*).
    if [ "$SUITE" != sid ]; then
        cat >"$tmp/etc/apt/sources.list" <<EOF
deb $MIRROR $SUITE main
deb $MIRROR $SUITE-updates main
deb ${MIRROR%/debian}/debian-security $SUITE-security main
EOF
    fi
    # A mirror snapshot's sid Release file may be past its Valid-Until (slurm/releases.sh).
    echo 'Acquire::Check-Valid-Until "false";' >"$tmp/etc/apt/apt.conf.d/99dynmig-install-test"
    cp /etc/hosts "$tmp/etc/hosts"
    unshare --mount --propagation private bash -c '
        set -e
        for d in proc sys dev; do mount --rbind "/$d" "$1/$d"; mount --make-rslave "$1/$d"; done
        timeout 900 chroot "$1" env DEBIAN_FRONTEND=noninteractive sh -c \
            "apt-get update -qq && apt-get install -y -qq --no-install-recommends $2 && apt-get clean"
    ' _ "$tmp" "$PKGS" >"$CACHE/.$SUITE.apt.log" 2>&1 ||
        die "apt-get in the $SUITE chroot failed: see $CACHE/.$SUITE.apt.log"
    echo "$KEY" >"$tmp/etc/dynmig-install-test"
    rm -rf "$BASE"
    mv "$tmp" "$BASE"
    log "$SUITE chroot ready in $(($(date +%s) - t0)) s"
}

host_main() {
    [ "$(id -u)" = 0 ] || die "run as root (chroot, namespaces, daemons)"
    local debs=${1:-${CARGO_TARGET_DIR:-$ROOT/target}/debian} run t0 rc=0
    debs=$(realpath -e "$debs") || die "no package directory $1 (packaging/build-debs.sh makes target/debian)"
    ls "$debs"/dynmig_*.deb >/dev/null 2>&1 || die "no dynmig_*.deb in $debs (run packaging/build-debs.sh)"
    t0=$(date +%s)
    base_chroot
    run=$(mktemp -d "$CACHE/run.XXXXXX")
    mkdir -p "$run"/{upper,work,root}
    log "fresh overlay on $BASE: $run"
    # shellcheck disable=SC2064 # $run as it is now
    [ "${DYNMIG_INSTALL_TEST_KEEP:-}" = 1 ] || trap "rm -rf '$run'" EXIT
    # A PID namespace whose init is the inner script: every process of the run ends with it,
    # at the latest on the timeout. The mounts go with the mount namespace.
    timeout --kill-after=10 "${DYNMIG_INSTALL_TEST_LIMIT:-900}" \
        unshare --mount --net --uts --pid --fork --propagation private \
        bash "$SELF" _inner "$run" "$debs" || rc=$?
    rm -rf "$ROOT/.run/install-test"
    mkdir -p "$ROOT/.run/install-test"
    cp -a "$run/upper$DIR/log" "$ROOT/.run/install-test/cluster-log" 2>/dev/null || true
    cp -a "$run/upper/var/log/dynmig-test/." "$ROOT/.run/install-test/" 2>/dev/null || true
    if [ "${DYNMIG_INSTALL_TEST_KEEP:-}" = 1 ]; then
        log "kept $run"
    else
        rm -rf "$run"
    fi
    [ "$rc" = 0 ] || die "exit $rc; logs in $ROOT/.run/install-test/"
    log "passed in $(($(date +%s) - t0)) s; logs in $ROOT/.run/install-test/"
}

# ---- in the new namespaces (PID 1), still on the host's root ----

inner_main() {
    local run=$1 debs=$2 r=$1/root
    mount -t overlay overlay -o "lowerdir=$BASE,upperdir=$run/upper,workdir=$run/work" "$r"
    mount -t proc proc "$r/proc"
    mount --rbind /sys "$r/sys" && mount --make-rslave "$r/sys"
    mount --rbind /dev "$r/dev" && mount --make-rslave "$r/dev"
    mount -t tmpfs tmpfs "$r/run"
    mount -t tmpfs tmpfs "$r/tmp"
    mkdir -p "$r$SRC" "$r$DEBS"
    mount --bind "$ROOT" "$r$SRC" && mount -o remount,bind,ro "$r$SRC"
    cp "$debs"/*.deb "$r$DEBS/"
    ip link set lo up
    hostname dynmig-install-test
    grep -q dynmig-install-test "$r/etc/hosts" || echo "127.0.1.1 dynmig-install-test" >>"$r/etc/hosts"
    chroot "$r" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root DYNMIG_INSTALL_TEST_SUITE="$SUITE" \
        bash "$SRC/packaging/install-test.sh" _chrooted
}

# ---- in the chroot ----

STEP_T0=0
step() {
    local now
    now=$(date +%s.%N)
    [ "$STEP_T0" = 0 ] || awk -v a="$STEP_T0" -v b="$now" 'BEGIN {printf "%.1f s\n", b - a}' >>/var/log/dynmig-test/steps.txt
    STEP_T0=$now
    [ "$*" = done ] || printf '%s: ' "$*" >>/var/log/dynmig-test/steps.txt
    log "step: $*"
}

# The fenced block after `<!-- install-test: NAME -->` in docs/install.md.
block() {
    local text
    text=$(awk -v name="$1" '
        $0 == "<!-- install-test: " name " -->" {found = 1; next}
        found && /^```/ {if (inside) exit; inside = 1; next}
        inside {print}' "$SRC/docs/install.md")
    [ -n "$text" ] || die "docs/install.md has no block '$1'"
    printf '%s\n' "$text"
}

# unit_line UNIT KEY: the KEY= line (ExecStart, ExecReload) of an installed unit.
unit_line() {
    local f line
    for f in /lib/systemd/system/$1.service /usr/lib/systemd/system/$1.service; do
        [ -f "$f" ] || continue
        line=$(sed -n "s/^$2=//p" "$f")
        [ -n "$line" ] || die "$f has no $2="
        echo "$line"
        return 0
    done
    die "unit $1.service is not installed"
}

exec_start() { unit_line "$1" ExecStart; }

# unit_value UNIT KEY: the KEY= value of an installed unit, empty when it has none.
unit_value() {
    local f
    for f in /lib/systemd/system/$1.service /usr/lib/systemd/system/$1.service; do
        [ -f "$f" ] && sed -n "s/^$2=//p" "$f" | tail -1 && return 0
    done
    die "unit $1.service is not installed"
}

# start_unit UNIT [NODE]: runs the unit's ExecStart line as systemd would (its
# EnvironmentFile first; as its User= and Group=, its StateDirectory= made and given to that
# user first), in NODE's namespace if given, where %l (the short host name) is the node's
# name. Output to /var/log/dynmig-test/UNIT[-NODE].log, pid in /run/dynmig-test/.
start_unit() {
    local unit=$1 node=${2:-} cmd name=$1${2:+-$2} user group state mode d
    cmd=$(exec_start "$unit")
    # shellcheck disable=SC2016
    cmd=${cmd//%l/'$(hostname -s)'}
    user=$(unit_value "$unit" User)
    if [ -n "$user" ]; then
        group=$(unit_value "$unit" Group)
        group=${group:-$user}
        state=$(unit_value "$unit" StateDirectory)
        mode=$(unit_value "$unit" StateDirectoryMode)
        for d in $state; do
            install -d -o "$user" -g "$group" -m "${mode:-0755}" "/var/lib/$d"
        done
        # setpriv: the user's uid, gid and groups, and no way back to root (NoNewPrivileges=).
        cmd="setpriv --reuid=$user --regid=$group --init-groups --no-new-privs $cmd"
    fi
    local wrapped="set -a; [ -r /etc/default/dynmig ] && . /etc/default/dynmig; set +a; exec $cmd"
    mkdir -p /run/dynmig-test
    if [ -n "$node" ]; then
        # In the node's network namespace with its host name, as slurm/cluster.sh starts the
        # node's slurmd (slurm/README.md, "Network and processes"). A command, not a shell
        # function: $! must be the daemon's pid (nsenter, unshare and both sh exec one
        # another down to dynmig), not a background subshell's.
        nsenter --net="/run/netns/dynmig-$node" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$node" \
            sh -c "$wrapped" >"/var/log/dynmig-test/$name.log" 2>&1 &
    else
        sh -c "$wrapped" >"/var/log/dynmig-test/$name.log" 2>&1 &
    fi
    echo $! >"/run/dynmig-test/$name.pid"
    log "started $name (pid $!): $cmd"
}

stop_units() {
    local f
    for f in /run/dynmig-test/*.pid; do
        [ -f "$f" ] || continue
        kill "$(cat "$f")" 2>/dev/null || true
        rm -f "$f"
    done
}

# job_field ID FIELD: one field of `scontrol show job`.
job_field() { scontrol show job "$1" | tr ' ' '\n' | sed -n "s/^$2=//p" | head -1; }

chrooted_main() {
    mkdir -p /var/log/dynmig-test
    : >/var/log/dynmig-test/steps.txt
    export DEBIAN_FRONTEND=noninteractive
    trap 'stop_units; bash "$SRC/slurm/cluster.sh" down >/dev/null 2>&1 || true' EXIT

    # docs/install.md's command names the 22.05 plugin package; another release's is the same
    # command with its own release.
    local mm apt_cmd
    mm=$(dpkg-query -W -f '${Version}' slurmctld | cut -d. -f1,2)
    apt_cmd=$(block apt)
    [ "$SUITE" = bookworm ] || apt_cmd=${apt_cmd//dynmig-slurm-plugins-22.05_/dynmig-slurm-plugins-${mm}_}
    step "1. apt-get install the packages (docs/install.md step 1, word for word; Slurm $mm)"
    (cd "$DEBS" && timeout 300 bash -c "$apt_cmd") >/var/log/dynmig-test/apt.log 2>&1 ||
        die "docs/install.md's apt-get install failed: $(tail -5 /var/log/dynmig-test/apt.log)"
    local f out
    for f in /usr/bin/dynmig /usr/bin/dynmig-controller /etc/slurm/dynmig.toml /etc/default/dynmig /usr/libexec/dynmig/prolog \
        /usr/libexec/dynmig/epilog /usr/share/man/man1/dynmig.1.gz "$PLUGIN_DIR/job_submit_dynmig.so" \
        "$PLUGIN_DIR/spank_dynmig.so"; do
        [ -e "$f" ] || die "the packages did not install $f"
    done
    for f in dynmig-controller dynmig-agent dynmig-history; do exec_start "$f" >/dev/null; done
    # The history service's own unprivileged user (packaging/debian/postinst), which its unit
    # runs it as.
    out=$(getent passwd dynmig-history) || die "the package made no dynmig-history user"
    case "$out" in *:/usr/sbin/nologin) ;; *) die "dynmig-history can log in: $out" ;; esac
    [ "$(unit_value dynmig-history User)" = dynmig-history ] || die "dynmig-history.service has no User=dynmig-history"
    [ "$(unit_value dynmig-controller User)" = "" ] || die "dynmig-controller.service: User= (it needs root)"
    # (Output into a variable first: with pipefail, grep -q closing the pipe early would fail
    # the producer.)
    out=$(dpkg-query --showformat='${Conffiles}\n' --show dynmig)
    grep -q '/etc/slurm/dynmig.toml' <<<"$out" ||
        die "/etc/slurm/dynmig.toml is not a conffile of dynmig"
    out=$(timeout 30 man -l /usr/share/man/man1/dynmig.1.gz 2>/dev/null)
    grep -q 'dynmig agent' <<<"$out" ||
        die "the man page does not describe 'dynmig agent'"
    dynmig --version | tee -a /var/log/dynmig-test/details.txt >&2

    step "2. /etc/slurm/dynmig.toml from the installed example, checked"
    # The local cluster runs every node on this machine: per-node Slurm config directories.
    # Fast controller rounds for the test, and the demand policy: the installed default
    # (guarded) keeps the layout the site picked for its first 14 days, and step 8 wants to see
    # a repartition. The rest stays the installed example's (nodes n1, n2 with two A100-80GB
    # on the simulated backend).
    sed -i -e "s|^slurm_conf_dir = .*|slurm_conf_dir = \"$DIR/nodes/{node}/etc\"|" \
        -e 's|^kind = "guarded" .*|kind = "demand"|' \
        -e "s|^# gres_conf = .*|gres_conf = \"$DIR/nodes/{node}/etc/gres.conf\"|" \
        -e 's|^# server = .*|server = "10.199.0.1:6830"|' \
        -e 's|^interval = .*|interval = "1s"|' \
        -e 's|^min_layout_lifetime = .*|min_layout_lifetime = "5s"|' \
        -e 's|^node_conf = .*|node_conf = "CPUs=16 RealMemory=16000"|' /etc/slurm/dynmig.toml
    grep -q "^slurm_conf_dir = \"$DIR" /etc/slurm/dynmig.toml || die "editing /etc/slurm/dynmig.toml failed"
    grep -q '^kind = "demand"$' /etc/slurm/dynmig.toml || die "setting kind = demand in /etc/slurm/dynmig.toml failed"
    dynmig config check /etc/slurm/dynmig.toml >/var/log/dynmig-test/config-check.log 2>&1 ||
        die "dynmig config check: $(cat /var/log/dynmig-test/config-check.log)"
    # Slurm's config is not in /etc/slurm here: the daemons and the Prolog/Epilog find it
    # through /etc/default/dynmig (docs/install.md step 7).
    echo "SLURM_CONF=$DIR/etc/slurm.conf" >>/etc/default/dynmig

    step "5. gres.conf and each node's initial GRES (dynmig init-node)"
    local node gres
    for node in $NODES; do
        gres=$(dynmig init-node --node "$node") || die "dynmig init-node --node $node failed"
        [ -f "$DIR/nodes/$node/etc/gres.conf" ] || die "init-node wrote no $DIR/nodes/$node/etc/gres.conf"
        export "DYNMIG_NODE_GRES_$node=$gres"
        log "$node: Gres=$gres"
    done

    step "3./4. slurm.conf with docs/install.md's lines, plugstack.conf; slurm/cluster.sh up"
    export DYNMIG_CLUSTER_DIR=$DIR DYNMIG_NODES=$NODES DYNMIG_ACCOUNTING=0
    export DYNMIG_NODE_CONF="CPUs=16 RealMemory=16000"
    DYNMIG_EXTRA_CONF=$(block slurm.conf-dynmig)
    export DYNMIG_EXTRA_CONF
    # The installed SPANK plugin from the start; below, plugstack.conf gets step 4's line.
    export DYNMIG_SPANK_SO=$PLUGIN_DIR/spank_dynmig.so
    unset DYNMIG_CONFIG DYNMIG_JOBSUBMIT_SO DYNMIG_PROLOG DYNMIG_EPILOG DYNMIG_CATALOG_GRES
    bash "$SRC/slurm/cluster.sh" up >/var/log/dynmig-test/cluster-up.log 2>&1 ||
        die "slurm/cluster.sh up failed: $(tail -5 /var/log/dynmig-test/cluster-up.log)"
    local line
    while read -r line; do
        grep -qx "$line" "$DIR/etc/slurm.conf" || die "the cluster's slurm.conf lacks docs/install.md's '$line'"
    done < <(block slurm.conf-dynamic)
    : >"$DIR/etc/plugstack.conf"
    (eval "$(block plugstack.conf | sed "s|/etc/slurm/plugstack.conf|$DIR/etc/plugstack.conf|")")
    grep -q spank_dynmig.so "$DIR/etc/plugstack.conf" || die "plugstack.conf has no spank_dynmig line"
    # shellcheck disable=SC1091
    . "$DIR/env.sh"
    local help
    help=$(sbatch --help 2>&1) || true
    grep -q -- '--mig-mem' <<<"$help" || die "sbatch --help does not list --mig-mem (SPANK plugin not loaded): $(tail -3 <<<"$help")"

    step "6. dynmig doctor"
    timeout 60 dynmig doctor >/var/log/dynmig-test/doctor.log 2>&1 || die "dynmig doctor: $(cat /var/log/dynmig-test/doctor.log)"
    cat /var/log/dynmig-test/doctor.log >&2

    step "7. the units' ExecStart lines: history, controller, one agent per node"
    start_unit dynmig-history
    start_unit dynmig-controller
    for node in $NODES; do start_unit dynmig-agent "$node"; done
    sleep 2
    for f in /run/dynmig-test/*.pid; do
        kill -0 "$(cat "$f")" 2>/dev/null || die "$(basename "$f" .pid) exited: $(tail -5 "/var/log/dynmig-test/$(basename "$f" .pid).log")"
    done
    # The history service runs as its own user, not root.
    local huid
    huid=$(ps -o uid= -p "$(cat /run/dynmig-test/dynmig-history.pid)" | tr -d ' ')
    [ "$huid" = "$(id -u dynmig-history)" ] || die "dynmig history serve runs as uid $huid, not dynmig-history"

    step "8. a job with --mig-mem=18G: a MIG profile at submit, a repartition, completion"
    local id state comment tres i
    id=$(sbatch --parsable --gres=gpu:1 --mig-mem=18G -o "$DIR/job-%j.out" \
        --wrap 'echo "node=$(hostname) gpus=$CUDA_VISIBLE_DEVICES"; sleep 2') || die "sbatch failed"
    # The decision record has spaces: `AdminComment=dynmig/v1 profile=2g.20gb count=1 ...`.
    comment=$(scontrol show job "$id" | grep -o 'AdminComment=dynmig/v1 profile=[^ ]* count=[^ ]* mem=[^ ]* source=[^ ]*' || true)
    tres=$(job_field "$id" TresPerNode)
    log "job $id: $comment TresPerNode=$tres" 2>&1 | tee -a /var/log/dynmig-test/details.txt >&2
    case "$comment" in *profile=2g.20gb*) ;; *) die "job $id: AdminComment '$comment' names no 2g.20gb profile" ;; esac
    case "$tres" in *gpu:2g.20gb:1*) ;; *) die "job $id: TresPerNode '$tres' is not gpu:2g.20gb:1" ;; esac
    for ((i = 0; i < ${DYNMIG_INSTALL_TEST_TIMEOUT:-180}; i++)); do
        state=$(job_field "$id" JobState)
        case "$state" in COMPLETED) break ;; FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY) die "job $id ended $state" ;; esac
        sleep 1
    done
    [ "$state" = COMPLETED ] || die "job $id is $state after ${DYNMIG_INSTALL_TEST_TIMEOUT:-180} s: $(scontrol show job "$id" | grep -o 'Reason=[^ ]*')"
    log "job $id: $(cat "$DIR/job-$id.out")" 2>&1 | tee -a /var/log/dynmig-test/details.txt >&2
    # The events: the controller drained a node, its agent applied the new layout, and the
    # job's Prolog claimed its instance.
    local kind
    for kind in drain applied job_start; do
        grep -q "\"kind\":\"$kind\"" /var/lib/dynmig/events.jsonl ||
            die "no '$kind' event in /var/lib/dynmig/events.jsonl"
    done
    grep '"kind":"applied"' /var/lib/dynmig/events.jsonl | tee -a /var/log/dynmig-test/details.txt >&2
    sinfo -h -N -o '%N %t %G' | tee -a /var/log/dynmig-test/details.txt >&2
    out=$(sinfo -h -N -o '%N %G')
    grep -v catalog <<<"$out" | grep -q 2g.20gb || die "no node has 2g.20gb after the repartition"
    dynmig status >/var/log/dynmig-test/status.txt 2>&1 || true
    # The Epilog's record reached the unprivileged history service, which checked its munge
    # credential (unmunge as dynmig-history) and stored it in its own state directory.
    for ((i = 0; i < 30; i++)); do
        out=$(dynmig history show 2>/dev/null) || true
        awk -v id="$id" '$1 == id {found = 1} END {exit !found}' <<<"$out" && break
        sleep 1
    done
    awk -v id="$id" '$1 == id {found = 1} END {exit !found}' <<<"$out" ||
        die "job $id: no history record in /var/lib/dynmig/history/history.db after 30 s: $(tail -5 /var/log/dynmig-test/dynmig-history.log)"
    [ "$(stat -c %U /var/lib/dynmig/history/history.db)" = dynmig-history ] ||
        die "/var/lib/dynmig/history/history.db is not dynmig-history's"

    step "the units' ExecReload lines (SIGHUP: the daemons reload their config and keep running)"
    local unit pid reload
    for unit in dynmig-controller dynmig-history dynmig-agent-n1; do
        pid=$(cat "/run/dynmig-test/$unit.pid")
        reload=$(unit_line "${unit%-n[0-9]}" ExecReload)
        sh -c "${reload//\$MAINPID/$pid}" || die "$unit: ExecReload failed: $reload"
    done
    sleep 1
    for unit in dynmig-controller dynmig-history dynmig-agent-n1; do
        kill -0 "$(cat "/run/dynmig-test/$unit.pid")" 2>/dev/null ||
            die "$unit exited after SIGHUP: $(tail -5 "/var/log/dynmig-test/$unit.log")"
        grep -q 'config reloaded' "/var/log/dynmig-test/$unit.log" ||
            die "$unit logged no 'config reloaded' after SIGHUP"
    done
    step "stop"
    stop_units
    bash "$SRC/slurm/cluster.sh" down >/dev/null 2>&1 || true
    trap - EXIT
    step "done"
    cat /var/log/dynmig-test/steps.txt >&2
}

case "${1:-}" in
chroot) [ "$(id -u)" = 0 ] || die "run as root"; base_chroot; echo "$BASE" ;;
_inner) shift; inner_main "$@" ;;
_chrooted) chrooted_main ;;
*) host_main "$@" ;;
esac
