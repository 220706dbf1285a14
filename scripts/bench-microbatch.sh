#!/usr/bin/env bash
# Benchmark (simulated GPU, shape mode): AlexNet (N = 256) and ResNet-18 (N = 128) convolution
# layers through libmarmoset.so at 8, 64 and 512 MiB of workspace per kernel, on the p100 and
# h100 profiles. Per configuration: the convolution time (forward, backward-data and
# backward-filter of every layer, measured with events in virtual time) undivided (cuDNN's
# fastest algorithm that fits, as a framework picks it), with WR (pow2 and all) and with WD (the
# same total: the per-kernel limit times the number of kernels), and the host time Marmoset
# spent planning (benchmarks + dynamic program). All times are simulated except the planning.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --workspace --release -q
bin=$(scripts/build-workloads.sh)
m=target/release/marmoset
layers=data/conv-layers
cache=$(mktemp -d)
trap 'rm -rf "$cache"' EXIT

# Progress on a terminal only (stderr): "[k/n] what", rewritten in place, cleared at the end.
progress() { if [ -t 2 ]; then printf '\r\033[2K[%s] %s' "$1" "$2" >&2; fi; }
progress_done() { if [ -t 2 ]; then printf '\r\033[2K' >&2; fi; }
total_ms() { awk '/ layers: / { print $3 }'; }
plan_ms() { awk '/marmoset: planned/ { gsub(/[(),;]/, " "); for (i = 1; i <= NF; i++) { if ($i == "measured" || $i == "cache") b += $(i+1); if ($i == "program") d += $(i+1) } } END { printf "%.1f", b + d }'; }

printf '%-9s %-5s %7s | %12s | %19s | %19s | %19s | %s\n' model gpu "MiB" "undivided ms" "WR pow2 ms" "WR all ms" "WD ms" "planning (host ms: pow2/all/WD)"
k=0
for model in alexnet resnet18; do
  kernels=$(( ( $(grep -c . "$layers/$model.csv") - 1 ) * 3 ))
  for gpu in p100 h100; do
    for mib in 8 64 512; do
      k=$((k + 1)); progress "$k/12" "$model on $gpu, $mib MiB per kernel"
      run() { SIMGPU_MODE=shape MARMOSET_LOG=info "$m" run --sim=$gpu "$@" -- "$bin/conv_layers" "$layers/$model.csv" "$mib" 2>&1; }
      base=$(SIMGPU_MODE=shape "$m" run --sim=$gpu --no-shim -- "$bin/conv_layers" "$layers/$model.csv" "$mib" | total_ms)
      p=$(MARMOSET_CACHE_DIR=$cache/p MARMOSET_BATCH_SIZES=pow2 run --workspace-limit ${mib}MiB)
      a=$(MARMOSET_CACHE_DIR=$cache/a MARMOSET_BATCH_SIZES=all run --workspace-limit ${mib}MiB)
      w=$(MARMOSET_CACHE_DIR=$cache/w MARMOSET_BATCH_SIZES=pow2 MARMOSET_WORKSPACE_TOTAL=$(( mib * kernels ))MiB run)
      tp=$(total_ms <<< "$p"); ta=$(total_ms <<< "$a"); tw=$(total_ms <<< "$w")
      printf '%-9s %-5s %7s | %12.2f | %10.2f (%5.2fx) | %10.2f (%5.2fx) | %10.2f (%5.2fx) | %s / %s / %s\n' \
        "$model" "$gpu" "$mib" "$base" "$tp" "$(echo "$base / $tp" | bc -l)" "$ta" "$(echo "$base / $ta" | bc -l)" \
        "$tw" "$(echo "$base / $tw" | bc -l)" "$(plan_ms <<< "$p")" "$(plan_ms <<< "$a")" "$(plan_ms <<< "$w")" | { progress_done; cat; }
    done
  done
done
echo "The μ-cuDNN paper (real GPUs): AlexNet convolutions 1.63x faster on a P100 with 64 MiB per kernel; ResNet-18 1.21x."
echo "All convolution times above are simulated (virtual time of the simulated GPU); planning times are host time."
