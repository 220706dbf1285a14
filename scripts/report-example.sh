#!/usr/bin/env bash
# The README's picture: the main job's guided run (scripts/demo.sh) — the trainer (6 steps, batch
# 256, 256 x 256, 6 blocks: 15.6 GiB at its peak) on the simulated H100 under the default policy
# at 0.3 of its peak — its report
# (OUT/report-example.html) and a screenshot of the page's top taken by headless Chromium
# (OUT/report.png). OUT is the first argument, docs/ by default. Every time in it is simulated.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --workspace --release -q
scripts/setup-chromium.sh
bin=$(scripts/build-workloads.sh)
m=target/release/marmoset
out=$(cd "${1:-docs}" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
args=(6 256 256 6)
clean=(env $(env | sed -n 's/^\(MARMOSET_[A-Z_]*\|SIMGPU_[A-Z_]*\)=.*/-u \1/p'))
"${clean[@]}" SIMGPU_MODE=shape SIMGPU_REPORT=$tmp/base.json "$m" run --sim=h100 --no-shim -- \
  "$bin/trainer" "${args[@]}" > /dev/null
budget=$(python3 -c "import json,sys; print(int(json.load(open(sys.argv[1]))['peak_bytes'] * 0.3))" "$tmp/base.json")
# Under --sim the program waits for the in-process planner (MARMOSET_PLAN_WAIT's default there).
"${clean[@]}" SIMGPU_MODE=shape MARMOSET_TRACE_TIMING=1 "$m" run --sim=h100 \
  --memory-limit "$budget" --trace "$tmp/run.jsonl" -- "$bin/trainer" "${args[@]}" > /dev/null
"$m" report "$tmp/run.jsonl" --simulated -o "$out/report-example.html"
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$tmp/profile" \
  --window-size=1040,1600 --screenshot="$out/report.png" "file://$out/report-example.html" 2>/dev/null
test -s "$out/report.png"
echo "${1:-docs}/report.png, ${1:-docs}/report-example.html"
