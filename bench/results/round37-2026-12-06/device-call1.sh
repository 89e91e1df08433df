#!/usr/bin/env bash
# Round 37, call 1 (round 36's call 6, extended): main's figures with quad_dv_mma's head sum as the
# default (its default path had not run on a GPU), then where the time goes per kernel at BDH-8k,
# BDH-base and long-T8192 (Nsight Compute's duration, DRAM bytes and warp instructions of every launch
# of one `rhoscan bench --backward --repeats 1`, summed per kernel by dev/cuda/ncu_summary.py).
# CLI-only build. Carry .gpucarry (COMMIT). $OUT: summary.txt, bench.jsonl, logs.tgz.
LOGS=/tmp/logs1 source bench/results/round32-prepared/call_common.sh
stage build
cmake -S . -B /tmp/bc -G Ninja -DRHOSCAN_VULKAN=OFF -DRHOSCAN_BUILD_TESTS=OFF -DCMAKE_CUDA_ARCHITECTURES=90a > $L/configure.log 2>&1 &&
  cmake --build /tmp/bc -j16 --target rhoscan_cli > $L/build.log 2>&1 || { tail -20 $L/build.log >> $S; pack; exit 1; }
R=/tmp/bc/tools/rhoscan
figures
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,smsp__inst_executed.sum
for c in BDH-8k BDH-base long-T8192; do
  late 480 && { echo "(skipped: late) ncu $c" >> $S; continue; }
  stage "ncu $c"
  timeout 150 ncu --clock-control none --metrics $M --csv $R bench --device cuda --cases $c \
    --backward --repeats 1 > $L/ncu-$c.csv 2>&1
  echo "-- $c (rc $?)" >> $S; python3 dev/cuda/ncu_summary.py $L/ncu-$c.csv >> $S 2>&1
  pack
done
stage end
pack
