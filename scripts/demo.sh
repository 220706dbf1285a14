#!/usr/bin/env bash
# The main job, from a fresh clone: build everything, then run convolution workloads on the
# simulated GPU. Every time and size printed here is simulated (no GPU is involved).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --workspace --release
bin=$(scripts/build-workloads.sh)
m=target/release/marmoset
layers=../shared/data/conv-layers
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
