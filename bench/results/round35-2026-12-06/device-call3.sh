#!/usr/bin/env bash
# Round 35, call 3: scan version 3 (wgmma) the default where wgmma runs. (1) build with the tests;
# (2) the CUDA suite (ChunkScanMatchesTheTwoKernels now holds the default and version 2 bitwise to
# the two kernels) and the harness's CUDA cases; (3) memcheck of that test; (4) main's figures;
# (5) a source profile of chunk_scan_wgmma_kernel at BDH-base (the next leads) when time is left.
# $OUT: summary.txt, bench.jsonl, logs.tgz. Carry .gpucarry (COMMIT, gtest-src).
LOGS=/tmp/logs3 source bench/results/round32-prepared/call_common.sh
TEST_CUDA_S=150 TEST_BACKENDS_S=90 build_and_test
R=/tmp/b/tools/rhoscan
sanitize ChunkScanMatchesTheTwoKernels 200 60 memcheck
figures
if ! late 330; then
  stage source
  OUT=$L SOURCE_KERNELS="chunk_scan_wgmma_kernel@BDH-base" bash scripts/cuda_device_run.sh source >> $S 2>&1
  [ -f $L/source_1_sass.csv ] && python3 dev/cuda/sass_hotspots.py $L/source_1_sass.csv --top 30 --regions >> $S 2>&1
  rm -f $L/*.ncu-rep
fi
stage end
pack
