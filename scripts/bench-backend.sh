#!/usr/bin/env bash
# Benchmark (simulated GPU, shape mode): μ-cuDNN on the cuDNN backend (graph) API against the
# legacy API, for AlexNet's and ResNet-18's convolution layers (data/conv-layers), forward and
# backward, on the p100 and h100 profiles, with the per-layer workspace capped at 8 and 64 MiB.
# Each layer runs without Marmoset and under WR at the same limit, in the same invocation:
# backend_layers (graphs as PyTorch's default path builds them, the first heuristic plan within
# the cap, PyTorch's CUDNN_CONV_WSCAP_DBG) and conv_layers (the legacy calls, the fastest Find
# result within the limit). Prints per-layer and total speedups side by side with the paper's
# (μ-cuDNN on a real P100 at 64 MiB: AlexNet 1.63x, ResNet-18 1.21x). Every time is simulated.
#
# This is the C-workload version of the benchmark: PyTorch itself (examples/ on the default path)
# is not run here.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --workspace --release -q
bin=$(scripts/build-workloads.sh)
m=target/release/marmoset
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
paper() { case "$1" in alexnet) echo 1.63 ;; resnet18) echo 1.21 ;; esac; }

run() { # run PROFILE PROG CSV MIB [wr] -> "layer dir ms" lines and a "total ms" line
  local env=(SIMGPU_MODE=shape)
  local shim=(--no-shim)
  if [ "${5:-}" = wr ]; then
    shim=()
    env+=(MARMOSET_WORKSPACE_LIMIT="$4MiB" MARMOSET_CACHE_DIR="$tmp/cache-$1-$2-$4")
  fi
  env "${env[@]}" "$m" run --sim="$1" "${shim[@]}" -- "$bin/$2" "$3" "$4" 2> /dev/null | awk -v prog="$2" '
    prog == "backend_layers" && / ms=/ { sub("ms=", "", $3); print $1, $2, $3 }
    prog == "backend_layers" && /^total_ms=/ { sub("total_ms=", ""); print "total -", $0 }
    prog == "conv_layers" && ($2 == "fwd" || $2 == "bwd-data" || $2 == "bwd-filt") && NF > 4 {
      d = $2 == "fwd" ? "fwd" : $2 == "bwd-data" ? "bwd_data" : "bwd_filter"; print $1, d, $4 }
    prog == "conv_layers" && / layers: / { print "total -", $3 }'
}

for net in alexnet resnet18; do
  csv=data/conv-layers/$net.csv
  for prof in p100 h100; do
    for mib in 8 64; do
      run "$prof" backend_layers "$csv" "$mib" > "$tmp/b0"
      run "$prof" backend_layers "$csv" "$mib" wr > "$tmp/b1"
      run "$prof" conv_layers "$csv" "$mib" > "$tmp/l0"
      run "$prof" conv_layers "$csv" "$mib" wr > "$tmp/l1"
      echo "== $net, $prof profile, workspace limit $mib MiB (simulated)"
      printf '%-20s %-11s %10s %10s %8s | %10s %10s %8s\n' layer direction "backend ms" "WR ms" speedup \
        "legacy ms" "WR ms" speedup
      paste -d' ' "$tmp/b0" "$tmp/b1" "$tmp/l0" "$tmp/l1" | awk -v paper="$(paper "$net")" -v mib="$mib" -v prof="$prof" '
        { printf "%-20s %-11s %10.3f %10.3f %7.3fx | %10.3f %10.3f %7.3fx\n", $1, $2, $3, $6, $3 / $6, $9, $12, $9 / $12 }
        $1 == "total" { b = $3 / $6; l = $9 / $12 }
        END {
          printf "total: backend %.3fx, legacy %.3fx (backend/legacy %.3f)", b, l, b / l
          if (mib == 64 && prof == "p100") printf "; the paper (real P100) %.2fx", paper
          printf "\n\n"
        }'
    done
  done
done

# PyTorch itself on its default path (the backend API), when .venv exists: examples/conv_layers.py
# without Marmoset and under WR. The installed PyTorch has no per-convolution workspace cap to set
# (its libraries do not contain CUDNN_CONV_WSCAP_DBG), so its baseline is uncapped: it may choose
# engines whose workspace is above the limit Marmoset enforces.
if [ -x .venv/bin/python ]; then
  for net in alexnet resnet18; do
    for prof in p100 h100; do
      for mib in 8 64; do
        args=(-- .venv/bin/python examples/conv_layers.py "data/conv-layers/$net.csv")
        t0=$(SIMGPU_MODE=shape "$m" run --sim="$prof" --no-shim "${args[@]}" 2> /dev/null | sed -n 's/^total_ms=//p')
        t1=$(SIMGPU_MODE=shape MARMOSET_CACHE_DIR="$tmp/torch-$prof-$mib" "$m" run --sim="$prof" \
          --workspace-limit "${mib}MiB" "${args[@]}" 2> /dev/null | sed -n 's/^total_ms=//p')
        printf 'PyTorch default path, %s, %s, %s MiB: %s ms uncapped, %s ms under WR: %.3fx (simulated)\n' \
          "$net" "$prof" "$mib" "$t0" "$t1" "$(echo "$t0 / $t1" | bc -l)"
      done
    done
  done
fi
