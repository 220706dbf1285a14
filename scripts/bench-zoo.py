#!/usr/bin/env python3
"""The model zoo's benchmark on the simulated GPU (shape mode; every device time, peak and ratio is
*simulated*). Run by scripts/bench-zoo.sh.

For each model of examples/zoo.py and each device profile, in one invocation:

1. without Marmoset (`marmoset run --sim --no-shim`): the device peak (SIMGPU_REPORT's
   peak_bytes, PyTorch's caching allocator included) and the step (the median of the last three
   of 12 steps, each timed by the program's CUDA events on the device's virtual clock);
2. under Marmoset within 0.5 and 0.3 of that peak (`--memory-limit BYTES`), with the default
   policy (no --policy: `auto`, the planner in the library, measured then guided) and with
   `--policy lru` (passive swapping): the step and its ratio to (1), the device peak against the
   budget, whether the simulator trapped (a touch of evicted memory: `simgpu: illegal address`,
   a sticky error in the report) or contents were lost; for the default policy, from its trace,
   the in-process plan (swaps, recomputations, its prediction, its planning time: the `plan`
   record) and the first of the program's steps that the plan guided whole;
3. a trace with `--policy none` and MARMOSET_TRACE_TIMING=1 (6 steps), planned offline:
   `marmoset plan --budget BYTES` (`auto` at the same budgets as (2): its predicted slowdown and the
   lower bound) and `marmoset plan --sweep` (every policy at 0.9 ... 0.2 of the trace's own peak;
   the table keeps `auto` and the bound at 0.5 and 0.3).

Prints markdown tables and, unless --no-docs (or --quick), writes each profile's into
docs/zoo.md between its markers, with the commit and the date. A model that fails is recorded
with its error line and the others go on.

    scripts/bench-zoo.sh [--profiles h100,p100] [--models a,b] [--fractions 0.5,0.3] [--quick] [--no-docs]
"""
import argparse
import ast
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARMOSET = os.path.join(ROOT, "target", "release", "marmoset")
PYTHON = os.path.join(ROOT, ".venv", "bin", "python")
ZOO = os.path.join(ROOT, "examples", "zoo.py")
DOC = os.path.join(ROOT, "docs", "zoo.md")
OUT = os.path.join(ROOT, "target", "bench-zoo")
GIB = 1 << 30
STEPS = 12
TRACE_STEPS = 6
# The records the tracker counts as calls (cli/src/report/steps.rs): a plan's start and period
# are in these.
CALLS = {"alloc", "free", "copy", "memset", "launch", "cudnn", "cublas", "sync"}
ABORT = "terminate called without an active exception"


def models():
    """examples/zoo.py's MODELS keys, in order, read without importing torch."""
    tree = ast.parse(open(ZOO).read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "MODELS" for t in node.targets):
            return [k.value for k in node.value.keys]
    sys.exit("bench-zoo: no MODELS in examples/zoo.py")


def say(what):
    sys.stderr.write(f"[{time.strftime('%H:%M:%S')}] {what}\n")
    sys.stderr.flush()


def error_line(p):
    """The line that says why a run failed: the simulator's or the shim's first complaint, else
    Python's exception, else the last line."""
    lines = [l for l in (p.stderr + "\n" + p.stdout).splitlines() if l.strip()]
    for pat in (r"simgpu: illegal address", r"^marmoset:.*(lost|error|fail)", r"^\w*(Error|Exception)\b.*:",
                r"not supported|NotImplemented|CUDA error|CUDNN_STATUS|cuBLAS|Segmentation|Aborted"):
        hit = [l for l in lines if re.search(pat, l)]
        if hit:
            return hit[0 if pat.startswith("simgpu") or pat.startswith("^marmoset") else -1].strip()
    return lines[-1].strip() if lines else f"exit status {p.returncode}, no output"


