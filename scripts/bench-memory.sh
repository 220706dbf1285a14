#!/usr/bin/env bash
# Benchmark (simulated GPU, shape mode): a C workload (MARMOSET_BENCH_PROG: trainer, a Caffe-like
# program whose peak is above 8 GiB at the default size, or torchlike, PyTorch-like), run
# without Marmoset (unlimited), under the passive policy (MARMOSET_POLICY=lru) and under the
# planner's policies run in-process (measured, then guided execution: capuchin, swap, recompute by
# default; MARMOSET_BENCH_POLICIES to choose) at 0.9, 0.7, 0.5 and 0.3 of that peak, in the same
# invocation. Prints the virtual time (simulated) against the unlimited run, the bytes moved each
# way and, for a planner policy, its plan (swaps, recomputations) with the planner's prediction
# for one guided iteration and the planning time (from the run's `plan` trace record).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --workspace --release -q
bin=$(scripts/build-workloads.sh)
m=target/release/marmoset
export TRAINER_TIMES=1
# The simulated GPU runs an iteration in far less host time than planning takes: the program
# waits for the planner, so the plan applies from the next iteration as it would on a real GPU.
export MARMOSET_PLAN_WAIT=1
# Enough iterations for the tracker to find, verify and plan one, and to run guided after it.
prog=${MARMOSET_BENCH_PROG:-trainer}
args=(${MARMOSET_BENCH_ARGS:-12 256 256 6})
policies=(${MARMOSET_BENCH_POLICIES:-lru capuchin swap recompute})
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
field() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$1" "$2"; }
# The last plan record of a trace, as "swaps/recomputes predicted_ms planning_ms", or "-".
plan() {
  python3 - "$1" <<'PY'
import json, sys
p = [json.loads(l) for l in open(sys.argv[1]) if '"kind":"plan"' in l]
# The last plan is the one that guides (the setup's loops may be found and planned first).
print(f"{p[-1]['swaps']}s/{p[-1]['recomputes']}r {p[-1]['predicted_ms']:.2f} {p[-1]['planning_ms']:.1f}" if p else "- - -")
PY
}

# The workload prints each iteration's time on the device clock (stderr); the last one is the
# steady state: guided under a planner policy, passive under lru.
last_iter() { sed -n 's/^[a-z]*: iteration times (ms, device clock)://p' "$1" | awk '{print $NF}'; }
SIMGPU_MODE=shape SIMGPU_REPORT=$tmp/base.json "$m" run --sim=h100 --no-shim -- "$bin/$prog" "${args[@]}" > /dev/null 2> "$tmp/base.err"
peak=$(field "$tmp/base.json" peak_bytes)
base=$(field "$tmp/base.json" virtual_time_s)
base_it=$(last_iter "$tmp/base.err")
printf '%s %s (shape mode, simulated H100): peak %.2f GiB, %.3f s per run, %.2f ms per iteration unlimited (simulated)\n' "$prog" "${args[*]}" \
  "$(echo "$peak / 1073741824" | bc -l)" "$base" "$base_it"
printf '%-9s %6s %10s %10s %9s %10s %12s %9s %9s %11s %10s %13s %9s %12s\n' policy budget "budget GiB" "peak GiB" "run s" "run x" \
  "to host GiB" "back GiB" plan "last it ms" "last it x" "predicted ms" "meas/pred" "planning ms"
# Progress on a terminal only (stderr): "[k/n] what", rewritten in place, cleared at the end.
progress() { if [ -t 2 ]; then printf '\r\033[2K[%s] %s' "$1" "$2" >&2; fi; }
progress_done() { if [ -t 2 ]; then printf '\r\033[2K' >&2; fi; }
k=0
n=$((4 * ${#policies[@]}))
for f in 0.9 0.7 0.5 0.3; do
  budget=$(python3 -c "print(int($peak * $f))")
  for pol in "${policies[@]}"; do
    k=$((k + 1)); progress "$k/$n" "$pol at $f of the peak"
    rm -f "$tmp/t.jsonl"
    if SIMGPU_MODE=shape SIMGPU_REPORT=$tmp/r.json "$m" run --sim=h100 --policy "$pol" --memory-limit "$budget" \
         --trace "$tmp/t.jsonl" -- "$bin/$prog" "${args[@]}" > /dev/null 2> "$tmp/err"; then
      t=$(field "$tmp/r.json" virtual_time_s)
      read -r pl pred ptime <<< "$(plan "$tmp/t.jsonl")"
      progress_done
      it=$(last_iter "$tmp/err")
      ratio=-
      [ "$pred" = "-" ] || ratio=$(printf '%.2f' "$(echo "$it / $pred" | bc -l)")
      printf '%-9s %6s %10.2f %10.2f %9.3f %9.2fx %12.2f %9.2f %9s %11.2f %9.2fx %13s %9s %12s\n' "$pol" "$f" \
        "$(echo "$budget / 1073741824" | bc -l)" "$(echo "$(field "$tmp/r.json" peak_bytes) / 1073741824" | bc -l)" \
        "$t" "$(echo "$t / $base" | bc -l)" "$(echo "$(field "$tmp/r.json" d2h_bytes) / 1073741824" | bc -l)" \
        "$(echo "$(field "$tmp/r.json" h2d_bytes) / 1073741824" | bc -l)" "$pl" "$it" "$(echo "$it / $base_it" | bc -l)" \
        "$pred" "$ratio" "$ptime"
    else
      progress_done
      printf '%-9s %6s %10.2f  failed: %s\n' "$pol" "$f" "$(echo "$budget / 1073741824" | bc -l)" "$(tail -1 "$tmp/err")"
    fi
  done
done
echo "Times are virtual (simulated GPU); bytes moved count the program's own copies too (a few MiB)."
echo "A planner policy's first iterations run passively while they are measured; 'run' is the whole"
echo "run, 'last it' the last iteration (guided once a plan is ready), beside the planner's prediction"
echo "for one guided iteration (its timeline simulator on the measured iteration)."
