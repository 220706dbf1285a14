#!/usr/bin/env python3
"""Issue 6's targets on the four DTR logs, from `marmoset plan --sweep --json` (simulated):
capuchin feasible wherever recompute or dtr is, and no slower than the best other policy at
every budget. Prints every miss; exits 1 if there is one."""
import glob, json, subprocess, sys, os

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
marmoset = os.path.join(root, "target/release/marmoset")
logs = os.path.join(os.environ.get("MARMOSET_DATA") or os.path.join(root, "../shared/data"), "dtr-logs")
found = sorted(glob.glob(os.path.join(logs, "*.log")))
if not found:
    sys.exit(f"plan-check.py: DTR's logs are not in {logs}: run scripts/fetch-data.sh and set MARMOSET_DATA")
misses = 0
for profile in ["h100", "p100"]:
    for log in found:
        out = subprocess.run([marmoset, "plan", log, "--sweep", "--json", "--profile", profile],
                             check=True, capture_output=True, text=True).stdout
        r = json.loads(out)["results"]
        name = os.path.basename(log).split("-")[0]
        for f in sorted({x["budget_fraction"] for x in r}, reverse=True):
            at = {x["policy"]: x for x in r if x["budget_fraction"] == f}
            cap = at["capuchin"]
            others = [x for p, x in at.items() if p != "capuchin" and x["feasible"]]
            if not cap["feasible"]:
                if any(x["policy"] in ("recompute", "dtr") for x in others):
                    print(f"MISS {name} {profile} {f}: capuchin infeasible, recompute or dtr feasible")
                    misses += 1
                continue
            if others:
                best = min(others, key=lambda x: x["planned_time_s"])
                if cap["planned_time_s"] > best["planned_time_s"] * (1 + 1e-12):
                    print(f"MISS {name} {profile} {f}: capuchin {cap['overhead']:.5f}x, "
                          f"{best['policy']} {best['overhead']:.5f}x")
                    misses += 1
print(f"{misses} misses (simulated figures)")
sys.exit(1 if misses else 0)
