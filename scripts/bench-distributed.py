#!/usr/bin/env python3
"""Data-parallel training under Marmoset on a simulated machine of several H100s (shape mode:
every device time, peak and ratio printed is *simulated*; host times are real and not used).

For each configuration (DDP ResNet-50, FSDP LLaMA-style decoder) and each rank count:

1. without Marmoset (`marmoset run --sim=h100xN --no-shim -- torchrun ...`): each device's peak
   (its report's peak_bytes) and the step: the median of the last three of STEPS steps, of the
   slowest rank (a step is as slow as its slowest rank);
2. under Marmoset within FRACTION of the largest device peak (`--memory-limit BYTES`, each rank
   its own budget), with the default policy and with `--policy lru`: the step, its ratio to (1),
   each device's peak against the budget, and any trap.

Prints one markdown table. Writes nothing else. The FSDP configuration is examples/zoo.py's
LLaMA-style decoder: run scripts/setup-zoo.sh first.

    scripts/bench-distributed.py [--ranks 2,4] [--fractions 0.5] [--configs ddp,fsdp] [--steps 12]
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
TORCHRUN = os.path.join(ROOT, ".venv", "bin", "torchrun")
SCRIPT = os.path.join(ROOT, "examples", "distributed.py")
CONFIGS = {
    "ddp": ["--model", "resnet50", "--batch", "16"],
    "fsdp": ["--model", "llama", "--parallel", "fsdp", "--layers", "8", "--batch", "4", "--seq", "512"],
}
STEP = re.compile(r"rank (\d+) step (\d+): [^\n]*?, ([0-9.]+) ms device time\)")


def say(what):
    sys.stderr.write(f"[{time.strftime('%H:%M:%S')}] {what}\n")
    sys.stderr.flush()


def run(ranks, config, steps, marmoset_args, tmp, name):
    report = os.path.join(tmp, f"{name}.json")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("MARMOSET_", "SIMGPU_", "TORCH_", "PYTORCH_", "NCCL_"))}
    env.update(SIMGPU_MODE="shape", SIMGPU_REPORT=report, OMP_NUM_THREADS="1")
    cmd = [MARMOSET, "run", f"--sim=h100x{ranks}", *marmoset_args, "--",
           TORCHRUN, "--standalone", "--nproc-per-node", str(ranks), SCRIPT,
           *CONFIGS[config], "--steps", str(steps)]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
    times = {}
    for m in STEP.finditer(p.stdout):
        times.setdefault(int(m.group(1)), {})[int(m.group(2))] = float(m.group(3))
    reports = []
    for d in range(ranks):
        path = os.path.join(tmp, f"{name}.dev{d}.json")
        try:
            reports.append(json.load(open(path)))
        except (OSError, ValueError):
            reports.append(None)
    complete = p.returncode == 0 and len(times) == ranks and all(len(t) == steps for t in times.values())
    if not complete:
        tail = [l for l in (p.stderr + p.stdout).splitlines() if "rror" in l or "simgpu:" in l]
        got = {r: len(t) for r, t in times.items()}
        return {"error": (tail[-1] if tail else f"exit {p.returncode}, steps per rank {got}")[:160]}
    slowest = [max(times[r][s] for r in range(ranks)) for s in range(steps)]
    return {
        "step": statistics.median(slowest[-3:]),
        "peaks": [r["peak_bytes"] if r else None for r in reports],
        "trap": any(r is None or r.get("sticky_error") is not None for r in reports)
        or "illegal address" in p.stderr,
    }


def main():
    a = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    a.add_argument("--ranks", default="2,4")
    a.add_argument("--fractions", default="0.5")
    a.add_argument("--configs", default="ddp,fsdp")
    a.add_argument("--steps", type=int, default=12)
    args = a.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for config in args.configs.split(","):
            for ranks in [int(r) for r in args.ranks.split(",")]:
                say(f"{config} at {ranks} ranks: without Marmoset")
                base = run(ranks, config, args.steps, ["--no-shim"], tmp, f"{config}{ranks}-plain")
                if "error" in base:
                    rows.append(f"| {config} | {ranks} | - | - | failed: {base['error']} | | |")
                    continue
                peak = max(base["peaks"])
                for f in [float(x) for x in args.fractions.split(",")]:
                    budget = int(peak * f)
                    cells = []
                    for policy in ([], ["--policy", "lru"]):
                        name = f"{config}{ranks}-{f}-{'lru' if policy else 'auto'}"
                        say(f"{name}: within {budget} B")
                        r = run(ranks, config, args.steps, ["--memory-limit", str(budget), *policy], tmp, name)
                        if "error" in r:
                            cells.append(f"failed: {r['error']}")
                            continue
                        over = max(p or 0 for p in r["peaks"]) > budget
                        flags = (" **trap**" if r["trap"] else "") + (" **over budget**" if over else "")
                        cells.append(f"{r['step']:.2f} ms ({r['step'] / base['step']:.2f}x){flags}")
                    rows.append(
                        f"| {config} | {ranks} | {peak / 2**20:.0f} MiB, {base['step']:.2f} ms | {f} | {cells[0]} | {cells[1]} |"
                    )
    print("Simulated H100s (shape mode), per-rank budget a fraction of the largest device peak without "
          "Marmoset; steps: median of the last three, slowest rank.\n")
    print("| config | ranks | alone: peak, step | fraction | default policy | lru |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(r)


if __name__ == "__main__":
    main()
