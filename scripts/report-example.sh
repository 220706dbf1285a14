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
# The same for unmodified PyTorch where .venv has it (scripts/setup-torch.sh): ResNet-50, batch 16,
# 6 steps, the default policy at 0.3 of its peak: a screenshot (OUT/report-torch.png) of its report
# (0.9 MB of HTML, kept out of the repository).
if [ -x .venv/bin/python ]; then
  targs=(examples/resnet50.py --steps 6 --batch 16)
  # PyTorch may abort at exit after a complete run ("terminate called without an active
  # exception"); what each run writes is checked instead of its status.
  "${clean[@]}" SIMGPU_MODE=shape SIMGPU_REPORT=$tmp/tbase.json "$m" run --sim=h100 --no-shim -- \
    .venv/bin/python "${targs[@]}" > /dev/null 2>&1 || test -s "$tmp/tbase.json"
  tbudget=$(python3 -c "import json,sys; print(int(json.load(open(sys.argv[1]))['peak_bytes'] * 0.3))" "$tmp/tbase.json")
  "${clean[@]}" SIMGPU_MODE=shape "$m" run --sim=h100 --memory-limit "$tbudget" \
    --trace "$tmp/torch.jsonl" -- .venv/bin/python "${targs[@]}" > "$tmp/torch.out" 2>&1 \
    || grep -q "^peak memory" "$tmp/torch.out"
  "$m" report "$tmp/torch.jsonl" --simulated -o "$tmp/report-torch.html"
  chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$tmp/profile" \
    --window-size=1040,1600 --screenshot="$out/report-torch.png" "file://$tmp/report-torch.html" 2>/dev/null
  test -s "$out/report-torch.png"
  echo "${1:-docs}/report-torch.png"
fi
