#!/usr/bin/env bash
# Benchmark (simulated GPU, shape mode): the trainer at a size whose peak is above 8 GiB, run
# without Marmoset (unlimited) and under the passive policy (MARMOSET_POLICY=lru) at 0.9, 0.7,
# 0.5 and 0.3 of that peak, in the same invocation. Prints the virtual time (simulated) against
# the unlimited run, and the bytes moved each way. This is the baseline later policies must beat.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --workspace --release -q
bin=$(scripts/build-workloads.sh)
m=target/release/marmoset
args=(${MARMOSET_BENCH_ARGS:-2 256 256 6})
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
field() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$1" "$2"; }

SIMGPU_MODE=shape SIMGPU_REPORT=$tmp/base.json "$m" run --sim=h100 --no-shim -- "$bin/trainer" "${args[@]}" > /dev/null
peak=$(field "$tmp/base.json" peak_bytes)
base=$(field "$tmp/base.json" virtual_time_s)
printf 'trainer %s (shape mode, simulated H100): peak %.2f GiB, %.3f s per run unlimited (simulated)\n' "${args[*]}" \
  "$(echo "$peak / 1073741824" | bc -l)" "$base"
printf '%8s %12s %12s %10s %14s %14s %9s\n' budget "budget GiB" "peak GiB" "time s" "slowdown" "to host GiB" "back GiB"
# Progress on a terminal only (stderr): "[k/n] what", rewritten in place, cleared at the end.
progress() { if [ -t 2 ]; then printf '\r\033[2K[%s] %s' "$1" "$2" >&2; fi; }
progress_done() { if [ -t 2 ]; then printf '\r\033[2K' >&2; fi; }
k=0
for f in 0.9 0.7 0.5 0.3; do
  k=$((k + 1)); progress "$k/4" "lru at $f of the peak"
  budget=$(python3 -c "print(int($peak * $f))")
  if SIMGPU_MODE=shape SIMGPU_REPORT=$tmp/r.json "$m" run --sim=h100 --policy lru --memory-limit "$budget" -- \
       "$bin/trainer" "${args[@]}" > /dev/null 2> "$tmp/err"; then
    t=$(field "$tmp/r.json" virtual_time_s)
    progress_done
    printf '%8s %12.2f %12.2f %10.3f %13.3fx %14.2f %9.2f\n' "$f" "$(echo "$budget / 1073741824" | bc -l)" \
      "$(echo "$(field "$tmp/r.json" peak_bytes) / 1073741824" | bc -l)" "$t" "$(echo "$t / $base" | bc -l)" \
      "$(echo "$(field "$tmp/r.json" d2h_bytes) / 1073741824" | bc -l)" "$(echo "$(field "$tmp/r.json" h2d_bytes) / 1073741824" | bc -l)"
  else
    progress_done
    printf '%8s %12.2f  failed: %s\n' "$f" "$(echo "$budget / 1073741824" | bc -l)" "$(tail -1 "$tmp/err")"
  fi
done
echo "Times are virtual (simulated GPU); bytes moved count the trainer's own copies too (a few MiB)."
