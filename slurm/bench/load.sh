#!/bin/bash
# Load: JOBS jobs (default 10000) submitted as fast as sbatch allows, from several parallel
# submitters, with mixed requests, to the local cluster with dynmig's controller, agents and
# history server running (slurm/local-dynmig.sh). The jobs go in blocks (LOAD_BLOCK, 500)
# that alternate between JobSubmitPlugins=dynmig and no job_submit plugin (slurm.conf edited,
# `scontrol reconfigure`), in the order none, dynmig, dynmig, none, none, dynmig, ..., so that
# both variants see the same queue lengths on average and the same positions in the run:
# the ratios dynmig/none are within one run. LOAD_VARIANTS="none dynmig typed" adds a
# control, "typed": no plugin, and each job asks for the typed GRES dynmig would give it
# (none, dynmig, typed, typed, dynmig, none, ...): dynmig against typed is the plugin's own
# cost, typed against none what typed jobs cost slurmctld and the cluster.
#
#   slurm/bench/load.sh [JOBS]           # as root; takes the cluster tests' lock
#   slurm/releases.sh load SUITE [JOBS]  # on another Slurm release
#
# Per submission it records sbatch's wall time (client: the whole RPC, the plugin included)
# and slurmctld's log line "_slurm_rpc_submit_batch_job: ... usec=N" (its timer restarts
# after the job_submit plugins ran and the job write lock is taken, on 22.05 to 26.05: the
# job's creation only); per block sdiag's count and mean of REQUEST_SUBMIT_BATCH_JOB (its
# counters' change over the block; the whole RPC handler, plugin and lock waits included),
# the queue length and the controller's pass time (dynmig_controller_pass_duration_seconds
# on 10.199.0.1:9811); at the end the plugin's own time per call (its log line "dynmig:
# job_submit took p50 .. us, p99 .. us, max .. us over the last N calls").
# Afterwards it checks that every sbatch returned a job id, that every job is still known
# to slurmctld (`squeue --states=all`) with the GRES it should have (typed by dynmig in
# dynmig blocks, as submitted in none blocks) and that slurmctld ran throughout, and prints
# a table (slurm/bench/load_report.py). Exit 1 if a job was refused or lost or slurmctld died.
#
# The jobs: `-t 1 -o /dev/null --wrap true`, not held: they run when their GPUs exist
# (2 nodes x 2 simulated A100s), so most of them stay pending while the controller
# repartitions for them; the cluster is brought down afterwards, the queue with it.
#
# Environment: LOAD_BLOCK (500 jobs), LOAD_SUBMITTERS (4 parallel sbatch loops), LOAD_VARIANTS,
# LOAD_OUT (results; default $DYNMIG_CLUSTER_DIR/load), DYNMIG_CLUSTER_DIR (default .run/load),
# DYNMIG_BIN_DIR (default target/release; copied first, so a rebuild during the run does
# not change the binaries), DYNMIG_PLUGIN_DIR (another release's plugins), LOAD_KEEP=1
# leaves the cluster up.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$here/../.." && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"
JOBS=${1:-10000}
BLOCK=${LOAD_BLOCK:-500}
P=${LOAD_SUBMITTERS:-4}
VARIANTS=${LOAD_VARIANTS:-none dynmig}
case " $VARIANTS " in *" dynmig "*) ;; *) echo "load: LOAD_VARIANTS must name dynmig" >&2; exit 2 ;; esac
for v in $VARIANTS; do
	case $v in none | dynmig | typed) ;; *) echo "load: unknown variant $v (none, dynmig, typed)" >&2; exit 2 ;; esac
done
export DYNMIG_CLUSTER_DIR=${DYNMIG_CLUSTER_DIR:-$ROOT/.run/load}
OUT=${LOAD_OUT:-$DYNMIG_CLUSTER_DIR/load}
METRICS=http://10.199.0.1:9811/metrics

