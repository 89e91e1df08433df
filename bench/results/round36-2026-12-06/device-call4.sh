#!/usr/bin/env bash
# Round 36, call 4 (run from the repository root; carry .gpucarry with COMMIT, gtest-src and base/, a
# copy of eb7a1c8 with its COMMIT): three changes from call 3's source profiles, each bitwise the
# same outputs (emulated): final_state_wgmma's decays an item ahead, cross_scores' factors by C's
# squarings, norm_scores' unrolled N carry. (1) build with the tests; the CUDA suite and the
# harness's CUDA cases; (2) memcheck of the three kernels' tests; (3) on an H200, main's figures;
# (4) A/B against eb7a1c8 (scripts/cuda_device_run.sh ab with AB_TREES), three rounds, and Nsight
# durations per build at BDH-8k.
LOGS=/tmp/logs4 source bench/results/round32-prepared/call_common.sh
TEST_CUDA_S=150 TEST_BACKENDS_S=90 build_and_test
R=/tmp/b/tools/rhoscan
sanitize "CrossScoresKernelsMmaAndWgmmaAgree:Cuda.FinalStateKernelsMmaAndWgmmaAgree:Cuda.NormScoresMatchesNormApplyAndScores" 200 90 memcheck
grep -q H200 $S && figures
stage ab
OUT=$L AB_TREES=.gpucarry/base AB_CASES=BDH-8k,long-T8192,BDH-base AB_ROUNDS=3 AB_NCU_CASES=BDH-8k \
  timeout 280 bash scripts/cuda_device_run.sh ab >> $S 2>&1
cp $L/bench-ab.jsonl $OUT/bench-ab.jsonl 2>/dev/null
stage end
pack