class Run:
    """One run of the program: its steps (device ms), the simulator's report, its stderr."""

    def __init__(self, p, report, host_s):
        self.p = p
        self.report = report
        self.host_s = host_s
        self.steps = [float(x) for x in re.findall(r", ([0-9.]+) ms device time\)", p.stdout)]
        m = re.search(r"^\S+: ([0-9.]+) M parameters", p.stdout, re.M)
        self.params = float(m.group(1)) if m else None
        shim = [l for l in p.stderr.splitlines() if l.startswith("marmoset:")]
        self.lost = [l for l in shim if "lost" in l]
        # A call the library could not make room for returns out-of-memory to the program
        # without running (shim/src/hooks: the hook returns the status, the real call is not
        # made); the PyTorch programs here ran on to their end regardless, so the step went on
        # without that call, and its time is not that of a whole step.
        self.refused = [l for l in shim if "out of memory for an operation" in l]
        self.shim_errors = [l for l in shim if re.search(r"out of memory|lost|internal error|panic|failed", l)]
        self.trapped = "simgpu: illegal address" in p.stderr or (report or {}).get("sticky_error") is not None
        self.aborted_at_exit = p.returncode in (-6, 134) and ABORT in p.stderr and "peak memory allocated" in p.stdout
        self.ok = (p.returncode == 0 or self.aborted_at_exit) and len(self.steps) >= 3 and report is not None

    @property
    def step_ms(self):
        return statistics.median(self.steps[-3:])

    @property
    def peak(self):
        return self.report["peak_bytes"]

    def why(self):
        if self.trapped:
            hit = [l for l in self.p.stderr.splitlines() if "illegal address" in l]
            return hit[0] if hit else f"sticky error {self.report.get('sticky_error')}"
        if self.lost:
            return f"{len(self.lost)} lines of lost contents, first: {self.lost[0]}"
        return error_line(self.p)


def run(model, profile, steps=STEPS, policy=None, budget=None, trace=None, timing=False, shim=True):
    """The program under `marmoset run --sim=PROFILE`; torch's known abort at exit after a
    complete run (scripts/torch-exit-race.py) is run again, up to twice."""
    for attempt in range(3):
        r = run_once(model, profile, steps, policy, budget, trace, timing, shim)
        if not r.aborted_at_exit:
            return r
        say(f"  torch's known abort at exit ({model}); running it again")
    return r


def run_once(model, profile, steps, policy, budget, trace, timing, shim):
    with tempfile.TemporaryDirectory() as tmp:
        rep = os.path.join(tmp, "sim.json")
        cmd = [MARMOSET, "run", f"--sim={profile}"]
        if not shim:
            cmd.append("--no-shim")
        if policy:
            cmd += ["--policy", policy]
        if budget:
            cmd += ["--memory-limit", str(budget)]
        if trace:
            cmd += ["--trace", trace]
        cmd += ["--", PYTHON, ZOO, "--model", model, "--steps", str(steps)]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MARMOSET_", "SIMGPU_", "PYTORCH_"))}
        env.update(SIMGPU_MODE="shape", SIMGPU_REPORT=rep)
        if timing:
            env["MARMOSET_TRACE_TIMING"] = "1"
        t = time.time()
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
        host = time.time() - t
        report = json.load(open(rep)) if os.path.exists(rep) else None
        return Run(p, report, host)


def guidance(trace):
    """From a guided run's trace: the plan that guided the program's steps (the first of the
    longest period: the shim may first find and plan a network's repeated blocks), and the first
    of the program's steps (0-based, as it prints them) that it guided whole. The plan applies
    from the first iteration boundary after its record (docs/guided.md); the program's steps end
    at its loss.item(), a 4-byte copy to the host."""
    recs = []
    with open(trace) as f:
        for line in f:
            try:
                recs.append(json.loads(line))
            except ValueError:
                break
    recs.sort(key=lambda r: r["seq"])
    plans = [r for r in recs if r["kind"] == "plan"]
    divergences = [r for r in recs if r["kind"] == "divergence"]
    if not plans:
        no = [r for r in recs if r["kind"] == "no_plan"]
        return {"plan": None, "no_plan": no[-1]["why"] if no else None, "guided_from": None, "plans": 0}
    period = max(p["period"] for p in plans)
    plan = next(p for p in plans if p["period"] == period)
    calls = [r["seq"] for r in recs if r["kind"] in CALLS]
    at = {s: i for i, s in enumerate(calls)}
    losses = [r["seq"] for r in recs if r["kind"] == "copy" and r.get("dir") == "d2h" and r.get("size") == 4]
    # The step in which the plan began to guide (it is adopted mid-iteration, from the call after
    # its record), and that step's calls before it.
    before_plan = [s for s in losses if s < plan["seq"]]
    step_calls = [c for c in calls if (not before_plan or c > before_plan[-1]) and c < plan["seq"]]
    began = (len(before_plan), len(step_calls))
    first = None
    if plan["start"] in at:
        i = at[plan["start"]]
        while i < len(calls) and calls[i] <= plan["seq"]:
            i += period
        if i < len(calls):
            boundary = calls[i]
            before = [s for s in losses if s < boundary]
            step = len(before)
            # A step guided from its first call, or the next one.
            if before:
                between = [c for c in calls if before[-1] < c < boundary]
                if len(between) > 0:
                    step += 1
            elif calls and boundary != calls[0]:
                step += 1
            first = step
    left = [d for d in divergences if d["seq"] > plan["seq"]]
    return {"plan": plan, "guided_from": first, "began": began, "plans": len(plans),
            "divergences_after": len(left), "losses": len(losses)}


