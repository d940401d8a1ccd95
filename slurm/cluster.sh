#!/usr/bin/env bash
# The dynmig local test cluster: one slurmctld in the root network namespace and one
# dynamic slurmd ("slurmd -Z") per node, each in its own network namespace, with simulated
# MIG devices (fake device files). Needs root, Slurm 22.05 and munge. See slurm/README.md.
#
#   slurm/cluster.sh up                        start everything, wait until all nodes are idle
#   slurm/cluster.sh down                      stop everything, remove namespaces; idempotent
#   slurm/cluster.sh restart-node NODE GRES [--write-gres-conf]
#                                              re-register NODE as a dynamic node with GRES
#   slurm/cluster.sh restart-ctld              restart slurmctld on its saved state
#   slurm/cluster.sh status                    daemons, namespaces and sinfo
#   slurm/cluster.sh selftest                  up, jobs, restart-node, down, with checks
#   slurm/cluster.sh user NAME [LEVEL]         make a user (host, chroot, accounting), print uid
#
# Environment: DYNMIG_CLUSTER_DIR (default ./.run/cluster), DYNMIG_NODES (default "n1 n2"),
# DYNMIG_JOBSUBMIT_SO, DYNMIG_SPANK_SO, DYNMIG_PROLOG, DYNMIG_EPILOG, DYNMIG_CONFIG,
# DYNMIG_NODE_GRES_<node> (default gpu:7g.80gb:2), DYNMIG_NODE_CONF, DYNMIG_CATALOG_GRES,
# DYNMIG_FAKE_DEV (char|file), DYNMIG_EXTRA_CONF, DYNMIG_MAX_JOB_COUNT, DYNMIG_UP_TIMEOUT,
# DYNMIG_UP_WAIT, DYNMIG_ACCOUNTING (1: slurmdbd and MariaDB, the default; 0: none).
# See slurm/README.md.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib/common.sh
. "$SCRIPT_DIR/lib/common.sh"
# shellcheck source=lib/net.sh
. "$SCRIPT_DIR/lib/net.sh"
# shellcheck source=lib/daemons.sh
. "$SCRIPT_DIR/lib/daemons.sh"
# shellcheck source=lib/selftest.sh
. "$SCRIPT_DIR/lib/selftest.sh"

cmd_up() {
    need_root
    # Wait (lock released) while the cluster of another directory runs, up to DYNMIG_UP_WAIT s.
    local waited=0
    while other_cluster_running && [ "$waited" -lt "${DYNMIG_UP_WAIT:-0}" ]; do
        [ "$waited" -gt 0 ] || log "waiting for the cluster of $(cat "$OWNER_FILE") to go down"
        flock -u 9
        sleep 1
        lock
        waited=$((waited + 1))
    done
    cleanup_stale
    mkdir -p "$DIR"/{etc,state,run,log,munge}
    [ -w "$DIR" ] || die "cannot write $DIR"
    if [ -d "$DIR/log" ] && [ -n "$(ls -A "$DIR/log")" ]; then
        rm -rf "$DIR/log.prev" && mv "$DIR/log" "$DIR/log.prev" && mkdir -p "$DIR/log"
    fi
    rm -rf "${DIR:?}/state" && mkdir -p "$DIR/state"
    printf '%s\n' $NODES >"$DIR/nodes.list"
    echo "$DIR" >"$OWNER_FILE"
    # A failed start leaves nothing running (the logs stay in $DIR/log).
    trap 'log "up failed: stopping what was started; logs in $DIR/log"; cleanup_dir; rm -f "$OWNER_FILE"' EXIT

    write_configs
    net_up
    start_munged
    start_accounting
    start_slurmctld
    net_check
    local node
    for node in $NODES; do
        # A fresh slurmd spool, as the StateSaveLocation is fresh: slurmd reads its whole
        # credential cache (cred_state) before it writes its pid file, and after the load
        # tests' thousands of jobs it had grown to 107 MB, which slurmd 26.05.5 did not read
        # within up's 10 s (every cluster test of that directory then failed to come up).
        rm -rf "$DIR/nodes/$node/spool"
        prepare_node "$node" "$(node_gres "$node")"
        start_slurmd "$node" "$(node_gres "$node")"
    done
    for node in $NODES; do
        wait_node_idle "$node" "$(node_gres "$node")" "${DYNMIG_UP_TIMEOUT:-60}"
    done
    write_env
    trap - EXIT
    log "cluster up: $DIR"
    cat "$DIR/env.sh"
}

cmd_down() {
    need_root
    cleanup_dir
    if [ -f "$OWNER_FILE" ] && [ "$(cat "$OWNER_FILE")" = "$DIR" ]; then rm -f "$OWNER_FILE"; fi
    log "cluster down: $DIR"
}

