#!/usr/bin/env bash
# The main job, from a fresh clone: build everything, then show Marmoset on the simulated GPU.
# Every time and size printed here is simulated (no GPU is involved).
#  1. A training program within half and 0.3 of its peak memory: without Marmoset, under the
#     passive lru policy and under the default policy (the planner in the library), one table
#     (scripts/demo-memory.py); the same program's losses, bit for bit, in data mode.
#  2. The report of the guided run, written to target/demo/report.html (MARMOSET_DEMO_OUT).
#  3. μ-cuDNN: convolutions micro-batched so faster algorithms fit their workspace.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --workspace --release
bin=$(scripts/build-workloads.sh)
m=target/release/marmoset
layers=data/conv-layers

echo
echo "== 1 and 2. Training within a memory budget: Marmoset's planner at work (simulated H100)"
MARMOSET_DEMO_BIN=$bin python3 scripts/demo-memory.py

echo
echo "== 3. μ-cuDNN: AlexNet's convolutions on a simulated P100 with 64 MiB of workspace per layer"
cache=$(mktemp -d)
trap 'rm -rf "$cache"' EXIT
SIMGPU_MODE=shape "$m" run --sim=p100 --no-shim -- "$bin/conv_layers" "$layers/alexnet.csv" 64 > "$cache/plain.txt"
SIMGPU_MODE=shape MARMOSET_CACHE_DIR="$cache" "$m" run --sim=p100 --workspace-limit 64MiB -- \
  "$bin/conv_layers" "$layers/alexnet.csv" 64 > "$cache/mu.txt"
echo "conv2 at the whole batch, without Marmoset (only algorithms whose workspace fits 64 MiB):"
grep -E "^(layer|conv2) " "$cache/plain.txt" | sed 's/ |.*//'
echo "conv2 through libmarmoset.so with --workspace-limit 64MiB (each convolution split into micro-batches):"
grep -E "^conv2 " "$cache/mu.txt" | sed 's/ |.*//'
first() { grep -E '^5 layers' "$1" | sed -E 's/^5 layers: ([0-9.]+ ms).*/\1/'; }
unlimited=$(grep -E '^5 layers' "$cache/plain.txt" | sed -E 's/.*, ([0-9.]+ ms) if workspace were unlimited.*/\1/')
echo "AlexNet's 5 layers, forward and backward: $(first "$cache/plain.txt") without Marmoset, $(first "$cache/mu.txt") with μ-cuDNN ($unlimited with unlimited workspace; simulated)"
