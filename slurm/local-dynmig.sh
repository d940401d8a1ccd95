#!/usr/bin/env bash
# Starts and stops dynmig on the local test cluster (slurm/cluster.sh): writes the cluster's
# dynmig.toml and hook wrappers, gives every node its initial layout, brings the cluster up
# with both plugins loaded, and runs one node agent per node (inside the node's network
# namespace, where its slurmd runs) and the controller. Sourced by slurm/demo.sh and used by
# the integration tests.
#
#   slurm/local-dynmig.sh up      # env: DYNMIG_CLUSTER_DIR, DYNMIG_BIN_DIR (target/release),
#                                 #      DYNMIG_NO_CONTROLLER=1 to start no controller
#                                 #      DYNMIG_PLUGIN_DIR: the plugins of one Slurm release
#                                 #        (slurm/releases.sh; default DYNMIG_BIN_DIR's)
#                                 #      DYNMIG_NO_HISTORY=1 to start no history server
#                                 #      DYNMIG_HISTORY_STORE=slurmdbd: the history in
#                                 #        Slurm's accounting (docs/history.md)
#                                 #      DYNMIG_NO_CATALOG=1 to add no catalog node (tests)
#                                 #      DYNMIG_METRICS=0: no Prometheus endpoints
#                                 #        (default: controller 10.199.0.1:9811, agents
#                                 #        :9812 on their node's address, history :9813)
#                                 #      DYNMIG_POLICY: [policy] kind (default demand)
#                                 #      DYNMIG_LEARNED_MODEL: the model of kind
#                                 #        "learned" (default the repository's
#                                 #        models/learned-A100-80GB.safetensors)
#                                 #      DYNMIG_ALLOWED_LAYOUTS: per-GPU layouts, spaces
#                                 #        between (default the six below)
#                                 #      DYNMIG_STATIC_LAYOUTS: one layout per node (every
#                                 #        GPU of it), in DYNMIG_NODES order (default
#                                 #        1x7g.80gb everywhere); one node group per node
#                                 #      DYNMIG_BACKEND: nvml (default: each node gets its
#                                 #        own NVML stand-in, crates/nvml-standin, under
#                                 #        DYNMIG_NVML_DIR/<node>, installed with
#                                 #        $DYNMIG_BIN_DIR/nvml-standin unless
#                                 #        DYNMIG_NVML_INSTALLED=1) or simulated
#   slurm/local-dynmig.sh down
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export DYNMIG_CLUSTER_DIR=${DYNMIG_CLUSTER_DIR:-$ROOT/.run/cluster}
DIR=$DYNMIG_CLUSTER_DIR
BIN=${DYNMIG_BIN_DIR:-$ROOT/target/release}
export DYNMIG_NODES=${DYNMIG_NODES:-"n1 n2"}
export DYNMIG_NODE_CONF=${DYNMIG_NODE_CONF:-"CPUs=16 SocketsPerBoard=1 CoresPerSocket=16 ThreadsPerCore=1 RealMemory=16000"}
DYNMIG=$BIN/dynmig
CONF=$DIR/dynmig.toml
BACKEND=${DYNMIG_BACKEND:-nvml}
NVML_DIR=${DYNMIG_NVML_DIR:-$DIR/nvml}

# The [[node_group]] tables: one group of every node, or with DYNMIG_STATIC_LAYOUTS one
# group per node with its own initial layout.
node_groups() {
    local allowed=${DYNMIG_ALLOWED_LAYOUTS:-"1x7g.80gb 1x4g.40gb+1x3g.40gb 2x3g.40gb 1x3g.40gb+2x2g.20gb 3x2g.20gb+1x1g.10gb 7x1g.10gb"}
    allowed=$(printf '"%s", ' $allowed)
    allowed=${allowed%, }
    local -a names layouts groups
    read -r -a names <<<"$DYNMIG_NODES"
    if [ -n "${DYNMIG_STATIC_LAYOUTS:-}" ]; then
        read -r -a layouts <<<"$DYNMIG_STATIC_LAYOUTS"
        [ "${#layouts[@]}" = "${#names[@]}" ] || { echo "DYNMIG_STATIC_LAYOUTS: one layout per node of '$DYNMIG_NODES'" >&2; return 1; }
        local i
        for i in "${!names[@]}"; do groups+=("a100-${names[$i]}|\"${names[$i]}\"|${layouts[$i]}"); done
    else
        groups=("a100|$(printf '"%s",' "${names[@]}" | sed 's/,$//')|1x7g.80gb")
    fi
    local g name nodes layout
    for g in "${groups[@]}"; do
        IFS='|' read -r name nodes layout <<<"$g"
        cat <<TOML

[[node_group]]
name = "$name"
nodes = [$nodes]
gpu_model = "A100-80GB"
gpus = 2
$(backend_keys)
initial_layout = "$layout"
allowed_layouts = [$allowed]
node_conf = "$DYNMIG_NODE_CONF"
TOML
    done
}

