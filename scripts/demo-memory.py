#!/usr/bin/env python3
"""The main job's first part (scripts/demo.sh runs it after building): a training program within
half and 0.3 of its peak memory on the simulated H100, without Marmoset, under the passive `lru`
policy and under the default policy (the planner in the library: the first steps measured, then
guided by the plan), as one table; the same program's losses under the default policy in data
mode; and the report of the guided run at 0.3, written to MARMOSET_DEMO_OUT (default
target/demo).

Every figure is simulated: step times are the simulated GPU's virtual clock, read by the
program's own events (TRAINER_TIMES); the device peak is the simulator's report (SIMGPU_REPORT);
bytes moved and what the plan did come from the trace's records, through `marmoset report`'s
JSON summary. MARMOSET_DEMO_BIN: the C workloads (scripts/build-workloads.sh prints it).
"""
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARMOSET = os.path.join(ROOT, "target", "release", "marmoset")
BIN = os.environ["MARMOSET_DEMO_BIN"]
OUT = os.environ.get("MARMOSET_DEMO_OUT", os.path.join(ROOT, "target", "demo"))
# 6 steps, batch 256, 256 x 256 images, 6 blocks: 15.6 GiB at its peak, activations of 512 MiB.
ARGS = ["6", "256", "256", "6"]
GIB = 1 << 30


def size(b):
    if b is None:
        return "-"
    if b >= GIB:
        return f"{b / GIB:.2f} GiB"
    return f"{b / (1 << 20):.0f} MiB"


def env(extra):
    e = {k: v for k, v in os.environ.items() if not k.startswith(("MARMOSET_", "SIMGPU_"))}
    e.update(extra)
    return e


def run(args, tmp, name, policy=None, budget=None, trace=None):
    """One run in shape mode (no bytes, the same timing): the program's step times on the
    device clock, the simulator's report and `marmoset report`'s summary of its trace."""
    report = os.path.join(tmp, f"{name}.sim.json")
    cmd = [MARMOSET, "run", "--sim=h100"]
    if budget is None:
        cmd.append("--no-shim")
    else:
        if policy:
            cmd += ["--policy", policy]
        cmd += ["--memory-limit", str(budget), "--trace", trace]
    # Under --sim the program waits for the in-process planner (MARMOSET_PLAN_WAIT's default
    # there), so the plan guides from the next step as it would on a real GPU.
    e = env({"SIMGPU_MODE": "shape", "SIMGPU_REPORT": report, "TRAINER_TIMES": "1",
             "MARMOSET_TRACE_TIMING": "1"})
    p = subprocess.run(cmd + ["--", os.path.join(BIN, "trainer")] + args, env=e,
                       capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"demo: {name} failed ({p.returncode}):\n{p.stderr}")
    times = re.findall(r"iteration times \(ms, device clock\):(.*)", p.stderr)
    steps = [float(t) for t in times[-1].split()]
    summary = None
    if trace:
        js = os.path.join(tmp, f"{name}.report.json")
        r = subprocess.run([MARMOSET, "report", "--simulated", trace, "-o", js],
                           capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"demo: marmoset report on {name} failed:\n{r.stderr}")
        summary = json.load(open(js))
    return steps, json.load(open(report)), summary


