#!/usr/bin/env bash
# Benchmark of training loops that change from step to step (examples/loops.py: a GPT-style
# decoder with random sequence lengths, ResNet-50 on images of three sizes, with an evaluation
# pass every 5 steps, 4-step gradient accumulation, a smaller last batch, checkpoints, a backbone
# unfrozen part-way, each against the same model's fixed loop) on the simulated H100 in shape
# mode (every time it prints is simulated): whole runs without Marmoset, under the default policy
# and under lru at half the peak, in the same invocation. What it prints and the environment
# variables that choose: scripts/bench-loops.py. docs/loops.md has its last output.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --workspace --release -q
scripts/setup-torch.sh >&2
exec python3 scripts/bench-loops.py
