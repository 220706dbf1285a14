#!/usr/bin/env bash
# The checks for a lent GPU, in one call (the standing order: docs/real-gpu/README.md).
#
#   scripts/real-gpu.sh             on the machine with the GPU: its CUDA, cuDNN and python3's torch
#   scripts/real-gpu.sh --sim       the same plan on the simulated H200 here (shape mode): each real
#                                   time's simulated twin
#   scripts/real-gpu.sh --dry-run   the same plan on the simulated GPU, fewer layers and steps,
#                                   quickly (the test suite runs it, so the script cannot rot)
#   --torch                         the PyTorch runs alone
#
# The plan, most telling first, cut at a deadline (--deadline SECONDS, default 450: what is left
# is listed as skipped, never silently dropped):
#  1. conv_check on cuDNN: every algorithm against our double-precision reference, plain and under
#     libmarmoset.so with forced micro-batches; the hook overhead against the driver;
#  2. PyTorch (examples/zoo.py: ResNet-50, a BERT-like encoder, a transformers LLaMA-style decoder
#     and a timm CNN; same seed, deterministic algorithms) without Marmoset, then under the shim
#     with no budget (trace on), within 0.5 of its peak (default policy), μ-cuDNN WR at a 64 MiB
#     workspace limit (the CNNs), `lru` at 0.5, the default policy at 0.3. The peak is the most
#     torch's caching allocator reserved in the run without Marmoset;
#  3. real convolution times and workspaces of data/conv-layers, plain and under WR.
# Results go to $OUT (or ./real-gpu-out): table.md and results.json (scripts/real-gpu-table.py:
# each run's step, its ratio to the run without Marmoset, its losses against that run's, the
# device memory the process held at its peak on the real GPU), summary.txt, device.txt, every
# output in real-gpu.tar.gz, the traces in traces.tar.gz (15 MiB pieces: the device tool brings
# back at most 8 files of 16 MiB).
#
# On the lent machine, build here first (cargo build --release --workspace;
# scripts/build-workloads.sh) and carry target/release.
set -uo pipefail
cd "$(dirname "$0")/.."
mode=real
deadline=450
torch_only=0
while [ $# -gt 0 ]; do
  case $1 in
    --sim) mode=sim ;;
    --dry-run) mode=dry ;;
    --torch) torch_only=1 ;;
    --deadline) deadline=$2; shift ;;
    *) echo "usage: $0 [--sim | --dry-run] [--deadline SECONDS]" >&2; exit 2 ;;
  esac
  shift
done
dest=${OUT:-real-gpu-out}
mkdir -p "$dest"
out=$(mktemp -d)
mkdir -p "$out/traces"
bin=$PWD/target/release/workloads
m=$PWD/target/release/marmoset
shim=$PWD/target/release/libmarmoset.so
for f in "$m" "$shim" "$bin/conv_check"; do
  [ -e "$f" ] || { echo "real-gpu: $f is missing: cargo build --release --workspace && scripts/build-workloads.sh" >&2; exit 2; }
done
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1

if [ "$mode" = real ]; then
  py=$(command -v python3 || true)
  # The real libraries for the C workloads: a CUDA toolkit's, or the NVIDIA wheels PyTorch installs.
  libs=()
  for d in /usr/local/cuda/lib64 /usr/lib/x86_64-linux-gnu; do
    { [ -e "$d/libcudart.so.13" ] || [ -e "$d/libcudart.so.12" ]; } && libs+=("$d")
  done
  if [ -n "$py" ]; then
    while read -r d; do [ -n "$d" ] && libs+=("$d"); done < <("$py" - <<'PY' 2>/dev/null
import glob, os, site
for sp in site.getsitepackages():
    for d in sorted(glob.glob(os.path.join(sp, "nvidia", "*", "lib"))):
        print(d)
PY
)
  fi
  export LD_LIBRARY_PATH=$(IFS=:; echo "${libs[*]}")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  plain=()               # a program without Marmoset
  under=("$m" run)       # a program under Marmoset (flags follow)
  steps=20 sizes=() hook_calls=1000000 conv_cases=20
