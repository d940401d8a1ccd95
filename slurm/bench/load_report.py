#!/usr/bin/env python3
"""The table of slurm/bench/load.sh from the files it wrote in OUT.

Usage: load_report.py OUT JOBS. Prints markdown; exits 1 when a job was refused or lost, a
job's GRES is not the expected one, or slurmctld was not answering.
"""
import math
import re
import sys
from collections import defaultdict

out, jobs_wanted = sys.argv[1], int(sys.argv[2])


def tsv(name, header=True):
    with open(f"{out}/{name}") as f:
        rows = [line.rstrip("\n").split("\t") for line in f if line.strip()]
    if not header:
        return rows
    keys = rows[0]
    return [dict(zip(keys, r)) for r in rows[1:]]


def pct(xs, p):
    """Nearest-rank percentile."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[max(0, math.ceil(p / 100 * len(s)) - 1)]


def ratio(a, b):
    return a / b if b else float("nan")


submits = tsv("submits.tsv")
blocks = tsv("blocks.tsv")
rpc = tsv("rpc.tsv", header=False)  # block variant jobid usec
variant_of_id = {}
for s in submits:
    if s["rc"] == "0" and s["id"].isdigit():
        variant_of_id[s["id"]] = s["variant"]
server = defaultdict(list)
server_block = defaultdict(list)
for b, v, jid, usec in rpc:
    # The job's own variant (from its sbatch); the block's when the id is unknown.
    server[variant_of_id.get(jid, v)].append(int(usec))
    server_block[int(b)].append(int(usec))

variants = []
for b in blocks:
    if b["variant"] not in variants:
        variants.append(b["variant"])
per = {v: {"jobs": 0, "acc": 0, "client": []} for v in variants}
client_block = defaultdict(list)
for s in submits:
    p = per[s["variant"]]
    p["jobs"] += 1
    if s["rc"] == "0" and s["id"].isdigit():
        p["acc"] += 1
    p["client"].append(int(s["client_us"]) / 1000)
    client_block[int(s["block"])].append(int(s["client_us"]) / 1000)
sd = {v: [0, 0] for v in variants}
for b in blocks:
    sd[b["variant"]][0] += int(b["sdiag_count"])
    sd[b["variant"]][1] += int(b["sdiag_total"])

try:
    release = open(f"{out}/release").read().strip()
except FileNotFoundError:
    release = "Slurm (release not recorded)"
print(f"## {release}: {len(submits)} of {jobs_wanted} jobs submitted, {len(blocks)} blocks\n")
print("| variant | jobs | accepted | client p50 ms | client p99 ms | job creation p50 µs | job creation p99 µs | sdiag mean µs (count) |")
print("|---|---|---|---|---|---|---|---|")
for v in variants:
    p = per[v]
    c, s = p["client"], server[v]
    mean = sd[v][1] / sd[v][0] if sd[v][0] else float("nan")
    print(
        f"| {v} | {p['jobs']} | {p['acc']} | {pct(c, 50):.1f} | {pct(c, 99):.1f} | "
        f"{pct(s, 50)} | {pct(s, 99)} | {mean:.0f} ({sd[v][0]}) |"
    )
for d, n in [("dynmig", "none"), ("dynmig", "typed"), ("typed", "none")]:
    if d not in per or n not in per:
        continue
    print(
        f"| **{d}/{n}** | | | {ratio(pct(per[d]['client'], 50), pct(per[n]['client'], 50)):.2f} | "
        f"{ratio(pct(per[d]['client'], 99), pct(per[n]['client'], 99)):.2f} | "
        f"{ratio(pct(server[d], 50), pct(server[n], 50)):.2f} | {ratio(pct(server[d], 99), pct(server[n], 99)):.2f} | "
        f"{ratio(sd[d][1] / max(sd[d][0], 1), sd[n][1] / max(sd[n][0], 1)):.2f} |"
    )
print(
    "\nclient: each sbatch's wall time (the whole RPC); job creation: slurmctld's log line "
    "`_slurm_rpc_submit_batch_job ... usec=` (timed after the job_submit plugins, under the job "
    "write lock); sdiag: REQUEST_SUBMIT_BATCH_JOB's total/count over the blocks (the whole "
    "handler: plugin and lock waits included).\n"
)
# A pooled p99 follows the worst blocks (a stall of slurmctld lands in one block): the
# median over a variant's blocks of each block's p99 is steadier.
bp99 = {v: pct([pct(client_block[int(b["block"])], 99) for b in blocks if b["variant"] == v], 50) for v in variants}
print(
    "client p99 per block, median over the variant's blocks: "
    + ", ".join(f"{v} {bp99[v]:.1f} ms" for v in variants)
    + (f"; dynmig/none {ratio(bp99['dynmig'], bp99['none']):.2f}" if "none" in bp99 and "dynmig" in bp99 else "")
    + "\n"
)
# The plugin's own time per call, from its summary lines (dynmig blocks only).
plugin = []
try:
    for line in open(f"{out}/plugin-timing.txt"):
        m = re.search(r"took p50 (\d+) us, p99 (\d+) us, max (\d+) us over the last (\d+) calls", line)
        if m:
            plugin.append(tuple(int(x) for x in m.groups()))
except FileNotFoundError:
    pass
if plugin:
    calls = sum(p[3] for p in plugin)
    print(
        f"job_submit/dynmig's own time per call ({calls} calls in {len(plugin)} windows): "
        f"p50 {min(p[0] for p in plugin)}-{max(p[0] for p in plugin)} µs, "
        f"p99 {min(p[1] for p in plugin)}-{max(p[1] for p in plugin)} µs, max {max(p[2] for p in plugin)} µs\n"
    )

# Per block: the queue, the throughput, the RPC times, the controller's passes.
print("| block | variant | queue before | jobs/s | client p50 ms | client p99 ms | creation p50 µs | creation p99 µs | sdiag mean µs | controller passes | pass mean s |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
pass_means = []
for b in blocks:
    i = int(b["block"])
    dt = float(b["t_end"]) - float(b["t_start"])
    nj = len(client_block[i])
    dc = float(b["pass_count1"]) - float(b["pass_count0"])
    ds = float(b["pass_sum1"]) - float(b["pass_sum0"])
    pm = ds / dc if dc > 0 else float("nan")
    if dc > 0:
        pass_means.append((int(b["queue"]), pm))
    print(
        f"| {i} | {b['variant']} | {b['queue']} | {nj / dt:.1f} | {pct(client_block[i], 50):.1f} | {pct(client_block[i], 99):.1f} | "
        f"{pct(server_block[i], 50)} | {pct(server_block[i], 99)} | {b['sdiag_ave']} | {dc:.0f} | {pm:.3f} |"
    )

# Run order: groups of four blocks (none, dynmig, dynmig, none) and the ratio within each;
# and each variant's first half against its second half.
cycle = 2 * len(variants)
base = "none" if "none" in variants else variants[0]
print(
    f"\nWithin each cycle of {cycle} blocks ({', '.join(variants + variants[::-1])}), dynmig/{base}: "
    "client p50 / client p99 / sdiag mean"
)
cgroups = defaultdict(lambda: defaultdict(list))
sgroups = defaultdict(lambda: defaultdict(lambda: [0, 0]))
for b in blocks:
    i = int(b["block"])
    cgroups[i // cycle][b["variant"]].extend(client_block[i])
    sgroups[i // cycle][b["variant"]][0] += int(b["sdiag_count"])
    sgroups[i // cycle][b["variant"]][1] += int(b["sdiag_total"])
line = []
for g in sorted(cgroups):
    c, sg = cgroups[g], sgroups[g]
    if c["dynmig"] and c[base]:
        sm = ratio(sg["dynmig"][1] / max(sg["dynmig"][0], 1), sg[base][1] / max(sg[base][0], 1))
        line.append(
            f"{ratio(pct(c['dynmig'], 50), pct(c[base], 50)):.2f}/"
            f"{ratio(pct(c['dynmig'], 99), pct(c[base], 99)):.2f}/{sm:.2f}"
        )
print("  " + " ".join(line))
for v in variants:
    bs = [int(b["block"]) for b in blocks if b["variant"] == v]
    half = len(bs) // 2
    if half:
        first = [x for i in bs[:half] for x in server_block[i]]
        second = [x for i in bs[half:] for x in server_block[i]]
        cf = [x for i in bs[:half] for x in client_block[i]]
        cs = [x for i in bs[half:] for x in client_block[i]]
        print(
            f"  {v}: first half of its blocks: client p50 {pct(cf, 50):.1f} ms, creation p50 {pct(first, 50)} µs; "
            f"second half: {pct(cs, 50):.1f} ms, {pct(second, 50)} µs"
        )

# The noise floor: each variant against itself, its blocks split by their place in the cycle
# (none: 1st against 4th of each cycle of four; dynmig: 2nd against 3rd).
print("\nA/A (a variant against itself, its blocks split by place in the cycle): client p50 / client p99 / sdiag mean")
for v in variants:
    places = sorted({int(b["block"]) % cycle for b in blocks if b["variant"] == v})
    if len(places) != 2:
        continue
    sides = []
    for place in places:
        bs = [b for b in blocks if b["variant"] == v and int(b["block"]) % cycle == place]
        cl = [x for b in bs for x in client_block[int(b["block"])]]
        n_ = sum(int(b["sdiag_count"]) for b in bs)
        t_ = sum(int(b["sdiag_total"]) for b in bs)
        sides.append((cl, t_ / max(n_, 1)))
    (a, sa), (b_, sb) = sides
    print(
        f"  {v} (places {places[1]}/{places[0]}): {ratio(pct(b_, 50), pct(a, 50)):.2f} / "
        f"{ratio(pct(b_, 99), pct(a, 99)):.2f} / {ratio(sb, sa):.2f}"
    )

# The controller's pass time.
print("\nController pass time (dynmig_controller_pass_duration_seconds)")
if pass_means:
    ms = [m for _, m in pass_means]
    print(
        f"  per-block mean: min {min(ms):.3f} s, median {pct(ms, 50):.3f} s, max {max(ms):.3f} s; "
        f"queue {pass_means[0][0]} -> {pass_means[-1][0]} jobs"
    )
try:
    text = open(f"{out}/metrics-controller.txt").read()
    buckets = [
        (m.group(1), float(m.group(2)))
        for m in re.finditer(r'^dynmig_controller_pass_duration_seconds_bucket\{le="([^"]+)"\} (\S+)', text, re.M)
    ]
    total = buckets[-1][1] if buckets else 0
    if total:
        print("  whole run, passes by duration: " + ", ".join(
            f"<= {le} s: {cnt:.0f}" for le, cnt in buckets))
    for m in re.finditer(r'^dynmig_controller_passes(?:_total)?\{result="(\w+)"\} (\S+)', text, re.M):
        print(f"  passes {m.group(1)}: {float(m.group(2)):.0f}")
except FileNotFoundError:
    print("  no scrape of the controller at the end")
try:
    errors = [line for line in open(f"{out}/controller.log") if " ERROR " in line]
    print(f"  controller log: {len(errors)} errors" + (f", last: {errors[-1].strip()[:160]}" if errors else ""))
except FileNotFoundError:
    pass
try:
    for line in open(f"{out}/controller-read.txt"):
        print("  " + line.strip())
except FileNotFoundError:
    pass

# Acceptance and losses: every accepted job is still known, with the GRES it should have.
expect_dynmig = {
    "0": "gpu:1g.10gb:1",
    "1": "gpu:2g.20gb:1",
    "2": "gpu:3g.40gb:1",
    "3": "gpu:1g.10gb:1",
    "4": "gpu:7g.80gb:1",
    "5": "gpu:7g.80gb:1",
    "6": "gpu:2g.20gb:1",
    "7": "gpu:1g.10gb:1",
    "8": "gpu:7g.80gb:2",
    "9": "",
}
expect_none = dict(expect_dynmig, **{"0": "gpu:1", "1": "gpu:1", "2": "gpu:1", "3": "gpu:1", "4": "gpu:1", "5": "gpu:1", "8": "gpu:2"})
final = {}
states = defaultdict(int)
checked = True
try:
    final_lines = open(f"{out}/final.txt").readlines()
except FileNotFoundError:
    final_lines, checked = [], False
for line in final_lines:
    parts = line.rstrip("\n").split("|")
    if len(parts) < 3:
        continue
    jid, state, tres = parts[0], parts[1], parts[2]
    tres = "" if tres in ("N/A", "(null)") else re.sub(r"^gres[:/]", "", tres)
    final[jid] = (state, tres)
lost, wrong = [], []
for s in submits:
    if not (s["rc"] == "0" and s["id"].isdigit()):
        continue
    if not checked:
        continue
    if s["id"] not in final:
        lost.append(s["id"])
        continue
    want = (expect_none if s["variant"] == "none" else expect_dynmig)[s["kind"]]
    state, tres = final[s["id"]]
    states[state] += 1
    if tres != want:
        wrong.append(f"{s['id']} ({s['variant']}, kind {s['kind']}): {tres!r}, expected {want!r}")
refused = sum(per[v]["jobs"] - per[v]["acc"] for v in variants)
alive = all(b["ctld_alive"] == "1" for b in blocks)
try:
    alive = alive and open(f"{out}/ctld_alive_end").read().strip() == "1"
except FileNotFoundError:
    alive = False
print("\nAcceptance and losses")
print(f"  submitted {len(submits)}, accepted {len(submits) - refused}, refused {refused}")
if not checked:
    print("  NOT CHECKED: no final.txt (the run stopped before listing the jobs)")
print(f"  accepted and not known to slurmctld afterwards (lost): {len(lost)} {' '.join(lost[:10])}")
print(f"  GRES other than expected: {len(wrong)}")
for w in wrong[:10]:
    print(f"    {w}")
print("  states afterwards: " + ", ".join(f"{k} {v}" for k, v in sorted(states.items())))
print(f"  slurmctld answered after every block and at the end: {'yes' if alive else 'NO'}")
try:
    print("  reconfigure (switch) times, s: " + " ".join(
        f"{float(line.split()[1]):.1f}" for line in open(f"{out}/reconfigure.txt") if line.strip()))
except (FileNotFoundError, IndexError, ValueError):
    pass
ok = checked and refused == 0 and not lost and not wrong and alive and len(submits) == jobs_wanted
sys.exit(0 if ok else 1)
