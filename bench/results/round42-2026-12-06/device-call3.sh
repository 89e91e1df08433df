#!/usr/bin/env bash
# Round 42, call 3 (carry .gpucarry): state_readback_mma version 3 with the dots read beside the GR
# fragments (no loop of global loads of its own) and the next item's state rows prefetched into the L2
# (call 2: 3.26 ms a launch at BDH-8k, equal to version 2; long-scoreboard stalls 39 %). (1) build
# with the tests; (2) the carried-state test; (3) one --with-state A/B round of the backward path;
# (4) Nsight durations of the quadratic backward's kernels at BDH-8k with the state.
LOGS=/tmp/logs3 source bench/results/round32-prepared/call_common.sh
stage build
OUT=$L bash scripts/cuda_device_run.sh build >> $S 2>&1 || { pack; exit 1; }
grep -A2 'state_readback' $L/build.log | grep -E 'spill|registers' | head -4 >> $S
lib=$(find /tmp/b -name 'librhoscan*.so*' -type f | head -1)
cuobjdump -sass "$lib" 2>/dev/null | awk '/Function : .*state_readback/{p=1;print;next} /Function :/{p=0} p' > $L/sr.sass
echo "SASS lines $(wc -l < $L/sr.sass), LDL $(grep -c LDL $L/sr.sass), STL $(grep -c STL $L/sr.sass), HMMA $(grep -c HMMA $L/sr.sass)" >> $S
stage "new test"
(cd /tmp/b && timeout 120 tests/test_cuda --gtest_filter='Cuda.QuadraticBackwardFromACarriedState' \
   > $L/test_new.log 2>&1; echo "new test rc=$?") >> $S
grep -E "^\[  (PASSED|FAILED|     OK) |Failure|Expected|Which is" $L/test_new.log | head -20 >> $S
pack
R=/tmp/b/tools/rhoscan
state_ab 1 200
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,smsp__inst_executed.sum
late 230 || { stage "ncu BDH-8k with the state, backward quadratic"
  RHOSCAN_CUDA_FORWARD_PATH=chunked RHOSCAN_CUDA_BACKWARD_PATH=quadratic timeout 60 ncu --clock-control none \
    -k regex:'state_readback|quad_dv|quad_readback' --metrics $M --csv $R bench --device cuda --cases BDH-8k --repeats 1 \
    --backward --with-state > $L/ncu.csv 2>&1
  python3 dev/cuda/ncu_summary.py $L/ncu.csv >> $S 2>&1; }
stage end
pack
