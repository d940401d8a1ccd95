#!/usr/bin/env bash
# Read-only hardware measurements on a lent GPU machine (docs/results/hardware-*.md):
# NVML's answers through `dynmig gpu probe`, and board power at idle and under load,
# sampled by nvidia-smi every 250 ms. It never changes MIG mode, clocks, power limits or
# compute mode; CUDA MPS (started and stopped here) limits the SMs a load may use.
# Usage: bash slurm/bench/hardware.sh OUTDIR [DYNMIG_BINARY]
set -u
out=${1:?usage: hardware.sh OUTDIR [DYNMIG_BINARY]}
bin=${2:-target/release/dynmig}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
nvidia-smi -q >"$out/nvidia-smi-q.txt" 2>&1
"$bin" gpu probe >"$out/probe.txt" 2>&1; echo "probe exit $?" >>"$out/probe.txt"
"$bin" gpu probe --json >"$out/probe.json" 2>>"$out/probe.txt"
nvidia-smi --query-gpu=timestamp,power.draw,power.limit,clocks.sm,clocks.mem,utilization.gpu,memory.used,temperature.gpu \
  --format=csv,noheader,nounits -lms 250 >"$out/power.csv" 2>&1 &
sampler=$!
phases="$out/phases.jsonl"
python3 "$here/gpu_load.py" idle 20 >>"$phases"
python3 "$here/gpu_load.py" matmul 30 >>"$phases"
python3 "$here/gpu_load.py" idle 10 idle-after-matmul >>"$phases"
python3 "$here/gpu_load.py" copy 20 >>"$phases"
python3 "$here/gpu_load.py" idle 10 idle-after-copy >>"$phases"
# SM fractions of MIG's compute slices (1/7 ... 7/7) through MPS, if MPS runs here.
export CUDA_MPS_PIPE_DIRECTORY=/tmp/dynmig-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/dynmig-mps-log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
if timeout 20 nvidia-cuda-mps-control -d; then
  for pct in 14 29 43 57 100; do
    CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$pct timeout 60 python3 "$here/gpu_load.py" matmul 20 "mps-matmul-$pct" >>"$phases" || echo "mps $pct failed" >&2
    python3 "$here/gpu_load.py" idle 5 "idle-after-mps-$pct" >>"$phases"
  done
  echo quit | timeout 20 nvidia-cuda-mps-control
else
  echo "MPS did not start" >&2
fi
kill "$sampler"
wait 2>/dev/null
echo done
