#!/usr/bin/env bash
# Host emulation check (no GPU needed): the working tree's normaliser scan and bwd_local against
# the same kernels at BASE_REV (default 905c4ad, main before the chunk-parallel scan).
#   dev/cuda/host_emulation/run.sh [BASE_REV]      (from the repository root)
# The tensor-core kernels: run_mma.sh (emulate_mma.cpp).
set -eu
cd "$(dirname "$0")/../../.."
dir=$(mktemp -d)
python3 dev/cuda/host_emulation/extract.py "${1:-905c4ad}" "$dir/kernels.h"
cp dev/cuda/host_emulation/shim.h "$dir/"
g++ -std=c++20 -O1 -pthread -w -I "$dir" dev/cuda/host_emulation/emulate.cpp -o "$dir/emulate"
timeout 600 "$dir/emulate"  # a __syncthreads not every thread reaches hangs: the timeout says so
