#!/usr/bin/env python3
"""Benchmark of Marmoset's memory policies on the simulated GPU (shape mode; every time printed
is simulated). Run by scripts/bench-memory.sh, which builds everything first.

For each workload and device profile: the program without Marmoset (unlimited), then under each
policy at 0.9, 0.7, 0.5 and 0.3 of that peak, in the same invocation. Per point: the last
iteration's device time (guided once a plan is ready; passive under lru) against the unlimited
one, the planner's prediction for one guided iteration beside it, the bytes moved each way in the
whole run, the plan (swaps, recomputations, predicted recomputation time) and the planning time.
Then the batch multiplier: the largest batch that runs at most 1.3x slower per step under
`auto` (what a budget gets) within a device of D bytes, over the largest batch that fits D without Marmoset (the
device's capacity is played by the budget: the program sees D as the device).

Environment: MARMOSET_BENCH_PROG (workloads, comma-separated: trainer, torchlike, resnet50,
bert; default trainer,resnet50,bert), MARMOSET_BENCH_PROFILES (default h100,p100),
MARMOSET_BENCH_POLICIES (default lru,auto,capuchin,swap,recompute), MARMOSET_BENCH_FRACTIONS,
(MARMOSET_BENCH_PROFILES empty: the multiplier alone)
MARMOSET_BENCH_MULTIPLIER (0 skips it).
"""
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARMOSET = os.path.join(ROOT, "target", "release", "marmoset")
PYTHON = os.path.join(ROOT, ".venv", "bin", "python")
BIN = os.environ.get("MARMOSET_BENCH_BIN", "")
GIB = 1 << 30

# name -> (command for a batch, default batch, device for the multiplier in bytes)
WORKLOADS = {
    "trainer": (lambda b: [os.path.join(BIN, "trainer"), "12", str(b), "256", "6"], 256, None),
    "torchlike": (lambda b: [os.path.join(BIN, "torchlike"), "12", str(b), "64", "16", "12"], 32, None),
    "resnet50": (
        lambda b: [PYTHON, os.path.join(ROOT, "examples", "resnet50.py"), "--steps", "8", "--batch", str(b)],
        32,
        2 * GIB,
    ),
    "bert": (
        lambda b: [PYTHON, os.path.join(ROOT, "examples", "bert.py"), "--steps", "8", "--batch", str(b)],
        8,
        3 * GIB,
    ),
}
SLOWER = 1.3
# What a budget gets with no policy named (shim/src/config.rs, BUDGET_DEFAULT).
DEFAULT = "auto"


def last_iteration(out, err):
    """The last iteration's device time in ms: the C workloads print them all on stderr, the
    PyTorch examples one per step line on stdout."""
    m = re.findall(r"iteration times \(ms, device clock\):(.*)", err)
    if m:
        return float(m[-1].split()[-1])
    steps = re.findall(r", ([0-9.]+) ms device time\)", out)
    return float(steps[-1]) if steps else None


def aborted_at_exit(p):
    """torch's known abort after a complete run (its autograd thread meets the interpreter's
    finalisation; scripts/torch-exit-race.py), which the tests retry too."""
    return (p.returncode == -6 or p.returncode == 134) and "terminate called without an active exception" in p.stderr \
        and "peak memory allocated by torch" in p.stdout


def run(cmd, profile, policy=None, budget=None, trace=None, env_extra=None):
    """One run; (ok, report, last iteration ms, stderr)."""
    for _ in range(4):
        got, p = run_once(cmd, profile, policy, budget, trace, env_extra or {})
        if not aborted_at_exit(p):
            return got
        sys.stderr.write("bench-memory: torch's known abort at exit; running it again\n")
    return got