# One cluster at a time on this machine: the cluster tests' lock, held for the whole run.
if [ -z "${LOAD_LOCKED:-}" ]; then
	LOAD_LOCKED=1 exec flock /run/dynmig-cluster-tests.lock bash "$0" "$@"
fi

# The binaries, copied: other builds in this checkout must not replace them mid-run.
src=${DYNMIG_BIN_DIR:-$ROOT/target/release}
mkdir -p "$OUT"
# Only this script's own files in OUT (it may be any directory).
rm -f "$OUT"/{blocks.tsv,submits.tsv,rpc.tsv,reconfigure.txt,sbatch.err,final.txt,sdiag.txt,controller.log} \
	"$OUT"/{metrics-controller.txt,controller-read.txt,plugin-timing.txt,slurmctld-errors.count} \
	"$OUT"/{slurmctld-errors.txt,ctld_alive_end,release} "$OUT"/submits.[0-9]*
copy_binaries "$src" "$DYNMIG_CLUSTER_DIR.bin"
# The nodes' GPUs: the simulated backend unless told otherwise. This measures slurmctld; the
# NVML stand-in rewrites its JSON state at every NVML call, CPU a real driver does not take,
# and on a small machine that slowed slurmctld's submits (a 2-core CI run, 2026-11-28: 4 of
# 200 sbatch timed out). The NVML path has its own suites (tests/cluster, the fault campaign).
export DYNMIG_BACKEND=${DYNMIG_BACKEND:-simulated}
# Room for every job of the run and the finished ones slurmctld keeps (MinJobAge).
export DYNMIG_MAX_JOB_COUNT=$((JOBS + 10000))
# Info, as a site runs it: the submit RPC's usec line is logged at info.
export DYNMIG_SLURMCTLD_DEBUG=${DYNMIG_SLURMCTLD_DEBUG:-info}

# since T0 [T1]: seconds from T0 to T1 (default now), both $EPOCHREALTIME values.
since() { awk -v a="$1" -v b="${2:-$EPOCHREALTIME}" 'BEGIN { printf "%.3f", b - a }'; }

down() {
	[ -n "${LOAD_KEEP:-}" ] || bash "$ROOT/slurm/local-dynmig.sh" down
}
trap down EXIT
t_up=$EPOCHREALTIME
bash "$ROOT/slurm/local-dynmig.sh" up
# shellcheck disable=SC1091
. "$DYNMIG_CLUSTER_DIR/env.sh"
D=$DYNMIG_CLUSTER_DIR
conf=$D/etc/slurm.conf
log=$D/log/slurmctld.log
ctld_pid=$(cat "$D/run/slurmctld.pid")
grep -q '^JobSubmitPlugins=dynmig' "$conf" || { echo "load: no JobSubmitPlugins=dynmig in $conf" >&2; exit 1; }
echo "load: cluster up in $(since "$t_up") s; Slurm $(slurmctld -V | awk '{print $NF}'), $JOBS jobs, blocks of $BLOCK, $P submitters" >&2

# The requests, by job number: hints, plain and typed GPUs, no GPU. Variant "typed" asks
# for the GRES that dynmig would write, itself, with no hint (kinds 0-5 and 8).
kind_of() { echo $(($1 % 10)); }
args_of() {
	[ "$2" = typed ] && case $1 in
	0 | 3) echo "--gres=gpu:1g.10gb:1" && return ;;
	1) echo "--gres=gpu:2g.20gb:1" && return ;;
	2) echo "--gres=gpu:3g.40gb:1" && return ;;
	4 | 5) echo "--gres=gpu:7g.80gb:1" && return ;;
	8) echo "--gres=gpu:7g.80gb:2" && return ;;
	esac
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

# The running slurmctld's JobSubmitPlugins: "dynmig" or "none".
plugin_now() {
	scontrol show config 2>/dev/null | awk -F' = ' '/^JobSubmitPlugins/ {print ($2 ~ /dynmig/) ? "dynmig" : "none"}'
}