def offline(trace, profile, budgets):
    """`marmoset plan` on the unguided trace: `auto` and the bound at each budget, and the sweep."""
    out = {}
    for b in budgets:
        p = subprocess.run([MARMOSET, "plan", trace, "--budget", str(b), "--profile", profile, "--json"],
                           capture_output=True, text=True)
        out[b] = json.loads(p.stdout) if p.returncode == 0 else {"error": error_line(p)}
    t = time.time()
    p = subprocess.run([MARMOSET, "plan", trace, "--sweep", "--profile", profile, "--json"],
                       capture_output=True, text=True)
    sweep = json.loads(p.stdout) if p.returncode == 0 else {"error": error_line(p)}
    sweep["host_s"] = time.time() - t
    return out, sweep


def bench(model, profile, fractions):
    """Every run of one model on one profile; a dict of what the tables show."""
    res = {"model": model, "profile": profile, "fractions": {}}
    t0 = time.time()
    say(f"{model} on {profile}: without Marmoset")
    base = run(model, profile, shim=False)
    if not base.ok:
        res["failed"] = f"without Marmoset: {base.why()}"
        res["host_s"] = time.time() - t0
        return res
    res.update(params=base.params, peak=base.peak, step_ms=base.step_ms, steps=base.steps,
               base_host_s=base.host_s)
    os.makedirs(OUT, exist_ok=True)
    budgets = []
    for f in fractions:
        budget = int(base.peak * f)
        budgets.append(budget)
        row = {"budget": budget}
        for pol in ("default", "lru"):
            say(f"{model} on {profile}: {pol} at {f} of the peak")
            trace = os.path.join(OUT, f"{model}-{profile}-{f}.jsonl") if pol == "default" else None
            r = run(model, profile, policy=None if pol == "default" else pol, budget=budget, trace=trace)
            cell = {"ok": r.ok and not r.trapped and not r.lost, "trapped": r.trapped, "lost": len(r.lost),
                    "refused": len(r.refused), "shim_errors": len(r.shim_errors),
                    "first_shim_error": r.shim_errors[0] if r.shim_errors else None, "host_s": r.host_s}
            if r.report:
                cell["peak"] = r.peak
                cell["within"] = r.peak <= budget
            if r.steps:
                cell["steps"] = r.steps
            if cell["ok"]:
                cell["step_ms"] = r.step_ms
                cell["ratio"] = r.step_ms / base.step_ms
            else:
                cell["why"] = r.why()
            if trace and os.path.exists(trace):
                cell["guidance"] = guidance(trace)
                os.remove(trace)
            row[pol] = cell
        res["fractions"][f] = row
    say(f"{model} on {profile}: traced with --policy none, planned offline")
    trace = os.path.join(OUT, f"{model}-{profile}-none.jsonl")
    r = run(model, profile, steps=TRACE_STEPS, policy="none", trace=trace, timing=True)
    if r.ok and os.path.exists(trace):
        plans, sweep = offline(trace, profile, budgets)
        res["offline"] = {str(b): plans[b] for b in budgets}
        res["sweep"] = sweep
        with open(os.path.join(OUT, f"{model}-{profile}.sweep.json"), "w") as f:
            json.dump(sweep, f)
    else:
        res["offline_failed"] = r.why()
    if os.path.exists(trace):
        os.remove(trace)
    res["host_s"] = time.time() - t0
    return res


def gib(b):
    return f"{b / GIB:.2f}"


def times(v, none="-"):
    """A ratio, or `none` where the planner gave none (null in its JSON: for the lower bound, no
    schedule fits the budget at all)."""
    return none if v is None else f"{v:.2f}x"


def cell_ms(c, base):
    if not c.get("ok"):
        return "failed", "-"
    mark = " †" if c.get("refused") else ""
    return f"{c['step_ms']:.2f}{mark}", f"{c['ratio']:.2f}x{mark}"


def peak_cell(c):
    if "peak" not in c:
        return "-"
    return gib(c["peak"]) + ("" if c["within"] else " **over**")


def traps(row):
    t = [p for p in ("default", "lru") if row[p].get("trapped")]
    lost = [p for p in ("default", "lru") if row[p].get("lost")]
    refused = [f"{p}: {row[p]['refused']} calls refused" for p in ("default", "lru") if row[p].get("refused")]
    return ", ".join([f"{p} trapped" for p in t] + [f"{p} lost contents" for p in lost] + refused) or "no"


