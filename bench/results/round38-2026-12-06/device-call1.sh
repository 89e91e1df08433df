#!/usr/bin/env bash
# Round 38, call 1: the one-pass prototype dev/cuda/fused_forward.cu (cross scores + final state
# from q, s and Nc, keys made in shared memory): its check against float64, its BDH-8k time,
# memcheck on the small problems, and Nsight Compute's duration, DRAM bytes and instructions of one
# BDH-8k launch (plus the speed-of-light, occupancy and warp-state sections). On an H200 (whose
# per-kernel baseline is older than the H100's of round 37, call 1) also the library's BDH-8k
# forward per kernel. Carry .gpucarry (COMMIT). $OUT: summary.txt, logs.tgz.
LOGS=/tmp/logs1 source bench/results/round32-prepared/call_common.sh
stage proto-build
nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a -Xptxas -v -I src -I include dev/cuda/fused_forward.cu \
  -o /tmp/ff > $L/ff-build.log 2>&1 || { tail -20 $L/ff-build.log >> $S; pack; exit 1; }
grep -E "registers|spill" $L/ff-build.log >> $S
stage proto-run
timeout 150 /tmp/ff > $L/ff.log 2>&1; echo "fused_forward rc=$?" >> $S; cat $L/ff.log >> $S
pack
stage proto-memcheck
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 /tmp/ff --small > $L/ff-memcheck.log 2>&1
echo "memcheck rc=$?" >> $S; grep -E "ERROR SUMMARY|check" $L/ff-memcheck.log | head -4 >> $S
pack
stage proto-ncu
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,smsp__inst_executed.sum,lts__t_bytes.sum
timeout 150 ncu --clock-control none -k regex:fused --launch-skip 6 --launch-count 1 --metrics $M \
  --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats /tmp/ff > $L/ff-ncu.txt 2>&1
echo "ncu rc=$?" >> $S
grep -E "Duration|dram__bytes|smsp__inst_executed|lts__t_bytes|Memory Throughput|DRAM Throughput|Compute \(SM\)|Registers Per|Achieved Occupancy|Warp Cycles Per Issued|Stall" $L/ff-ncu.txt | head -30 >> $S
pack
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && ! late 360; then
  stage lib-build
  cmake -S . -B /tmp/bc -G Ninja -DRHOSCAN_VULKAN=OFF -DRHOSCAN_BUILD_TESTS=OFF -DCMAKE_CUDA_ARCHITECTURES=90a > $L/configure.log 2>&1 &&
    cmake --build /tmp/bc -j16 --target rhoscan_cli > $L/build.log 2>&1 || { tail -20 $L/build.log >> $S; pack; exit 1; }
  stage lib-ncu
  timeout 120 ncu --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,smsp__inst_executed.sum \
    --csv /tmp/bc/tools/rhoscan bench --device cuda --cases BDH-8k --repeats 1 > $L/ncu-lib.csv 2>&1
  python3 dev/cuda/ncu_summary.py $L/ncu-lib.csv >> $S 2>&1
fi
stage end
pack
