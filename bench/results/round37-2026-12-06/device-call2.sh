#!/usr/bin/env bash
# Round 37, call 2 (carry .gpucarry with COMMIT and gtest-src): the quadratic backward's readback
# pipeline (RHOSCAN_CUDA_BWD_PIPE=k or k:2: quad_readback then bwd_local in parts of k pairs, so that
# a part's W and U are still in the L2 when bwd_local reads them; :2 the readbacks on a side stream,
# part j + 1's beside bwd_local of part j). (1) build with the tests; the CUDA suite (the new
# Cuda.ReadbackPipelineIsBitwiseUnchanged) and the harness's CUDA cases; (2) memcheck of the new test;
# (3) A/B, alternating, at BDH-8k and BDH-base; (4) Nsight durations and DRAM bytes of the two kernels.
LOGS=/tmp/logs2 source bench/results/round32-prepared/call_common.sh
TEST_CUDA_S=180 TEST_BACKENDS_S=90 build_and_test
R=/tmp/b/tools/rhoscan
sanitize ReadbackPipelineIsBitwiseUnchanged 260 90 memcheck
ab RHOSCAN_CUDA_BWD_PIPE "0 1 2 4 8 1:2 2:2 4:2" 2 420 --cases BDH-8k --backward
ab RHOSCAN_CUDA_BWD_PIPE "0 16 32 16:2 32:2" 2 480 --cases BDH-base --backward
NCU_BENCH_ARGS=--backward ncu_durations RHOSCAN_CUDA_BWD_PIPE "0 2 8" "bwd_local|quad_readback" BDH-8k 540
stage end
pack
