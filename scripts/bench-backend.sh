#!/usr/bin/env bash
# Benchmark (simulated GPU, shape mode): μ-cuDNN on the cuDNN backend (graph) API against the
# legacy API, for AlexNet's and ResNet-18's convolution layers (data/conv-layers), forward and
# backward, on the p100 and h100 profiles, with the per-layer workspace capped at 8 and 64 MiB.
# Each layer runs without Marmoset and under WR at the same limit, in the same invocation:
# backend_layers (graphs as PyTorch's default path builds them, the first heuristic plan within
# the cap, as a framework cap such as TF_CUDNN_WORKSPACE_LIMIT_IN_MB does) and conv_layers (the legacy calls, the fastest Find
# result within the limit). Prints per-layer and total speedups side by side with the paper's
# (μ-cuDNN on a real P100 at 64 MiB: AlexNet 1.63x, ResNet-18 1.21x). Every time is simulated.
#
# Then PyTorch itself on its default path (examples/conv_layers.py), when .venv exists: below.
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
          printf "\n"
        }'
      # WD, the per-kernel limit times the number of kernels in total: in the first pass each
      # kernel runs under the knapsack of the kernels seen so far (the early ones get more of
      # the workspace); from the second pass on, under the one of the whole network.
      kernels=$(( ($(grep -c . "$csv") - 1) * 3 ))
      for passes in 1 2; do
        SIMGPU_MODE=shape MARMOSET_WORKSPACE_TOTAL="$(( mib * kernels ))MiB" MARMOSET_CACHE_DIR="$tmp/wd-$prof-$net-$mib" \
          "$m" run --sim="$prof" -- "$bin/backend_layers" "$csv" "$mib" 0 "$passes" 2> /dev/null |
          sed -n 's/^total_ms=//p' > "$tmp/wd$passes"
      done
      awk -v t0="$(awk '$1 == "total" { print $3 }' "$tmp/b0")" -v w1="$(cat "$tmp/wd1")" -v w2="$(cat "$tmp/wd2")" \
        -v total="$(( mib * kernels ))" 'BEGIN {
          printf "backend WD (%d MiB in total): first pass %.3f ms (%.3fx), every graph seen %.3f ms (%.3fx)\n\n",
            total, w1, t0 / w1, w2, t0 / w2 }'
    done
  done
done

