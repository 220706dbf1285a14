#!/usr/bin/env bash
# Downloads DTR's four logs (uwsampl/dtr-prototype, simrd/logs.zip) for the comparisons with DTR's
# simulator (tests, scripts/plan-sweep.sh, scripts/plan-check.py). They come without a licence to
# redistribute, so the repository does not carry them. Pinned to one commit, each log checked
# against its SHA-256.
#   scripts/fetch-data.sh [DIR]     DIR defaults to $MARMOSET_DATA, else ~/.cache/marmoset/data
# then: export MARMOSET_DATA=DIR
set -euo pipefail
commit=7f50d996b7432980dbe969281f215b08a5baf913
url=${MARMOSET_DTR_LOGS_URL:-https://raw.githubusercontent.com/uwsampl/dtr-prototype/$commit/simrd/logs.zip}  # a mirror may stand in
dest=${1:-${MARMOSET_DATA:-${XDG_CACHE_HOME:-$HOME/.cache}/marmoset/data}}
logs=(
  "f17c569c87bcd1368cc1d1eb0ad79cc75ac8eea0985755c6cd437d7faff2a31f lstm-128-11000000000.0-2020-10-1-16-38-52-default.log"
  "38c94cada99aca654ad9589d99eabc2267a51835593b598085f9f8221a7bacaf resnet32-56-9000000000.0-2020-10-1-13-3-30-default.log"
  "cdcac0e9f4af95ccf30cacb28f9edcc2f194c31653946f9ddde424f926fcb7d1 transformer-10-8000000000.0-2020-10-1-10-56-5-default.log"
  "4d9e8bd06f6b76c894dfbef4743f714177665dee9e883aa245c2770fe48e45de tv_densenet121-84-10000000000.0-2020-10-1-13-41-18-default.log"
)
for tool in curl unzip sha256sum; do
  command -v "$tool" >/dev/null || { echo "fetch-data.sh: $tool is needed" >&2; exit 1; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "downloading $url" >&2
curl -fL --retry 3 -o "$tmp/logs.zip" "$url"
unzip -q "$tmp/logs.zip" -d "$tmp/x"
mkdir -p "$dest/dtr-logs"
for entry in "${logs[@]}"; do
  sum=${entry%% *}
  name=${entry#* }
  # The archive's folder layout is not ours to rely on: find each log by its name.
  src=$(find "$tmp/x" -type f -name "$name" | head -n 1)
  [ -n "$src" ] || { echo "fetch-data.sh: $name is not in logs.zip at $commit" >&2; exit 1; }
  echo "$sum  $src" | sha256sum -c --quiet - || { echo "fetch-data.sh: $name does not match its SHA-256" >&2; exit 1; }
  cp "$src" "$dest/dtr-logs/$name"
done
echo "DTR's logs are in $dest/dtr-logs; for the tests and scripts: export MARMOSET_DATA=$dest" >&2
