#!/usr/bin/env bash
# The README's picture: the trainer (2 iterations, batch 16, 64 x 64, 8 blocks) on the simulated
# H100 under the lru policy at 0.3 of its peak, its report, and a screenshot of the page taken by
# headless Chromium (docs/report.png). Every time in it is simulated or this machine's host time.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --workspace --release -q
scripts/setup-chromium.sh
bin=$(scripts/build-workloads.sh)
m=target/release/marmoset
out=${1:-docs}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
args=(2 16 64 8)
SIMGPU_MODE=shape SIMGPU_REPORT=$tmp/base.json "$m" run --sim=h100 --no-shim -- "$bin/trainer" "${args[@]}" > /dev/null
budget=$(python3 -c "import json,sys; print(int(json.load(open(sys.argv[1]))['peak_bytes'] * 0.3))" "$tmp/base.json")
SIMGPU_MODE=shape MARMOSET_TRACE_TIMING=1 "$m" run --sim=h100 --policy lru --memory-limit "$budget" \
  --trace "$tmp/run.jsonl" -- "$bin/trainer" "${args[@]}" > /dev/null
"$m" report "$tmp/run.jsonl" --budget "$budget" --simulated -o "$out/report-example.html"
"$m" export --chrome "$tmp/run.jsonl" --simulated -o "$tmp/trace.json"
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$tmp/profile" \
  --window-size=1040,1500 --screenshot="$out/report.png" "file://$PWD/$out/report-example.html" 2>/dev/null
echo "$out/report.png, $out/report-example.html"