# PyTorch itself on its default path (the cuDNN backend API), when .venv exists:
# examples/conv_layers.py (each layer's Conv2d forward, and backward: data + filter gradients,
# timed with events). PyTorch 2.15 has no per-convolution workspace cap (its libraries do not
# contain CUDNN_CONV_WSCAP_DBG; its heuristics take any workspace the caching allocator gives),
# so the capped baseline is Marmoset with micro-batching off (--batch-sizes undivided: the
# fastest engine within the cap, undivided, which is the paper's baseline); PyTorch uncapped is
# printed beside it. WR at the cap; WD with the cap times the number of kernels in total, in the
# first pass (each layer timed under the knapsack of the layers seen so far) and in a second
# (examples/conv_layers_again.py: every convolution seen). The
# legacy columns are conv_layers' speedups (the legacy calls, fastest Find result within the cap)
# under WR and WD in this same run, backward = backward-data + backward-filter.
# torch_run PROFILE CSV [MARMOSET ARGS] -> "layer dir ms" lines and "total - ms". A run that
# printed its total counts even if the process then aborted at exit (the README's known abort
# after a complete run); one without a total is run once more, then the benchmark stops.
torch_run() {
  local prof=$1 csv=$2
  shift 2
  local args=(--no-shim)
  if [ $# -gt 0 ]; then args=("$@"); fi
  local out
  for _ in 1 2; do
    out=$( (SIMGPU_MODE=shape MARMOSET_CACHE_DIR="$(mktemp -d -p "$tmp")" "$m" run --sim="$prof" "${args[@]}" \
      -- .venv/bin/python "examples/${script:-conv_layers.py}" "$csv" 2> /dev/null || true) | awk '
      / ms=/ { sub("ms=", "", $3); print $1, $2, $3 }
      /^total_ms=/ { sub("total_ms=", ""); print "total -", $0 }')
    if grep -q '^total ' <<< "$out"; then
      echo "$out"
      return
    fi
    echo "PyTorch printed no total ($prof ${args[*]} $csv); running it once more" >&2
  done
  echo "PyTorch failed twice ($prof ${args[*]} $csv)" >&2
  exit 1
}
legacy_run() { # legacy_run PROFILE CSV MIB [ENV...] -> as torch_run, backward summed
  local prof=$1 csv=$2 mib=$3
  shift 3
  env SIMGPU_MODE=shape MARMOSET_CACHE_DIR="$(mktemp -d -p "$tmp")" "$@" "$m" run --sim="$prof" \
    -- "$bin/conv_layers" "$csv" "$mib" 2> /dev/null | awk '
    ($2 == "fwd" || $2 == "bwd-data" || $2 == "bwd-filt") && NF > 4 {
      d = $2 == "fwd" ? "fwd" : "bwd"; k = $1 " " d
      if (!(k in ms)) order[n++] = k
      ms[k] += $4 }
    / layers: / { t = $3 }
    END { for (i = 0; i < n; i++) print order[i], ms[order[i]]; print "total -", t }'
}
if [ -x .venv/bin/python ]; then
  for net in alexnet resnet18; do
    csv=data/conv-layers/$net.csv
    kernels=$(( ($(grep -c . "$csv") - 1) * 3 ))
    for prof in p100 h100; do
      torch_run "$prof" "$csv" > "$tmp/t-uncapped"
      for mib in 8 64; do
        total=$(( mib * kernels ))
        torch_run "$prof" "$csv" --workspace-limit "${mib}MiB" --batch-sizes undivided > "$tmp/t0"
        torch_run "$prof" "$csv" --workspace-limit "${mib}MiB" > "$tmp/t1"
        torch_run "$prof" "$csv" --workspace-total "${total}MiB" > "$tmp/t2"
        script=conv_layers_again.py torch_run "$prof" "$csv" --workspace-total "${total}MiB" > "$tmp/t3"
        legacy_run "$prof" "$csv" "$mib" > "$tmp/g0"
        legacy_run "$prof" "$csv" "$mib" MARMOSET_WORKSPACE_LIMIT="${mib}MiB" > "$tmp/g1"
        legacy_run "$prof" "$csv" "$mib" MARMOSET_WORKSPACE_TOTAL="${total}MiB" > "$tmp/g2"
        echo "== PyTorch default path, $net, $prof profile, $mib MiB per kernel, WD $total MiB in total (simulated)"
        printf '%-20s %-4s %9s %9s %9s %8s %9s %8s | %9s %9s\n' layer dir "uncapped" "capped" "WR" "WR x" \
          "WD" "WD x" "legacy WR" "legacy WD"
        paste -d' ' "$tmp/t-uncapped" "$tmp/t0" "$tmp/t1" "$tmp/t2" "$tmp/g0" "$tmp/g1" "$tmp/g2" |
          awk -v paper="$(paper "$net")" -v mib="$mib" -v prof="$prof" '
          { printf "%-20s %-4s %9.3f %9.3f %9.3f %7.3fx %9.3f %7.3fx | %8.3fx %8.3fx\n", $1, $2, $3, $6, $9,
              $6 / $9, $12, $6 / $12, $15 / $18, $15 / $21 }
          $1 == "total" { wr = $6 / $9; wd = $6 / $12; lwr = $15 / $18; lwd = $15 / $21 }
          END {
            printf "total: WR %.3fx (legacy %.3fx, backend/legacy %.3f), WD %.3fx (legacy %.3fx, %.3f)", wr, lwr, wr / lwr, wd, lwd, wd / lwd
            if (mib == 64 && prof == "p100") printf "; the paper (WR, real P100) %.2fx", paper
            printf "\n"
          }'
        awk -v c="$(awk '$1 == "total" { print $3 }' "$tmp/t0")" -v w="$(awk '$1 == "total" { print $3 }' "$tmp/t3")" \
          'BEGIN { printf "PyTorch WD with every convolution seen (a second pass): %.3f ms, %.3fx\n\n", w, c / w }'
      done
    done
  done
fi
