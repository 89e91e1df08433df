#!/usr/bin/env bash
# Round 34, call 4: chunk_scan_mma version 1 removed (version 2 the only one, the forward's scan
# switchable per call by RHOSCAN_CUDA_FORWARD_SCAN). Build with the tests; the CUDA suite (its
# Cuda.ChunkScanMatchesTheTwoKernels holds the scan to chunk_states_mma + chunk_output_mma bitwise)
# and the harness's CUDA cases; the scan test under memcheck; BDH-base's figures with the scan and
# without it. $OUT: summary.txt, bench.jsonl, logs.tgz. Carry .gpucarry (COMMIT, gtest-src).
LOGS=/tmp/logs4 source bench/results/round32-prepared/call_common.sh
TEST_CUDA_S=120 TEST_BACKENDS_S=90 build_and_test
R=/tmp/b/tools/rhoscan
sanitize ChunkScanMatchesTheTwoKernels 170 50 memcheck
stage figures
for sc in 1 0; do
  echo "-- forward scan=$sc" >> $S
  RHOSCAN_CUDA_FORWARD_SCAN=$sc timeout 30 $R bench --device cuda --cases BDH-base --backward --repeats 5 --json $J \
    --commit "$RHOSCAN_COMMIT$([ $sc = 0 ] && echo +forward_scan=off)" 2>&1 | grep -E "^BDH" >> $S
done
stage end
pack
