#!/usr/bin/env bash
# The model zoo (examples/zoo.py: torchvision CNNs, a segmentation model, transformers' GPT-2,
# LLaMA-style, T5, ViT, DistilBERT, Swin) on the simulated GPU, shape mode: each model without
# Marmoset, then within 0.5 and 0.3 of its peak under the default policy and under lru, and its
# trace planned offline; one markdown table per profile, written into docs/zoo.md. Every device
# time it prints is simulated. What it measures and its options: scripts/bench-zoo.py.
#
# Usage: scripts/bench-zoo.sh [--profiles h100,p100] [--models a,b] [--fractions 0.5,0.3] [--quick] [--no-docs]
#   (after scripts/setup-zoo.sh and cargo build --release --workspace)
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x target/release/marmoset ] && [ -f target/release/libmarmoset.so ] || {
    echo "bench-zoo: build first: cargo build --release --workspace" >&2
    exit 1
}
.venv/bin/python - 2>/dev/null <<'EOF' || { echo "bench-zoo: run scripts/setup-zoo.sh first" >&2; exit 1; }
import importlib.metadata as m
for p in ("torch", "torchvision", "transformers"):
    m.version(p)
EOF
exec python3 scripts/bench-zoo.py "$@"
