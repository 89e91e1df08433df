#!/usr/bin/env bash
# Round 37, call 6 (carry .gpucarry with COMMIT and exp/, a copy of branch exp-fs-early at 712c440):
# an experiment for timing only (its rho is wrong): with RHOSCAN_CUDA_DEV_FS_EARLY=1 the quadratic
# forward launches final_state_wgmma on a side stream before norm_scores_mma (reading Kq before it is
# made), so that the two overlap, as they would if norm_sums made the state keys Kq (it reads q
# anyway): is the overlap worth norm_sums' extra 268 MB of writes (~0.09 ms) at BDH-8k? CLI-only build
# of the branch; four rounds alternating, forward only; Nsight is no use here (it serializes).
LOGS=/tmp/logs6 source bench/results/round32-prepared/call_common.sh
stage build
cmake -S .gpucarry/exp -B /tmp/bx -G Ninja -DRHOSCAN_VULKAN=OFF -DRHOSCAN_BUILD_TESTS=OFF -DCMAKE_CUDA_ARCHITECTURES=90a > $L/configure.log 2>&1 &&
  cmake --build /tmp/bx -j16 --target rhoscan_cli > $L/build.log 2>&1 || { tail -20 $L/build.log >> $S; pack; exit 1; }
R=/tmp/bx/tools/rhoscan
export RHOSCAN_COMMIT=712c440
ab RHOSCAN_CUDA_DEV_FS_EARLY "0 1" 4 200 --cases BDH-8k
stage end
pack
