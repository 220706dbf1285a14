#!/usr/bin/env python3
"""bench-workspace: convolution workspaces within a memory budget (issue 41's joint plan).

For each CNN of the zoo (examples/zoo.py) on each simulated profile, shape mode, 14 steps (the
step: the median of the last nine, on the program's CUDA events, *simulated*):

1. without Marmoset (`marmoset run --sim --no-shim`): the device peak (the simulator's
   `peak_bytes`) and the step;
2. at each fraction of that peak:
   - **PyTorch alone** within it: `--memory-fraction` (torch.cuda.set_per_process_memory_fraction
     of the device's capacity; its caching allocator refuses more and cuDNN's engine choice falls
     back to configurations with less workspace), no Marmoset; `OOM` where it cannot run;
   - **PyTorch's choice**: Marmoset's default policy within the budget (`--memory-limit`) with
     the joint plan off (`--joint-workspace off`): PyTorch's engines and workspaces, which the
     memory plan makes room for;
   - **default** (the joint plan): the same budget, nothing else set;
   - **fixed limits**: the same with each `--workspace-limit` (μ-cuDNN's WR), and the best of
     them: what a user who guessed right would get.

A default marked "(plan cut)" had a plan the planner's host-time deadline cut (a loaded host:
run the script on an idle one). The planner's lower bound on one iteration of the default run's trace within the budget, over
the convolutions' configurations too, and the default's gap to it, close each row.

The ratio default / best fixed is what issue 41's joint plan must bring to at most 1.02; the
ratio default / the better of PyTorch alone and PyTorch's choice is the joint plan's gain over
what a user had without it (at most 1, and below 0.95 where workspace matters).

Usage: scripts/bench-workspace.py [--profiles h100,p100] [--models a,b] [--fractions 0.9,0.7,0.5,0.3]
       [--limits 16MiB,64MiB,256MiB,1GiB] [--json FILE]
"""

import argparse
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
CNNS = ["vgg16_bn", "resnet50", "densenet121", "mobilenet_v3_large", "efficientnet_b0",
        "convnext_tiny", "fcn_resnet50"]
STEPS = 14
# The step: the median of the last MEASURED steps, so that a replanning transient (a program
# that leaves the planned sequence for a step or two) does not decide it.
MEASURED = 9


def say(what):
    sys.stderr.write(f"[{time.strftime('%H:%M:%S')}] {what}\n")
    sys.stderr.flush()


