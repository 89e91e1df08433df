#!/usr/bin/env bash
# Round 38, call 8: main's figures (BDH-8k, long-T8192, BDH-base, the step) on whatever card this
# call gets (asked as nvidia-h200: the README's H200 figures are round 29's). CLI-only build.
# Carry .gpucarry (COMMIT). $OUT: summary.txt, bench.jsonl, logs.tgz.
LOGS=/tmp/logs8 source bench/results/round32-prepared/call_common.sh
stage build
cmake -S . -B /tmp/bc -G Ninja -DRHOSCAN_VULKAN=OFF -DRHOSCAN_BUILD_TESTS=OFF -DCMAKE_CUDA_ARCHITECTURES=90a > $L/configure.log 2>&1 &&
  cmake --build /tmp/bc -j16 --target rhoscan_cli > $L/build.log 2>&1 || { tail -20 $L/build.log >> $S; pack; exit 1; }
R=/tmp/bc/tools/rhoscan
figures
late 200 || figures
stage end
pack