def main():
    os.makedirs(OUT, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        base_steps, base, _ = run(ARGS, tmp, "plain")
        peak, base_ms = base["peak_bytes"], base_steps[-1]
        print(f"The trainer (a Caffe-style C program on the CUDA and cuDNN C ABI: {ARGS[0]} steps, batch "
              f"{ARGS[1]}, {ARGS[2]} x {ARGS[2]} images, {ARGS[3]} blocks) on a simulated H100: "
              f"{size(peak)} at its peak. Every figure is simulated (shape mode: no bytes, the same "
              f"timing); each run's last step.\n")
        rows = [("without Marmoset", None, base_ms, peak, None, None, None)]
        guided = {}
        for frac in (0.5, 0.3):
            budget = int(peak * frac)
            for policy, label in (("lru", "lru"), (None, "default (auto)")):
                name = f"{policy or 'default'}-{frac}"
                trace = os.path.join(OUT if policy is None else tmp, f"trainer-{name}.jsonl")
                steps, sim, summary = run(ARGS, tmp, name, policy, budget, trace)
                rows.append((f"{label} at {frac}", budget, steps[-1], sim["peak_bytes"],
                             summary["steps"][-1] if summary["steps"] else None, summary["plans"], steps))
                if policy is None:
                    guided[frac] = (steps, summary, trace)
        head = ("run", "budget", "last step ms", "slowdown", "device peak", "out / back per step",
                "the plan", "predicted ms", "meas/pred")
        fmt = "%-21s %9s %12s %9s %12s %21s %26s %13s %10s"
        print(fmt % head)
        for name, budget, ms, dpeak, last, plans, _ in rows:
            moved = f"{size(last['to_host_bytes'])} / {size(last['to_device_bytes'])}" if last else "-"
            if plans:
                p = plans[-1]
                plan = f"{p['swaps']} swaps, {p['recomputes']} recomputation{'s' if p['recomputes'] != 1 else ''}"
                pred = p["predicted_ms"]
                ratio = f"{ms / pred:.3f}" if pred else "-"
                pred = f"{pred:.2f}" if pred else "-"
            else:
                plan = "passive" if budget else "-"
                pred = ratio = "-"
            print(fmt % (name, size(budget), f"{ms:.2f}", f"{ms / base_ms:.2f}x", size(dpeak), moved,
                         plan, pred, ratio))
        print("\nStep by step under the default policy (ms, simulated; | where the plan starts to guide):")
        for frac, (steps, summary, _) in guided.items():
            modes = [s["mode"] for s in summary["steps"]]
            cells = []
            for i, ms in enumerate(steps):
                if i < len(modes) and modes[i] != "passive" and (i == 0 or modes[i - 1] == "passive"):
                    cells.append("|")
                cells.append(f"{ms:.2f}")
            print(f"  at {frac}: {' '.join(cells)}")
        print("  The first steps run passively while the library measures the iteration and plans it "
              "(the online policy: evictions by DTR's heuristic, rebuilding what it can replay); the "
              "plan then swaps and recomputes what it chose, step after step.")

        # Correctness, with real bytes and arithmetic: a smaller trainer in data mode.
        small = ["5", "16", "64", "4"]
        plain = subprocess.run([MARMOSET, "run", "--sim=h100", "--no-shim", "--",
                                os.path.join(BIN, "trainer")] + small,
                               env=env({"SIMGPU_REPORT": os.path.join(tmp, "d0.json")}),
                               capture_output=True, text=True)
        dpeak = json.load(open(os.path.join(tmp, "d0.json")))["peak_bytes"]
        budget = int(dpeak * 0.3)
        dtrace = os.path.join(tmp, "data.jsonl")
        under = subprocess.run([MARMOSET, "run", "--sim=h100", "--memory-limit", str(budget), "--trace",
                                dtrace, "--", os.path.join(BIN, "trainer")] + small,
                               env=env({"SIMGPU_REPORT": os.path.join(tmp, "d1.json")}),
                               capture_output=True, text=True)
        recs = [json.loads(l) for l in open(dtrace)]
        plan = [r for r in recs if r["kind"] == "plan"]
        replays = sum(1 for r in recs if r["kind"] == "recompute")
        same = plain.returncode == 0 and under.returncode == 0 and plain.stdout == under.stdout
        loss = re.findall(r"loss (\S+)", plain.stdout)
        print(f"\nThe same program in data mode (real bytes and float32 arithmetic; {small[0]} steps, "
              f"batch {small[1]}, {small[2]} x {small[2]}, {small[3]} blocks; {size(dpeak)} peak) under the "
              f"default policy at 0.3 of it: "
              + (f"losses ({', '.join(loss)}) and weight checksum bit for bit those without Marmoset; "
                 f"{plan[-1]['swaps'] if plan else 0} swaps and {plan[-1]['recomputes'] if plan else 0} "
                 f"recomputations planned, {replays} replays run; device peak "
                 f"{size(json.load(open(os.path.join(tmp, 'd1.json')))['peak_bytes'])} (simulated)."
                 if same else "OUTPUT DIFFERS"))
        if not same:
            sys.exit(f"{plain.stdout}\n---\n{under.stdout}\n{under.stderr}")

    steps, summary, trace = guided[0.3]
    html = os.path.join(OUT, "report.html")
    r = subprocess.run([MARMOSET, "report", "--simulated", trace, "-o", html], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"demo: marmoset report failed:\n{r.stderr}")
    last = summary["steps"][-1]
    print(f"\nThe report of the guided run at 0.3 (open it in a browser): {os.path.relpath(html, ROOT)}")
    print(f"  its trace: {os.path.relpath(trace, ROOT)}; the last step rebuilt from the trace's device "
          f"timings: {last['measured_ms']:.2f} ms ({steps[-1]:.2f} by the program's events), "
          f"{last['compute_ms']:.2f} of compute, {last['recompute_ms']:.2f} recomputing, "
          f"{sum(last['stalls_ms'].values()):.2f} stalled (simulated)")


if __name__ == "__main__":
    main()
