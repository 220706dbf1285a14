#!/usr/bin/env bash
# Headless Chromium for the report test (Debian's package). Idempotent: silent and instant when
# it is already installed; otherwise installs it with apt-get (needs root), quietly.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "setup-chromium.sh: chromium is missing; install Debian's package: apt-get install chromium" >&2
  exit 1
fi
echo "setup-chromium.sh: installing chromium (Debian's package) for the report test" >&2
export DEBIAN_FRONTEND=noninteractive
log=$(mktemp)
if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium; } >"$log" 2>&1; then
  cat "$log" >&2
  rm -f "$log"
  exit 1
fi
rm -f "$log"
