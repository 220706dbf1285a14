#!/usr/bin/env bash
# Builds Marmoset's Python wheel into dist/: the `marmoset` command, libmarmoset.so and the
# simulated GPU, for `pip install dist/marmoset-*.whl` in any virtual environment. Prints the
# wheel's path.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --workspace --release -q
m=target/release/marmoset
version=$("$m" --version | awk '{print $2}')
sim=$(MARMOSET_LIB_DIR= MARMOSET_BUILD_DIR= "$m" sim-path)
rm -f dist/marmoset-*.whl
python3 packaging/build_wheel.py target/release "$sim" "$version" dist
