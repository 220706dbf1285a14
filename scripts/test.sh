#!/usr/bin/env bash
# The whole test suite, from a fresh clone: format and lint checks, a release build of the
# workspace (the simulated GPU's libraries and the marmoset command), then every test. Ends with
# one line counting the tests of all crates.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --release -- -D warnings
cargo build --workspace --release
# PyTorch for the e2e tests that train on the simulated GPU (tests/e2e/tests/torch.rs), with
# the model zoo's torchvision, timm and transformers (tests/e2e/tests/real_gpu_plan.rs).
scripts/setup-zoo.sh
# The torch of the lent GPUs beside it (tests/e2e/tests/torch_versions.rs).
scripts/setup-torch.sh --version 2.11.0
# TensorFlow for the e2e test that runs it on the simulated GPU (tests/e2e/tests/tensorflow.rs).
scripts/setup-tf.sh
scripts/setup-chromium.sh   # the report test renders a page in headless Chromium
# The comparisons with DTR's simulator need DTR's logs, which the repository cannot carry.
data=${MARMOSET_DATA:-${XDG_CACHE_HOME:-$HOME/.cache}/marmoset/data}
if ! ls "$data"/dtr-logs/*.log >/dev/null 2>&1; then
  echo "*** DTR's logs not found ($data/dtr-logs): the comparisons with DTR's simulator do not run; scripts/fetch-data.sh downloads them ***"
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
cargo test --workspace --release 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
awk '/^test result:/ { for (i = 2; i <= NF; i++) { if ($i == "passed;") p += $(i-1); if ($i == "failed;") f += $(i-1) } }
     END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
exit "$status"
