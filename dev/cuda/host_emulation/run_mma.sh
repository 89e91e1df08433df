#!/usr/bin/env bash
# Host emulation check of the tensor-core kernels (no GPU needed): the working tree's mma.sync
# kernels of src/cuda against float64 loops, on the CPU (see emulate_mma.cpp).
#   dev/cuda/host_emulation/run_mma.sh [KERNEL_SUBSTRING]      (from anywhere)
# EMU_CP_ASYNC=eager makes cp.async copy at issue time instead of at the wait (shim.h);
# EMU_BOTH=1 runs both modes. EMU_DIGEST=1 prints a hash of each checked output's bits: two source
# trees' runs, diffed, show whether a change meant to keep every output bit for bit does.
set -eu
cd "$(dirname "$0")/../../.."
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
python3 dev/cuda/host_emulation/extract.py --mma "$dir/kernels_mma.h"
cp dev/cuda/host_emulation/shim.h "$dir/"
g++ -std=c++20 -O2 -fno-strict-aliasing -pthread -w ${EMU_CXXFLAGS:-} -I "$dir" dev/cuda/host_emulation/emulate_mma.cpp -o "$dir/emulate_mma"
# a __syncthreads that not every thread reaches hangs the emulation: the timeout says so. 1700 s,
# under ctest's 1800 for emulation.tensor_core_kernels: the whole quick run took 1120 s on an idle
# 2-core machine in round 29, and past 1200 s (the limit until then) with other jobs beside it
timeout 1700 "$dir/emulate_mma" "$@"
if [ "${EMU_BOTH:-0}" = 1 ]; then
  echo "--- again with EMU_CP_ASYNC=eager"
  EMU_CP_ASYNC=eager timeout 1700 "$dir/emulate_mma" "$@"
fi
