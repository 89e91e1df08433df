#!/usr/bin/env bash
# Round 38, call 5: the fused small-L forward prototype dev/cuda/fused_scan.cu (BDH-base's whole
# forward in one kernel, 16-token steps, the state in registers): its checks against float64, its
# BDH-base time, memcheck on the small problems, Nsight Compute on one BDH-base launch; then the
# library's BDH-base forward on the same card (`rhoscan bench`, and Nsight per kernel).
# Carry .gpucarry (COMMIT). $OUT: summary.txt, logs.tgz.
LOGS=/tmp/logs5 source bench/results/round32-prepared/call_common.sh
stage build
nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a -Xptxas -v -I src -I include dev/cuda/fused_scan.cu \
  -o /tmp/fs > $L/fs-build.log 2>&1 || { tail -20 $L/fs-build.log >> $S; pack; exit 1; }
grep -E "registers|spill" $L/fs-build.log >> $S
(cmake -S . -B /tmp/bc -G Ninja -DRHOSCAN_VULKAN=OFF -DRHOSCAN_BUILD_TESTS=OFF -DCMAKE_CUDA_ARCHITECTURES=90a > $L/configure.log 2>&1 &&
  cmake --build /tmp/bc -j16 --target rhoscan_cli > $L/build.log 2>&1; echo "lib build rc=$?" > $L/lib-rc.txt) &
stage run
timeout 120 /tmp/fs > $L/fs.log 2>&1; echo "fused_scan rc=$?" >> $S; cat $L/fs.log >> $S
pack
stage memcheck
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 /tmp/fs --small > $L/fs-memcheck.log 2>&1
echo "memcheck rc=$?" >> $S; grep -E "ERROR SUMMARY|check" $L/fs-memcheck.log | head -5 >> $S
pack
stage ncu
timeout 120 ncu --clock-control none -k regex:fused --launch-skip 5 --launch-count 1 \
  --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,smsp__inst_executed.sum \
  --section SpeedOfLight --section WarpStateStats /tmp/fs > $L/fs-ncu.txt 2>&1
echo "ncu rc=$?" >> $S
grep -E "Duration|dram__bytes|smsp__inst_executed|DRAM Throughput|Compute \(SM\)|Warp Cycles Per Issued" $L/fs-ncu.txt | head -12 >> $S
pack
stage lib
wait
cat $L/lib-rc.txt >> $S
R=/tmp/bc/tools/rhoscan
for r in 1 2; do
  timeout 60 $R bench --device cuda --cases BDH-base --repeats 5 2>&1 | grep -E "^BDH" >> $S
done
timeout 120 ncu --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,smsp__inst_executed.sum \
  --csv $R bench --device cuda --cases BDH-base --repeats 1 > $L/ncu-lib.csv 2>&1
python3 dev/cuda/ncu_summary.py $L/ncu-lib.csv >> $S 2>&1
stage end
pack
