#!/usr/bin/env bash
# Round 42, call 2 (carry .gpucarry): state_readback_mma version 3 with its fragments' loads from two
# row pointers a thread (call 1: the state's Str4 taken by reference put both parameters on the
# stack, 840 LDL in SASS; 4.28 ms a launch at BDH-8k against version 2's 3.25). (1) build with the
# tests, the kernel's ptxas line and SASS counts; (2) the carried-state test; (3) one --with-state A/B
# round of the backward path; (4) Nsight Compute's full set for one launch of state_readback_mma at
# BDH-8k (details page: stall reasons, memory).
LOGS=/tmp/logs2 source bench/results/round32-prepared/call_common.sh
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
late 260 || { stage "ncu full, state_readback_mma, BDH-8k"
  RHOSCAN_CUDA_FORWARD_PATH=chunked RHOSCAN_CUDA_BACKWARD_PATH=quadratic timeout 120 ncu --clock-control none \
    -k regex:state_readback -c 1 --set full -o $L/sr $R bench --device cuda --cases BDH-8k --repeats 1 --backward \
    --with-state > $L/ncu_full.log 2>&1; echo "ncu rc=$?" >> $S
  ncu --import $L/sr.ncu-rep --page details > $L/sr_details.txt 2>&1
  grep -E "Duration|DRAM Throughput|Memory Throughput|L2 Cache Throughput|Compute \(SM\)|Issued Warp|Eligible Warps|Warp Cycles Per Issued|Achieved Occupancy|Stall|stall" $L/sr_details.txt | head -40 >> $S; }
stage end
pack