def run_once(cmd, profile, policy, budget, trace, env_extra):
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "r.json")
        args = [MARMOSET, "run", f"--sim={profile}"]
        if policy is None:
            args.append("--no-shim")
        else:
            args += ["--policy", policy, "--memory-limit", str(budget)]
            if trace:
                args += ["--trace", trace]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MARMOSET_", "SIMGPU_"))}
        # The simulated GPU runs an iteration in far less host time than planning takes: the
        # program waits for the planner, so the plan applies from the next iteration as it
        # would on a real GPU.
        env.update(SIMGPU_MODE="shape", SIMGPU_REPORT=report, TRAINER_TIMES="1", MARMOSET_PLAN_WAIT="1")
        env.update(env_extra)
        p = subprocess.run(args + ["--"] + cmd, env=env, capture_output=True, text=True)
        rep = json.load(open(report)) if os.path.exists(report) else {}
        # A run that lost contents (a recomputation that failed after its drop) is no
        # measurement: shape mode prints no wrong loss, so the log is the only witness.
        lost = [l for l in p.stderr.splitlines() if l.startswith("marmoset:") and "lost" in l]
        if lost:
            return (False, rep, None, p.stderr + f"\n{len(lost)} lines of lost contents, first: {lost[0]}"), p
        return (p.returncode == 0, rep, last_iteration(p.stdout, p.stderr), p.stderr), p


def last_plan(trace):
    if not trace or not os.path.exists(trace):
        return None
    plans = [json.loads(l) for l in open(trace) if '"kind":"plan"' in l]
    return plans[-1] if plans else None


def progress(what):
    if sys.stderr.isatty():
        sys.stderr.write("\r\033[2K" + what)
        sys.stderr.flush()


def done():
    if sys.stderr.isatty():
        sys.stderr.write("\r\033[2K")


def table(name, profile, policies, fractions):
    cmd, batch, _ = WORKLOADS[name]
    ok, rep, base_it, err = run(cmd(batch), profile)
    if not ok or base_it is None:
        print(f"{name} on {profile}: the unlimited run failed: {err.strip().splitlines()[-1:]}")
        return
    peak = rep["peak_bytes"]
    print(f"\n{name} (batch {batch}) on the simulated {profile.upper()}, shape mode: peak {peak / GIB:.2f} GiB, "
          f"{base_it:.2f} ms per iteration unlimited (simulated)")
    head = ("policy", "budget", "peak GiB", "last it ms", "x", "predicted", "meas/pred", "out GiB",
            "in GiB", "plan", "recomp ms", "planning ms")
    print("%-9s %6s %9s %11s %7s %10s %10s %8s %8s %10s %10s %12s" % head)
    for f in fractions:
        budget = int(peak * f)
        for pol in policies:
            progress(f"{name} {profile}: {pol} at {f} of the peak")
            with tempfile.TemporaryDirectory() as tmp:
                trace = os.path.join(tmp, "t.jsonl")
                ok, r, it, err = run(cmd(batch), profile, pol, budget, trace)
                plan = last_plan(trace)
            done()
            if not ok or it is None:
                last = err.strip().splitlines()[-1] if err.strip() else "no output"
                print("%-9s %6s  failed: %s" % (pol, f, last))
                continue
            if plan and not plan["feasible"]:
                # The plan does not fit the budget: the passive mechanism makes up the rest,
                # and the timeline's figure is no prediction.
                pred, ratio = "infeasible", "-"
                shape = "%ds/%dr" % (plan["swaps"], plan["recomputes"])
                recomp = "%.2f" % plan.get("recompute_ms", 0.0)
                planning = "%.1f" % plan["planning_ms"]
            elif plan:
                pred = "%.2f" % plan["predicted_ms"]
                ratio = "%.2f" % (it / plan["predicted_ms"])
                shape = "%ds/%dr" % (plan["swaps"], plan["recomputes"])
                recomp = "%.2f" % plan.get("recompute_ms", 0.0)
                planning = "%.1f" % plan["planning_ms"]
            else:
                pred = ratio = shape = recomp = planning = "-"
            print("%-9s %6s %9.2f %11.2f %6.2fx %10s %10s %8.2f %8.2f %10s %10s %12s" % (
                pol, f, r["peak_bytes"] / GIB, it, it / base_it, pred, ratio,
                r["d2h_bytes"] / GIB, r["h2d_bytes"] / GIB, shape, recomp, planning))