else
  py=$PWD/.venv/bin/python
  [ -x "$py" ] || { echo "real-gpu: $py is missing: scripts/setup-zoo.sh" >&2; exit 2; }
  plain=("$m" run --sim=h200 --no-shim)
  under=("$m" run --sim=h200)
  # Shape mode: torch's own kernels have no arithmetic on the simulated GPU in either mode, so
  # its losses say nothing there; conv_check computes in data mode.
  export SIMGPU_MODE=shape
  if [ "$mode" = sim ]; then
    steps=20 sizes=() hook_calls=1000000 conv_cases=20
  else
    # Fewer layers and steps, so that the plan runs in minutes on two cores (in shape mode a
    # step's host time follows its calls, not its sizes; at the real sizes the budgets are
    # the real runs' kind: activations, not weights, fill them).
    steps=6 sizes=(--layers 2) hook_calls=20000 conv_cases=4
  fi
fi

start=$SECONDS
{
  echo "date: $(date -u)"
  echo "mode: $mode$([ "$mode" != real ] && echo " (simulated GPU: every device time here is simulated)")"
  if [ "$mode" = real ]; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv 2>&1
    echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  fi
  "${plain[@]}" ${plain:+--} "$py" -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version(), torch.cuda.get_device_name())" 2>&1 | tail -1
  "${plain[@]}" ${plain:+--} "$py" -c "import transformers, timm, torchvision; print('transformers', transformers.__version__, 'timm', timm.__version__, 'torchvision', torchvision.__version__)" 2>&1 | tail -1
  "$m" --version 2>&1
} | tee "$out/device.txt"

# run NAME LIMIT CMD...: CMD's output in NAME.txt, its exit status last ("exit N"); on the real
# GPU, the device memory in use sampled every 100 ms in NAME.smi. Past the deadline, or with too
# little of it left, the run is listed as skipped.
run() {
  local name=$1 limit=$2; shift 2
  local left=$((deadline - (SECONDS - start)))
  if [ "$left" -lt 20 ]; then
    echo "== $name: skipped (the deadline: ${deadline} s)" | tee -a "$out/summary.txt"
    echo "skipped" > "$out/$name.txt"
    return 1
  fi
  [ "$left" -lt "$limit" ] && limit=$left
  local smi=
  if [ "$mode" = real ] && command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 > "$out/$name.smi" 2>/dev/null &
    smi=$!
  fi
  local t=$SECONDS
  timeout -k 5 "$limit" "$@" > "$out/$name.txt" 2>&1
  local rc=$?
  [ -n "$smi" ] && kill "$smi" 2>/dev/null && wait "$smi" 2>/dev/null
  echo "exit $rc" >> "$out/$name.txt"
  { echo "== $name: exit $rc, $((SECONDS - t)) s"; grep -v '^exit ' "$out/$name.txt" | tail -2; } | tee -a "$out/summary.txt"
  return $rc
}

# 1. C checks (--torch: the PyTorch runs alone).
cache=$(mktemp -d)
if [ "$torch_only" = 0 ]; then
[ "$mode" = real ] && run doctor 60 "$m" doctor -- "$py" -c "import torch; torch.zeros(1, device='cuda')"
run conv_check 60 env SIMGPU_MODE=data "${plain[@]}" ${plain:+--} "$bin/conv_check" 1 "$conv_cases"
run conv_check-microbatched 90 env SIMGPU_MODE=data MARMOSET_TEST_MICROBATCH=2 MARMOSET_CACHE_DIR="$cache" MARMOSET_LOG=info \
  "${under[@]}" --workspace-limit 64MiB -- "$bin/conv_check" 3 "$conv_cases"
run hook_bench 60 "${under[@]}" -- "$bin/hook_bench" "$hook_calls"
fi