# The node group's backend: the NVML backend on each node's NVML stand-in, or the simulated one.
backend_keys() {
    if [ "$BACKEND" = nvml ]; then
        cat <<TOML
backend = "nvml"
nvml_library = "$NVML_DIR/{node}/libnvidia-ml.so.1"
nvml_device_root = "$NVML_DIR/{node}/root"
TOML
    else
        echo 'backend = "simulated"'
    fi
}

# Gives each node a fresh NVML stand-in: 2 A100-80GB with MIG on, the driver's files under
# the node's root (the cluster tests install them themselves: DYNMIG_NVML_INSTALLED=1).
install_standins() {
    [ "$BACKEND" = nvml ] && [ -z "${DYNMIG_NVML_INSTALLED:-}" ] || return 0
    rm -rf "$NVML_DIR"
    local node
    for node in $DYNMIG_NODES; do
        "$BIN/nvml-standin" install --dir "$NVML_DIR/$node" --board A100-80GB --gpus 2 --mig \
            --device-root "$NVML_DIR/$node/root" >/dev/null
    done
}

# `metrics_listen = "ADDR"` for the daemons' Prometheus endpoints, unless DYNMIG_METRICS=0:
# the controller on 10.199.0.1:9811, each agent on its node's address :9812, the history
# service on 10.199.0.1:9813 (docs/config.md "Metrics").
metrics_key() {
    [ "${DYNMIG_METRICS:-1}" = 0 ] || echo "metrics_listen = \"$2\""
}

write_config() {
    mkdir -p "$DIR/dynmig" "$DIR/bin"
    local groups model_key=""
    groups=$(node_groups)
    if [ "${DYNMIG_POLICY:-}" = learned ]; then
        model_key="model = \"${DYNMIG_LEARNED_MODEL:-$ROOT/models/learned-A100-80GB.safetensors}\""
    fi
    cat >"$CONF" <<TOML
# dynmig.toml of the local test cluster (written by slurm/local-dynmig.sh)
version = 1

[paths]
state_dir = "$DIR/dynmig"
slurm_conf_dir = "$DIR/nodes/{node}/etc"
gres_conf = "$DIR/nodes/{node}/etc/gres.conf"
device_dir = "$DIR/dynmig/devices"
slurmd = "$(command -v slurmd)"
scontrol = "$(command -v scontrol)"
squeue = "$(command -v squeue)"
sinfo = "$(command -v sinfo)"
sacct = "$(command -v sacct)"
sacctmgr = "$(command -v sacctmgr)"

[history]
# dynmig history serve listens on the controller's address (slurm/lib/common.sh CTL_ADDR),
# which the nodes' namespaces reach.
server = "${DYNMIG_HISTORY_ADDR:-10.199.0.1:6830}"
store = "${DYNMIG_HISTORY_STORE:-server}"
sacct_interval = "1s"
$(metrics_key history "10.199.0.1:9813")

[agent]
# Each agent binds in its node's network namespace (address 10.199.0.(10+index)).
$(metrics_key agent "0.0.0.0:9812")
# The demo dashboard's "top jobs by energy" panel (off by default: per-job data).
metrics_per_job = true

[estimator]
max_oom_restarts = 2

[jobs]
whole_gpu = "full-profile"
multi_gpu = "full-profile"

[controller]
interval = "1s"
max_concurrent_repartitions = 1
min_layout_lifetime = "${DYNMIG_MIN_LAYOUT_LIFETIME:-10s}"
$(metrics_key controller "10.199.0.1:9811")

[policy]
kind = "${DYNMIG_POLICY:-demand}"
$model_key
$groups
TOML
    "$DYNMIG" --config "$CONF" config check >/dev/null
    # Slurm runs Prolog/Epilog with no arguments and its own environment.
    for hook in prolog epilog; do
        cat >"$DIR/bin/$hook" <<SH
#!/bin/sh
export SLURM_CONF=$DIR/etc/slurm.conf
exec $DYNMIG --config $CONF $hook
SH
        chmod +x "$DIR/bin/$hook"
    done
}

