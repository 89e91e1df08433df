#!/usr/bin/env bash
# Round 35, call 5 (asked of an H200): main's figures for the README (BDH-8k, long-T8192, BDH-base,
# the step) and BDH-base with scan version 2 and 3, two rounds. CLI-only build. $OUT: summary.txt,
# bench.jsonl. Carry .gpucarry (COMMIT).
set -u
S=$OUT/summary.txt J=$OUT/bench.jsonl C=$(cat .gpucarry/COMMIT)
t0=$(date +%s)
stage() { echo "== $1 ($(( $(date +%s) - t0 )) s)" >> $S; }
nvidia-smi --query-gpu=name --format=csv,noheader >> $S
stage build
cmake -S . -B /tmp/bc -G Ninja -DRHOSCAN_VULKAN=OFF -DRHOSCAN_BUILD_TESTS=OFF -DCMAKE_CUDA_ARCHITECTURES=90a \
  > /tmp/configure.log 2>&1 && cmake --build /tmp/bc -j16 --target rhoscan_cli > /tmp/build.log 2>&1 ||
  { echo "build failed" >> $S; tail -20 /tmp/build.log >> $S; exit 1; }
R=/tmp/bc/tools/rhoscan
stage figures
timeout 60 $R bench --device cuda --cases BDH-8k,long-T8192,BDH-base,step-8k --backward --repeats 5 --json $J \
  --commit "$C" 2>&1 | grep -E "^(BDH|long|step)" >> $S
stage ab
for r in 1 2; do
  for v in mma wgmma; do
    echo "-- scan $v (round $r)" >> $S
    RHOSCAN_CUDA_SCAN=$v timeout 30 $R bench --device cuda --cases BDH-base --backward --repeats 5 --json $J \
      --commit "$C+scan=$v" 2>&1 | grep -E "^BDH" >> $S
  done
done
stage end
