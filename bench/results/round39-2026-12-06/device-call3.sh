#!/usr/bin/env bash
# Round 39, call 3 (carry .gpucarry with COMMIT and gtest-src): the finish with one thread's fences, and a
# queue of up to 3 tiles finished when ready (a wait only when it is full), with one thread's fences
# around the barriers (call 2: every thread fenced after each item, and bwd_local took 2.98 ms a
# launch against 1.50 + 0.29 for the three kernels). (1) build with the tests; the finish's test and
# the determinism test; (2) A/B of RHOSCAN_CUDA_BWD_FINISH, two rounds; (3) Nsight durations both ways.
LOGS=/tmp/logs3 source bench/results/round32-prepared/call_common.sh
stage build
OUT=$L bash scripts/cuda_device_run.sh build >> $S 2>&1 || { pack; exit 1; }
stage tests
(cd /tmp/b && timeout 120 tests/test_cuda --gtest_filter='Cuda.BwdLocalFinish*:Cuda.BackwardIsBitwiseDeterministic:Cuda.QuadraticAndChunkedBackwardAgree' \
  > $L/test_cuda.log 2>&1; echo "test_cuda (3 tests) rc=$?") >> $S
grep -E "^\[  (PASSED|FAILED) |Failure" $L/test_cuda.log | head -10 >> $S
pack
R=/tmp/b/tools/rhoscan
ab RHOSCAN_CUDA_BWD_FINISH "0 1" 2 300 --cases BDH-8k,BDH-base,long-T8192 --backward
NCU_BENCH_ARGS=--backward ncu_durations RHOSCAN_CUDA_BWD_FINISH "0 1" "bwd_local|dq_final|bscan|gc_reduce" BDH-8k 380
stage end
pack
