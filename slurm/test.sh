#!/usr/bin/env bash
# README command 2 (and what .ci/run calls): install what is missing, build every crate
# (the Slurm plugins need Slurm's headers), run the unit tests, then, on every Slurm release
# of the matrix one after another (slurm/releases.sh: 22.05 on the host, 24.11 in a trixie
# chroot, 26.05 in a sid chroot), the bindings' tests against that release's headers and the
# integration tests on a real local cluster of that release (needs root). Prints one line per
# release; exits 1 if anything failed.
#
#   DYNMIG_RELEASES="bookworm trixie sid"   the releases to run (default all three)
#   DYNMIG_FULL_MATRIX=1                    the whole cluster suite on every release
#
# By default the host's release (22.05, bookworm) runs the whole cluster suite and the two
# chroot releases run the release pass: every test whose outcome depends on what Slurm does
# (submit, update, requeue, restarts, accounting, Prolog/Epilog, the users' actions and
# attacks), without the long campaigns that exercise dynmig's own code the same way on every
# release (the agent killed at every point, NVML failing at every call, the 200-job load, the
# metrics scrape, the learned and mpc controllers, the agent killed mid-apply). That keeps CI
# inside its 45 minutes; DYNMIG_FULL_MATRIX=1 runs all of it everywhere (about an hour), see
# docs/results/ for its last run. Each test's time goes to .run/releases/SUITE.times.tsv.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
t_all=$(date +%s)
# The release pass leaves these out on the chroot releases (libtest --skip, substring match).
RELEASE_PASS_SKIPS=(
    faults::an_agent_killed_at_every_point_of_a_repartition
    faults::an_nvml_failure_at_every_backend_call
    load::two_hundred_jobs
    metrics::prometheus_scrapes
    the_learned_controller_serves
    the_mpc_controller_reads
    an_agent_killed_mid_apply
)
phases=()
t0=$(date +%s)
DYNMIG_PROFILE=dev bash slurm/setup.sh
phases+=("setup and build: $(($(date +%s) - t0)) s")
mkdir -p .run/releases
# The chroots of the other releases (on a fresh machine debootstrap and apt: minutes of
# network and disk, little CPU) are built while the unit tests run; a chroot that fails here
# is built again, in the foreground, by the release loop below. Cached ones take a second.
chroots_pid=""
others=$(printf '%s\n' ${DYNMIG_RELEASES:-bookworm trixie sid} | grep -vx bookworm || true)
if [ -n "$others" ]; then
    t_chroots=$(date +%s)
    (
        for s in $others; do
            bash slurm/releases.sh chroot "$s" >/dev/null || echo "dynmig test: the $s chroot failed here; the release loop tries again"
        done
        echo "dynmig test: chroots ready in $(($(date +%s) - t_chroots)) s"
    ) >.run/releases/chroots.log 2>&1 &
    chroots_pid=$!
fi
t0=$(date +%s)
cargo test --workspace
phases+=("unit and integration tests (cargo test --workspace): $(($(date +%s) - t0)) s")
if [ -n "$chroots_pid" ]; then
    t0=$(date +%s)
    wait "$chroots_pid" || true
    cat .run/releases/chroots.log >&2
    phases+=("waiting for the chroots after the unit tests: $(($(date +%s) - t0)) s")
fi
summary=()
failed=0
for suite in ${DYNMIG_RELEASES:-bookworm trixie sid}; do
    t0=$(date +%s)
    log=.run/releases/$suite.log
    rc=0
    ver=$(bash slurm/releases.sh version "$suite") || rc=$?
    skips=()
    pass="whole suite"
    if [ "$suite" != bookworm ] && [ -z "${DYNMIG_FULL_MATRIX:-}" ]; then
        for t in "${RELEASE_PASS_SKIPS[@]}"; do skips+=(--skip "$t"); done
        pass="release pass"
    fi
    rm -f .run/cluster-test-times.tsv
    if [ "$rc" = 0 ]; then
        {
            bash slurm/releases.sh plugins "$suite" >/dev/null &&
                bash slurm/releases.sh unit "$suite" &&
                bash slurm/releases.sh test "$suite" "${skips[@]}"
        } 2>&1 | tee "$log" || rc=$?
    fi
    times=.run/releases/$suite.times.tsv
    mv -f .run/cluster-test-times.tsv "$times" 2>/dev/null || : >"$times"
    echo "dynmig test: $suite: the slowest cluster tests (seconds):" >&2
    sort -t$'\t' -k2,2nr "$times" | head -8 | awk -F'\t' '{printf "  %5d  %s (%s)\n", $2, $1, $3}' >&2
    # "test result: ok. 12 passed; 0 failed; ..." of the cluster suite (the last one).
    counts=$(grep -o 'test result: [a-zA-Z]*\. [0-9]* passed; [0-9]* failed' "$log" 2>/dev/null | tail -1 |
        sed 's/test result: [a-zA-Z]*\. //') || true
    line="release ${ver:-?} ($suite): cluster suite ($pass) ${counts:-not run}, $(($(date +%s) - t0)) s"
    if [ "$rc" != 0 ]; then
        line="$line: FAILED (log: $log)"
        failed=1
    fi
    echo "dynmig test: $line" >&2
    summary+=("$line")
done
echo "dynmig test: done in $(($(date +%s) - t_all)) s:" >&2
printf '  %s\n' "${phases[@]}" "${summary[@]}" >&2
exit "$failed"
