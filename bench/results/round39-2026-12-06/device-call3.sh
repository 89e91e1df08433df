#!/usr/bin/env bash
# Round 39, call 3 (carry .gpucarry with COMMIT and gtest-src), trimmed to the device time left: the
# finish's version 3 (one thread's fences around the barriers, and a queue of up to 3 tiles per
# block finished when ready, a wait only when it is full; call 2's version 2: every thread fenced
# after each item, bwd_local 2.98 ms a launch against 1.50 + 0.29 for the three kernels). (1) build
# with the tests; the finish's test; (2) one round of the switch at BDH-8k and BDH-base,
# forward+backward; (3) Nsight durations of bwd_local with the finish at BDH-8k.
LOGS=/tmp/logs3 source bench/results/round32-prepared/call_common.sh
stage build
OUT=$L bash scripts/cuda_device_run.sh build >> $S 2>&1 || { pack; exit 1; }
stage tests
(cd /tmp/b && timeout 60 tests/test_cuda --gtest_filter='Cuda.BwdLocalFinish*' > $L/test_cuda.log 2>&1
 echo "test_cuda (the finish's test) rc=$?") >> $S
grep -E "^\[  (PASSED|FAILED) |Failure" $L/test_cuda.log | head -10 >> $S
pack
R=/tmp/b/tools/rhoscan
ab RHOSCAN_CUDA_BWD_FINISH "0 1" 1 150 --cases BDH-8k,BDH-base --backward
NCU_BENCH_ARGS=--backward ncu_durations RHOSCAN_CUDA_BWD_FINISH "1" "bwd_local" BDH-8k 170
stage end
pack
