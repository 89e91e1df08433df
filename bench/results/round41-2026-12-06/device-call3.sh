#!/usr/bin/env bash
# Round 41, call 3 (carry .gpucarry): state_readback_mma version 2 (the states kept in shared memory as
# bf16 hi + lo planes, state_split gone; call 2: 0.89 + 2.24 ms a launch at BDH-8k). (1) build with the tests; the carried-state tests (the suite left out: device time was short);
# (2) memcheck of the backward's; (3) --with-state A/B of the backward path (forward
# chunked, the default with a state), one round (device time was short); (4) Nsight of BDH-8k's backward with the state on
# the quadratic path.
LOGS=/tmp/logs3 source bench/results/round32-prepared/call_common.sh
stage build
OUT=$L bash scripts/cuda_device_run.sh build >> $S 2>&1 || { pack; exit 1; }
stage "new tests"
(cd /tmp/b && timeout 150 tests/test_cuda --gtest_filter='Cuda.QuadraticForwardFromAnInitialState:Cuda.QuadraticBackwardFromACarriedState' \
   > $L/test_new.log 2>&1; echo "new tests rc=$?") >> $S
grep -E "^\[  (PASSED|FAILED|     OK) |Failure|Expected|Which is|rms|grad|context|rho|Trace|test_cuda.cpp" $L/test_new.log | head -40 >> $S
pack
for tool in memcheck; do
  late 150 && break
  timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 /tmp/b/tests/test_cuda \
    --gtest_filter='Cuda.QuadraticBackwardFromACarriedState' > $L/$tool.log 2>&1
  echo "$tool rc=$?" >> $S; grep -E "ERROR SUMMARY|RACECHECK SUMMARY" $L/$tool.log | head -2 >> $S
done
pack
R=/tmp/b/tools/rhoscan
stage ab
for r in 1; do
  late 200 && break
  for b in chunked quadratic; do
    echo "-- round $r, forward chunked, backward $b, with the state" >> $S
    ( export RHOSCAN_CUDA_FORWARD_PATH=chunked RHOSCAN_CUDA_BACKWARD_PATH=$b
      timeout 60 $R bench --device cuda --cases BDH-8k,BDH-base --backward --repeats 5 --with-state --json $J \
        --commit "$RHOSCAN_COMMIT+forward_path=chunked+backward_path=$b" 2>&1 | grep -E "^(BDH|long)" >> $S )
  done
done
pack
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,smsp__inst_executed.sum
late 240 || { stage "ncu BDH-8k forward+backward with the state, backward quadratic"
  RHOSCAN_CUDA_FORWARD_PATH=chunked RHOSCAN_CUDA_BACKWARD_PATH=quadratic timeout 80 ncu --clock-control none --metrics $M \
    --csv $R bench --device cuda --cases BDH-8k --repeats 1 --backward --with-state > $L/ncu.csv 2>&1
  python3 dev/cuda/ncu_summary.py $L/ncu.csv >> $S 2>&1; }
stage end
pack
