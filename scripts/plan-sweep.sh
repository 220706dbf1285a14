#!/usr/bin/env bash
# Every memory policy on DTR's four logs ($MARMOSET_DATA/dtr-logs, else where
# scripts/fetch-data.sh puts them: ~/.cache/marmoset/data/dtr-logs), at 0.9 ... 0.2 of each
# log's peak, on the h100 and p100 profiles' PCIe links. Simulated (the timeline simulator).
set -euo pipefail
cd "$(dirname "$0")/.."
logs=${MARMOSET_DATA:-${XDG_CACHE_HOME:-$HOME/.cache}/marmoset/data}/dtr-logs
if ! ls "$logs"/*.log >/dev/null 2>&1; then
  echo "plan-sweep.sh: DTR's logs are not in $logs: run scripts/fetch-data.sh and set MARMOSET_DATA" >&2
  exit 1
fi
cargo build -p marmoset-cli --release -q
for profile in h100 p100; do
  for log in "$logs"/*.log; do
    target/release/marmoset plan "$log" --sweep --profile "$profile"
    echo
  done
done
