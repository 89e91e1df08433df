#!/usr/bin/env bash
# Round 37, call 5 (carry .gpucarry with COMMIT, gtest-src and base/, a copy of 0ad738d with its
# COMMIT): the value checks on a side stream (the call's kernels no longer queue behind them), and
# the backward's gc_reduce beside bscan and da_accumulate beside dq_final. (1) build with the tests;
# the CUDA suite and the harness's CUDA cases; (2) memcheck of the value-check and side-stream
# tests; (3) A/B against 0ad738d, three rounds, BDH-8k, BDH-base, long-T8192.
LOGS=/tmp/logs5 source bench/results/round32-prepared/call_common.sh
TEST_CUDA_S=150 TEST_BACKENDS_S=90 build_and_test
R=/tmp/b/tools/rhoscan
sanitize "ValueChecksReadWhatTheCallersStreamWrote:Cuda.ValueErrorsWriteNothing:Cuda.SavedHeaderChangedSinceItsForward:Cuda.QuadraticSideStreamsJoinTheCallersStream" 200 120 memcheck
stage ab
OUT=$L AB_TREES=.gpucarry/base AB_CASES=BDH-8k,long-T8192,BDH-base AB_ROUNDS=3 \
  timeout 240 bash scripts/cuda_device_run.sh ab >> $S 2>&1
cp $L/bench-ab.jsonl $OUT/bench-ab.jsonl 2>/dev/null
stage end
pack
