#!/usr/bin/env bash
# Round 40, call 1 (carry .gpucarry with COMMIT and gtest-src): round 39's call 3, never run, made
# whole. The finish's version 3 (one thread's fences around the barriers, a queue of up to 3 tiles
# per block finished when ready, a wait only when it is full). (1) build with the tests, the CUDA
# suite and the harness; (2) memcheck and racecheck of the finish's test; (3) two rounds of the
# switch at BDH-8k, BDH-base and long-T8192, forward+backward; (4) Nsight durations of bwd_local
# and the three kernels it replaces, both ways, at BDH-8k.
LOGS=/tmp/logs1 source bench/results/round32-prepared/call_common.sh
build_and_test
R=/tmp/b/tools/rhoscan
ab RHOSCAN_CUDA_BWD_FINISH "0 1" 2 330 --cases BDH-8k,BDH-base,long-T8192 --backward
NCU_BENCH_ARGS=--backward ncu_durations RHOSCAN_CUDA_BWD_FINISH "0 1" "bwd_local|gc_reduce|bscan|dq_final" BDH-8k 420
sanitize 'BwdLocalFinish*' 480 60 memcheck racecheck
stage end
pack