# 2. PyTorch. zoo NAME MODEL LIMIT [marmoset run flags...]: one program of the zoo, plain when no
# flag is given.
zoo() {
  local name=$1 model=$2 limit=$3; shift 3
  local prog=("$py" examples/zoo.py --model "$model" --steps "${zoo_steps:-$steps}" --seed 0 --deterministic "${sizes[@]}")
  if [ "$1" = plain ]; then
    run "torch-$model-$name" "$limit" "${plain[@]}" ${plain:+--} "${prog[@]}"
  else
    run "torch-$model-$name" "$limit" "${under[@]}" "$@" -- "${prog[@]}"
  fi
}
# The most torch reserved in the run without Marmoset, in bytes.
peak() {
  sed -n 's/^peak memory reserved by torch: \([0-9]*\) bytes$/\1/p' "$out/torch-$1-plain.txt" | tail -1
}
# What the process held beyond torch's reservation in the run without Marmoset (the context, the
# libraries' handles and modules: about 0.7 GiB on an H200), in bytes, from its nvidia-smi
# samples; 0 where none were taken (the simulated GPU, whose context holds next to nothing).
context() {
  local f=$out/torch-$1-plain.smi p
  p=$(peak "$1")
  if [ ! -s "$f" ] || [ -z "$p" ]; then echo 0; return; fi
  python3 -c '
import sys
used = [int(v) for v in open(sys.argv[1]).read().split() if v.isdigit()]
held = (max(used) - min(used)) * 2**20 if used else 0
print(max(held - int(sys.argv[2]), 0))' "$f" "$p"
}
# A budget of PERCENT of the model's tensors: that share of torch's peak reservation, plus what
# the process holds beyond it, which Marmoset counts against the budget and cannot move.
budget() {
  local p c
  p=$(peak "$1")
  [ -n "$p" ] || return 0
  c=$(context "$1")
  echo $((p * $2 / 100 + c))
}
models=(resnet50 distilbert llama regnety_016)
cnns=(resnet50 regnety_016)
for model in "${models[@]}"; do zoo plain "$model" 120 plain; done
for model in "${models[@]}"; do
  # Eight steps: enough for the planner to find the iteration, and the traces travel back.
  zoo_steps=8 zoo traced "$model" 150 --policy none --trace "$out/traces/$model.jsonl"
done
# under NAME PERCENT MODEL [flags...]: within PERCENT of the model's peak.
under() {
  local name=$1 pct=$2 model=$3; shift 3
  local b
  b=$(budget "$model" "$pct")
  if [ -z "$b" ]; then
    echo "== torch-$model-$name: skipped (no peak: the run without Marmoset failed)" | tee -a "$out/summary.txt"
    echo "skipped" > "$out/torch-$model-$name.txt"
    return
  fi
  # The planner's first plan is waited for (on a real GPU it is otherwise ready some steps
  # later): the last steps are the guided ones whichever machine plans.
  MARMOSET_PLAN_WAIT=1 zoo "$name" "$model" 150 --memory-limit "$b" "$@"
}
for model in "${models[@]}"; do under auto-0.5 50 "$model"; done
for model in "${cnns[@]}"; do zoo wr-64MiB "$model" 150 --workspace-limit 64MiB; done
for model in "${models[@]}"; do under lru-0.5 50 "$model" --policy lru; done
for model in "${models[@]}"; do under auto-0.3 30 "$model"; done

# 3. Convolution layers: times and workspaces per layer, plain and under WR.
[ "$torch_only" = 1 ] || for net in alexnet resnet18; do
  run "conv_layers-$net" 90 "${plain[@]}" ${plain:+--} "$bin/conv_layers" "data/conv-layers/$net.csv" 64
  run "conv_layers-$net-wr" 120 env MARMOSET_CACHE_DIR="$cache" "${under[@]}" --workspace-limit 64MiB -- \
    "$bin/conv_layers" "data/conv-layers/$net.csv" 64
done
rm -rf "$cache"
echo "elapsed: $((SECONDS - start)) s of a ${deadline} s deadline" | tee -a "$out/summary.txt"

python3 scripts/real-gpu-table.py "$out" --mode "$mode" > "$out/table.md" 2> "$out/table.err"
table_rc=$?
cp "$out/device.txt" "$out/summary.txt" "$out/table.md" "$dest/" 2>/dev/null
[ -e "$out/results.json" ] && cp "$out/results.json" "$dest/"
tar czf "$dest/traces.tar.gz" -C "$out" traces && rm -rf "$out/traces"
if [ "$(stat -c %s "$dest/traces.tar.gz")" -gt $((15 * 1024 * 1024)) ]; then
  split -b 15M -d -a 1 "$dest/traces.tar.gz" "$dest/traces.tar.gz." && rm "$dest/traces.tar.gz"
fi
tar czf "$dest/real-gpu.tar.gz" -C "$out" .
rm -rf "$out"
cat "$dest/table.md"
echo "results in $dest/"
exit $table_rc
