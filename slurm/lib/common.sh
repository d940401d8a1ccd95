# Shared settings and helpers of slurm/cluster.sh (sourced, not run).

# The cluster directory, absolute.
DIR=$(realpath -m "${DYNMIG_CLUSTER_DIR:-./.run/cluster}")
NODES=${DYNMIG_NODES:-n1 n2}
NODE_CONF=${DYNMIG_NODE_CONF:-CPUs=16 SocketsPerBoard=1 CoresPerSocket=16 ThreadsPerCore=1 RealMemory=16000}
# Only one dynmig cluster can run per machine (fixed ports, addresses and namespace names):
# this file names the directory of the one that runs.
OWNER_FILE=/run/dynmig-cluster.owner
LOCK_FILE=/run/dynmig-cluster.lock
CTL_ADDR=10.199.0.1
CTL_PORT=6817
DBD_PORT=6819
CATALOG_STATE=${DYNMIG_CATALOG_STATE:-DOWN}
GRES_HEADER="gres.conf written by slurm/cluster.sh"
# The root directory of the Slurm release in use: empty for the host's own, a chroot of
# slurm/releases.sh otherwise (its commands are then wrappers on PATH that chroot there).
SLURM_ROOT=${DYNMIG_SLURM_ROOT:-}

# The running Slurm's version, "24.11.5" (of the slurmctld on PATH, so of the release in use).
slurm_version() {
    [ -n "${SLURM_VERSION:-}" ] || SLURM_VERSION=$(timeout 10 slurmctld -V | awk '{print $2}')
    echo "$SLURM_VERSION"
}

