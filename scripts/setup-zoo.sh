#!/usr/bin/env bash
# Adds to .venv/ (made by scripts/setup-torch.sh, which this runs first) what examples/zoo.py
# needs: torchvision, timm and Hugging Face transformers, for the simulated GPU, never the nvidia-*
# packages (their libraries would load ahead of the simulated GPU's: see setup-torch.sh).
#
# - torchvision $TORCHVISION_VERSION with --no-deps (its requirement is torch and numpy, which
#   setup-torch.sh installed, and pillow, installed here). The torchvision built against torch
#   2.15 would be 0.30; the newest on the package index is 0.29.2, built against torch 2.14, whose
#   metadata asks for torch>=2.14.0. Its model definitions are pure Python and are what
#   examples/zoo.py uses; its compiled operators (torchvision._C: nms, roi_align, ...) are not
#   used, and `torchvision.extension._has_ops()` says whether they loaded.
# - transformers $TRANSFORMERS_VERSION with --no-deps, and its dependencies named here (none of
#   them asks for torch); timm $TIMM_VERSION with --no-deps (its requirements are torch,
#   torchvision and transformers' own); then a check that torch is still $TORCH_VERSION and no nvidia-* came in.
#
# Idempotent and quick once done. Offline or from a local mirror: pip's own PIP_FIND_LINKS /
# PIP_INDEX_URL apply. No model weights are ever downloaded: examples/zoo.py builds every model
# from a configuration in code.
set -euo pipefail
cd "$(dirname "$0")/.."

TORCH_VERSION=2.15.0
TORCHVISION_VERSION=0.29.2
TRANSFORMERS_VERSION=5.24.0
TIMM_VERSION=1.0.31
# transformers' requirements (its METADATA, extras left out) less numpy (setup-torch.sh's), and
# pillow for torchvision. Each resolves with its own dependencies, none of which is torch.
DEPS=("pillow>=5.3.0,!=8.3.*" "huggingface-hub>=1.31.0,<3.0" "packaging>=20.0" "pyyaml>=5.1"
      "regex>=2025.10.22" "tokenizers>=0.23.1,<0.24.0" typer "safetensors>=0.8.0" "tqdm>=4.60")
VENV=.venv
PY="$VENV/bin/python"

say() { echo "setup-zoo: $*" >&2; }

scripts/setup-torch.sh

# Whether the venv already has every package at its version (no import: quick).
complete() {
    "$PY" - "$TORCH_VERSION" "$TORCHVISION_VERSION" "$TRANSFORMERS_VERSION" "$TIMM_VERSION" <<'EOF'
import importlib.metadata as m, sys
torch, vision, tf, timm = sys.argv[1:]
try:
    ok = (m.version("torch").startswith(torch) and m.version("torchvision") == vision
          and m.version("transformers") == tf and m.version("timm") == timm)
    for d in ("pillow", "huggingface-hub", "packaging", "pyyaml", "regex", "tokenizers", "typer",
              "safetensors", "tqdm"):
        m.version(d)
except m.PackageNotFoundError:
    ok = False
sys.exit(0 if ok else 1)
EOF
}

# The same refusal as setup-torch.sh's: no nvidia-* package, no site-packages/nvidia.
check_nvidia() {
    local bad site
    bad=$("$PY" - <<'EOF'
import importlib.metadata as m
print(" ".join(sorted({d.metadata["Name"] for d in m.distributions()
      if (d.metadata["Name"] or "").lower().startswith(("nvidia-", "nvidia_", "cuda-toolkit"))})))
EOF
)
    site=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    if [[ -n "$bad" || -d "$site/nvidia" ]]; then
        say "ERROR: NVIDIA's CUDA packages are installed in $VENV: ${bad:-$site/nvidia}"
        say "torch's RPATH would load their real libraries ahead of the simulated GPU's."
        say "Remove them:  $PY -m pip uninstall -y ${bad:-'<the nvidia-* packages>'}"
        return 1
    fi
}

if complete; then
    check_nvidia
    exit 0
fi

pip=("$PY" -m pip install --quiet --disable-pip-version-check)
say "installing pillow and transformers' dependencies into $VENV"
"${pip[@]}" "${DEPS[@]}"
say "installing torchvision==$TORCHVISION_VERSION, transformers==$TRANSFORMERS_VERSION and timm==$TIMM_VERSION with --no-deps"
"${pip[@]}" --no-deps "torchvision==$TORCHVISION_VERSION" "transformers==$TRANSFORMERS_VERSION" "timm==$TIMM_VERSION"
check_nvidia
complete || {
    say "torch $TORCH_VERSION, torchvision $TORCHVISION_VERSION, transformers $TRANSFORMERS_VERSION, timm $TIMM_VERSION or a dependency is missing in $VENV"
    exit 1
}
say "done: $("$PY" -c 'import importlib.metadata as m; print(", ".join(f"{p} {m.version(p)}" for p in ("torch", "torchvision", "transformers", "timm")))') in $VENV"
