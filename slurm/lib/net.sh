# Network of the test cluster (sourced by slurm/cluster.sh): a bridge in the root namespace
# with the controller's address 10.199.0.1/24, one namespace dynmig-<node> per node joined by
# a veth pair (dynmig-v<i> on the bridge, eth0 inside, address 10.199.0.(10+i)/24).

BRIDGE=dynmig-br0

ns_name() { echo "dynmig-$1"; }
node_addr() { echo "10.199.0.$((10 + $(node_index "$1")))"; }

net_up() {
    local node i ns
    ip link add "$BRIDGE" type bridge
    ip addr add "$CTL_ADDR/24" dev "$BRIDGE"
    ip link set "$BRIDGE" up
    for node in $(recorded_nodes); do
        i=$(node_index "$node")
        ns=$(ns_name "$node")
        ip netns add "$ns"
        ip link add "dynmig-v$i" type veth peer name eth0 netns "$ns"
        ip link set "dynmig-v$i" master "$BRIDGE" up
        ip -n "$ns" addr add "$(node_addr "$node")/24" dev eth0
        ip -n "$ns" link set lo up
        ip -n "$ns" link set eth0 up
    done
}

# net_check: from every node's namespace, scontrol reaches slurmctld (network and munge).
net_check() {
    local node
    for node in $(recorded_nodes); do
        nsenter --net="/run/netns/$(ns_name "$node")" env SLURM_CONF="$DIR/etc/slurm.conf" \
            scontrol ping 2>&1 | grep -q 'is UP' || die "node $node cannot reach slurmctld at $CTL_ADDR"
    done
}

# kill_ns_pids NS: SIGKILL every process left in network namespace NS (job steps, strays).
kill_ns_pids() {
    local pids
    pids=$(ip netns pids "$1" 2>/dev/null || true)
    [ -z "$pids" ] && return 0
    log "killing processes left in $1: $(echo $pids)"
    kill -KILL $pids 2>/dev/null || true
    sleep 0.2
}

# net_down NODE...: kill what still runs in the namespaces, delete them, the veths, the bridge.
net_down() {
    local node ns i=0
    for node in "$@"; do
        i=$((i + 1))
        ns=$(ns_name "$node")
        if ip netns list 2>/dev/null | awk '{print $1}' | grep -qx "$ns"; then
            kill_ns_pids "$ns"
            ip netns del "$ns" 2>/dev/null || true
        fi
        ip link del "dynmig-v$i" 2>/dev/null || true
    done
    ip link del "$BRIDGE" 2>/dev/null || true
}