# slurm_at_least MAJOR.MINOR: true when the Slurm in use is that release or later.
slurm_at_least() {
    local v want
    v=$(slurm_version)
    want=$1
    [ "$(printf '%d%02d' "${v%%.*}" "$(echo "$v" | cut -d. -f2)")" -ge \
        "$(printf '%d%02d' "${want%%.*}" "${want#*.}")" ]
}

log() { echo "cluster.sh: $*" >&2; }
die() {
    log "error: $*"
    exit 1
}
need_root() { [ "$(id -u)" = 0 ] || die "must run as root (network namespaces, daemons)"; }

# The nodes of the cluster in $DIR: the recorded list when there is one, else $NODES.
recorded_nodes() {
    if [ -s "$DIR/nodes.list" ]; then cat "$DIR/nodes.list"; else echo $NODES; fi
}

# 1-based index of a node in the recorded list (its address is 10.199.0.(10+index)).
node_index() {
    local i=0 n
    for n in $(recorded_nodes); do
        i=$((i + 1))
        if [ "$n" = "$1" ]; then
            echo "$i"
            return 0
        fi
    done
    die "unknown node $1 (nodes: $(recorded_nodes | tr '\n' ' '))"
}

# Initial GRES of a node: $DYNMIG_NODE_GRES_<node> (non-alphanumerics as _), or 2 x 7g.80gb.
node_gres() {
    local var="DYNMIG_NODE_GRES_${1//[^A-Za-z0-9_]/_}"
    echo "${!var:-gpu:7g.80gb:2}"
}

# pid_alive PIDFILE COMM: true when PIDFILE names a live process whose name is COMM.
pid_alive() {
    local pid
    [ -s "$1" ] || return 1
    pid=$(cat "$1")
    [ -n "$pid" ] && [ -r "/proc/$pid/comm" ] && [ "$(cat "/proc/$pid/comm")" = "$2" ]
}

# stop_pids PID...: SIGTERM to all, wait up to 10 s for all to exit, then SIGKILL.
stop_pids() {
    local pid left i
    [ $# -gt 0 ] || return 0
    kill -TERM "$@" 2>/dev/null || true
    for i in $(seq 100); do
        left=""
        for pid in "$@"; do kill -0 "$pid" 2>/dev/null && left="$left $pid"; done
        [ -z "$left" ] && return 0
        sleep 0.1
    done
    log "pids$left did not stop after 10 s: SIGKILL"
    kill -KILL $left 2>/dev/null || true
    sleep 0.2
}

# stop_pidfiles PIDFILE COMM [PIDFILE COMM]...: stop together the processes the pid files
# name (only those whose name is COMM); remove the files.
stop_pidfiles() {
    local pids=() files=()
    while [ $# -ge 2 ]; do
        if pid_alive "$1" "$2"; then pids+=("$(cat "$1")"); fi
        files+=("$1")
        shift 2
    done
    stop_pids "${pids[@]}"
    rm -f "${files[@]}"
}

# stop_pidfile PIDFILE COMM: one process, see stop_pidfiles.
stop_pidfile() { stop_pidfiles "$1" "$2"; }

show_pidfile() {
    if pid_alive "$1" "$2"; then
        echo "$2${3:+ $3}: running, pid $(cat "$1")"
    else
        echo "$2${3:+ $3}: stopped"
    fi
}

# Fill @NAME@ fields of the template and add the optional lines.
write_configs() {
    local conf="$DIR/etc/slurm.conf" plugin_dir=/usr/lib/x86_64-linux-gnu/slurm-wlm
    if [ ! -d "$SLURM_ROOT$plugin_dir" ]; then
        plugin_dir=$(find "$SLURM_ROOT"/usr/lib* -name auth_munge.so 2>/dev/null | head -1)
        plugin_dir=$(dirname "${plugin_dir#"$SLURM_ROOT"}")
    fi
    sed -e "s|@DIR@|$DIR|g" -e "s|@CTL_HOST@|$(hostname -s)|g" -e "s|@CTL_ADDR@|$CTL_ADDR|g" \
        -e "s|@CTL_PORT@|$CTL_PORT|g" -e "s|@MUNGE_SOCKET@|$DIR/munge/munge.socket|g" \
        -e "s|@CTL_DEBUG@|${DYNMIG_SLURMCTLD_DEBUG:-debug}|g" \
        -e "s|@SLURMD_DEBUG@|${DYNMIG_SLURMD_DEBUG:-debug}|g" \
        "$SCRIPT_DIR/templates/slurm.conf.in" >"$conf"
    rm -f "$DIR/etc/slurmdbd.conf"
    if accounting_on; then
        # Accounting through slurmdbd (slurm/lib/daemons.sh starts it and MariaDB). Slurm's
        # connections to slurmdbd take munge's socket from AccountingStoragePass, not AuthInfo.
        sed -i "s|^AccountingStorageType=.*|AccountingStorageType=accounting_storage/slurmdbd\\nAccountingStorageHost=$CTL_ADDR\\nAccountingStoragePort=$DBD_PORT\\nAccountingStoragePass=$DIR/munge/munge.socket|" "$conf"
        write_slurmdbd_conf
    fi
    if [ -n "${DYNMIG_JOBSUBMIT_SO:-}" ]; then
        # Slurm loads job_submit/dynmig from <PluginDir>/job_submit_dynmig.so: link the given
        # file (cargo names it libjob_submit_dynmig.so) under that name in $DIR/plugins.
        local so
        so=$(realpath -e "$DYNMIG_JOBSUBMIT_SO") || die "no such file: $DYNMIG_JOBSUBMIT_SO"
        mkdir -p "$DIR/plugins"
        ln -sfn "$so" "$DIR/plugins/job_submit_dynmig.so"
        printf 'JobSubmitPlugins=dynmig\nPluginDir=%s:%s\n' "$DIR/plugins" "$plugin_dir" >>"$conf"
    fi
    if slurm_at_least 25.11; then
        # From 25.11 slurmstepd holds NVML open unless GPU accounting is off, and the nodes
        # run dynmig's NVML backend (on the NVML stand-in): what a site sets (docs/gpus.md,
        # and `dynmig doctor` checks it).
        echo "JobAcctGatherParams=DisableGPUAcct" >>"$conf"
    fi
    if [ -n "${DYNMIG_PROLOG:-}" ]; then
        echo "Prolog=$(realpath "$DYNMIG_PROLOG")" >>"$conf"
    fi
    if [ -n "${DYNMIG_EPILOG:-}" ]; then
        echo "Epilog=$(realpath "$DYNMIG_EPILOG")" >>"$conf"
    fi
    if [ -n "${DYNMIG_CATALOG_GRES:-}" ]; then
        # A node that never runs: it lists every GRES type, so that slurmctld accepts jobs
        # for a type no dynamic node has yet (they pend until a node registers with it).
        echo "NodeName=catalog NodeAddr=10.199.0.254 $NODE_CONF Gres=$DYNMIG_CATALOG_GRES State=$CATALOG_STATE Reason=dynmig_catalog" >>"$conf"
    fi
    if [ -n "${DYNMIG_MAX_JOB_COUNT:-}" ]; then
        # Slurm's default is 10000 jobs in slurmctld's memory, finished ones (MinJobAge)
        # included; slurm/bench/load.sh submits more.
        case $DYNMIG_MAX_JOB_COUNT in
        *[!0-9]*) die "DYNMIG_MAX_JOB_COUNT: not a number: $DYNMIG_MAX_JOB_COUNT" ;;
        esac
        echo "MaxJobCount=$DYNMIG_MAX_JOB_COUNT" >>"$conf"
    fi
    if [ -n "${DYNMIG_EXTRA_CONF:-}" ]; then
        printf '%s\n' "$DYNMIG_EXTRA_CONF" >>"$conf"
    fi
    # 24.11's slurmd stops with "cgroup filesystem not mounted" without a cgroup plugin it
    # can use; no cgroups are used here (proctrack/linuxproc, task/none).
    rm -f "$DIR/etc/cgroup.conf"
    if slurm_at_least 24.05; then
        echo "CgroupPlugin=disabled" >"$DIR/etc/cgroup.conf"
    fi
    : >"$DIR/etc/plugstack.conf"
    if [ -n "${DYNMIG_SPANK_SO:-}" ]; then
        echo "optional $(realpath "$DYNMIG_SPANK_SO")" >"$DIR/etc/plugstack.conf"
    fi
}

# slurmdbd.conf next to slurm.conf (slurmdbd reads it from SLURM_CONF's directory): mode 0600,
# owned by SlurmUser (root), as slurmdbd demands. MariaDB on localhost means its unix socket
# (MYSQL_UNIX_PORT, see start_slurmdbd); root logs in there without a password.
write_slurmdbd_conf() {
    local f="$DIR/etc/slurmdbd.conf"
    (
        umask 077
        cat >"$f" <<EOT
# slurmdbd.conf of the dynmig local test cluster (written by slurm/cluster.sh)
AuthType=auth/munge
AuthInfo=socket=$DIR/munge/munge.socket
DbdHost=localhost
DbdAddr=$CTL_ADDR
DbdPort=$DBD_PORT
SlurmUser=root
PidFile=$DIR/run/slurmdbd.pid
LogFile=$DIR/log/slurmdbd.log
DebugLevel=${DYNMIG_SLURMDBD_DEBUG:-info}
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=root
StorageLoc=slurm_acct_db
EOT
    )
    chown root:root "$f"
    chmod 0600 "$f"
}

# write_gres_conf NODE GRES: a gres.conf with one File= line per device, "gpu:T:N,gpu:U:M",
# each device a fake device file in $DIR/nodes/NODE/dev/ (mig0, mig1, ...): by default a
# character device with /dev/null's numbers (1,3), so that slurmd accepts it as a device and
# sets CUDA_VISIBLE_DEVICES / SLURM_JOB_GPUS; DYNMIG_FAKE_DEV=file makes plain empty files
# (jobs then run but get no CUDA_VISIBLE_DEVICES, and slurmd logs "not a valid character or
# block device").
write_gres_conf() {
    local node=$1 gres=$2 dev="$DIR/nodes/$1/dev" k=0 item type count i
    mkdir -p "$DIR/nodes/$node/etc" "$dev"
    rm -f "$dev"/mig*
    {
        echo "# $GRES_HEADER for $node, Gres=$gres"
        for item in ${gres//,/ }; do
            IFS=: read -r _ type count <<<"$item"
            if [ -z "$count" ]; then
                count=$type
                type=""
            fi
            for i in $(seq "$count"); do
                make_fake_dev "$dev/mig$k"
                echo "Name=gpu${type:+ Type=$type} File=$dev/mig$k"
                k=$((k + 1))
            done
        done
    } >"$DIR/nodes/$node/etc/gres.conf"
}

# make_fake_dev PATH: see write_gres_conf.
make_fake_dev() {
    rm -f "$1"
    if [ "${DYNMIG_FAKE_DEV:-char}" = file ]; then
        : >"$1"
    else
        mknod -m 0666 "$1" c 1 3
    fi
}

# prepare_node NODE GRES: the node's config dir (slurm.conf copy, its own gres.conf), spool.
prepare_node() {
    local node=$1 gres=$2 nd="$DIR/nodes/$1"
    mkdir -p "$nd/etc" "$nd/spool" "$nd/dev"
    cp "$DIR/etc/slurm.conf" "$nd/etc/slurm.conf"
    rm -f "$nd/etc/cgroup.conf"
    if [ -f "$DIR/etc/cgroup.conf" ]; then cp "$DIR/etc/cgroup.conf" "$nd/etc/cgroup.conf"; fi
    # A gres.conf the caller wrote (no header of ours) is kept; ours is rewritten for GRES.
    if [ ! -f "$nd/etc/gres.conf" ] || head -1 "$nd/etc/gres.conf" | grep -q "$GRES_HEADER"; then
        write_gres_conf "$node" "$gres"
    fi
    echo "$gres" >"$nd/gres"
}

write_env() {
    cat >"$DIR/env.sh" <<EOT
# Source this to use the dynmig test cluster: slurm/cluster.sh up wrote it.
export SLURM_CONF=$DIR/etc/slurm.conf
export DYNMIG_CLUSTER_DIR=$DIR
EOT
}

load_env() {
    [ -f "$DIR/etc/slurm.conf" ] || die "no cluster in $DIR (run up first)"
    export SLURM_CONF="$DIR/etc/slurm.conf"
}

# Remove what an earlier run left behind: our own daemons, the namespaces of our nodes and of
# a crashed cluster from another directory. Refuses when another cluster is really running.
cleanup_stale() {
    if other_cluster_running; then
        die "a dynmig cluster from $(cat "$OWNER_FILE") is running; stop it first: DYNMIG_CLUSTER_DIR=$(cat "$OWNER_FILE") $0 down"
    fi
    if [ -s "$OWNER_FILE" ] && [ "$(cat "$OWNER_FILE")" != "$DIR" ]; then
        log "cleaning up leftovers of a crashed cluster in $(cat "$OWNER_FILE")"
        (DIR=$(cat "$OWNER_FILE") && cleanup_dir)
    fi
    cleanup_dir
    # Any other dynmig-* namespace is a leftover of ours: kill what runs in it, delete it.
    local ns
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep '^dynmig-' || true); do
        kill_ns_pids "$ns"
        ip netns del "$ns" 2>/dev/null || true
    done
    ip link del "$BRIDGE" 2>/dev/null || true
    if ss -ltn 2>/dev/null | awk '{print $4}' | grep -q ":$CTL_PORT\$"; then
        die "port $CTL_PORT is in use (another slurmctld?): $(ss -ltnp | grep ":$CTL_PORT " || true)"
    fi
}

# True when the running cluster (per $OWNER_FILE) is one from another directory.
other_cluster_running() {
    local other
    [ -s "$OWNER_FILE" ] || return 1
    other=$(cat "$OWNER_FILE")
    [ "$other" != "$DIR" ] && pid_alive "$other/run/slurmctld.pid" slurmctld
}

# Stop the daemons recorded in $DIR and remove its namespaces (unless another cluster runs:
# the namespace names are shared).
cleanup_dir() {
    local node nodes
    nodes=$(recorded_nodes)
    local args=()
    for node in $nodes; do args+=("$DIR/nodes/$node/slurmd.pid" slurmd); done
    stop_pidfiles "${args[@]}"
    stop_pidfiles "$DIR/run/slurmctld.pid" slurmctld
    # slurmdbd after slurmctld (which sends it its last records), then MariaDB (slurmdbd
    # reconnects to it while stopping) and munged. Each takes under 0.1 s to exit.
    stop_pidfiles "$DIR/run/slurmdbd.pid" slurmdbd
    stop_pidfiles "$DIR/mysql/mariadbd.pid" mariadbd "$DIR/munge/munged.pid" munged
    if other_cluster_running; then
        log "not touching namespaces: the cluster of $(cat "$OWNER_FILE") is running"
    else
        net_down $nodes
    fi
}
