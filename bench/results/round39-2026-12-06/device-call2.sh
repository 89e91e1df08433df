#!/usr/bin/env bash
# Round 39, call 2 (carry .gpucarry with COMMIT and gtest-src): bwd_local finishes dq itself
# (version 2 of the finish: each block finishes its previous item's tile, waiting for its chunk's gc and B carry;
# call 1's version, the block that completed a chunk finishing all of it, took 61 ms a launch; RHOSCAN_CUDA_BWD_FINISH=0 runs
# gc_reduce, bscan and dq_final after it, as before). (1) build with the tests: the CUDA suite (the
# new Cuda.BwdLocalFinishMatchesTheThreeKernels compares both ways bitwise) and the harness's CUDA
# cases; (2) memcheck and racecheck on the new test; (3) main's figures; (4) A/B of the switch, three
# alternating rounds at BDH-8k, BDH-base and long-T8192, forward+backward; (5) Nsight durations of
# the backward's kernels at BDH-8k both ways.
LOGS=/tmp/logs2 source bench/results/round32-prepared/call_common.sh
TEST_CUDA_S=200 TEST_BACKENDS_S=90 build_and_test
R=/tmp/b/tools/rhoscan
sanitize BwdLocalFinishMatchesTheThreeKernels 330 90 memcheck racecheck
figures
ab RHOSCAN_CUDA_BWD_FINISH "0 1" 3 470 --cases BDH-8k,BDH-base,long-T8192 --backward
NCU_BENCH_ARGS=--backward ncu_durations RHOSCAN_CUDA_BWD_FINISH "0 1" "bwd_local|dq_final|bscan|gc_reduce" BDH-8k 530
stage end
pack
