#!/usr/bin/env bash
# Round 38, call 6: the fused small-L forward prototype, versions 1 and 2, dev/cuda/fused_scan.cu (BDH-base's whole
# forward in one kernel, 16-token steps, the state in registers): its checks against float64, its
# BDH-base time, memcheck on the small problems, Nsight Compute on one BDH-base launch of version 2 (launch 33: 6 checks, 23 of version 1, 3 warm-ups); (the library's
# baseline on the same card: call 5).
# Carry .gpucarry (COMMIT). $OUT: summary.txt, logs.tgz.
LOGS=/tmp/logs6 source bench/results/round32-prepared/call_common.sh
stage build
nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a -Xptxas -v -I src -I include dev/cuda/fused_scan.cu \
  -o /tmp/fs > $L/fs-build.log 2>&1 || { tail -20 $L/fs-build.log >> $S; pack; exit 1; }
grep -E "registers|spill" $L/fs-build.log >> $S
stage run
timeout 120 /tmp/fs > $L/fs.log 2>&1; echo "fused_scan rc=$?" >> $S; cat $L/fs.log >> $S
pack
stage memcheck
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 /tmp/fs --small > $L/fs-memcheck.log 2>&1
echo "memcheck rc=$?" >> $S; grep -E "ERROR SUMMARY|check" $L/fs-memcheck.log | head -5 >> $S
pack
stage ncu
timeout 120 ncu --clock-control none -k regex:fused_scan --launch-skip 32 --launch-count 1 \
  --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,smsp__inst_executed.sum \
  --section SpeedOfLight --section WarpStateStats /tmp/fs > $L/fs-ncu.txt 2>&1
echo "ncu rc=$?" >> $S
grep -E "Duration|dram__bytes|smsp__inst_executed|DRAM Throughput|Compute \(SM\)|Warp Cycles Per Issued" $L/fs-ncu.txt | head -12 >> $S
pack
stage end
pack
