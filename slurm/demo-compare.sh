#!/usr/bin/env bash
# Sim-to-real (docs/demo.md, "Simulator vs. real"), as root: runs the demo's trace slice on
# the local Slurm cluster (2 nodes x 2 simulated A100-80GB) once per policy, bringing the
# cluster up and down for each, and prints the measured queue waits, makespan and
# repartitions side by side with what the simulator predicts for the same jobs, cluster and
# policy. Exits non-zero if a run failed (a job lost or not COMPLETED).
#
#   bash slurm/demo-compare.sh [policy ...]     # default: static plan demand
#
# "static" keeps the simulator's searched static layout for the slice (dynmig demo-compare
# setup); "plan" and "demand" start from whole GPUs, as in the simulator. Extra arguments of
# `dynmig demo` go in DYNMIG_DEMO_ARGS. Skips slurm/setup.sh with DYNMIG_SKIP_SETUP=1.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
[ "$(id -u)" = 0 ] || { echo "demo-compare: run as root (it starts slurmctld, slurmd and munged)" >&2; exit 1; }
POLICIES=("$@")
[ "${#POLICIES[@]}" -gt 0 ] || POLICIES=(static plan demand)
[ -n "${DYNMIG_SKIP_SETUP:-}" ] || bash slurm/setup.sh
# One real cluster at a time on this machine: the integration tests hold this lock for a
# whole test; hold it for the whole comparison.
exec 8>/run/dynmig-cluster-tests.lock
flock -w "${DYNMIG_LOCK_TIMEOUT:-1800}" 8 || { echo "demo-compare: another cluster user holds /run/dynmig-cluster-tests.lock" >&2; exit 1; }
TRACE=slurm/demo/trace-slice.csv
OUTDIR=$ROOT/.run/demo-compare
mkdir -p "$OUTDIR"
# shellcheck disable=SC2046
eval "$(target/release/dynmig demo-compare setup --trace "$TRACE")"
export DYNMIG_ALLOWED_LAYOUTS
export DYNMIG_CLUSTER_DIR=$ROOT/.run/demo
trap 'bash slurm/local-dynmig.sh down' EXIT
failed=()
files=()
for policy in "${POLICIES[@]}"; do
    echo "demo-compare: === $policy ===" >&2
    export DYNMIG_POLICY=$policy
    rm -f "$OUTDIR/$policy.json"
    if [ "$policy" = static ]; then
        export DYNMIG_STATIC_LAYOUTS
    else
        unset DYNMIG_STATIC_LAYOUTS
    fi
    bash slurm/local-dynmig.sh up
    # shellcheck disable=SC1091
    . "$DYNMIG_CLUSTER_DIR/env.sh"
    rc=0
    # shellcheck disable=SC2086
    target/release/dynmig demo --trace "$TRACE" --workdir "$DYNMIG_CLUSTER_DIR/jobs" \
        --report "$OUTDIR/report-$policy.md" --compare "$OUTDIR/$policy.json" ${DYNMIG_DEMO_ARGS:-} || rc=$?
    [ "$rc" = 0 ] || failed+=("$policy (exit $rc)")
    [ -f "$OUTDIR/$policy.json" ] && [ "$rc" = 0 ] && files+=("$OUTDIR/$policy.json")
    cp "$DYNMIG_CLUSTER_DIR/dynmig.toml" "$OUTDIR/dynmig-$policy.toml"
    bash slurm/local-dynmig.sh down
done
echo
echo "## Simulator vs. real: $TRACE on 2 nodes x 2 A100-80GB"
echo
[ "${#files[@]}" = 0 ] || target/release/dynmig demo-compare table "${files[@]}" | tee "$OUTDIR/table.md"
echo "reports and figures: $OUTDIR" >&2
if [ "${#failed[@]}" -gt 0 ]; then
    echo "demo-compare: FAILED: ${failed[*]}" >&2
    exit 1
fi
