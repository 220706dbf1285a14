#!/usr/bin/env bash
# Planning time of `auto` on a generated iteration of about 10,000 operations (and on the
# Inception-sized one of about 1,300), in full and under deadlines of 100 ms and 1 s, against
# DTR's runtime (one passive run) planned in the same run as the baseline. Host time on this
# machine; the slowdowns are simulated. Usage: scripts/bench-planner.sh [FAMILY:SCALE ...]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -p planner --release -q
m=target/release/marmoset
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
specs=("$@")
[ ${#specs[@]} -gt 0 ] || specs=(rnn:40 attention:240 inception:12)
for spec in "${specs[@]}"; do
  trace="$tmp/${spec//:/-}.json"
  "$m" import family "$spec" -o "$trace" 2>"$tmp/import.txt"
  ops=$(sed -E 's/.*: ([0-9]+) operations.*/\1/' "$tmp/import.txt")
  for budget in 0.5 0.2; do
    # Prints "<ms> <slowdown> <gap>" from one `marmoset plan`.
    one() {
      "$m" plan "$trace" --budget "$budget" --profile p100 "$@" --json | python3 -c '
import json, sys
v = json.load(sys.stdin)
x = "%.3fx" % v["overhead"] + ("" if v["feasible"] else "(infeasible)")
gap = "-" if v["gap"] is None else "%.1f%%" % (100 * v["gap"])
print("%.1f %s %s" % (1e3 * v["planning_time_s"], x, gap))'
    }
    read -r base_ms base_x base_gap < <(one --policy dtr)
    read -r full_ms full_x full_gap < <(one --policy auto)
    read -r d100_ms d100_x d100_gap < <(one --policy auto --deadline-ms 100)
    read -r d1000_ms d1000_x d1000_gap < <(one --policy auto --deadline-ms 1000)
    echo "$spec ($ops operations), budget $budget of the peak, p100 (slowdowns simulated, gap to the lower bound):"
    printf '  %-22s %9s ms  %5.1fx dtr   %s  gap %s\n' \
      "dtr (baseline)" "$base_ms" 1 "$base_x" "$base_gap" \
      "auto" "$full_ms" "$(python3 -c "print($full_ms/max($base_ms,1e-3))")" "$full_x" "$full_gap" \
      "auto, deadline 100 ms" "$d100_ms" "$(python3 -c "print($d100_ms/max($base_ms,1e-3))")" "$d100_x" "$d100_gap" \
      "auto, deadline 1 s" "$d1000_ms" "$(python3 -c "print($d1000_ms/max($base_ms,1e-3))")" "$d1000_x" "$d1000_gap"
  done
done
