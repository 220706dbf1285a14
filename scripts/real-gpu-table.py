"""The table of scripts/real-gpu.sh: reads the outputs it left in a folder and writes, to standard
output, a Markdown table of the PyTorch runs and one of the other checks, and results.json beside
the outputs.

Per PyTorch run: its exit status, the steps it finished, its step (the median device time of the
last three steps, by CUDA events: real on the real GPU, simulated otherwise) and the ratio to the
run without Marmoset, its losses against that run's (the same seed: `equal` when every printed
loss is the same, else the largest relative difference), the most torch reserved, and on the real
GPU the most device memory the process held (nvidia-smi sampled every 100 ms, less the samples'
least, which is taken before the program starts) against the budget.

    python3 scripts/real-gpu-table.py FOLDER [--mode real|sim|dry]
"""
import argparse
import json
import os
import re
import statistics
import sys

STEP = re.compile(r"^step (\d+): loss (\S+) \(.*?(?:, ([0-9.]+) ms device time)?\)$")
RESERVED = re.compile(r"^peak memory reserved by torch: (\d+) bytes$")
MiB = 2**20


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return None


def status(text):
    """'skipped', or the exit status written last, or None when there is none."""
    if text is None:
        return None
    if text.strip() == "skipped":
        return "skipped"
    last = [line for line in text.splitlines() if line.startswith("exit ")]
    return int(last[-1].split()[1]) if last else None


def torch_run(folder, name):
    text = read(os.path.join(folder, name + ".txt"))
    run = {"name": name, "status": status(text), "losses": [], "step_ms": [], "reserved": None}
    for line in (text or "").splitlines():
        m = STEP.match(line.strip())
        if m:
            run["losses"].append(m.group(2))
            if m.group(3):
                run["step_ms"].append(float(m.group(3)))
        m = RESERVED.match(line.strip())
        if m:
            run["reserved"] = int(m.group(1))
    samples = read(os.path.join(folder, name + ".smi"))
    if samples:
        used = [int(v) for v in samples.split() if v.isdigit()]
        if used:
            run["held_mib"] = max(used) - min(used)
    return run


def step(run):
    last = run["step_ms"][-3:]
    return statistics.median(last) if last else None


def compare(losses, base):
    """'equal', the largest relative difference, or None when nothing can be compared."""
    n = min(len(losses), len(base))
    if n == 0:
        return None
    if losses[:n] == base[:n]:
        return "equal" if len(losses) == len(base) else f"equal ({n} of {len(base)})"
    worst = 0.0
    for a, b in zip(losses[:n], base[:n]):
        try:
            a, b = float(a), float(b)
        except ValueError:
            return "unreadable"
        if a != a or b != b:
            return "nan"
        worst = max(worst, abs(a - b) / max(abs(b), 1e-12))
    return f"{worst:.2e}"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folder")
    p.add_argument("--mode", default="real", choices=["real", "sim", "dry"])
    a = p.parse_args()
    names = sorted(f[:-4] for f in os.listdir(a.folder) if f.endswith(".txt"))
    runs = {}
    for name in names:
        if name.startswith("torch-"):
            runs[name] = torch_run(a.folder, name)
    models = []
    for name in runs:
        model = name[len("torch-"):].rsplit("-", 1)[0] if name.endswith("-plain") else None
        if model:
            models.append(model)
    rows = []
    for model in models:
        base = runs[f"torch-{model}-plain"]
        base_step = step(base)
        prefix = f"torch-{model}-"
        for name in [f"torch-{model}-plain"] + sorted(n for n in runs if n.startswith(prefix) and not n.endswith("-plain")):
            r = runs[name]
            config = name[len(prefix):]
            s = step(r)
            row = {
                "model": model,
                "config": config,
                "status": r["status"],
                "steps": len(r["losses"]),
                "step_ms": s,
                "ratio": (s / base_step) if s and base_step else None,
                "losses": r["losses"],
                "losses_vs_plain": None if config == "plain" else compare(r["losses"], base["losses"]),
                "reserved": r["reserved"],
                "held_mib": r.get("held_mib"),
            }
            pct = re.search(r"-0\.(\d+)$", config)
            if pct and base["reserved"]:
                row["budget"] = base["reserved"] * int(pct.group(1)) // 10 ** len(pct.group(1))
            rows.append(row)
    # The device memory a process holds beyond what torch reserves (its CUDA context, cuBLAS's
    # and cuDNN's handles), from the run without Marmoset.
    context = {}
    for row in rows:
        if row["config"] == "plain" and row["held_mib"] is not None and row["reserved"]:
            context[row["model"]] = row["held_mib"] - row["reserved"] / MiB
    for row in rows:
        c = context.get(row["model"])
        if "budget" in row and row["held_mib"] is not None and c is not None:
            row["held_beyond_context_mib"] = row["held_mib"] - c
            row["within_budget"] = row["held_mib"] - c <= row["budget"] / MiB * 1.02
    checks = []
    for name in names:
        if name.startswith("torch-") or name in ("device", "summary", "table"):
            continue
        text = read(os.path.join(a.folder, name + ".txt")) or ""
        lines = [line for line in text.splitlines() if line.strip() and not line.startswith("exit ")]
        checks.append({"name": name, "status": status(text), "last": lines[-1] if lines else ""})
    with open(os.path.join(a.folder, "results.json"), "w") as f:
        json.dump({"mode": a.mode, "torch": rows, "checks": checks}, f, indent=1)

    if a.mode == "real":
        print("## PyTorch (real GPU: device times real)\n")
    else:
        print(f"## PyTorch ({a.mode}: device times simulated; torch's kernels compute nothing on the "
              "simulated GPU, so its losses say nothing there)\n")
    print("| model | run | exit | steps | step ms | x plain | losses vs plain | torch reserved MiB | held MiB | budget MiB |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    fmt = lambda v, f: "" if v is None else f.format(v)
    for row in rows:
        within = row.get("within_budget")
        held = fmt(row["held_mib"], "{:.0f}")
        if "held_beyond_context_mib" in row:
            held += f" ({row['held_beyond_context_mib']:.0f} past the context{'' if within else ', OVER'})"
        print(
            f"| {row['model']} | {row['config']} | {row['status']} | {row['steps']} | {fmt(row['step_ms'], '{:.2f}')} "
            f"| {fmt(row['ratio'], '{:.2f}')} | {row['losses_vs_plain'] or ''} | {fmt(row['reserved'] and row['reserved'] / MiB, '{:.0f}')} "
            f"| {held} | {fmt(row.get('budget') and row['budget'] / MiB, '{:.0f}')} |"
        )
    print("\n## Other checks\n")
    print("| check | exit | last line |")
    print("|---|---|---|")
    for c in checks:
        print(f"| {c['name']} | {c['status']} | {c['last'][:160].replace('|', '/')} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