def tables(results, profile, fractions, head):
    """The profile's section of docs/zoo.md: the models without Marmoset, then under it."""
    out = [head, ""]
    out.append(f"Without Marmoset (`--no-shim`), simulated {profile.upper()}, shape mode: the device peak "
               f"(the simulator's `peak_bytes`, PyTorch's caching allocator included) and the step, the "
               f"median of steps {STEPS - 3}-{STEPS - 1} of {STEPS} (*simulated*); host seconds are the "
               "whole run's, real.")
    out.append("")
    out.append("| model | parameters | peak GiB | step ms | host s |")
    out.append("|---|---|---|---|---|")
    for r in results:
        if "failed" in r:
            out.append(f"| {r['model']} | - | - | failed | - |")
            continue
        out.append(f"| {r['model']} | {r['params']:.1f} M | {gib(r['peak'])} | {r['step_ms']:.2f} | "
                   f"{r['base_host_s']:.1f} |")
    out.append("")
    out.append(f"Under Marmoset within a fraction of that peak, the same {STEPS} steps (*simulated*). "
               "**default**: no `--policy` (`auto`, the planner in the library); **lru**: `--policy lru`. "
               "`x`: the step against the step without Marmoset above, same run of this script. "
               "*peak*: the simulator's device peak (**over** where above the budget). *traps*: the "
               "simulator trapped (a touch of evicted memory), contents were lost, or (†) the library "
               "refused calls it could not make room for within the budget (`marmoset: memory: out of "
               "memory for an operation`): it returns out-of-memory without running the call, and "
               "the program ran on to its end regardless, so a † "
               "time is not that of a whole step. *guided from*: "
               "the program's step (0-based) in which the in-process plan began to guide, and the "
               "calls of that step run before it (the plan guides from the next call; a step's "
               "calls end at its loss.item()); *whole*: the first step it guided whole; "
               "*plan*: its swaps / recomputations and its predicted step; *planning*: the planner's "
               "host ms for that plan (real). *offline*: `marmoset plan --budget` (`auto`) on a trace "
               "recorded with `--policy none`: its predicted slowdown and the lower bound, both "
               "against the trace's own compute-only step.")
    out.append("")
    out.append("| model | fraction | budget GiB | default ms | x | peak | guided from | plan | planning ms "
               "| lru ms | x | peak | traps | offline auto x | bound x |")
    out.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        if "failed" in r:
            continue
        for f in fractions:
            row = r["fractions"][f]
            d, l = row["default"], row["lru"]
            dms, dx = cell_ms(d, r["step_ms"])
            lms, lx = cell_ms(l, r["step_ms"])
            g = d.get("guidance") or {}
            plan = g.get("plan")
            if plan:
                ptxt = f"{plan['swaps']} / {plan['recomputes']}, {plan['predicted_ms']:.2f} ms"
                if not plan["feasible"]:
                    ptxt += " (infeasible)"
                planning = f"{plan['planning_ms']:.0f}"
                whole = "-" if g.get("guided_from") is None else str(g["guided_from"])
                began = g.get("began")
                gf = f"{began[0]} (call {began[1]}), whole {whole}" if began else whole
            else:
                ptxt = "none" + (f" ({g['no_plan']})" if g.get("no_plan") else "")
                planning, gf = "-", "never"
            o = (r.get("offline") or {}).get(str(row["budget"])) or {}
            if "overhead" in o:
                ox = times(o["overhead"]) + ("" if o.get("feasible", True) else " (infeasible)")
                bx = times(o.get("lower_bound_overhead"), "none fits")
            else:
                ox = bx = "-"
            out.append(f"| {r['model']} | {f} | {gib(row['budget'])} | {dms} | {dx} | {peak_cell(d)} | {gf} | "
                       f"{ptxt} | {planning} | {lms} | {lx} | {peak_cell(l)} | {traps(row)} | {ox} | {bx} |")
    out.append("")
    out.append("`marmoset plan --sweep` on the same traces (`auto` and the lower bound at fractions of the "
               "trace's own peak, which is that of one allocation per tensor: `cudaMallocAsync`, no "
               "caching allocator; *simulated*):")
    out.append("")
    cols = " | ".join(f"auto x @{f} | bound x @{f}" for f in fractions)
    out.append(f"| model | trace peak GiB | {cols} | sweep host s |")
    out.append("|---|---|" + "---|---|" * len(fractions) + "---|")
    for r in results:
        s = r.get("sweep")
        if not s or "results" not in s:
            if "failed" not in r:
                why = r.get("offline_failed") or (s or {}).get("error", "no sweep")
                out.append(f"| {r['model']} | {why} |")
            continue
        cells = []
        for f in fractions:
            a = [x for x in s["results"] if x["policy"] == "auto" and abs(x["budget_fraction"] - f) < 1e-9]
            if a:
                a = a[0]
                cells.append(times(a["overhead"]) + ("" if a["feasible"] else " (infeasible)"))
                cells.append(times(a.get("lower_bound_overhead"), "none fits"))
            else:
                cells += ["-", "-"]
        out.append(f"| {r['model']} | {gib(s['peak_bytes_baseline'])} | {' | '.join(cells)} | {s['host_s']:.1f} |")
    fails = [r for r in results if "failed" in r]
    fails += [dict(model=f"{r['model']} at {f}, {p}", failed=r["fractions"][f][p]["why"])
              for r in results if "failed" not in r for f in fractions for p in ("default", "lru")
              if "why" in r["fractions"][f][p]]
    fails += [dict(model=f"{r['model']} at {f}, {p}", failed=r["fractions"][f][p]["first_shim_error"])
              for r in results if "failed" not in r for f in fractions for p in ("default", "lru")
              if r["fractions"][f][p].get("first_shim_error") and "why" not in r["fractions"][f][p]]
    if fails:
        out.append("")
        out.append("Failures and the library's errors, each with its first line:")
        out.append("")
        for r in fails:
            out.append(f"- {r['model']}: `{r['failed']}`")
    return "\n".join(out)


