#!/usr/bin/env bash
# Benchmark of Marmoset's memory policies on the simulated GPU (shape mode; every time it prints
# is simulated): the trainer (a Caffe-like C program), and unmodified PyTorch training ResNet-50
# and the BERT-like encoder of examples/, on the h100 and p100 profiles, without Marmoset, under
# the passive `lru` policy and under the planner's policies run in-process (measured, then
# guided execution), at 0.9, 0.7, 0.5 and 0.3 of the peak, in the same invocation; each planner
# policy's prediction beside its measurement; then the batch multiplier. What it prints and the
# environment variables that choose: scripts/bench-memory.py.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --workspace --release -q
bin=$(scripts/build-workloads.sh)
case ",${MARMOSET_BENCH_PROG:-trainer,resnet50,bert}," in
  *,resnet50,* | *,bert,*) scripts/setup-torch.sh >&2 ;;
esac
MARMOSET_BENCH_BIN=$bin exec python3 scripts/bench-memory.py
