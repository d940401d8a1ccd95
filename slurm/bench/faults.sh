#!/usr/bin/env bash
# Fault injection at every step of a repartition (issue 14, item 2): runs the cluster tests of
# tests/cluster/faults.rs on one Slurm release and prints their rows as one Markdown table
# (fault, outcome, jobs or records lost, seconds). Needs root, as the cluster tests do.
#
#   slurm/bench/faults.sh [SUITE] [FILTER]   # SUITE: bookworm (22.05, the host; default),
#                                            # trixie (24.11), sid (26.05); FILTER: a test
#                                            # name part (default every fault test, faults::)
# The raw output stays in .run/faults-SUITE.log.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
suite=${1:-bookworm}
filter=${2:-faults::}
log=.run/faults-$suite.log
mkdir -p .run
t0=$(date +%s)
rc=0
if [ "$suite" = bookworm ]; then
    cargo test -p dynmig --test cluster -- --include-ignored --test-threads=1 --nocapture "$filter" >"$log" 2>&1 || rc=$?
else
    bash slurm/releases.sh test "$suite" --nocapture "$filter" >"$log" 2>&1 || rc=$?
fi
echo "| fault | outcome | lost | s |"
echo "|---|---|---|---|"
grep -a -o 'FAULT|.*' "$log" | sed 's/^FAULT|/| /; s/$/ |/' || true
rows=$(grep -a -c 'FAULT|' "$log" || true)
lost=$(grep -a -o 'FAULT|.*' "$log" | awk -F'|' '{s += $4} END {print s + 0}')
echo
echo "$rows faults, $lost jobs or records lost; $(grep -a -o 'test result: .*' "$log" | tail -1); $(($(date +%s) - t0)) s (log: $log)"
exit "$rc"