# Runs a command in a node's namespace with the node's host name, in place of the calling
# (sub)shell: only in the background (`in_node ... &`), where it makes $! the command's own
# pid. Without exec, $! was the subshell's: `kill` of run/agent-NODE.pid stopped only that
# shell (the agent ran on) and a SIGUSR1 to it killed the shell instead of waking the agent.
in_node() {
    local node=$1
    shift
    SLURM_CONF=$SLURM_CONF exec nsenter --net="/run/netns/dynmig-$node" unshare --uts \
        sh -c 'hostname "$0" && exec "$@"' "$node" "$@"
}

# A placeholder node that never runs and lists every profile the nodes may get, so that
# slurmctld accepts a job for a type no node has at the moment (slurm/README.md, "Jobs for a
# type no node has"). Counts: the most of each type one node can hold.
catalog_gres() {
    local gpus=2
    echo "gpu:1g.10gb:$((7 * gpus)),gpu:2g.20gb:$((3 * gpus)),gpu:3g.40gb:$((2 * gpus)),gpu:4g.40gb:$gpus,gpu:7g.80gb:$gpus"
}

cmd_up() {
    "$ROOT/slurm/cluster.sh" down >/dev/null 2>&1 || true
    rm -rf "$DIR/dynmig"
    install_standins
    write_config
    local node gres
    for node in $DYNMIG_NODES; do
        gres=$("$DYNMIG" --config "$CONF" init-node --node "$node")
        export "DYNMIG_NODE_GRES_$node=$gres"
    done
    export DYNMIG_CONFIG=$CONF
    if [ -n "${DYNMIG_PLUGIN_DIR:-}" ]; then
        # The plugins of one Slurm release (slurm/releases.sh plugins SUITE).
        export DYNMIG_SPANK_SO=$DYNMIG_PLUGIN_DIR/spank_dynmig.so
        export DYNMIG_JOBSUBMIT_SO=$DYNMIG_PLUGIN_DIR/job_submit_dynmig.so
    else
        export DYNMIG_SPANK_SO=$BIN/libspank_dynmig.so
        export DYNMIG_JOBSUBMIT_SO=$BIN/libjob_submit_dynmig.so
    fi
    export DYNMIG_PROLOG=$DIR/bin/prolog
    export DYNMIG_EPILOG=$DIR/bin/epilog
    if [ -z "${DYNMIG_NO_CATALOG:-}" ]; then
        export DYNMIG_CATALOG_GRES=$(catalog_gres)
    fi
    "$ROOT/slurm/cluster.sh" up >/dev/null
    # shellcheck disable=SC1091
    . "$DIR/env.sh"
    for node in $DYNMIG_NODES; do
        # The agent lives where the node's slurmd lives (its network namespace and host
        # name), because it restarts that slurmd. nsenter, not `ip netns exec`, which
        # remounts /sys and breaks slurmd (slurm/README.md).
        in_node "$node" "$DYNMIG" --config "$CONF" agent --node "$node" >>"$DIR/log/agent-$node.log" 2>&1 &
        echo $! >"$DIR/run/agent-$node.pid"
    done
    if [ -z "${DYNMIG_NO_HISTORY:-}" ]; then
        "$DYNMIG" --config "$CONF" history serve >>"$DIR/log/history.log" 2>&1 &
        echo $! >"$DIR/run/history.pid"
    fi
    if [ -z "${DYNMIG_NO_CONTROLLER:-}" ]; then
        "$DYNMIG" --config "$CONF" controller >>"$DIR/log/controller.log" 2>&1 &
        echo $! >"$DIR/run/controller.pid"
    fi
    echo "export DYNMIG_CONFIG=$CONF" >>"$DIR/env.sh"
    echo "dynmig up: $DIR (source $DIR/env.sh)" >&2
}

cmd_down() {
    local f
    for f in "$DIR"/run/agent-*.pid "$DIR/run/controller.pid" "$DIR/run/history.pid"; do
        [ -f "$f" ] || continue
        kill "$(cat "$f")" 2>/dev/null || true
        rm -f "$f"
    done
    "$ROOT/slurm/cluster.sh" down >/dev/null 2>&1 || true
}

case "${1:-}" in
up) cmd_up ;;
down) cmd_down ;;
*) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
