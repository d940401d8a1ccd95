#!/bin/bash
# Queue: what dynmig costs slurmctld and how long its controller pass and Epilog take with
# JOBS queued jobs (default 50000): arrays of 1,000 tasks for 80% of them and single jobs for
# the rest, with the mixed requests of slurm/bench/load.sh (hints, plain and typed GPUs, no
# GPU), on the local cluster of slurm/local-dynmig.sh (2 nodes x 2 simulated A100-80GB).
#
#   slurm/bench/queue.sh [JOBS]             # as root; takes the cluster tests' lock
#   slurm/releases.sh queue SUITE [JOBS]    # on another Slurm release
#
# 1. The cluster comes up without the controller; the jobs are submitted (4 parallel
#    submitters, `-t 1 -o /dev/null --wrap true`, not held; most stay pending on 4 GPUs).
# 2. Without dynmig's controller for WINDOW seconds (QUEUE_WINDOW, 60): slurmctld's RPC
#    counts per message type from sdiag (the change over the window).
# 3. With the controller (policy demand, `[controller] interval` QUEUE_INTERVAL, default 5s: the
#    config's default; the cluster tests use 1s) for WINDOW seconds
#    after its first pass that left nothing for later: the same counts, and every pass's
#    time from its log line "pass took X s: N jobs listed, R read, D left for later passes".
#    The first passes (the whole queue learnt, READS_PER_PASS jobs a pass) are reported on
#    their own.
# 4. The Epilog: each finished GPU job's Epilog is timed by the hook wrapper (a line per run
#    in epilog-times.txt).
# dynmig's share of the RPCs is (RPCs with - RPCs without) / RPCs with, over the window.
# Results go to QUEUE_OUT (default $DYNMIG_CLUSTER_DIR/queue): summary.txt, sdiag-*.txt,
# passes.tsv, epilog-times.txt. Exit 1 if slurmctld died or a submission failed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$here/../.." && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"
JOBS=${1:-50000}
WINDOW=${QUEUE_WINDOW:-60}
INTERVAL=${QUEUE_INTERVAL:-5s}
P=4
export DYNMIG_CLUSTER_DIR=${DYNMIG_CLUSTER_DIR:-$ROOT/.run/queue}
OUT=${QUEUE_OUT:-$DYNMIG_CLUSTER_DIR/queue}

if [ -z "${QUEUE_LOCKED:-}" ]; then
	QUEUE_LOCKED=1 exec flock /run/dynmig-cluster-tests.lock bash "$0" "$@"
fi

src=${DYNMIG_BIN_DIR:-$ROOT/target/release}
mkdir -p "$OUT"
rm -f "$OUT"/{summary.txt,sdiag-without.txt,sdiag-with.txt,passes.tsv,epilog-times.txt,sbatch.err,controller.log} "$OUT"/rpc-*.txt "$OUT"/fails.*
copy_binaries "$src" "$DYNMIG_CLUSTER_DIR.bin"
export DYNMIG_BACKEND=${DYNMIG_BACKEND:-simulated}
export DYNMIG_MAX_JOB_COUNT=$((JOBS + 10000))
export DYNMIG_NO_CONTROLLER=1

since() { awk -v a="$1" -v b="${2:-$EPOCHREALTIME}" 'BEGIN { printf "%.3f", b - a }'; }
down() {
	[ -n "${QUEUE_KEEP:-}" ] || bash "$ROOT/slurm/local-dynmig.sh" down
}
trap down EXIT
bash "$ROOT/slurm/local-dynmig.sh" up
# shellcheck disable=SC1091
. "$DYNMIG_CLUSTER_DIR/env.sh"
D=$DYNMIG_CLUSTER_DIR
ctld_pid=$(cat "$D/run/slurmctld.pid")
release=$(slurmctld -V | awk '{print $NF}')
# The Epilog, timed: the wrapper slurmd runs appends "job milliseconds gpus" per run.
cmd=$(sed -n 's/^exec //p' "$D/bin/epilog")
[ -n "$cmd" ] || { echo "queue: no exec line in $D/bin/epilog" >&2; exit 1; }
cat >"$D/bin/epilog" <<SH
#!/bin/sh
export SLURM_CONF=$D/etc/slurm.conf
t0=\$(date +%s%N)
$cmd
rc=\$?
echo "\$SLURM_JOB_ID \$(( (\$(date +%s%N) - t0) / 1000000 )) \${SLURM_JOB_GPUS:-none}" >>$OUT/epilog-times.txt
exit \$rc
SH
echo "queue: Slurm $release, $JOBS jobs, controller interval $INTERVAL" >&2

