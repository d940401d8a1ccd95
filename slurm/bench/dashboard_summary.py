#!/usr/bin/env python3
"""Evaluates every query of a Grafana dashboard over [start, end] on a Prometheus server and
prints, per panel, each series with its minimum, maximum and last value (Markdown).

Usage: dashboard_summary.py PROMETHEUS_URL START END DASHBOARD_JSON   (START, END: unix s)
"""
import json, sys, urllib.parse, urllib.request

url, start, end, path = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
dash = json.load(open(path))
print(f"# Dashboard queries over the demo ({end - start} s, step 2 s)\n")
for panel in dash["panels"]:
    if panel.get("type") == "row":
        print(f"\n## {panel['title']}\n")
        continue
    print(f"### {panel['title']}\n")
    print("| query | series | min | max | last |\n|---|---|---|---|---|")
    for t in panel.get("targets", []):
        expr = t["expr"].replace("$__rate_interval", "1m").replace("$node", ".*")
        q = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": 2})
        res = json.load(urllib.request.urlopen(f"{url}/api/v1/query_range?{q}", timeout=30))
        series = res["data"]["result"]
        if not series:
            print(f"| `{t['expr']}` | (no data) | | | |")
        for s in series:
            vals = [float(v) for _, v in s["values"] if v not in ("NaN", "+Inf", "-Inf")]
            labels = ",".join(f"{k}={v}" for k, v in sorted(s["metric"].items()) if k not in ("job", "__name__"))
            if vals:
                print(f"| `{t['expr']}` | {labels} | {min(vals):.4g} | {max(vals):.4g} | {vals[-1]:.4g} |")
            else:
                print(f"| `{t['expr']}` | {labels} | NaN | NaN | NaN |")
    print()