cmd_restart_node() {
    need_root
    local node=${1:?usage: restart-node NODE GRES [--write-gres-conf]}
    local gres=${2:?usage: restart-node NODE GRES [--write-gres-conf]}
    local write=${3:-}
    load_env
    local t0
    t0=$(date +%s.%N)
    node_quiet "$node" || die "node $node is busy ($(node_busy_reason "$node")); not restarting"
    stop_slurmd "$node"
    if ! delete_node "$node"; then
        log "restarting $node's slurmd with its old GRES $(cat "$DIR/nodes/$node/gres")"
        start_slurmd "$node" "$(cat "$DIR/nodes/$node/gres")"
        die "scontrol delete nodename=$node refused; $node is back with its old GRES"
    fi
    if [ "$write" = "--write-gres-conf" ]; then
        write_gres_conf "$node" "$gres"
    fi
    prepare_node "$node" "$gres"
    start_slurmd "$node" "$gres"
    wait_node_idle "$node" "$gres" 30
    log "restart-node $node $gres: idle again after $(elapsed "$t0") s"
}

# restart-ctld: stop slurmctld and start it again on its saved state (jobs, dynamic nodes).
cmd_restart_ctld() {
    need_root
    load_env
    local t0
    t0=$(date +%s.%N)
    # The job_submit plugin's config, as up gave it (slurm/local-dynmig.sh records it).
    if [ -z "${DYNMIG_CONFIG:-}" ] && [ -f "$DIR/env.sh" ]; then
        DYNMIG_CONFIG=$(sed -n 's/^export DYNMIG_CONFIG=//p' "$DIR/env.sh")
    fi
    stop_pidfile "$DIR/run/slurmctld.pid" slurmctld
    start_slurmctld
    log "restart-ctld: slurmctld answers again after $(elapsed "$t0") s"
}

# user NAME [LEVEL]: an ordinary user NAME (own group, no home, no login), made if missing, also
# inside the release's chroot (DYNMIG_SLURM_ROOT); prints its uid. When the cluster of $DIR
# runs with accounting, NAME is also added to the account dynmig with AdminLevel=LEVEL (None,
# Operator or Administrator; default None), and this returns once slurmctld knows it.
cmd_user() {
    need_root
    local name=${1:?usage: user NAME [None|Operator|Administrator]} level=${2:-None} f
    id -u "$name" >/dev/null 2>&1 ||
        useradd --system --user-group --no-create-home --shell /usr/sbin/nologin "$name" ||
        die "useradd $name failed"
    if [ -n "$SLURM_ROOT" ]; then
        for f in passwd group; do
            grep -q "^$name:" "$SLURM_ROOT/etc/$f" || grep "^$name:" "/etc/$f" >>"$SLURM_ROOT/etc/$f"
        done
    fi
    if [ -f "$DIR/etc/slurmdbd.conf" ] && pid_alive "$DIR/run/slurmdbd.pid" slurmdbd; then
        accounting_user "$name" "$level"
    elif [ "$level" != None ]; then
        die "AdminLevel=$level needs the cluster of $DIR running with accounting"
    fi
    id -u "$name"
}

cmd_status() {
    local nodes node
    nodes=$(recorded_nodes)
    echo "cluster dir: $DIR"
    show_pidfile "$DIR/munge/munged.pid" munged
    show_pidfile "$DIR/run/slurmdbd.pid" slurmdbd
    show_pidfile "$DIR/mysql/mariadbd.pid" mariadbd
    show_pidfile "$DIR/run/slurmctld.pid" slurmctld
    for node in $nodes; do
        show_pidfile "$DIR/nodes/$node/slurmd.pid" "slurmd" "$node"
        if ip netns list 2>/dev/null | grep -qw "$(ns_name "$node")"; then
            echo "netns $(ns_name "$node"): present"
        else
            echo "netns $(ns_name "$node"): absent"
        fi
    done
    if [ -f "$DIR/etc/slurm.conf" ] && pid_alive "$DIR/run/slurmctld.pid" slurmctld; then
        SLURM_CONF="$DIR/etc/slurm.conf" sinfo -N -o '%N %t %G' || true
    fi
}

# Commands that start or stop things hold /run/dynmig-cluster.lock, so that two of them
# (e.g. the up of one test and the down of another) never interleave.
lock() {
    exec 9>"$LOCK_FILE"
    flock -w "${DYNMIG_LOCK_TIMEOUT:-300}" 9 || die "another cluster.sh holds $LOCK_FILE"
}

main() {
    local cmd=${1:-}
    shift || true
    case "$cmd" in
    up | down | restart-node | restart-ctld | selftest) need_root && lock ;;
    esac
    case "$cmd" in
    up) cmd_up "$@" ;;
    down) cmd_down "$@" ;;
    restart-node) cmd_restart_node "$@" ;;
    restart-ctld) cmd_restart_ctld "$@" ;;
    status) cmd_status "$@" ;;
    selftest) cmd_selftest "$@" ;;
    user) cmd_user "$@" ;;
    *)
        sed -n '2,19p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
        [ -z "$cmd" ] || [ "$cmd" = help ] || [ "$cmd" = -h ] || exit 2
        ;;
    esac
}

main "$@"
