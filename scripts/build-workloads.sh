#!/usr/bin/env bash
# Builds the C workloads in tests/workloads against the real sonames, using the simulated GPU's
# libraries (target/release/simgpu) to link. The binaries carry no rpath: what they load is
# decided at run time (marmoset run --sim, or a real CUDA installation).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
profile=${MARMOSET_CARGO_PROFILE:-release}
out=${1:-$root/target/$profile/workloads}
sim=$("$root/target/$profile/marmoset" sim-path)
mkdir -p "$out"
for src in "$root"/tests/workloads/*.c; do
  name=$(basename "$src" .c)
  bin=$out/$name
  case $name in
    dl_*)
      # Programs that reach CUDA only through dlopen link no CUDA library.
      if [ ! -x "$bin" ] || [ "$src" -nt "$bin" ] || [ "$root/tests/workloads/cuda_abi.h" -nt "$bin" ]; then
        cc -O2 -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -I"$root/tests/workloads" -o "$bin" "$src" -ldl
      fi
      continue
      ;;
    gemm_*)
      # cuBLAS / cuBLASLt programs: CUDA 13 only (libcublas.so.13 needs the 13 runtime).
      if [ ! -x "$bin" ] || [ "$src" -nt "$bin" ] || [ "$root/tests/workloads/cuda_abi.h" -nt "$bin" ] \
        || [ "$root/tests/workloads/cublas_abi.h" -nt "$bin" ]; then
        cc -O2 -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -I"$root/tests/workloads" -o "$bin" "$src" \
          -L"$sim" -lcudart -lcublas -lcublasLt -ldl -lm -lpthread -Wl,-rpath-link,"$sim"
      fi
      continue
      ;;
  esac
  if [ ! -x "$bin" ] || [ "$src" -nt "$bin" ] || [ "$root/tests/workloads/cuda_abi.h" -nt "$bin" ]; then
    cc -O2 -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -I"$root/tests/workloads" -o "$bin" "$src" \
      -L"$sim" -lcudart -lcudnn -ldl -lm -lpthread -Wl,-rpath-link,"$sim"
  fi
  # The same program linked against the CUDA 12 runtime.
  if [ ! -x "$bin-cu12" ] || [ "$src" -nt "$bin-cu12" ] || [ "$root/tests/workloads/cuda_abi.h" -nt "$bin-cu12" ]; then
    cc -O2 -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -I"$root/tests/workloads" -o "$bin-cu12" "$src" \
      -L"$sim" -l:libcudart.so.12 -lcudnn -ldl -lm -lpthread -Wl,-rpath-link,"$sim"
  fi
done
echo "$out"
