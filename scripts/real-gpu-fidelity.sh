#!/usr/bin/env bash
# The fidelity tables of a lent device's run, regenerated here: for every trace the run kept
# (DIR/MODEL.jsonl.gz, as scripts/real-gpu.sh's traced runs write them), its simulated twin is
# recorded on the simulated GPU with the same examples/zoo.py arguments (torch 2.11's venv when
# there is one, as on the device), and scripts/fidelity.py compares the two kind by kind over the
# steady steps. Writes DIR/fidelity.md; every simulated time in it is simulated.
#
# Usage: scripts/real-gpu-fidelity.sh DIR [--profile h200] [--steps 8]
#   (after cargo build --release --workspace and scripts/setup-zoo.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:?usage: scripts/real-gpu-fidelity.sh DIR [--profile h200] [--steps 8]}
shift
profile=h200 steps=8
while [ $# -gt 0 ]; do
  case $1 in
    --profile) profile=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    *) echo "real-gpu-fidelity: unknown argument $1" >&2; exit 2 ;;
  esac
done
m=$PWD/target/release/marmoset
[ -x "$m" ] || { echo "real-gpu-fidelity: build first: cargo build --release --workspace" >&2; exit 2; }
py=$PWD/.venv-torch-2.11.0/bin/python
[ -x "$py" ] || py=$PWD/.venv/bin/python
[ -x "$py" ] || { echo "real-gpu-fidelity: no venv: scripts/setup-zoo.sh" >&2; exit 2; }
shopt -s nullglob
traces=("$dir"/*.jsonl.gz "$dir"/*.jsonl)
[ ${#traces[@]} -gt 0 ] || { echo "real-gpu-fidelity: no trace in $dir" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
out=$dir/fidelity.md
{
  echo "# Real against simulated, kind by kind"
  echo
  echo "\`scripts/real-gpu-fidelity.sh\` at commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $(date -u +%Y-%m-%d):"
  echo "each real trace of this folder against its twin on the simulated $profile (torch $("$py" -c 'import importlib.metadata as m; print(m.version("torch"))'),"
  echo "shape mode, \`examples/zoo.py --steps $steps --seed 0 --deterministic\`). Simulated times are *simulated*."
} > "$out"
for t in "${traces[@]}"; do
  model=$(basename "$t"); model=${model%.gz}; model=${model%.jsonl}
  echo "real-gpu-fidelity: $model: its twin on the simulated $profile" >&2
  twin=$tmp/$model.jsonl
  if ! env SIMGPU_MODE=shape MARMOSET_TRACE_TIMING=1 "$m" run --sim="$profile" --policy none --trace "$twin" -- \
      "$py" examples/zoo.py --model "$model" --steps "$steps" --seed 0 --deterministic > "$tmp/$model.log" 2>&1; then
    { echo; echo "## $model"; echo; echo "The twin failed: $(tail -1 "$tmp/$model.log")"; } >> "$out"
    continue
  fi
  { echo; echo "## $model"; echo; python3 scripts/fidelity.py "$t" "$twin"; } >> "$out"
done
echo "real-gpu-fidelity: wrote $out" >&2
