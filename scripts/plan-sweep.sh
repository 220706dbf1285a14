#!/usr/bin/env bash
# Every memory policy on the four DTR logs in ../shared/data/dtr-logs, at 0.9 ... 0.2 of each
# log's peak, on the h100 and p100 profiles' PCIe links. Simulated (the timeline simulator).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -p planner --release -q
for profile in h100 p100; do
  for log in ../shared/data/dtr-logs/*.log; do
    target/release/marmoset plan "$log" --sweep --profile "$profile"
    echo
  done
done