def write_doc(profile, text):
    begin, end = f"<!-- bench-zoo:{profile}:begin -->", f"<!-- bench-zoo:{profile}:end -->"
    doc = open(DOC).read() if os.path.exists(DOC) else ""
    if begin not in doc or end not in doc:
        sys.exit(f"bench-zoo: {os.path.relpath(DOC, ROOT)} has no markers {begin} ... {end}")
    a, rest = doc.split(begin, 1)
    _, b = rest.split(end, 1)
    with open(DOC, "w") as f:
        f.write(a + begin + "\n" + text + "\n" + end + b)


def main():
    p = argparse.ArgumentParser(description="The model zoo on the simulated GPU, with and without Marmoset.")
    p.add_argument("--profiles", default="h100,p100", help="device profiles, comma-separated (default h100,p100)")
    p.add_argument("--models", help="models of examples/zoo.py, comma-separated (default all)")
    p.add_argument("--fractions", default="0.5,0.3", help="budgets as fractions of the peak (default 0.5,0.3)")
    p.add_argument("--quick", action="store_true", help="h100 only, resnet50, gpt2 and llama; docs untouched")
    p.add_argument("--no-docs", action="store_true", help="print the tables only; docs/zoo.md untouched")
    a = p.parse_args()
    names = models()
    chosen = a.models.split(",") if a.models else names
    profiles = a.profiles.split(",")
    if a.quick:
        chosen = a.models.split(",") if a.models else ["resnet50", "gpt2", "llama"]
        profiles = ["h100"] if a.profiles == "h100,p100" else profiles
    for m in chosen:
        if m not in names:
            sys.exit(f"bench-zoo: unknown model {m!r} (examples/zoo.py has {', '.join(names)})")
    fractions = [float(f) for f in a.fractions.split(",")]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=ROOT).stdout.strip() or "unknown"
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                           text=True, cwd=ROOT).stdout.strip()
    commit += " (with uncommitted changes)" if dirty else ""
    start = time.time()
    all_results = {}
    for prof in profiles:
        t = time.time()
        results = []
        os.makedirs(OUT, exist_ok=True)
        for m in chosen:
            results.append(bench(m, prof, fractions))
            # Kept as it goes, so that a table's failure loses no measurement.
            with open(os.path.join(OUT, f"results-{prof}.json"), "w") as f:
                json.dump(results, f, indent=1, default=str)
        all_results[prof] = results
        wall = time.time() - t
        head = (f"### Simulated {prof.upper()}\n\n`scripts/bench-zoo.sh` at commit {commit}, "
                f"{datetime.date.today().isoformat()}: {len(chosen)} models, {wall / 60:.1f} min of host time "
                f"on this project's 2-core machine. Every device time, peak and ratio below is "
                f"*simulated* (shape mode).")
        text = tables(results, prof, fractions, head)
        print(text + "\n", flush=True)
        if not (a.quick or a.no_docs):
            write_doc(prof, text)
            say(f"wrote the {prof} tables into {os.path.relpath(DOC, ROOT)}")
    say(f"done in {(time.time() - start) / 60:.1f} min")


if __name__ == "__main__":
    main()
