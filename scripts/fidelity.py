#!/usr/bin/env python3
"""The simulated GPU against a real one, call kind by call kind: two traces of the same program
(recorded with `--policy none --trace` and MARMOSET_TRACE_TIMING on, as scripts/real-gpu.sh
records them on a lent device), one real and one simulated, their device time per kind of call
over the steady steps, as a markdown table.

    scripts/fidelity.py REAL.jsonl[.gz] SIMULATED.jsonl[.gz] [--skip 2] [--top 12] [--json]

A step ends at the program's read of its loss (a device-to-host copy of at most 8 bytes:
`loss.item()`); the first `--skip` steps (warm-up: the first cuBLAS call, cuDNN's heuristics)
are left out of both. A kind is an API (`cudnnBackendExecute`, `cublasSgemm_v2`, the copies by
direction) or, for a kernel launched by the program, its function's name without namespaces,
template arguments or parameters. The two programs must have issued the same kinds in the same
number: where they did not, the script says so, and the table shows both counts. Last, the
kinds whose calls Marmoset could not attribute (no operand named but a workspace) more often in
one trace than in the other: where the real libraries hide what the simulated ones show, a memory policy
cannot protect those operands on the real device.
"""
import argparse
import gzip
import json
import re
import sys
from collections import defaultdict

TIMED = ("launch", "cudnn", "cublas", "copy", "memset")


def records(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        for line in f:
            line = line.strip()
            if line:
                try:
                    yield json.loads(line)
                except json.JSONDecodeError:
                    # A trace cut short ends in a partial line: what came before stands.
                    break


def family(name):
    """A kernel's family: its function's name without return type, namespaces, template
    arguments or parameters (`void at::native::foo<4, ...>(int, ...)` -> `foo`)."""
    depth, out = 0, []
    for ch in name:
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth = max(depth - 1, 0)
        elif depth == 0:
            out.append(ch)
    base = "".join(out).split()[-1] if "".join(out).split() else name
    return base.split("::")[-1] or name


def operands(r):
    """What a call was found to touch besides its workspace (a library call's named tensors, a
    launch's or copy's touches)."""
    if "tensors" in r:
        return [t for t in r["tensors"] if t.get("role") != "workspace"]
    if r.get("kind") in ("cudnn", "cublas"):
        return [t for t in r.get("touches") or [] if t.get("access") != "rw"] or r.get("touches")
    return r.get("touches")


def kinds(path, skip):
    """{kind: [calls, device ms, calls naming no operand]} over the steps after the first
    `skip`, and the step count."""
    names = {}  # kernel function handle -> family
    calls = {}  # seq -> kind, for the calls whose timing is still to come
    step = 0
    totals = defaultdict(lambda: [0, 0.0, 0])
    for r in records(path):
        k = r.get("kind")
        if k == "kernel":
            names[r.get("func")] = family(r.get("name", "?"))
        elif k in TIMED:
            if k == "launch":
                kind = names.get(r.get("func"), "kernel " + str(r.get("func")))
            elif k == "copy":
                kind = f"copy {r.get('dir', '?')}"
            else:
                kind = r.get("api", k)
            if step >= skip:
                calls[r["seq"]] = kind
                totals[kind][0] += 1
                totals[kind][2] += not operands(r)
            if k == "copy" and r.get("dir") == "d2h" and r.get("size", 9) <= 8:
                step += 1
        elif k == "timing":
            kind = calls.pop(r.get("of"), None)
            if kind is not None:
                totals[kind][1] += r.get("device_ms", 0.0)
    return dict(totals), step


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("real")
    ap.add_argument("simulated")
    ap.add_argument("--skip", type=int, default=2, help="warm-up steps left out (default 2)")
    ap.add_argument("--top", type=int, default=12, help="kinds shown, the dearest on the real device first")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    real, real_steps = kinds(a.real, a.skip)
    sim, sim_steps = kinds(a.simulated, a.skip)
    if real_steps <= a.skip or sim_steps <= a.skip:
        print(f"fidelity: {real_steps} real and {sim_steps} simulated steps found; nothing after "
              f"the first {a.skip} to compare", file=sys.stderr)
        return 1
    every = sorted(set(real) | set(sim), key=lambda k: -real.get(k, [0, 0.0])[1])
    rows = []
    for k in every:
        rc, rt, ru = real.get(k, [0, 0.0, 0])
        sc, st, su = sim.get(k, [0, 0.0, 0])
        rows.append({"kind": k, "real_calls": rc, "sim_calls": sc, "real_ms": rt, "sim_ms": st,
                     "ratio": rt / st if st > 0 else None,
                     "real_unattributed": ru, "sim_unattributed": su})
    unattributed = [r for r in rows if r["real_unattributed"] != r["sim_unattributed"]]
    differ = [r["kind"] for r in rows if r["real_calls"] != r["sim_calls"]]
    total = {"kind": "all", "real_calls": sum(r["real_calls"] for r in rows),
             "sim_calls": sum(r["sim_calls"] for r in rows),
             "real_ms": sum(r["real_ms"] for r in rows), "sim_ms": sum(r["sim_ms"] for r in rows)}
    total["ratio"] = total["real_ms"] / total["sim_ms"] if total["sim_ms"] > 0 else None
    steps = (real_steps - a.skip, sim_steps - a.skip)
    if a.json:
        print(json.dumps({"steps": steps, "kinds": rows, "all": total, "counts_differ": differ,
                          "unattributed_differ": [r["kind"] for r in unattributed]}, indent=1))
        return 0
    print(f"Device time by kind of call over steps {a.skip}-{real_steps - 1} of the real trace "
          f"({steps[0]} steps) and {a.skip}-{sim_steps - 1} of the simulated one ({steps[1]}); "
          f"the simulated times are *simulated*.\n")
    print("| kind | calls (real / simulated) | real ms | simulated ms | real / simulated |")
    print("|---|---|---|---|---|")

    def line(r):
        calls = f"{r['real_calls']:,}" if r["real_calls"] == r["sim_calls"] \
            else f"{r['real_calls']:,} / {r['sim_calls']:,}"
        ratio = f"{r['ratio']:.2f}" if r["ratio"] is not None else "-"
        print(f"| {r['kind']} | {calls} | {r['real_ms']:.1f} | {r['sim_ms']:.1f} | {ratio} |")

    for r in rows[:a.top]:
        line(r)
    rest = rows[a.top:]
    if rest:
        other = {"kind": f"the other {len(rest)} kinds",
                 "real_calls": sum(r["real_calls"] for r in rest),
                 "sim_calls": sum(r["sim_calls"] for r in rest),
                 "real_ms": sum(r["real_ms"] for r in rest), "sim_ms": sum(r["sim_ms"] for r in rest)}
        other["ratio"] = other["real_ms"] / other["sim_ms"] if other["sim_ms"] > 0 else None
        line(other)
    line(total)
    if differ:
        print(f"\nThe two programs differ in the count of {len(differ)} kind(s): {', '.join(differ[:6])}"
              f"{' ...' if len(differ) > 6 else ''}")
    if unattributed:
        print("\nCalls naming no operand (Marmoset could not attribute them), real against simulated:\n")
        print("| kind | real | simulated |")
        print("|---|---|---|")
        for r in unattributed:
            print(f"| {r['kind']} | {r['real_unattributed']:,} of {r['real_calls']:,} "
                  f"| {r['sim_unattributed']:,} of {r['sim_calls']:,} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
