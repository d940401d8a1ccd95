#!/usr/bin/env bash
# Installs what dynmig's local cluster needs (Debian packages) and builds the workspace.
# Used by slurm/demo.sh, slurm/test.sh and .ci/run. Needs root for apt-get.
#
#   slurm/setup.sh            install missing packages, then `cargo build --release --workspace`
#   DYNMIG_PROFILE=dev slurm/setup.sh   build the debug profile instead
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# prometheus: promtool and the server for the metrics tests (tests/daemon_observability.rs).
# python3, curl: slurm/bench/load.sh (its report; the controller's metrics), in the suite's load test.
PKGS=(slurmctld slurmd slurm-client munge slurmdbd mariadb-server prometheus libslurm-dev slurm-wlm-basic-plugins-dev libclang-dev iproute2 procps util-linux python3 curl)
missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "dynmig setup: missing Debian packages: ${missing[*]}; run as root (apt-get install)" >&2
        exit 1
    fi
    echo "dynmig setup: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# Debian's slurm packages enable their services; this project starts its own daemons.
for s in slurmctld slurmd slurmdbd munge mariadb prometheus; do
    systemctl disable --now "$s" >/dev/null 2>&1 || true
done

if ! command -v cargo >/dev/null 2>&1; then
    [ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
fi
command -v cargo >/dev/null 2>&1 || { echo "dynmig setup: cargo not found; install Rust (rustup) first" >&2; exit 1; }

profile=${DYNMIG_PROFILE:-release}
if [ "$profile" = release ]; then
    cargo build --release --workspace --quiet
else
    cargo build --workspace --quiet
fi
# The plugins must not link libslurm: slurmctld and slurmd provide Slurm's symbols when they
# load them (a feature unified across the workspace once linked it in: crates/dynmig-fuzz).
dir=${CARGO_TARGET_DIR:-target}/$([ "$profile" = release ] && echo release || echo debug)
for so in "$dir/libjob_submit_dynmig.so" "$dir/libspank_dynmig.so"; do
    if readelf -d "$so" | grep -q 'NEEDED.*libslurm'; then
        echo "dynmig setup: $so links libslurm; the plugins must take Slurm's symbols from the daemon that loads them" >&2
        exit 1
    fi
done
echo "dynmig setup: built ($profile)" >&2
