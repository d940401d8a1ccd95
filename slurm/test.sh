#!/usr/bin/env bash
# README command 2 (and what .ci/run calls): install what is missing, build every crate
# (the Slurm plugins need Slurm's headers), run the unit tests, then, on every Slurm release
# of the matrix one after another (slurm/releases.sh: 22.05 on the host, 24.11 in a trixie
# chroot, 26.05 in a sid chroot), the bindings' tests against that release's headers and the
# integration tests on a real local cluster of that release (needs root). Prints one line per
# release; exits 1 if anything failed.
#
#   DYNMIG_RELEASES="bookworm trixie sid"   the releases to run (default all three)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
t_all=$(date +%s)
DYNMIG_PROFILE=dev bash slurm/setup.sh
cargo test --workspace
mkdir -p .run/releases
summary=()
failed=0
for suite in ${DYNMIG_RELEASES:-bookworm trixie sid}; do
    t0=$(date +%s)
    log=.run/releases/$suite.log
    rc=0
    ver=$(bash slurm/releases.sh version "$suite") || rc=$?
    if [ "$rc" = 0 ]; then
        {
            bash slurm/releases.sh plugins "$suite" >/dev/null &&
                bash slurm/releases.sh unit "$suite" &&
                bash slurm/releases.sh test "$suite"
        } 2>&1 | tee "$log" || rc=$?
    fi
    # "test result: ok. 12 passed; 0 failed; ..." of the cluster suite (the last one).
    counts=$(grep -o 'test result: [a-zA-Z]*\. [0-9]* passed; [0-9]* failed' "$log" 2>/dev/null | tail -1 |
        sed 's/test result: [a-zA-Z]*\. //') || true
    line="release ${ver:-?} ($suite): cluster suite ${counts:-not run}, $(($(date +%s) - t0)) s"
    if [ "$rc" != 0 ]; then
        line="$line: FAILED (log: $log)"
        failed=1
    fi
    echo "dynmig test: $line" >&2
    summary+=("$line")
done
echo "dynmig test: all releases in $(($(date +%s) - t_all)) s:" >&2
printf '  %s\n' "${summary[@]}" >&2
exit "$failed"
