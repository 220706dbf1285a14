#!/usr/bin/env bash
# A first PyTorch program (scripts/real-gpu-probe.py) without and under libmarmoset.so in each of
# its modes, on the lent GPU (every call's log at MARMOSET_LOG=debug); each run's output in
# $OUT/probes.tar.gz (probe-NAME.txt), one line each in $OUT/probes.txt and on the output.
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
  local f=$t/probe-$name.txt
  timeout -k 5 60 "$@" "$py" scripts/real-gpu-probe.py > "$f" 2>&1
  echo "exit $?" >> "$f"
  echo "== $name: $(grep -E '^(ok|FAIL|all)' "$f" | tail -1) [$(tail -1 "$f")]" | tee -a "$dest/probes.txt"
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
# Below the 512 MiB the last steps hold: tensors leave and come back.
probe shim-evict "$m" run --memory-limit 256MiB --
probe shim-evict-lru "$m" run --memory-limit 256MiB --policy lru --
rm -f "$t"/*.jsonl*
tar czf "$dest/probes.tar.gz" -C "$t" . && rm -rf "$t"
