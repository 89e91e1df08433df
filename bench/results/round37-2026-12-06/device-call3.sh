#!/usr/bin/env bash
# Round 37, call 3 (carry .gpucarry with COMMIT, gtest-src and base/, a copy of 0d68976 with its
# COMMIT): norm_carry and bscan with batches of 8 where the chunks are few (the same bits, emulated),
# gc_reduce with a thread per token where bwd_local's latent blocks are few. (1) build with the tests;
# the CUDA suite and the harness's CUDA cases; (2) memcheck of two backward tests that run the three
# kernels; (3) main's figures; (4) A/B against 0d68976 (scripts/cuda_device_run.sh ab with AB_TREES),
# three rounds, and Nsight durations per build at BDH-8k and BDH-base.
LOGS=/tmp/logs3 source bench/results/round32-prepared/call_common.sh
TEST_CUDA_S=150 TEST_BACKENDS_S=90 build_and_test
R=/tmp/b/tools/rhoscan
sanitize "QuadraticBackwardUnderACapIsBitwiseUnchanged:Cuda.DvHeadSumMatchesThePerPairKernel" 200 90 memcheck
figures
stage ab
OUT=$L AB_TREES=.gpucarry/base AB_CASES=BDH-8k,long-T8192,BDH-base AB_ROUNDS=3 AB_NCU_CASES=BDH-8k,BDH-base \
  timeout 300 bash scripts/cuda_device_run.sh ab >> $S 2>&1
cp $L/bench-ab.jsonl $OUT/bench-ab.jsonl 2>/dev/null
cp $L/ab-durations.txt $OUT/ab-durations.txt 2>/dev/null
stage end
pack
