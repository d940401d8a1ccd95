#!/usr/bin/env bash
# README command 1: on a fresh Debian machine (as root), install what is missing, build,
# start a local Slurm cluster (2 nodes x 2 simulated A100-80GB) with dynmig, replay a slice
# of the real Alibaba GPU trace as sbatch jobs, wait until every job has ended, print the
# report, and clean up. Exits non-zero if a job was lost or failed.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
[ "$(id -u)" = 0 ] || { echo "demo: run as root (it starts slurmctld, slurmd and munged)" >&2; exit 1; }
# DYNMIG_SKIP_SETUP=1 skips it (everything already installed and built).
[ -n "${DYNMIG_SKIP_SETUP:-}" ] || bash slurm/setup.sh
# DYNMIG_PROFILE=dev (as slurm/setup.sh) runs the debug build instead of the release one.
if [ "${DYNMIG_PROFILE:-release}" = release ]; then
    export DYNMIG_BIN_DIR=${CARGO_TARGET_DIR:-$ROOT/target}/release
else
    export DYNMIG_BIN_DIR=${CARGO_TARGET_DIR:-$ROOT/target}/debug
fi
export DYNMIG_CLUSTER_DIR=$ROOT/.run/demo
trap 'bash slurm/local-dynmig.sh down' EXIT
bash slurm/local-dynmig.sh up
# shellcheck disable=SC1091
. "$DYNMIG_CLUSTER_DIR/env.sh"
"$DYNMIG_BIN_DIR/dynmig" demo --trace slurm/demo/trace-slice.csv \
    --workdir "$DYNMIG_CLUSTER_DIR/jobs" --report "$DYNMIG_CLUSTER_DIR/report.md" "$@"
echo "report: $DYNMIG_CLUSTER_DIR/report.md" >&2
