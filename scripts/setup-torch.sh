#!/usr/bin/env bash
# Makes .venv/ at the repository root with PyTorch for the simulated GPU: the torch wheel
# installed --no-deps (the CUDA 13 build, for this machine's python3) and its pure-Python
# dependencies, never the nvidia-* packages: torch's RPATH ($ORIGIN/../../nvidia/...) would load
# the real CUDA libraries from them ahead of the simulated ones, and LD_LIBRARY_PATH cannot
# override an RPATH.
#
# Idempotent and quick once done: an existing .venv (a directory or a link to a shared one) with
# torch 2.15.0 and its dependencies is accepted as it is and not touched. Offline or from a local
# mirror: pip's own PIP_FIND_LINKS / PIP_INDEX_URL apply.
#
# Then: target/release/marmoset run --sim -- .venv/bin/python SCRIPT.py
#
# --version V: torch V in .venv-torch-V/ instead (the test suite adds 2.11.0, the torch of the
# lent GPUs, so that kernel readers that know one torch version only are caught here).
set -euo pipefail
cd "$(dirname "$0")/.."

TORCH_VERSION=2.15.0
VENV=.venv
if [[ "${1:-}" == --version && -n "${2:-}" ]]; then
    TORCH_VERSION=$2
    VENV=.venv-torch-$2
elif [[ $# -gt 0 ]]; then
    echo "usage: $0 [--version V]" >&2
    exit 2
fi
DEPS=(filelock typing-extensions "setuptools>=77.0.3" sympy networkx jinja2 fsspec numpy)
PY="$VENV/bin/python"

say() { echo "setup-torch: $*" >&2; }

# The nvidia-* packages, if any are installed in the venv: their libraries would shadow ours.
nvidia_packages() {
    "$PY" - <<'EOF'
import importlib.metadata as m
bad = sorted({d.metadata["Name"] for d in m.distributions()
              if (d.metadata["Name"] or "").lower().startswith(("nvidia-", "nvidia_", "cuda-toolkit"))})
print(" ".join(bad))
EOF
}

check_nvidia() {
    local bad
    bad=$(nvidia_packages)
    local site
    site=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    if [[ -n "$bad" || -d "$site/nvidia" ]]; then
        say "=================================================================="
        say "ERROR: NVIDIA's CUDA packages are installed in $VENV: ${bad:-$site/nvidia}"
        say "torch's RPATH loads their real libcudart/libcudnn/libcublas ahead of the"
        say "simulated GPU's, and LD_LIBRARY_PATH cannot override an RPATH."
        say "Remove them:  $PY -m pip uninstall -y ${bad:-'<the nvidia-* packages>'}"
        say "=================================================================="
        return 1
    fi
}

# Whether the venv already has torch $TORCH_VERSION and every dependency (no torch import: quick).
complete() {
    [[ -x "$PY" ]] || return 1
    "$PY" - "$TORCH_VERSION" <<'EOF'
import importlib.metadata as m, sys
try:
    if not m.version("torch").startswith(sys.argv[1]):
        sys.exit(1)
    for d in ("filelock", "typing_extensions", "setuptools", "sympy", "networkx", "jinja2", "fsspec", "numpy"):
        m.version(d)
except m.PackageNotFoundError:
    sys.exit(1)
EOF
}

if complete; then
    check_nvidia
    exit 0
fi

if [[ -e "$VENV" && ! -x "$PY" ]]; then
    say "$VENV exists but has no bin/python; remove it and run again"
    exit 1
fi
if [[ ! -e "$VENV" ]]; then
    python3 -m venv "$VENV"
fi
check_nvidia
ver=$("$PY" -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')
say "installing torch==$TORCH_VERSION (cp$ver) into $VENV, with --no-deps: pip's warning that"
say "cuda-toolkit, nvidia-* and triton are not installed is expected (they are left out on purpose)"
"$PY" -m pip install --quiet --disable-pip-version-check "${DEPS[@]}"
"$PY" -m pip install --quiet --disable-pip-version-check --no-deps "torch==$TORCH_VERSION"
check_nvidia
complete || {
    say "torch $TORCH_VERSION or a dependency is still missing in $VENV"
    exit 1
}
say "done: $("$PY" -c 'import importlib.metadata as m; print("torch", m.version("torch"))') in $VENV"
