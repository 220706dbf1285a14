#!/usr/bin/env python3
"""Issue 14's claims on the four DTR logs, from `marmoset plan --sweep --json` (simulated):
auto at or below every other policy; capuchin and recompute at or below dtr; hybrid at or below
the better of swap and recompute; no figure below the lower bound. "At or below" includes
feasible wherever the other is. Prints every miss and auto's gap to the bound; exits 1 on a miss."""
import glob, json, subprocess, sys, os

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
marmoset = os.path.join(root, "target/release/marmoset")
cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
logs = os.path.join(os.environ.get("MARMOSET_DATA") or os.path.join(cache, "marmoset/data"), "dtr-logs")
found = sorted(glob.glob(os.path.join(logs, "*.log")))
if not found:
    sys.exit(f"plan-check.py: DTR's logs are not in {logs}: run scripts/fetch-data.sh and set MARMOSET_DATA")
CLAIMS = [("capuchin", ["dtr"]), ("recompute", ["dtr"]), ("hybrid", ["swap", "recompute"])]
misses = 0
for profile in ["h100", "p100"]:
    for log in found:
        out = subprocess.run([marmoset, "plan", log, "--sweep", "--json", "--profile", profile],
                             check=True, capture_output=True, text=True).stdout
        r = json.loads(out)["results"]
        name = os.path.basename(log).split("-")[0]
        gaps = []
        for f in sorted({x["budget_fraction"] for x in r}, reverse=True):
            at = {x["policy"]: x for x in r if x["budget_fraction"] == f}
            time = lambda x: x["planned_time_s"] if x["feasible"] else float("inf")
            claims = CLAIMS + [("auto", [p for p in at if p != "auto"])]
            for who, than in claims:
                best = min(than, key=lambda p: time(at[p]))
                if time(at[who]) > time(at[best]) * (1 + 1e-12):
                    print(f"MISS {name} {profile} {f}: {who} {time(at[who]):.6f} s, {best} {time(at[best]):.6f} s")
                    misses += 1
            for p, x in at.items():
                if x["feasible"] and x["gap"] < -1e-9:
                    print(f"MISS {name} {profile} {f}: {p} below the lower bound")
                    misses += 1
            gaps.append(f"{f}: {100 * at['auto']['gap']:.1f}%" if at["auto"]["feasible"] else f"{f}: -")
        print(f"{name} {profile} auto's gap to the bound: " + ", ".join(gaps))
print(f"{misses} misses (simulated figures)")
sys.exit(1 if misses else 0)
