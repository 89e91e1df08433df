#!/usr/bin/env bash
# Host emulation check (no GPU needed): the working tree's normaliser scan and bwd_local against
# the same kernels at BASE_REV (default 905c4ad, main before the chunk-parallel scan).
#   dev/cuda/host_emulation/run.sh [BASE_REV]      (from the repository root)
# The tensor-core kernels: run_mma.sh (emulate_mma.cpp).
# Exit status 77 (ctest's skip) when the base revision is not in the clone (a shallow clone).
set -eu
cd "$(dirname "$0")/../../.."
base=${1:-905c4ad}
if ! git cat-file -e "$base^{commit}" 2>/dev/null; then
  echo "skipped: base revision $base is not in this clone (shallow?)"
  exit 77
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
python3 dev/cuda/host_emulation/extract.py "$base" "$dir/kernels.h"
cp dev/cuda/host_emulation/shim.h "$dir/"
g++ -std=c++20 -O1 -pthread -w -I "$dir" dev/cuda/host_emulation/emulate.cpp -o "$dir/emulate"
timeout 600 "$dir/emulate"  # a __syncthreads not every thread reaches hangs: the timeout says so