# set_variant dynmig|none: edits slurm.conf, reconfigures, waits until slurmctld runs with it.
set_variant() {
	local want=$1 t0=$EPOCHREALTIME
	[ "$(plugin_now)" = "$want" ] && return 0
	if [ "$want" = dynmig ]; then
		sed -i 's/^#JobSubmitPlugins=dynmig/JobSubmitPlugins=dynmig/' "$conf"
	else
		sed -i 's/^JobSubmitPlugins=dynmig/#JobSubmitPlugins=dynmig/' "$conf"
	fi
	scontrol reconfigure || true
	for _ in $(seq 600); do
		[ "$(plugin_now)" = "$want" ] && {
			echo "$want $(since "$t0")" >>"$OUT/reconfigure.txt"
			return 0
		}
		sleep 0.1
	done
	echo "load: slurmctld did not switch to JobSubmitPlugins=$want in 60 s" >&2
	return 1
}

# submitter K BLOCK VARIANT FROM TO: jobs FROM+K, FROM+K+P, ... below TO, one line each:
# block variant job kind rc jobid client_usec.
submitter() {
	local k=$1 b=$2 v=$3 from=$4 to=$5 i kind out rc t0 t1
	local -a a
	for ((i = from + k; i < to; i += P)); do
		kind=$(kind_of "$i")
		read -r -a a <<<"$(args_of "$kind" "$v")"
		rc=0
		t0=$EPOCHREALTIME
		out=$(sbatch --parsable -t 1 -o /dev/null -J "load-$kind" "${a[@]}" --wrap true 2>>"$OUT/sbatch.err") || rc=$?
		t1=$EPOCHREALTIME
		printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$b" "$v" "$i" "$kind" "$rc" "${out%%;*}" $((${t1/./} - ${t0/./}))
	done
}

# The controller's pass histogram: "SUM COUNT".
pass_sum_count() {
	curl -sf --max-time 5 "$METRICS" | awk '/^dynmig_controller_pass_duration_seconds_sum/ {s=$2}
		/^dynmig_controller_pass_duration_seconds_count/ {c=$2} END {print s+0, c+0}'
}

ctld_alive() { kill -0 "$ctld_pid" 2>/dev/null && scontrol ping >/dev/null 2>&1 && echo 1 || echo 0; }

