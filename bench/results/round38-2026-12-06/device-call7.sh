#!/usr/bin/env bash
# Round 38, call 7 (carry .gpucarry with COMMIT, gtest-src and base/, a copy of 07e72ad with its
# COMMIT): norm_sums writes s itself where one latent block covers L (BDH-base), so that
# token_sum_reduce is not launched (the same bits, emulated). (1) build with the tests; the CUDA
# suite and the harness's CUDA cases (the saved buffer's bitwise cases compare the forward's s with
# the backward's); (2) A/B against 07e72ad, three rounds, BDH-base and BDH-8k (unchanged there:
# 16 latent blocks); (3) Nsight durations of BDH-base's kernels in both builds.
LOGS=/tmp/logs7 source bench/results/round32-prepared/call_common.sh
TEST_CUDA_S=150 TEST_BACKENDS_S=90 build_and_test
R=/tmp/b/tools/rhoscan
stage ab
OUT=$L AB_TREES=.gpucarry/base AB_CASES=BDH-base,BDH-8k AB_ROUNDS=3 AB_NCU_CASES=BDH-base \
  timeout 300 bash scripts/cuda_device_run.sh ab >> $S 2>&1
cp $L/bench-ab.jsonl $OUT/bench-ab.jsonl 2>/dev/null
cp $L/ab-durations.txt $OUT/ab-durations.txt 2>/dev/null
stage end
pack
