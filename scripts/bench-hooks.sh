#!/usr/bin/env bash
# Benchmark: the cost libmarmoset.so adds to a hooked call, against the direct call in the same
# run, with tracing off and on. The host-side cost is real (the simulated GPU only answers).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --workspace --release -q
bin=$(scripts/build-workloads.sh)
n=${1:-2000000}
trace=$(mktemp)
trap 'rm -f "$trace"' EXIT
echo "== tracing off"
target/release/marmoset run --sim -- "$bin/hook_bench" "$n"
echo "== tracing on (MARMOSET_TRACE)"
target/release/marmoset run --sim --trace "$trace" -- "$bin/hook_bench" "$n"