printf 'block\tvariant\tt_start\tt_end\tqueue\tsdiag_count\tsdiag_ave\tsdiag_total\tpass_sum0\tpass_count0\tpass_sum1\tpass_count1\tctld_alive\n' >"$OUT/blocks.tsv"
printf 'block\tvariant\tjob\tkind\trc\tid\tclient_us\n' >"$OUT/submits.tsv"
: >"$OUT/rpc.tsv"
: >"$OUT/reconfigure.txt"
t_run=$EPOCHREALTIME
nblocks=$(((JOBS + BLOCK - 1) / BLOCK))
# The order of the variants: as listed, then reversed, again and again (ABBA, ABCCBA).
read -r -a vs <<<"$VARIANTS"
order=("${vs[@]}")
for ((i = ${#vs[@]} - 1; i >= 0; i--)); do order+=("${vs[$i]}"); done
for ((b = 0; b < nblocks; b++)); do
	v=${order[$((b % ${#order[@]}))]}
	if [ "$v" = dynmig ]; then set_variant dynmig; else set_variant none; fi
	# 26.05's reconfigure restarts slurmctld: follow its new pid.
	ctld_pid=$(cat "$D/run/slurmctld.pid")
	queue=$(squeue -h -t PD,R,CG -o %i | wc -l)
	read -r s0 c0 <<<"$(pass_sum_count || echo "0 0")"
	# Cumulative counters, read before and after the block (no `sdiag -r`: from 23.11 a
	# reconfigure restarts slurmctld, which resets them anyway).
	read -r sd_n0 _ sd_t0 <<<"$(sdiag_submit)"
	from_byte=$(($(stat -c %s "$log") + 1))
	from=$((b * BLOCK))
	to=$(((b + 1) * BLOCK))
	[ "$to" -le "$JOBS" ] || to=$JOBS
	tb=$EPOCHREALTIME
	for ((k = 0; k < P; k++)); do
		submitter "$k" "$b" "$v" "$from" "$to" >"$OUT/submits.$k" &
	done
	wait
	te=$EPOCHREALTIME
	cat "$OUT"/submits.[0-9]* >>"$OUT/submits.tsv"
	rm -f "$OUT"/submits.[0-9]*
	read -r n _ total <<<"$(sdiag_submit)"
	n=$((n - sd_n0))
	total=$((total - sd_t0))
	ave=$((n > 0 ? total / n : 0))
	read -r s1 c1 <<<"$(pass_sum_count || echo "0 0")"
	tail -c +"$from_byte" "$log" | rpc_submit_usec | sed "s/^/$b\t$v\t/; s/ /\t/" >>"$OUT/rpc.tsv"
	alive=$(ctld_alive)
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$b" "$v" "$tb" "$te" "$queue" "$n" "$ave" "$total" "$s0" "$c0" "$s1" "$c1" "$alive" >>"$OUT/blocks.tsv"
	printf 'load: block %d/%d %-6s %d jobs in %.1f s, queue %d before, sdiag mean %d us\n' \
		$((b + 1)) "$nblocks" "$v" $((to - from)) "$(since "$tb" "$te")" "$queue" "$ave" >&2
	[ "$alive" = 1 ] || { echo "load: slurmctld is not answering after block $b" >&2; break; }
done
echo "load: submitted in $(since "$t_run") s" >&2

# Every job still known, with its GRES; the controller's histogram and last passes.
sleep 2
squeue -h --states=all -o '%i|%T|%b' >"$OUT/final.txt"
curl -sf --max-time 5 "$METRICS" >"$OUT/metrics-controller.txt" || true
# What the controller reads every pass, with this queue: time and size of squeue's JSON; its
# memory.
t0=$EPOCHREALTIME
bytes=$(squeue --json --states=all | wc -c)
echo "squeue --json --states=all: $bytes bytes in $(since "$t0") s" >"$OUT/controller-read.txt"
# The same jobs as text with only the fields a pass needs, for comparison.
t0=$EPOCHREALTIME
bytes=$(squeue --states=all -h -o '%i|%T|%b|%N|%l|%V|%S|%e|%r' | wc -c)
echo "squeue --states=all -o (9 fields): $bytes bytes in $(since "$t0") s" >>"$OUT/controller-read.txt"
ps -o rss= -p "$(cat "$D/run/slurmctld.pid")" 2>/dev/null | awk '{printf "slurmctld RSS: %.0f MiB\n", $1 / 1024}' >>"$OUT/controller-read.txt" || true
ps -o rss= -p "$(cat "$D/run/controller.pid")" 2>/dev/null | awk '{printf "controller RSS: %.0f MiB\n", $1 / 1024}' >>"$OUT/controller-read.txt" || true
sdiag >"$OUT/sdiag.txt" 2>&1 || true
cp "$D/log/controller.log" "$OUT/" 2>/dev/null || true
# The plugin's own time per submit, summarised by it every 1000 calls and when unloaded.
grep 'dynmig: job_submit took' "$log" >"$OUT/plugin-timing.txt" || true
grep -c 'error\|fatal' "$log" >"$OUT/slurmctld-errors.count" || true
grep -E 'error|fatal' "$log" | tail -50 >"$OUT/slurmctld-errors.txt" || true
echo "$(ctld_alive)" >"$OUT/ctld_alive_end"
echo "Slurm $(slurmctld -V | awk '{print $NF}')" >"$OUT/release"
python3 "$here/load_report.py" "$OUT" "$JOBS"
