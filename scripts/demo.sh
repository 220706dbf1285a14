#!/usr/bin/env bash
# The main job, from a fresh clone: build everything, then run convolution workloads on the
# simulated GPU. Every time and size printed here is simulated (no GPU is involved).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --workspace --release
bin=$(scripts/build-workloads.sh)
m=target/release/marmoset
layers=data/conv-layers
report=$(mktemp)
trap 'rm -f "$report"' EXIT

echo "== 1. Every cuDNN convolution algorithm against a double-precision reference (simulated H100, real float32 arithmetic)"
"$m" run --sim=h100 --no-shim -- "$bin/conv_check" 1 12

echo
echo "== 2. AlexNet's convolutions on a simulated P100 with Caffe2's 64 MiB per-layer workspace (shape mode: no bytes, same timing)"
SIMGPU_MODE=shape SIMGPU_REPORT="$report" "$m" run --sim=p100 --no-shim -- "$bin/conv_layers" "$layers/alexnet.csv" 64
echo "simulated device report: $(tr -d '\n ' < "$report")"

echo
echo "== 3. The same layers at a micro-batch of 32 images: FFT now fits the 64 MiB (what μ-cuDNN exploits; simulated)"
SIMGPU_MODE=shape "$m" run --sim=p100 --no-shim -- "$bin/conv_layers" "$layers/alexnet.csv" 64 32

echo
echo "== 4. ResNet-18's convolutions (N = 128) on a simulated H100, 64 MiB per layer"
SIMGPU_MODE=shape "$m" run --sim=h100 --no-shim -- "$bin/conv_layers" "$layers/resnet18.csv" 64

echo
echo "== 5. A small CNN trainer without and with libmarmoset.so (simulated H100): identical losses, and what the trace saw"
trace=$(mktemp)
trap 'rm -f "$report" "$trace"' EXIT
"$m" run --sim=h100 --no-shim -- "$bin/trainer" 5 > "$trace.plain"
MARMOSET_TRACE_TIMING=1 "$m" run --sim=h100 --trace "$trace" -- "$bin/trainer" 5 | tee "$trace.shim"
if cmp -s "$trace.plain" "$trace.shim"; then echo "same output with and without Marmoset"; else echo "OUTPUT DIFFERS"; exit 1; fi
rm -f "$trace.plain" "$trace.shim"
"$m" inspect "$trace" | sed 's/ ms$/ ms (simulated)/'

echo
echo "== 6. μ-cuDNN through libmarmoset.so: AlexNet on a simulated P100, 64 MiB per kernel, micro-batched (compare with step 2)"
cache=$(mktemp -d)
SIMGPU_MODE=shape MARMOSET_CACHE_DIR="$cache" "$m" run --sim=p100 --workspace-limit 64MiB -- "$bin/conv_layers" "$layers/alexnet.csv" 64
rm -rf "$cache"

echo
echo "== 7. The deeper trainer within a third of its peak memory under MARMOSET_POLICY=lru (simulated H100): same losses, bit for bit"
rep0=$(mktemp); rep1=$(mktemp)
SIMGPU_REPORT=$rep0 "$m" run --sim=h100 --no-shim -- "$bin/trainer" 2 16 64 8 > "$rep0.out"
peak=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['peak_bytes'])" "$rep0")
budget=$((peak * 3 / 10))
SIMGPU_REPORT=$rep1 "$m" run --sim=h100 --policy lru --memory-limit "$budget" --trace "$trace" -- "$bin/trainer" 2 16 64 8 | tee "$rep1.out"
if cmp -s "$rep0.out" "$rep1.out"; then echo "same output as without Marmoset, at $budget of $peak bytes"; else echo "OUTPUT DIFFERS"; exit 1; fi
python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(f\"simulated device peak {r['peak_bytes']} B (budget $budget B), {r['d2h_bytes']} B to host, {r['h2d_bytes']} B back\")" "$rep1"
"$m" inspect "$trace" | grep -E "memory moved|peak memory"
rm -f "$rep0" "$rep1" "$rep0.out" "$rep1.out"
