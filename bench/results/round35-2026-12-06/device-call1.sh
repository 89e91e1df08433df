#!/usr/bin/env bash
# Round 35, call 1: round 34's call 4 (scan version 1 removed: the CUDA suite with
# Cuda.ChunkScanMatchesTheTwoKernels, the harness's CUDA cases, memcheck of the scan test, BDH-base
# with the forward's scan on and off), then main's figures (BDH-8k, long-T8192, BDH-base, the step)
# for the README when the card is an H200. $OUT: summary.txt, bench.jsonl, logs.tgz.
LOGS=/tmp/logs1 source bench/results/round32-prepared/call_common.sh
TEST_CUDA_S=120 TEST_BACKENDS_S=90 build_and_test
R=/tmp/b/tools/rhoscan
sanitize ChunkScanMatchesTheTwoKernels 170 50 memcheck
stage scan-on-off
for sc in 1 0; do
  echo "-- forward scan=$sc" >> $S
  RHOSCAN_CUDA_FORWARD_SCAN=$sc timeout 30 $R bench --device cuda --cases BDH-base --backward --repeats 5 --json $J \
    --commit "$RHOSCAN_COMMIT$([ $sc = 0 ] && echo +forward_scan=off)" 2>&1 | grep -E "^BDH" >> $S
done
late 400 || figures
stage end
pack
