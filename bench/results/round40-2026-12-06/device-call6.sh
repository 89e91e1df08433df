#!/usr/bin/env bash
# Round 40, call 6 (carry .gpucarry with COMMIT and gtest-src): after call 5 (quadratic_output 0.82 ms
# a launch, its rho0 loads waited for at each step; final_state_wgmma with an init 0.45 ms, spilling): rho0 staged
# by cp.async a step ahead, a^T rho0 added after the final state's stores; the final state's two kernels
# with the state compared (RHOSCAN_CUDA_FINAL_STATE=mma|wgmma). (1) build with the tests, the new
# test, the CUDA suite and the harness's CUDA cases; (2) memcheck of the new test; (3) forward and
# forward+backward with --with-state, RHOSCAN_CUDA_FORWARD_PATH=quadratic against =chunked (the
# default with rho0), two rounds, and the default without the
# state; (4) Nsight per kernel of BDH-8k's forward with the state. (Lost its machine in round 40; since
# then calls with rho0 keep the chunked path by default, so the A/B forces quadratic against chunked.)
LOGS=/tmp/logs6 source bench/results/round32-prepared/call_common.sh
stage build
OUT=$L bash scripts/cuda_device_run.sh build >> $S 2>&1 || { pack; exit 1; }
stage "new test"
(cd /tmp/b && timeout 120 tests/test_cuda --gtest_filter='Cuda.QuadraticForwardFromAnInitialState' > $L/test_new.log 2>&1
 echo "new test rc=$?") >> $S
grep -E "^\[  (PASSED|FAILED) |Failure|Expected|Which is|rms|context|rho" $L/test_new.log | head -30 >> $S
pack
stage tests
(cd /tmp/b && timeout 150 tests/test_cuda > $L/test_cuda.log 2>&1; echo "test_cuda rc=$?") >> $S
grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure" $L/test_cuda.log | head -20 >> $S
(cd /tmp/b && timeout 120 tests/test_backends --gtest_filter='*cuda*' > $L/test_backends.log 2>&1
 echo "test_backends (cuda) rc=$?") >> $S
grep -E "^\[  (PASSED|FAILED) |Failure" $L/test_backends.log | head -10 >> $S
pack
late 250 || { timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 /tmp/b/tests/test_cuda \
  --gtest_filter='Cuda.QuadraticForwardFromAnInitialState' > $L/memcheck.log 2>&1
  echo "memcheck rc=$?" >> $S; grep -E "ERROR SUMMARY" $L/memcheck.log | head -2 >> $S; }
R=/tmp/b/tools/rhoscan
stage ab
for r in 1 2; do
  late 420 && break
  for path in quadratic chunked; do
    echo "-- round $r, forward path $path, with the state" >> $S
    ( export RHOSCAN_CUDA_FORWARD_PATH=$path
      timeout 60 $R bench --device cuda --cases BDH-8k,BDH-base --backward --repeats 5 --with-state --json $J \
        --commit "$RHOSCAN_COMMIT+forward_path=$path" 2>&1 | grep -E "^(BDH|long)" >> $S )
  done
done
echo "-- quadratic with the state, final_state_mma (RHOSCAN_CUDA_FINAL_STATE=mma)" >> $S
RHOSCAN_CUDA_FORWARD_PATH=quadratic RHOSCAN_CUDA_FINAL_STATE=mma timeout 60 $R bench --device cuda --cases BDH-8k --backward --repeats 5 --with-state --json $J \
  --commit "$RHOSCAN_COMMIT+final_state=mma" 2>&1 | grep -E "^(BDH|long)" >> $S
echo "-- without the state" >> $S
timeout 60 $R bench --device cuda --cases BDH-8k,BDH-base,long-T8192 --backward --repeats 5 --json $J \
  --commit "$RHOSCAN_COMMIT" 2>&1 | grep -E "^(BDH|long)" >> $S
pack
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,smsp__inst_executed.sum
late 480 || { stage "ncu BDH-8k forward with the state"
  RHOSCAN_CUDA_FORWARD_PATH=quadratic timeout 80 ncu --clock-control none --metrics $M --csv $R bench --device cuda --cases BDH-8k --repeats 1 \
    --with-state > $L/ncu.csv 2>&1; python3 dev/cuda/ncu_summary.py $L/ncu.csv >> $S 2>&1; }
stage end
pack
