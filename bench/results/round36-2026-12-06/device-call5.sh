#!/usr/bin/env bash
# Round 36, call 5 (run from the repository root; carry .gpucarry with COMMIT and gtest-src):
# quad_dv_mma summing the heads into grad_v (RHOSCAN_CUDA_DV_HEAD_SUM). (1) build with the tests;
# the CUDA suite (the new Cuda.DvHeadSumMatchesThePerPairKernel: every gradient bitwise both ways)
# and the harness's CUDA cases; (2) memcheck of the new test; (3) A/B, alternating, three rounds, at
# BDH-base (where the default heuristic would take it) and BDH-8k (forced: 128 items); (4) Nsight
# durations of quad_dv and dv_accumulate both ways at BDH-base.
LOGS=/tmp/logs5 source bench/results/round32-prepared/call_common.sh
TEST_CUDA_S=150 TEST_BACKENDS_S=90 build_and_test
R=/tmp/b/tools/rhoscan
sanitize DvHeadSumMatchesThePerPairKernel 200 60 memcheck
ab RHOSCAN_CUDA_DV_HEAD_SUM "0 1" 3 300 --cases BDH-base,BDH-8k --backward
NCU_BENCH_ARGS=--backward ncu_durations RHOSCAN_CUDA_DV_HEAD_SUM "0 1" "quad_dv|dv_accumulate" BDH-base 360
stage end
pack
