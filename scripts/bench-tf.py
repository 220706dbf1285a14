#!/usr/bin/env python3
"""TensorFlow's benchmark on the simulated GPU (shape mode; every device time, peak and ratio is
*simulated*; host times are real and not compared).

For each example of examples/tf (Keras ResNet-50, the transformer encoder), in one invocation:

1. without Marmoset (`marmoset run --sim --no-shim`, TF_GPU_ALLOCATOR=cuda_malloc_async, which
   shape mode needs for the small tensors TensorFlow reads back): the device peak
   (SIMGPU_REPORT's peak_bytes) and the steady step (the median of the last three of STEPS
   steps, each the device's time across `train_on_batch`, timed by examples/tf/common.py's CUDA
   events on the device's virtual clock);
2. under Marmoset within FRACTION of that peak (`--memory-limit BYTES`), and, where the first
   step's peak (TensorFlow's autotuning workspaces) is well above the later steps', within
   FRACTION of theirs (the memory pool's high-water mark, `cudaMemPoolAttrUsedMemHigh`, reset at
   each step's start by examples/tf/common.py), with the default policy
   (`auto`, measured then guided) and with each policy asked for (`--policies`): the steady step
   and its ratio to (1), the device peak against the budget, whether the simulator trapped (a
   touch of evicted memory) or the run failed, and for a planner policy the last in-process plan
   (swaps, recomputations, predicted step) from its trace;
3. for ResNet-50, μ-cuDNN's WR under a per-convolution workspace limit (`--workspace-limit`)
   against TensorFlow's own choice under the same limit (TF_CUDNN_WORKSPACE_LIMIT_IN_MB, no
   Marmoset).

Prints a markdown table and, unless --no-docs, writes it into docs/tensorflow.md between its
markers with the commit and the date.

    python3 scripts/bench-tf.py [--fraction 0.5] [--policies lru,capuchin] [--steps 10]
        [--examples resnet50,transformer] [--budgets peak,steady] [--workspace-limit-mib 64] [--no-docs]
"""
import argparse
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
PYTHON = os.path.join(ROOT, ".venv-tf", "bin", "python")
DOC = os.path.join(ROOT, "docs", "tensorflow.md")
OUT = os.path.join(ROOT, "target", "bench-tf")
MIB = 1 << 20
# Each example with the arguments that make its tensors a policy's business (most above the
# 1 MiB below which Marmoset leaves tensors in its pool) while a step stays seconds of host time.
EXAMPLES = {
    "resnet50": ["examples/tf/resnet50.py", "--size", "64", "--batch", "8"],
    "transformer": ["examples/tf/transformer.py", "--seq", "256", "--dim", "256"],
}
STEP = re.compile(r"^step (\d+): loss \S+ \(\S+ s host time, ([0-9.]+) ms device time"
                  r"(?:, ([0-9.]+) MiB pool peak)?\)", re.M)


def say(what):
    sys.stderr.write(f"[{time.strftime('%H:%M:%S')}] {what}\n")
    sys.stderr.flush()


def run(name, args, steps, marmoset_args, env=None, trace=None):
    """One run: (exit status, steady step ms or None, report dict, output, the highest of the
    memory pool's per-step peaks after the first step in bytes or None)."""
    os.makedirs(OUT, exist_ok=True)
    report = os.path.join(OUT, f"{name}.report.json")
    if os.path.exists(report):
        os.remove(report)
    e = dict(os.environ, SIMGPU_MODE="shape", SIMGPU_REPORT=report)
    e.pop("MARMOSET_POLICY", None)
    e.update(env or {})
    cmd = [MARMOSET, "run", "--sim=h100", *marmoset_args]
    if trace:
        cmd += ["--trace", trace]
    cmd += ["--", PYTHON, *args, "--steps", str(steps)]
    p = subprocess.run(cmd, cwd=ROOT, env=e, capture_output=True, text=True)
    out = p.stdout + p.stderr
    found = list(STEP.finditer(p.stdout))
    times = [float(m.group(2)) for m in found]
    step = statistics.median(times[-3:]) if len(times) == steps else None
    pools = [float(m.group(3)) for m in found[1:] if m.group(3)]
    pool = int(max(pools) * MIB) if pools else None
    rep = json.load(open(report)) if os.path.exists(report) else {}
    with open(os.path.join(OUT, f"{name}.out"), "w") as f:
        f.write(out)
    return p.returncode, step, rep, out, pool


def failure(code, rep, out):
    """Why a run failed, or None."""
    if "simgpu: illegal address" in out or rep.get("sticky_error"):
        return "trapped: " + (rep.get("sticky_error") or "illegal address")
    if code != 0:
        lines = [l for l in out.splitlines() if re.search(r"Error|error|OOM|marmoset:", l)]
        return f"exit {code}: " + (lines[-1].strip() if lines else "no message")[:160]
    return None


