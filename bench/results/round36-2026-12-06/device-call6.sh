#!/usr/bin/env bash
# Round 36, call 6: main's figures with the head sum as the default (CLI-only build; the suite ran in
# call 5 with the head sum forced both ways). $OUT: summary.txt, bench.jsonl.
LOGS=/tmp/logs6 source bench/results/round32-prepared/call_common.sh
stage build
cmake -S . -B /tmp/bc -G Ninja -DRHOSCAN_VULKAN=OFF -DRHOSCAN_BUILD_TESTS=OFF -DCMAKE_CUDA_ARCHITECTURES=90a > $L/configure.log 2>&1 &&
  cmake --build /tmp/bc -j16 --target rhoscan_cli > $L/build.log 2>&1 || { tail -20 $L/build.log >> $S; pack; exit 1; }
R=/tmp/bc/tools/rhoscan
figures
stage end
pack
