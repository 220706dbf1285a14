#!/usr/bin/env bash
# Runs the project's checks against a real GPU's CUDA and cuDNN (for a machine lent with one):
#  1. conv_check on the real cuDNN: every algorithm against our double-precision reference (this
#     validates the reference, our hand-written ABI and the simulator's support rules at once);
#  2. the same under libmarmoset.so with forced micro-batches (the shim on real cuDNN);
#  3. real convolution times and workspaces of data/conv-layers next to the simulated
#     h100 profile's (conv_layers, 64 MiB per layer);
#  4. the hook overhead benchmark against the real driver;
#  5. where the machine's python has torch with CUDA and transformers: the zoo's LLaMA-style
#     decoder on the real torch, without Marmoset, traced (what `marmoset plan --explain` finds
#     replayable among that torch's kernels: the shim's parameter readers on real cubins), and
#     within 0.55 of its peak under the default policy.
# Build on the x86-64 dev machine first (cargo build --release --workspace; scripts/build-workloads.sh)
# and carry target/release. Results go to $OUT (or ./real-gpu-out): summary.txt, device.txt and
# every output packed in real-gpu.tar.gz (the device tool brings back at most 8 files).
set -uo pipefail
cd "$(dirname "$0")/.."
dest=${OUT:-real-gpu-out}
mkdir -p "$dest"
out=$(mktemp -d)
bin=target/release/workloads
m=target/release/marmoset
# The real libraries: a CUDA toolkit, or the NVIDIA wheels PyTorch installs.
libs=()
for d in /usr/local/cuda/lib64 /usr/lib/x86_64-linux-gnu; do [ -e "$d/libcudart.so.13" ] || [ -e "$d/libcudart.so.12" ] && libs+=("$d"); done
py=$(command -v python3 || true)
if [ -n "$py" ]; then
  while read -r d; do [ -n "$d" ] && libs+=("$d"); done < <("$py" - <<'PY' 2>/dev/null
import glob, os, site
for sp in site.getsitepackages():
    for d in glob.glob(os.path.join(sp, "nvidia", "*", "lib")):
        print(d)
PY
)
fi
export LD_LIBRARY_PATH=$(IFS=:; echo "${libs[*]}")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
{
  echo "date: $(date -u)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
} | tee "$out/device.txt"
run() {
  local name=$1; shift
  { echo "== $name"; timeout 300 "$@" > "$out/$name.txt" 2>&1; echo "exit $?" | tee -a "$out/$name.txt"; tail -3 "$out/$name.txt"; } | tee -a "$out/summary.txt"
}
run conv_check-real "$bin/conv_check" 1 20
run conv_check-real-cu12 "$bin/conv_check-cu12" 2 10
cache=$(mktemp -d)
run conv_check-real-microbatched env LD_PRELOAD="$PWD/target/release/libmarmoset.so" MARMOSET_WORKSPACE_LIMIT=64MiB \
  MARMOSET_TEST_MICROBATCH=2 MARMOSET_CACHE_DIR="$cache" MARMOSET_LOG=info "$bin/conv_check" 3 12
for model in alexnet resnet18; do
  run "conv_layers-$model-real" "$bin/conv_layers" "data/conv-layers/$model.csv" 64
  run "conv_layers-$model-sim-h100" env SIMGPU_MODE=shape "$m" run --sim=h100 --no-shim -- "$bin/conv_layers" "data/conv-layers/$model.csv" 64
  run "conv_layers-$model-real-wr" env LD_PRELOAD="$PWD/target/release/libmarmoset.so" MARMOSET_WORKSPACE_LIMIT=64MiB \
    MARMOSET_CACHE_DIR="$cache" MARMOSET_LOG=info "$bin/conv_layers" "data/conv-layers/$model.csv" 64
done
run hook_bench-real env LD_PRELOAD="$PWD/target/release/libmarmoset.so" "$bin/hook_bench" 1000000
if [ -n "$py" ] && "$py" -c "import torch, transformers; assert torch.cuda.is_available()" 2>/dev/null; then
  export HF_HUB_OFFLINE=1
  zoo=(examples/zoo.py --model llama --steps 8)
  run zoo-llama-real "$py" "${zoo[@]}"
  peak=$(sed -n 's/^peak memory allocated by torch: \([0-9.]*\) GiB$/\1/p' "$out/zoo-llama-real.txt")
  trace=$(mktemp -d)/llama.jsonl
  run zoo-llama-traced "$m" run --policy none --trace "$trace" -- "$py" "${zoo[@]}"
  run zoo-llama-explain "$m" plan "$trace" --budget 0.55 --explain
  if [ -n "$peak" ]; then
    budget=$("$py" -c "print(int($peak * 0.55 * 2**30))")
    run zoo-llama-budget "$m" run --memory-limit "$budget" -- "$py" "${zoo[@]}"
  fi
  rm -rf "$(dirname "$trace")"
fi
rm -rf "$cache"
cp "$out/device.txt" "$out/summary.txt" "$dest/" 2>/dev/null
tar czf "$dest/real-gpu.tar.gz" -C "$out" . && echo "results in $dest/ (real-gpu.tar.gz)"
rm -rf "$out"