def run(model, profile, marmoset_args=(), zoo_args=(), bound_of=None):
    """One run: (step ms or None, the simulator's report, why it failed or None). With
    `bound_of` (a budget) the run is traced and the report gets `bound_ms`: the planner's lower
    bound for one iteration of the trace within it (`marmoset plan --json`; over the
    convolutions' configurations where the trace names them)."""
    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "trace.jsonl")
        if bound_of is not None:
            marmoset_args = ["--trace", trace, *marmoset_args]
        rep = os.path.join(tmp, "sim.json")
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("MARMOSET_", "SIMGPU_", "TORCH_", "PYTORCH_"))}
        env.update(SIMGPU_MODE="shape", SIMGPU_REPORT=rep, MARMOSET_CACHE_DIR=tmp)
        cmd = [MARMOSET, "run", f"--sim={profile}", *marmoset_args, "--",
               PYTHON, ZOO, "--model", model, "--steps", str(STEPS), *zoo_args]
        p = subprocess.run(cmd, env=env, capture_output=True, text=True)
        report = json.load(open(rep)) if os.path.exists(rep) else {}
        if bound_of is not None and os.path.exists(trace):
            # Plans the host-time deadline cut (a loaded host): their figures depend on the host.
            with open(trace) as f:
                report["plans_cut"] = sum(1 for line in f if '"kind":"plan"' in line
                                          and '"timed_out":true' in line)
            q = subprocess.run([MARMOSET, "plan", trace, "--budget", str(bound_of), "--json"],
                               capture_output=True, text=True)
            try:
                b = json.loads(q.stdout).get("lower_bound_time_s")
                report["bound_ms"] = b * 1e3 if b else None
            except ValueError:
                report["bound_ms"] = None
    steps = [float(x) for x in re.findall(r", ([0-9.]+) ms device time\)", p.stdout)]
    complete = "peak memory allocated" in p.stdout and len(steps) == STEPS
    if complete and report.get("sticky_error") is None:
        return statistics.median(steps[-MEASURED:]), report, None
    text = p.stderr + p.stdout
    why = "OOM" if "OutOfMemoryError" in text else (text.strip().splitlines() or ["no output"])[-1]
    return None, report, why


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profiles", default="h100")
    ap.add_argument("--models", default=",".join(CNNS))
    ap.add_argument("--fractions", default="0.9,0.7,0.5,0.3")
    ap.add_argument("--limits", default="16MiB,64MiB,256MiB,1GiB")
    ap.add_argument("--json")
    a = ap.parse_args()
    for path in (MARMOSET, PYTHON):
        if not os.path.exists(path):
            sys.exit(f"bench-workspace: {path} missing: cargo build --release --workspace; scripts/setup-zoo.sh")
    fractions = [float(f) for f in a.fractions.split(",")]
    limits = a.limits.split(",")
    results = []
    t0 = time.time()
    for profile in a.profiles.split(","):
        for model in a.models.split(","):
            base, rep, why = run(model, profile, ["--no-shim"])
            if base is None:
                say(f"{model} on {profile}: the run without Marmoset failed: {why}")
                continue
            peak, capacity = rep["peak_bytes"], rep["capacity_bytes"]
            for f in fractions:
                budget = int(peak * f)
                row = {"profile": profile, "model": model, "fraction": f, "budget": budget,
                       "without_ms": base}
                alone, _, why = run(model, profile, ["--no-shim"],
                                    ["--memory-fraction", f"{budget / capacity:.6f}"])
                row["pytorch_alone_ms"] = alone
                row["pytorch_alone_why"] = why
                if alone is None and why != "OOM":
                    say(f"{model} on {profile} at {f}: PyTorch alone failed, not for memory: {why}")
                row["choice_ms"], _, _ = run(model, profile, ["--memory-limit", str(budget),
                                                              "--joint-workspace", "off"])
                row["default_ms"], drep, row["default_why"] = run(
                    model, profile, ["--memory-limit", str(budget)], bound_of=budget)
                row["bound_ms"] = drep.get("bound_ms")
                row["plans_cut"] = drep.get("plans_cut", 0)
                row["limits"] = {}
                for lim in limits:
                    ms, _, _ = run(model, profile, ["--memory-limit", str(budget), "--workspace-limit", lim])
                    row["limits"][lim] = ms
                done = {k: v for k, v in row["limits"].items() if v is not None}
                row["best_limit"] = min(done, key=done.get) if done else None
                results.append(row)
                say(f"{model} on {profile} at {f}: default {row['default_ms']}, PyTorch's choice "
                    f"{row['choice_ms']}, best fixed "
                    f"{row['best_limit']} {done.get(row['best_limit'])}, PyTorch alone {alone or why}")
    host = time.time() - t0
    fmt = lambda x: "fails" if x is None else f"{x:.2f}"
    print(f"bench-workspace: {len(results)} points, {host / 60:.1f} min of host time; every time is "
          f"*simulated* (shape mode), the step the median of the last {MEASURED} of {STEPS}.\n")
    head = " | ".join(limits)
    print(f"| profile | model | fraction | without ms | PyTorch alone ms | PyTorch's choice ms | default ms | "
          f"{head} | best fixed | default / best | default / better other | bound ms | default / bound |")
    print("|---" * (12 + len(limits)) + "|")
    for r in results:
        best = r["limits"].get(r["best_limit"]) if r["best_limit"] else None
        ratio = f"{r['default_ms'] / best:.3f}" if best and r["default_ms"] else "-"
        # OOM, or "failed" (the reason is on stderr): a table cell holds no log line.
        alone = fmt(r["pytorch_alone_ms"]) if r["pytorch_alone_ms"] else (
            "OOM" if r["pytorch_alone_why"] == "OOM" else "failed")
        cells = " | ".join(fmt(r["limits"][l]) for l in limits)
        others = [x for x in (r["pytorch_alone_ms"], r.get("choice_ms")) if x]
        gain = f"{r['default_ms'] / min(others):.3f}" if others and r["default_ms"] else "-"
        bound = r.get("bound_ms")
        gap = f"{r['default_ms'] / bound:.3f}" if bound and r["default_ms"] else "-"
        cut = " (plan cut)" if r.get("plans_cut") else ""
        print(f"| {r['profile']} | {r['model']} | {r['fraction']} | {r['without_ms']:.2f} | {alone} | "
              f"{fmt(r.get('choice_ms'))} | {fmt(r['default_ms'])}{cut} | {cells} | {r['best_limit'] or '-'} | "
              f"{ratio} | {gain} | {fmt(bound) if bound else '-'} | {gap} |")
    if a.json:
        with open(a.json, "w") as out:
            json.dump({"host_s": host, "results": results}, out, indent=1)


if __name__ == "__main__":
    main()