def last_plan(trace):
    """The last plan record of a trace that guided (not reused, not declined), or None."""
    plan = None
    if not os.path.exists(trace):
        return None
    for line in open(trace):
        if '"kind":"plan"' in line:
            r = json.loads(line)
            if not r.get("declined"):
                plan = r
    return plan


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fraction", type=float, default=0.5)
    ap.add_argument("--policies", default="lru", help="policies besides the default (comma-separated)")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--examples", default=",".join(EXAMPLES))
    ap.add_argument("--workspace-limit-mib", type=int, default=64,
                    help="μ-cuDNN WR's limit on ResNet-50 (0: not measured)")
    ap.add_argument("--budgets", default="peak,steady",
                    help="which budgets: peak (FRACTION of the run's peak), steady (of the steady steps' peak)")
    ap.add_argument("--no-docs", action="store_true")
    a = ap.parse_args()
    if not (os.access(MARMOSET, os.X_OK) and os.access(PYTHON, os.X_OK)):
        sys.exit("bench-tf: build first (cargo build --release --workspace) and run scripts/setup-tf.sh")
    rows, notes = [], []
    base_env = {"TF_GPU_ALLOCATOR": "cuda_malloc_async"}
    for ex in a.examples.split(","):
        args = EXAMPLES[ex]
        say(f"{ex}: without Marmoset")
        code, base, rep, out, steady = run(f"{ex}-base", args, a.steps, ["--no-shim"], base_env)
        why = failure(code, rep, out)
        if why or base is None:
            rows.append(f"| {ex} | without Marmoset | | | | failed: {why or 'no step times'} |")
            continue
        peak = rep["peak_bytes"]
        steady_note = f"; steady steps' pool peak {steady / MIB:.1f} MiB" if steady else ""
        rows.append(f"| {ex} | without Marmoset | {base:.3f} | 1.00x | {peak / MIB:.1f} MiB{steady_note} | |")
        # The measure, half the run's device peak; and, where the first step's peak
        # (TensorFlow's autotuning workspaces) is far above the steady steps', half theirs.
        asked = a.budgets.split(",")
        budgets = [("peak", int(peak * a.fraction))] if "peak" in asked else []
        if "steady" in asked and steady and steady * 1.25 < peak:
            budgets.append(("steady peak", int(steady * a.fraction)))
        for (of, budget), policy in [(b, p) for b in budgets
                                     for p in ["auto"] + [p for p in a.policies.split(",") if p]]:
            say(f"{ex}: {policy} within {a.fraction} of the {of} ({budget} B)")
            tag = f"{ex}-{policy}-{of.replace(' ', '-')}"
            trace = os.path.join(OUT, f"{tag}.jsonl")
            margs = ["--memory-limit", str(budget)] + ([] if policy == "auto" else ["--policy", policy])
            code, step, rep, out, _ = run(tag, args, a.steps, margs, trace=trace)
            why = failure(code, rep, out)
            label = f"{policy} at {a.fraction} of the {of}" + (" (default)" if policy == "auto" else "")
            if why or step is None:
                rows.append(f"| {ex} | {label} | | | | failed: {why or 'no step times'} |")
                continue
            over = rep.get("peak_bytes", 0) > budget
            what = []
            plan = last_plan(trace) if policy not in ("lru", "none") else None
            if plan:
                what.append(f"plan: {plan.get('swaps')} swaps, {plan.get('recomputes')} recomputations, "
                            f"predicted {plan.get('predicted_ms', 0):.3f} ms"
                            + ("" if plan.get("feasible") else " (infeasible)"))
            elif policy not in ("lru", "none"):
                what.append("no plan guided")
            if over:
                what.append("**peak over the budget**")
            rows.append(f"| {ex} | {label} | {step:.3f} | {step / base:.2f}x | "
                        f"{rep.get('peak_bytes', 0) / MIB:.1f} MiB of {budget / MIB:.1f} | {'; '.join(what)} |")
        if ex == "resnet50" and a.workspace_limit_mib > 0:
            lim = a.workspace_limit_mib
            say(f"{ex}: TensorFlow's own choice under a {lim} MiB workspace limit")
            code, tf_step, rep, out, _ = run(f"{ex}-tfws", args, a.steps, ["--no-shim"],
                                          dict(base_env, TF_CUDNN_WORKSPACE_LIMIT_IN_MB=str(lim)))
            why = failure(code, rep, out)
            say(f"{ex}: μ-cuDNN WR under a {lim} MiB workspace limit")
            code2, wr_step, rep2, out2, _ = run(f"{ex}-wr", args, a.steps,
                                             ["--policy", "none", "--workspace-limit", f"{lim}MiB"],
                                             dict(base_env, TF_CUDNN_WORKSPACE_LIMIT_IN_MB=str(lim)))
            why2 = failure(code2, rep2, out2)
            if why or why2 or tf_step is None or wr_step is None:
                notes.append(f"- μ-cuDNN WR under {lim} MiB on {ex}: failed: {why or why2 or 'no step times'}")
            else:
                notes.append(f"- μ-cuDNN WR under a {lim} MiB workspace limit on {ex}: {wr_step:.3f} ms a step "
                             f"against TensorFlow's own choice under the same limit {tf_step:.3f} ms: "
                             f"speed-up {tf_step / wr_step:.2f}x")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    table = "\n".join([
        f"Measured {datetime.date.today()} at {commit} by `python3 scripts/bench-tf.py` "
        f"(simulated H100, shape mode; steady step: median of the last 3 of {a.steps}; "
        "all device times and peaks *simulated*).",
        "",
        "| example | run | step (ms) | ratio | device peak | the plan |",
        "|---|---|---|---|---|---|",
        *rows,
        "",
        *notes,
    ])
    print(table)
    if not a.no_docs:
        text = open(DOC).read()
        begin, end = "<!-- bench-tf:begin -->", "<!-- bench-tf:end -->"
        if begin in text and end in text:
            text = text[: text.index(begin) + len(begin)] + "\n" + table + "\n" + text[text.index(end):]
            open(DOC, "w").write(text)
        else:
            sys.stderr.write("bench-tf: docs/tensorflow.md has no bench-tf markers; not written\n")


if __name__ == "__main__":
    main()
