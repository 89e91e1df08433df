#!/usr/bin/env bash
# Round 38, call 4 (after the Xq walk's loads were hoisted): the one-pass prototype dev/cuda/fused_forward.cu, versions 1 and 2: its check
# against float64, its BDH-8k times, version 2's phase clocks, memcheck on the small problems; then
# the library's BDH-8k forward per kernel on the same card (Nsight Compute: duration, DRAM bytes,
# warp instructions), the kernels the prototype would replace. Carry .gpucarry (COMMIT).
# $OUT: summary.txt, logs.tgz.
LOGS=/tmp/logs4 source bench/results/round32-prepared/call_common.sh
stage proto-build
nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a -Xptxas -v -I src -I include dev/cuda/fused_forward.cu \
  -o /tmp/ff > $L/ff-build.log 2>&1 || { tail -20 $L/ff-build.log >> $S; pack; exit 1; }
grep -E "registers|spill" $L/ff-build.log >> $S
stage proto-run
timeout 150 /tmp/ff > $L/ff.log 2>&1; echo "fused_forward rc=$?" >> $S; cat $L/ff.log >> $S
pack
stage proto-memcheck
[ -n "${SKIP_MEMCHECK:-}" ] || {
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 /tmp/ff --small > $L/ff-memcheck.log 2>&1
echo "memcheck rc=$?" >> $S; grep -E "ERROR SUMMARY|check" $L/ff-memcheck.log | head -4 >> $S
}
pack
if false; then  # (the library baseline: call 3)
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
