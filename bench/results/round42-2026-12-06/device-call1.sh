#!/usr/bin/env bash
# Round 42, call 1 (carry .gpucarry): state_readback_mma version 3 (the states' rows as A fragments in
# registers, W, U and the keys by cp.async with each chunk's first step into three epilogue
# buffers; round 41's version 2: 3.25 ms a launch at BDH-8k on an H100). (1) build with the tests,
# the kernel's ptxas line and its spills in SASS; (2) the carried-state test, then the CUDA suite;
# (3) memcheck of the backward's test; (4) --with-state A/B of the backward path
# (forward chunked), two rounds; (5) Nsight of BDH-8k's backward with the state on the quadratic path.
LOGS=/tmp/logs1 source bench/results/round32-prepared/call_common.sh
stage build
OUT=$L bash scripts/cuda_device_run.sh build >> $S 2>&1 || { pack; exit 1; }
grep -A2 'state_readback' $L/build.log | grep -E 'spill|registers' | head -4 >> $S
lib=$(find /tmp/b -name 'librhoscan*.so*' -type f | head -1)
cuobjdump -sass "$lib" 2>/dev/null | awk '/Function : .*state_readback/{p=1;print;next} /Function :/{p=0} p' > $L/sr.sass
echo "SASS lines $(wc -l < $L/sr.sass 2>/dev/null), LDL $(grep -c LDL $L/sr.sass 2>/dev/null), STL $(grep -c STL $L/sr.sass 2>/dev/null), HMMA $(grep -c HMMA $L/sr.sass 2>/dev/null)" >> $S
stage "new test"
(cd /tmp/b && timeout 120 tests/test_cuda --gtest_filter='Cuda.QuadraticBackwardFromACarriedState' \
   > $L/test_new.log 2>&1; echo "new test rc=$?") >> $S
grep -E "^\[  (PASSED|FAILED|     OK) |Failure|Expected|Which is|rms|grad|Trace|test_cuda.cpp" $L/test_new.log | head -30 >> $S
pack
for tool in memcheck; do
  late 200 && break
  timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 /tmp/b/tests/test_cuda \
    --gtest_filter='Cuda.QuadraticBackwardFromACarriedState' > $L/$tool.log 2>&1
  echo "$tool rc=$?" >> $S; grep -E "ERROR SUMMARY|RACECHECK SUMMARY" $L/$tool.log | head -2 >> $S
done
pack
R=/tmp/b/tools/rhoscan
state_ab 2 250
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,smsp__inst_executed.sum
late 320 || { stage "ncu BDH-8k forward+backward with the state, backward quadratic"
  RHOSCAN_CUDA_FORWARD_PATH=chunked RHOSCAN_CUDA_BACKWARD_PATH=quadratic timeout 70 ncu --clock-control none -k regex:'state_readback|quad_dv|quad_readback' --metrics $M \
    --csv $R bench --device cuda --cases BDH-8k --repeats 1 --backward --with-state > $L/ncu.csv 2>&1
  python3 dev/cuda/ncu_summary.py $L/ncu.csv >> $S 2>&1; }
pack
late 400 || { stage "CUDA suite"
  (cd /tmp/b && timeout 80 tests/test_cuda > $L/test_cuda.log 2>&1; echo "test_cuda rc=$?") >> $S
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure" $L/test_cuda.log | head -10 >> $S; }
stage end
pack