def fits(cmd, profile, device, lo, hi):
    """The largest batch in [lo, hi) whose unlimited peak is within `device` (bisection: the
    peak grows with the batch)."""
    while hi - lo > 1:
        mid = (lo + hi) // 2
        ok, rep, _, _ = run(cmd(mid), profile)
        if ok and rep["peak_bytes"] <= device:
            lo = mid
        else:
            hi = mid
    return lo


def multiplier(name, profile):
    cmd, batch, device = WORKLOADS[name]
    if device is None:
        return
    progress(f"{name}: the largest batch within {device / GIB:.0f} GiB")
    base = fits(cmd, profile, device, 1, 4 * batch)
    done()
    best, rows = base, []

    def slowdown(b):
        """Batch b's step under DEFAULT within the device over its step without Marmoset (None
        if either fails or the budget is exceeded)."""
        progress(f"{name}: batch {b} under {DEFAULT} within {device / GIB:.0f} GiB")
        # The baseline is the faster of the program's own allocator and the one-allocation-per-
        # tensor backend Marmoset asks PyTorch for (the simulated GPU times them differently,
        # BERT by up to 13%): never one that flatters Marmoset.
        ok0, _, t0, _ = run(cmd(b), profile)
        oka, _, ta, _ = run(cmd(b), profile, env_extra={"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"})
        if oka and ta and (not t0 or ta < t0):
            ok0, t0 = True, ta
        ok1, rep, t1, _ = run(cmd(b), profile, DEFAULT, device)
        done()
        within = ok0 and ok1 and t0 and t1 and rep["peak_bytes"] <= device
        x = t1 / t0 if within else None
        rows.append((b, t0, t1, x))
        return x

    over = None
    for b in sorted({max(base + 1, int(base * m)) for m in (1.5, 2, 3, 4, 6)}):
        x = slowdown(b)
        if x is not None and x <= SLOWER:
            best = b
        elif over is None:
            over = b
        if x is None or x > 2 * SLOWER:
            break
    # Between the largest batch within the line and the first above it, bisection (the
    # slowdown grows with the batch), so the multiplier is not the coarse steps' artefact.
    while over is not None and best < over and over - best > 1:
        mid = (best + over) // 2
        x = slowdown(mid)
        if x is not None and x <= SLOWER:
            best = mid
        else:
            over = mid
    rows.sort()
    print(f"\nbatch multiplier, {name} on the simulated {profile.upper()} with a device of {device / GIB:.0f} GiB "
          f"(played by the budget): batch {base} fits without Marmoset")
    for b, t0, t1, x in rows:
        what = "failed" if x is None else f"{t1:.2f} ms against {t0:.2f} ms unlimited: {x:.2f}x"
        print(f"  batch {b:5d} under {DEFAULT}: {what}")
    print(f"  largest batch at most {SLOWER}x slower: {best}; multiplier {best / base:.2f}x (simulated)")


def main():
    names = os.environ.get("MARMOSET_BENCH_PROG", "trainer,resnet50,bert").split(",")
    # Empty: no tables (the multiplier alone).
    profiles = [p for p in os.environ.get("MARMOSET_BENCH_PROFILES", "h100,p100").split(",") if p]
    policies = os.environ.get("MARMOSET_BENCH_POLICIES", "lru,auto,capuchin,swap,recompute").replace(" ", ",").split(",")
    fractions = os.environ.get("MARMOSET_BENCH_FRACTIONS", "0.9,0.7,0.5,0.3").split(",")
    for n in names:
        if n not in WORKLOADS:
            sys.exit(f"bench-memory: unknown workload {n!r} (one of {', '.join(WORKLOADS)})")
    for n in names:
        for p in profiles:
            table(n, p, [x for x in policies if x], [float(f) for f in fractions])
    if os.environ.get("MARMOSET_BENCH_MULTIPLIER", "1") != "0":
        for n in names:
            multiplier(n, "h100")
    print("\nTimes are virtual (simulated GPU). 'last it' is the last iteration: guided once a plan is "
          "ready under a planner policy, passive under lru; 'predicted' is the planner's timeline for "
          "one guided iteration. Bytes moved are the whole run's, the program's own copies included.")


if __name__ == "__main__":
    main()
