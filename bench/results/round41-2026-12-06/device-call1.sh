#!/usr/bin/env bash
# Round 41, call 1 (carry .gpucarry with COMMIT and gtest-src): round 40's call 6 (lost with its
# machine) and the new quadratic backward from a carried state. (1) build with the tests; the new
# tests Cuda.QuadraticForwardFromAnInitialState and Cuda.QuadraticBackwardFromACarriedState; the CUDA
# suite and the harness's CUDA cases; (2) memcheck of both new tests; (3) --with-state forward and
# forward+backward at BDH-8k and BDH-base, the forward and backward paths forced (quadratic or
# chunked, the default with a state), two rounds; (4) the default without the state; (5) Nsight per
# kernel of BDH-8k's forward+backward with the state on the quadratic paths.
LOGS=/tmp/logs1 source bench/results/round32-prepared/call_common.sh
stage build
OUT=$L bash scripts/cuda_device_run.sh build >> $S 2>&1 || { pack; exit 1; }
stage "new tests"
(cd /tmp/b && timeout 150 tests/test_cuda --gtest_filter='Cuda.QuadraticForwardFromAnInitialState:Cuda.QuadraticBackwardFromACarriedState' \
   > $L/test_new.log 2>&1; echo "new tests rc=$?") >> $S
grep -E "^\[  (PASSED|FAILED|     OK) |Failure|Expected|Which is|rms|grad|context|rho|Trace|test_cuda.cpp" $L/test_new.log | head -40 >> $S
pack
stage tests
(cd /tmp/b && timeout 180 tests/test_cuda > $L/test_cuda.log 2>&1; echo "test_cuda rc=$?") >> $S
grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure" $L/test_cuda.log | head -20 >> $S
(cd /tmp/b && timeout 120 tests/test_backends --gtest_filter='*cuda*' > $L/test_backends.log 2>&1
 echo "test_backends (cuda) rc=$?") >> $S
grep -E "^\[  (PASSED|FAILED) |Failure" $L/test_backends.log | head -10 >> $S
pack
late 300 || { timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 /tmp/b/tests/test_cuda \
  --gtest_filter='Cuda.QuadraticBackwardFromACarriedState:Cuda.QuadraticForwardFromAnInitialState' > $L/memcheck.log 2>&1
  echo "memcheck rc=$?" >> $S; grep -E "ERROR SUMMARY" $L/memcheck.log | head -2 >> $S; }
R=/tmp/b/tools/rhoscan
stage ab
for r in 1 2; do
  late 450 && break
  for paths in chunked:chunked quadratic:chunked quadratic:quadratic; do
    f=${paths%:*} b=${paths#*:}
    echo "-- round $r, forward $f, backward $b, with the state" >> $S
    ( export RHOSCAN_CUDA_FORWARD_PATH=$f RHOSCAN_CUDA_BACKWARD_PATH=$b
      timeout 60 $R bench --device cuda --cases BDH-8k,BDH-base --backward --repeats 5 --with-state --json $J \
        --commit "$RHOSCAN_COMMIT+forward_path=$f+backward_path=$b" 2>&1 | grep -E "^(BDH|long)" >> $S )
  done
done
echo "-- without the state" >> $S
timeout 60 $R bench --device cuda --cases BDH-8k,BDH-base,long-T8192 --backward --repeats 5 --json $J \
  --commit "$RHOSCAN_COMMIT" 2>&1 | grep -E "^(BDH|long)" >> $S
pack
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,smsp__inst_executed.sum
late 500 || { stage "ncu BDH-8k forward+backward with the state, quadratic paths"
  RHOSCAN_CUDA_FORWARD_PATH=quadratic RHOSCAN_CUDA_BACKWARD_PATH=quadratic timeout 80 ncu --clock-control none --metrics $M \
    --csv $R bench --device cuda --cases BDH-8k --repeats 1 --backward --with-state > $L/ncu.csv 2>&1
  python3 dev/cuda/ncu_summary.py $L/ncu.csv >> $S 2>&1; }
stage end
pack
