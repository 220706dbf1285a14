#!/usr/bin/env bash
# Makes .venv-tf/ at the repository root with TensorFlow for the simulated GPU: the newest
# TensorFlow 2.x wheel pip finds for this machine's python3 (2.21.0 when this was written), and
# Keras 3, both installed --no-deps, with the dependencies they need to import named here, never
# the nvidia-* packages (TensorFlow's "and-cuda" extra): TensorFlow finds CUDA by soname through
# its RUNPATH, which would put their real libcudart/libcuda/libcudnn ahead of the simulated GPU's.
#
# Its own venv, not .venv: TensorFlow and torch want different numpy/protobuf ranges, and neither
# needs the other.
#
# Idempotent and quick once done: an existing .venv-tf (a directory or a link to a shared one)
# with tensorflow 2.x, keras and every dependency is accepted as it is and not touched (pass
# TF_VERSION=X.Y.Z to ask for one version). Offline or from a local mirror: pip's own
# PIP_FIND_LINKS / PIP_INDEX_URL apply.
#
# It also puts libdevice (NVIDIA's bitcode maths library, libdevice.10.bc, from the
# nvidia-cuda-nvcc-cu12 wheel, downloaded --no-deps) at .venv-tf/cuda-data/nvvm/libdevice/ and no
# other file of that wheel: TensorFlow compiles some kernels at run time (BatchNormalization's
# Rsqrt) and needs libdevice for that; were ptxas or nvvm beside it, TensorFlow would load
# machine code the simulated GPU cannot run instead of PTX. `marmoset run --sim` passes the
# directory to TensorFlow (XLA_FLAGS=--xla_gpu_cuda_data_dir=...) when the program is this
# venv's python. Set LIBDEVICE_WHEEL=path/to/nvidia_cuda_nvcc_cu12-*.whl to use a wheel on disk.
#
# Then: SIMGPU_MODE=shape target/release/marmoset run --sim --no-shim -- .venv-tf/bin/python -c \
#         "import tensorflow as tf; print(tf.config.list_physical_devices('GPU'))"
set -euo pipefail
cd "$(dirname "$0")/.."

# Empty: the newest 2.x; else exactly this version.
TF_VERSION=${TF_VERSION:-}
# tensorflow's requirements (its METADATA, extras left out) less libclang (only its C++ header
# tooling uses it) and tensorflow-io-gcs-filesystem (an extra), plus Keras 3's (rich, namex,
# optree). Each resolves with its own dependencies, none of which is tensorflow or nvidia-*.
DEPS=("absl-py>=1.0.0" "astunparse>=1.6.0" "flatbuffers>=25.9.23" "gast>=0.2.1,!=0.5.0,!=0.5.1,!=0.5.2"
      "google-pasta>=0.1.1" "opt-einsum>=2.3.2" packaging "protobuf>=6.31.1,<8.0.0"
      "requests>=2.21.0,<3" setuptools "six>=1.12.0" "termcolor>=1.1.0" "typing-extensions>=3.6.6"
      "wrapt>=1.11.0" "grpcio>=1.24.3,<2.0" "numpy>=1.26.0" "h5py>=3.11.0,<3.15.0"
      "ml-dtypes>=0.5.1,<1.0.0" rich namex optree)
# The distributions' names as importlib.metadata knows them, for the quick check.
DEP_NAMES="absl-py astunparse flatbuffers gast google-pasta opt-einsum packaging protobuf requests
           setuptools six termcolor typing-extensions wrapt grpcio numpy h5py ml-dtypes rich namex
           optree"
VENV=.venv-tf
PY="$VENV/bin/python"

say() { echo "setup-tf: $*" >&2; }

# The nvcc wheel libdevice is taken from (any 12.x carries the same libdevice.10.bc).
NVCC_WHEEL=${NVCC_WHEEL:-nvidia-cuda-nvcc-cu12==12.5.82}
LIBDEVICE="$VENV/cuda-data/nvvm/libdevice/libdevice.10.bc"

# libdevice alone into $VENV/cuda-data (see the header); nothing else of the wheel is kept.
fetch_libdevice() {
    [[ -s "$LIBDEVICE" ]] && return 0
    local tmp wheel
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' RETURN
    if [[ -n "${LIBDEVICE_WHEEL:-}" ]]; then
        wheel=$LIBDEVICE_WHEEL
    else
        say "downloading $NVCC_WHEEL (about 22 MB) for libdevice.10.bc only"
        "$PY" -m pip download --quiet --disable-pip-version-check --no-deps \
            --only-binary=:all: -d "$tmp" "$NVCC_WHEEL"
        wheel=$(ls "$tmp"/nvidia_cuda_nvcc_cu12-*.whl)
    fi
    "$PY" - "$wheel" "$LIBDEVICE" <<'EOF'
import os, sys, zipfile
wheel, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if n.endswith("/nvvm/libdevice/libdevice.10.bc")]
    if not names:
        sys.exit(f"setup-tf: {wheel} has no nvvm/libdevice/libdevice.10.bc")
    data = z.read(names[0])
os.makedirs(os.path.dirname(out), exist_ok=True)
with open(out + ".part", "wb") as f:
    f.write(data)
os.replace(out + ".part", out)
EOF
    say "libdevice at $LIBDEVICE"
}

# The refusal of setup-torch.sh: no nvidia-* package, no site-packages/nvidia.
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
        say "=================================================================="
        say "ERROR: NVIDIA's CUDA packages are installed in $VENV: ${bad:-$site/nvidia}"
        say "TensorFlow would load their real CUDA libraries ahead of the simulated GPU's."
        say "Remove them:  $PY -m pip uninstall -y ${bad:-'<the nvidia-* packages>'}"
        say "=================================================================="
        return 1
    fi
}

# Whether the venv already has tensorflow (2.x, or $TF_VERSION), keras and every dependency (no
# import: quick).
complete() {
    [[ -x "$PY" ]] || return 1
    "$PY" - "$TF_VERSION" $DEP_NAMES <<'EOF'
import importlib.metadata as m, sys
want, deps = sys.argv[1], sys.argv[2:]
try:
    v = m.version("tensorflow")
    if (want and v != want) or not v.startswith("2."):
        sys.exit(1)
    if not m.version("keras").startswith("3."):
        sys.exit(1)
    for d in deps:
        m.version(d)
except m.PackageNotFoundError:
    sys.exit(1)
EOF
}

if complete; then
    check_nvidia
    fetch_libdevice
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
if [[ -n "$TF_VERSION" ]]; then
    tf="tensorflow==$TF_VERSION"
else
    tf="tensorflow>=2,<3"
fi
pip=("$PY" -m pip install --quiet --disable-pip-version-check)
say "installing TensorFlow's and Keras' dependencies into $VENV"
"${pip[@]}" "${DEPS[@]}"
say "installing $tf and keras>=3.12 with --no-deps (the wheel is about 570 MB): pip's warning"
say "that libclang and tensorflow-io-gcs-filesystem are not installed is expected"
"${pip[@]}" --no-deps "$tf" "keras>=3.12.0,<4"
check_nvidia
complete || {
    say "tensorflow or a dependency is still missing in $VENV"
    exit 1
}
fetch_libdevice
say "done: $("$PY" -c 'import importlib.metadata as m; print("tensorflow", m.version("tensorflow"), "keras", m.version("keras"))') in $VENV"
