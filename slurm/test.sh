#!/usr/bin/env bash
# README command 2 (and what .ci/run calls): install what is missing, build every crate
# (the Slurm plugins need Slurm's headers), run the unit tests, then the integration tests on
# a real local Slurm cluster that the tests start and stop themselves (needs root).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
DYNMIG_PROFILE=dev bash slurm/setup.sh
cargo test --workspace
# One cluster at a time: the cluster tests share network namespaces and ports.
cargo test -p dynmig --test cluster -- --include-ignored --test-threads=1