args_of() {
	case $1 in
	0) echo "--gres=gpu:1 --mig-mem=9G" ;;
	1) echo "--gres=gpu:1 --mig-mem=18G" ;;
	2) echo "--gres=gpu:1 --mig-profile=3g.40gb" ;;
	3) echo "--gres=gpu:1 --mig-profile=1g.10gb" ;;
	4 | 5) echo "--gres=gpu:1" ;;
	6) echo "--gres=gpu:2g.20gb:1" ;;
	7) echo "--gres=gpu:1g.10gb:1" ;;
	8) echo "--gres=gpu:2" ;;
	9) echo "" ;;
	esac
}
ARRAYS=$((JOBS * 8 / 10 / 1000))
SINGLES=$((JOBS - ARRAYS * 1000))
# submitter K: arrays K, K+P, ... then singles K, K+P, ...
submitter() {
	local k=$1 i
	local -a a
	for ((i = k; i < ARRAYS; i += P)); do
		read -r -a a <<<"$(args_of $((i % 10)))"
		sbatch --parsable -t 1 -o /dev/null -J "queue-a$i" --array=0-999 "${a[@]}" --wrap true >/dev/null 2>>"$OUT/sbatch.err" || echo fail
	done
	for ((i = k; i < SINGLES; i += P)); do
		read -r -a a <<<"$(args_of $((i % 10)))"
		sbatch --parsable -t 1 -o /dev/null -J "queue-s$((i % 10))" "${a[@]}" --wrap true >/dev/null 2>>"$OUT/sbatch.err" || echo fail
	done
}
t0=$EPOCHREALTIME
for ((k = 0; k < P; k++)); do submitter "$k" >"$OUT/fails.$k" & done
wait
fails=$(cat "$OUT"/fails.* | wc -l)
rm -f "$OUT"/fails.*
queued=$(squeue -h -r -t PD,R,CG -o %i | wc -l)
echo "queue: $ARRAYS arrays of 1000 and $SINGLES single jobs submitted in $(since "$t0") s, $fails refused; $queued jobs queued" >&2

