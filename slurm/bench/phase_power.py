#!/usr/bin/env python3
"""Mean board power per load phase, from the files slurm/bench/hardware.sh writes.

Usage: phase_power.py DIR [DROP_SECONDS]   (DIR holds power.csv and phases.jsonl)

power.csv: nvidia-smi --query-gpu=timestamp,power.draw,power.limit,clocks.sm,clocks.mem,
utilization.gpu,memory.used,temperature.gpu (UTC timestamps, one sample per 250 ms);
phases.jsonl: one line per phase from gpu_load.py (epoch start and end, TFLOP/s or TB/s).
For each phase: the samples in [start + DROP_SECONDS, end] (default 3 s: the ramp), their
mean power, mean SM clock and max temperature. Prints a Markdown table. Standard library only.
"""
import csv, json, statistics, sys
from datetime import datetime, timezone

d = sys.argv[1]
drop = float(sys.argv[2]) if len(sys.argv) > 2 else 3.0
samples = []
with open(f"{d}/power.csv") as f:
    for row in csv.reader(f):
        if len(row) < 8:
            continue
        try:
            t = datetime.strptime(row[0].strip(), "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=timezone.utc).timestamp()
            samples.append((t, float(row[1]), float(row[2]), float(row[3]), float(row[7])))
        except ValueError:
            continue
print(f"| phase | seconds | samples | rate (TFLOP/s or TB/s) | mean W | min-max W | SM MHz | limit W | max temp C |")
print("|---|---|---|---|---|---|---|---|---|")
with open(f"{d}/phases.jsonl") as f:
    for line in f:
        p = json.loads(line)
        s = [x for x in samples if p["start"] + drop <= x[0] <= p["end"]]
        if not s:
            print(f"| {p['phase']} | no samples |")
            continue
        w = [x[1] for x in s]
        print(
            f"| {p['phase']} | {p['end'] - p['start']:.1f} | {len(s)} | {p['tera_per_s']:.2f} | {statistics.mean(w):.1f} "
            f"| {min(w):.1f}-{max(w):.1f} | {statistics.mean(x[3] for x in s):.0f} | {s[0][2]:.0f} | {max(x[4] for x in s):.0f} |"
        )
