#!/usr/bin/env bash
# Simulated training throughput of unmodified PyTorch (examples/resnet50.py, examples/bert.py, FP32
# with PyTorch's defaults: cuDNN convolutions may use TF32, matmuls do not) on the h100 and p100
# profiles, beside published figures, each cited. Shape mode, without Marmoset (--no-shim).
#
# A step's simulated time is the difference of the simulator's makespan (SIMGPU_REPORT
# virtual_time_s) between a 4-step and a 2-step run, halved: first-step costs (cuDNN plans,
# allocator warm-up) cancel out.
#
# Usage: scripts/bench-torch.sh   (after cargo build --release --workspace and scripts/setup-torch.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
M=target/release/marmoset
PY=.venv/bin/python
[ -x "$M" ] || { echo "build first: cargo build --release --workspace" >&2; exit 1; }
[ -x "$PY" ] || { echo "missing .venv: run scripts/setup-torch.sh" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# makespan PROFILE SCRIPT BATCH STEPS -> seconds (simulated), or "" when the run failed twice
# (a run once died at exit with "terminate called without an active exception"; the retry says so)
makespan() {
    local rep="$tmp/r.json"
    try "$@" || { echo "retrying $2 on $1 after: $(tail -1 "$tmp/out")" >&2; try "$@"; } || true
}

try() {
    local rep="$tmp/r.json"
    rm -f "$rep"
    if SIMGPU_MODE=shape SIMGPU_REPORT="$rep" "$M" run --sim="$1" --no-shim -- \
        "$PY" "examples/$2" --steps "$4" --batch "$3" >"$tmp/out" 2>&1 && [ -f "$rep" ]; then
        python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["virtual_time_s"])' "$rep"
    else
        return 1
    fi
}

# row PROFILE MODEL SCRIPT BATCH PUBLISHED(samples/s or -) CITATION
row() {
    local a b
    a=$(makespan "$1" "$3" "$4" 2)
    b=$(makespan "$1" "$3" "$4" 4)
    if [ -z "$a" ] || [ -z "$b" ]; then
        printf '%-5s %-9s batch %-4s cannot run: %s\n' "$1" "$2" "$4" \
            "$(grep -m1 -iE 'error|no kernel image|not compatible' "$tmp/out" || tail -1 "$tmp/out")"
        return
    fi
    python3 - "$1" "$2" "$4" "$a" "$b" "$5" "$6" <<'EOF'
import sys
prof, model, batch, a, b, pub, cite = sys.argv[1:]
step = (float(b) - float(a)) / 2
sps = int(batch) / step
line = f"{prof:<5} {model:<9} batch {batch:<4} simulated step {step*1e3:8.1f} ms = {sps:7.0f} samples/s"
if pub != "-":
    line += f"   published {float(pub):6.0f}   simulated/published {sps/float(pub):5.2f}x"
print(line)
if cite:
    print(f"      published: {cite}")
EOF
}

echo "Simulated training throughput (simulated GPU, shape mode; FP32 with PyTorch's defaults)"
row h100 resnet50 resnet50.py 256 938 \
    "NVIDIA DeepLearningExamples, PyTorch/Classification/ConvNets/resnet50v1.5/README.md, Training performance: NVIDIA DGX A100 (8x A100 80GB), 1 GPU, TF32, 938 img/s (batch 256, pytorch-21.03). An A100, not an H100: no published single-GPU FP32/TF32 PyTorch ResNet-50 figure for the H100 was found; an H100 should be faster, so this ratio is an upper bound."
row p100 resnet50 resnet50.py 64 219 \
    "TensorFlow benchmarks, https://www.tensorflow.org/performance/benchmarks, Details for NVIDIA DGX-1 (NVIDIA Tesla P100): ResNet-50, 1 GPU, batch 64, synthetic data, FP32: 219 images/s (TensorFlow, not PyTorch)."
row h100 bert bert.py 8 - \
    "none comparable: examples/bert.py is a BERT-like encoder (sequence 512), not BERT-base/large as NVIDIA publishes it (AMP/TF32 pretraining)."
row p100 bert bert.py 8 - ""
echo "(BERT on p100: torch 2.15 for CUDA 13 ships no sm_60 kernels, so a real P100 refuses it too.)"
