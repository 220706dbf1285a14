#!/usr/bin/env bash
# A first PyTorch program (scripts/real-gpu-probe.py) without and under libmarmoset.so in each of
# its modes, on the lent GPU; each run's output in $OUT/probe-NAME.txt, one line each at the end.
set -uo pipefail
cd "$(dirname "$0")/.."
dest=${OUT:-real-gpu-out}
mkdir -p "$dest"
m=$PWD/target/release/marmoset
py=$(command -v python3)
t=$(mktemp -d)
export CUDA_LAUNCH_BLOCKING=1 MARMOSET_LOG=debug
probe() {
  local name=$1; shift
  timeout -k 5 60 "$@" "$py" scripts/real-gpu-probe.py > "$dest/probe-$name.txt" 2>&1
  echo "exit $?" >> "$dest/probe-$name.txt"
  echo "== $name: $(grep -E '^(ok|FAIL|all)' "$dest/probe-$name.txt" | tail -1) [$(tail -1 "$dest/probe-$name.txt")]"
}
probe plain env
probe plain-async env PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync
probe shim-none "$m" run --policy none --
probe shim-disabled env MARMOSET_DISABLE=1 "$m" run --policy none --trace "$t/a.jsonl" --
probe shim-trace "$m" run --policy none --trace "$t/b.jsonl" --
probe shim-trace-native env PYTORCH_CUDA_ALLOC_CONF=backend:native "$m" run --policy none --trace "$t/c.jsonl" --
probe shim-trace-untimed env MARMOSET_TRACE_TIMING=0 "$m" run --policy none --trace "$t/d.jsonl" --
probe shim-async-none env PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync "$m" run --policy none --
probe shim-budget "$m" run --memory-limit 4GiB --
probe shim-budget-lru "$m" run --memory-limit 4GiB --policy lru --
rm -rf "$t"
