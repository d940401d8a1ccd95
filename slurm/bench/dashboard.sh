#!/usr/bin/env bash
# What the Grafana dashboard (docs/grafana/dynmig.json) would show during the demo, without
# Grafana: a real Prometheus (Debian's package) scrapes the local cluster's daemons while
# slurm/demo.sh replays the trace; then every panel's queries are evaluated over the demo's
# time range and summarised per series (slurm/bench/dashboard_summary.py), and the last
# scrape of each endpoint is kept as an example of the exposition text.
# Takes the cluster tests' lock, so it never runs beside them. Needs root.
# Usage: bash slurm/bench/dashboard.sh OUTDIR
set -euo pipefail
out=$(realpath -m "${1:?usage: dashboard.sh OUTDIR}")
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
mkdir -p "$out"
data=$(mktemp -d)
web=127.0.0.1:19090
targets='"10.199.0.1:9811", "10.199.0.11:9812", "10.199.0.12:9812", "10.199.0.1:9813"'
printf 'global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: dynmig\n    static_configs:\n      - targets: [%s]\n' "$targets" >"$data/prometheus.yml"
prometheus --config.file="$data/prometheus.yml" --storage.tsdb.path="$data/tsdb" --web.listen-address=$web >"$data/prometheus.log" 2>&1 &
prom=$!
# The last good scrape of each endpoint, every 5 s while the demo runs.
(
    while sleep 5; do
        for t in controller:10.199.0.1:9811 agent-n1:10.199.0.11:9812 agent-n2:10.199.0.12:9812 history:10.199.0.1:9813; do
            name=${t%%:*}
            curl -sf --max-time 2 "http://${t#*:}/metrics" >"$data/$name.tmp" && mv "$data/$name.tmp" "$out/scrape-$name.txt" || true
        done
    done
) &
scraper=$!
trap 'kill $scraper $prom 2>/dev/null; rm -rf "$data"' EXIT
start=$(date +%s)
flock /run/dynmig-cluster-tests.lock env DYNMIG_SKIP_SETUP=1 bash "$ROOT/slurm/demo.sh" 2>&1 | tail -30 >"$out/demo.txt"
end=$(date +%s)
python3 "$ROOT/slurm/bench/dashboard_summary.py" "http://$web" "$start" "$end" "$ROOT/docs/grafana/dynmig.json" >"$out/dashboard.md"
cat "$out/dashboard.md"