# sdiag's RPC counts per message type: "TYPE COUNT" lines.
rpc_counts() {
	sdiag | awk '/^Remote Procedure Call statistics by message type/ {on=1; next}
		/^Remote Procedure Call statistics by user/ {on=0}
		on && /count:/ {t=$1; sub(/^[ \t]*/, "", t); sub(/\(.*$/, "", t); for (i=1;i<=NF;i++) if ($i ~ /^count:/) {c=$i; sub(/count:/, "", c); print t, c}}'
}
window() {
	local name=$1
	rpc_counts >"$OUT/rpc-$name-0.txt"
	sleep "$WINDOW"
	rpc_counts >"$OUT/rpc-$name-1.txt"
	sdiag >"$OUT/sdiag-$name.txt"
	# The change per type over the window.
	awk 'NR==FNR {a[$1]=$2; next} {d=$2-a[$1]; if (d>0) print $1, d}' "$OUT/rpc-$name-0.txt" "$OUT/rpc-$name-1.txt" | sort -k2,2nr >"$OUT/rpc-$name.txt"
	awk '{s+=$2} END {print s+0}' "$OUT/rpc-$name.txt"
}
without=$(window without)
echo "queue: without the controller: $without RPCs in $WINDOW s" >&2

# The controller, as local-dynmig.sh starts it, at the campaign's interval.
sed -i "s/^interval = .*/interval = \"$INTERVAL\"/" "$DYNMIG_CONFIG"
: >"$D/log/controller.log"
"$DYNMIG_BIN_DIR/dynmig" --config "$DYNMIG_CONFIG" controller >>"$D/log/controller.log" 2>&1 &
echo $! >"$D/run/controller.pid"
t0=$EPOCHREALTIME
for _ in $(seq 3600); do
	grep -q 'pass took .* 0 left for later passes' "$D/log/controller.log" && break
	sleep 1
done
learnt=$(since "$t0")
warm=$(grep -c 'pass took' "$D/log/controller.log" || true)
echo "queue: the controller learnt the whole queue in $learnt s ($warm passes)" >&2
with=$(window with)
echo "queue: with the controller: $with RPCs in $WINDOW s" >&2
cp "$D/log/controller.log" "$OUT/controller.log"
grep -o 'pass took [0-9.]* s: [0-9]* jobs listed, [0-9]* read, [0-9]* left' "$OUT/controller.log" |
	awk '{print NR "\t" $3 "\t" $5 "\t" $8 "\t" $10}' >"$OUT/passes.tsv"
alive=$(kill -0 "$ctld_pid" 2>/dev/null && scontrol ping >/dev/null 2>&1 && echo yes || echo no)
python3 - "$OUT" "$warm" "$without" "$with" "$WINDOW" "$release" "$JOBS" "$queued" "$learnt" "$alive" "$fails" <<'PY'
import sys, statistics
out, warm, without, with_, window, release, jobs, queued, learnt, alive, fails = sys.argv[1:]
warm, without, with_ = int(warm), int(without), int(with_)
rows = [l.split("\t") for l in open(f"{out}/passes.tsv") if l.strip()]
def q(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p * len(v)))] if v else float("nan")
first = [float(r[1]) for r in rows[:warm]]
steady = [float(r[1]) for r in rows[warm:]]
reads = [int(r[3]) for r in rows[warm:]]
import os
runs = [l.split() for l in open(f"{out}/epilog-times.txt")] if os.path.exists(f"{out}/epilog-times.txt") else []
ep = [int(r[1]) / 1000 for r in runs if len(r) == 3]
ep_gpu = [int(r[1]) / 1000 for r in runs if len(r) == 3 and r[2] != "none"]
# The RPC types dynmig's controller, agents and hooks send (reads of jobs, nodes and
# partitions, the federation lookup squeue makes first; node, job and reservation changes);
# nobody else sends them in this cluster.
DYNMIG_TYPES = {"REQUEST_JOB_INFO", "REQUEST_JOB_INFO_SINGLE", "REQUEST_FED_INFO", "REQUEST_JOB_STATE", "REQUEST_NODE_INFO",
    "REQUEST_NODE_INFO_SINGLE", "REQUEST_PARTITION_INFO", "REQUEST_UPDATE_NODE", "REQUEST_DELETE_NODE",
    "REQUEST_UPDATE_JOB", "REQUEST_JOB_REQUEUE", "REQUEST_CREATE_RESERVATION", "REQUEST_UPDATE_RESERVATION",
    "REQUEST_DELETE_RESERVATION", "REQUEST_RESERVATION_INFO", "REQUEST_BUILD_INFO"}
def split(name):
    rows = [l.split() for l in open(f"{out}/rpc-{name}.txt") if l.strip()]
    ours = sum(int(c) for t, c in rows if t in DYNMIG_TYPES)
    return ours, sum(int(c) for _, c in rows)
ours_without, all_without = split("without")
ours_with, all_with = split("with")
ctl = ours_with - ours_without
share = ours_with / all_with if all_with else float("nan")
lines = [
    f"Slurm {release}: {jobs} jobs submitted ({fails} refused), {queued} queued (array tasks counted one by one)",
    f"controller learnt the whole queue in {learnt} s over {warm} passes (slowest {max(first) if first else float('nan'):.3f} s)",
    f"controller pass over {len(steady)} passes after that: p50 {q(steady, .5):.3f} s, p99 {q(steady, .99):.3f} s, max {max(steady) if steady else float('nan'):.3f} s; jobs read a pass p50 {q(reads, .5)}, max {max(reads) if reads else 0}",
    f"Epilog over {len(ep)} runs: p50 {q(ep, .5):.3f} s, p99 {q(ep, .99):.3f} s, max {max(ep) if ep else float('nan'):.3f} s; of GPU jobs ({len(ep_gpu)}): p50 {q(ep_gpu, .5):.3f} s, p99 {q(ep_gpu, .99):.3f} s",
    f"slurmctld RPCs in {window} s without the controller: {all_without}, {ours_without} of dynmig's types (its agents' node reads, the Epilogs' job reads)",
    f"slurmctld RPCs in {window} s with the controller: {all_with}, {ours_with} of dynmig's types ({share:.1%}); the controller's own: about {ctl} ({ctl / int(window):.2f} a second)",
    f"slurmctld alive at the end: {alive}",
]
open(f"{out}/summary.txt", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
[ "$alive" = yes ] && [ "$fails" = 0 ]
