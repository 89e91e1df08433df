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
# The limit is for a kernel that loops forever (a barrier that not every thread reaches is reported
# as a deadlock, shim.h). With the threads as fibers (round 33) the quick run takes ~160 s on one
# core, the full run ~320 s; with one std::thread per CUDA thread the quick run took ~1100 s.
timeout 900 "$dir/emulate_mma" "$@"
if [ "${EMU_BOTH:-0}" = 1 ]; then
  echo "--- again with EMU_CP_ASYNC=eager"
  EMU_CP_ASYNC=eager timeout 900 "$dir/emulate_mma" "$@"
fi
