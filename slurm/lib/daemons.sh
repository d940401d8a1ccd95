# Starting and stopping the daemons of the test cluster (sourced by slurm/cluster.sh).

# munged with its own key, socket, pid, log and seed files under $DIR/munge. Slurm finds the
# socket through AuthInfo=socket=... in slurm.conf.
start_munged() {
    local m="$DIR/munge" i
    # 0755 like /run/munge: ordinary users (sbatch as a normal user) must reach the socket;
    # the key itself stays 0400.
    chmod 0755 "$m"
    if [ ! -s "$m/munge.key" ]; then
        dd if=/dev/urandom of="$m/munge.key" bs=1024 count=1 status=none
    fi
    chmod 0400 "$m/munge.key"
    rm -f "$m/munge.socket" "$m/munge.socket.lock"
    munged --force --num-threads=10 9>&- --socket="$m/munge.socket" --key-file="$m/munge.key" \
        --pid-file="$m/munged.pid" --log-file="$DIR/log/munged.log" --seed-file="$m/munged.seed" ||
        die "munged failed to start: see $DIR/log/munged.log"
    for i in $(seq 50); do
        if munge -n -S "$m/munge.socket" 2>/dev/null | unmunge -S "$m/munge.socket" >/dev/null 2>&1; then
            return 0
        fi
        sleep 0.1
    done
    die "munged does not answer on $m/munge.socket"
}

start_slurmctld() {
    local i
    env DYNMIG_CONFIG="${DYNMIG_CONFIG:-}" slurmctld -f "$DIR/etc/slurm.conf" 9>&- ||
        die "slurmctld failed to start: see $DIR/log/slurmctld.log"
    for i in $(seq 100); do
        if SLURM_CONF="$DIR/etc/slurm.conf" scontrol ping 2>/dev/null | grep -q 'is UP'; then
            return 0
        fi
        sleep 0.1
    done
    die "slurmctld does not answer: see $DIR/log/slurmctld.log"
}

# start_slurmd NODE GRES: a dynamic slurmd in the node's namespace and own UTS namespace
# (hostname = NODE), with the node's config dir (its gres.conf is read from there).
start_slurmd() {
    local node=$1 gres=$2 nd="$DIR/nodes/$1" i
    rm -f "$nd/slurmd.pid"
    echo "$NODE_CONF Gres=$gres" >"$nd/slurmd.conf-line"
    nsenter --net="/run/netns/$(ns_name "$node")" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$node" \
        slurmd -Z -N "$node" -f "$nd/etc/slurm.conf" --conf "$NODE_CONF Gres=$gres" 9>&- ||
        die "slurmd $node failed to start: see $DIR/log/slurmd-$node.log"
    for i in $(seq 100); do
        pid_alive "$nd/slurmd.pid" slurmd && return 0
        sleep 0.1
    done
    die "slurmd $node wrote no pid file: see $DIR/log/slurmd-$node.log"
}

stop_slurmd() { stop_pidfile "$DIR/nodes/$1/slurmd.pid" slurmd; }

# delete_node NODE: scontrol delete (retried for 2 s while slurmctld finishes a job there).
# Fails when the node stays busy.
delete_node() {
    local i out
    for i in $(seq 5); do
        if out=$(scontrol delete nodename="$1" 2>&1); then return 0; fi
        case "$out" in
        *"Invalid node name"* | *"not found"*) return 0 ;;
        esac
        sleep 0.5
    done
    log "scontrol delete nodename=$1 failed: $out"
    return 1
}

# node_busy_reason NODE: jobs and state that keep NODE from being re-registered (empty: none).
node_busy_reason() {
    local jobs state
    jobs=$(squeue -h -w "$1" -o %i 2>/dev/null | paste -sd, -)
    state=$(sinfo -h -N -n "$1" -o %t 2>/dev/null | head -1)
    case "$state" in
    idle* | drain | down* | inval* | "") state="" ;;
    esac
    echo "${jobs:+jobs $jobs }${state:+state $state}"
}

# node_quiet NODE: true when no job runs or completes on NODE.
node_quiet() { [ -z "$(node_busy_reason "$1")" ]; }

# Canonical, sorted GRES list without socket annotations: "gpu:3g.40gb:2(S:0)" -> "gpu:3g.40gb:2".
canon_gres() { echo "$1" | sed 's/([^)]*)//g' | tr ',' '\n' | sed '/^$/d' | sort | paste -sd, -; }

# wait_node_idle NODE GRES TIMEOUT_S: until sinfo shows NODE idle with GRES.
wait_node_idle() {
    local node=$1 want deadline line
    want=$(canon_gres "$2")
    deadline=$(($(date +%s) + $3))
    while [ "$(date +%s)" -lt "$deadline" ]; do
        line=$(SLURM_CONF="$DIR/etc/slurm.conf" sinfo -h -N -n "$node" -o '%t %G' 2>/dev/null | head -1)
        if [ "${line%% *}" = idle ] && [ "$(canon_gres "${line#* }")" = "$want" ]; then
            return 0
        fi
        case "${line%% *}" in
        inval* | drain*)
            if [ "$(canon_gres "${line#* }")" = "$want" ]; then
                die "node $node is ${line%% *}: $(SLURM_CONF="$DIR/etc/slurm.conf" sinfo -h -n "$node" -o %E); check $DIR/nodes/$node/etc/gres.conf (one kept from an earlier run? delete it)"
            fi
            ;;
        esac
        sleep 0.2
    done
    die "node $node not idle with $want after $3 s (sinfo: '${line:-}'); see $DIR/log/slurmd-$node.log"
}
