#!/usr/bin/env bash
# Round 37, call 4 (carry .gpucarry with COMMIT, gtest-src and base/, a copy of 7d81756 with its
# COMMIT): the backward's keys (norm_apply) and recomputed cross scores on the side stream, beside
# the values' packing, cross_values and the readback's wait (the same kernels: the same bits).
# (1) build with the tests; the CUDA suite (QuadraticSideStreamsJoinTheCallersStream now with the
# saved buffer's backward) and the harness's CUDA cases; (2) memcheck of that test; (3) A/B against
# 7d81756, three rounds, BDH-8k, BDH-base, long-T8192; (4) the same build with the side streams off.
LOGS=/tmp/logs4 source bench/results/round32-prepared/call_common.sh
TEST_CUDA_S=150 TEST_BACKENDS_S=90 build_and_test
R=/tmp/b/tools/rhoscan
sanitize "QuadraticSideStreamsJoinTheCallersStream" 200 90 memcheck
stage ab
OUT=$L AB_TREES=.gpucarry/base AB_CASES=BDH-8k,long-T8192,BDH-base AB_ROUNDS=3 \
  timeout 240 bash scripts/cuda_device_run.sh ab >> $S 2>&1
cp $L/bench-ab.jsonl $OUT/bench-ab.jsonl 2>/dev/null
late 500 || ab RHOSCAN_CUDA_SIDE_STREAMS "0 1" 2 520 --cases BDH-8k,BDH-base --backward
stage end
pack
