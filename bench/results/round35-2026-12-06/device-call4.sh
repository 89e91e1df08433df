#!/usr/bin/env bash
# Round 35, call 4: where the time goes now, per kernel, at BDH-8k and BDH-base (main with scan
# version 3): Nsight Compute's duration, DRAM bytes and warp instructions of every launch of one
# `rhoscan bench --backward --repeats 1` (a warm-up and one run of each direction), summed per
# kernel by dev/cuda/ncu_summary.py. CLI-only build. $OUT: summary.txt, logs.tgz. No carry needed
# (.gpucarry/COMMIT names the commit when carried).
set -u
S=$OUT/summary.txt L=/tmp/logs4
mkdir -p $L
t0=$(date +%s)
stage() { echo "== $1 ($(( $(date +%s) - t0 )) s)" >> $S; }
nvidia-smi --query-gpu=name --format=csv,noheader >> $S
stage build
cmake -S . -B /tmp/bc -G Ninja -DRHOSCAN_VULKAN=OFF -DRHOSCAN_BUILD_TESTS=OFF -DCMAKE_CUDA_ARCHITECTURES=90a \
  > $L/configure.log 2>&1 && cmake --build /tmp/bc -j16 --target rhoscan_cli > $L/build.log 2>&1 ||
  { echo "build failed" >> $S; tail -20 $L/build.log >> $S; exit 1; }
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,smsp__inst_executed.sum
for c in BDH-8k BDH-base; do
  stage "ncu $c"
  timeout 200 ncu --clock-control none --metrics $M --csv /tmp/bc/tools/rhoscan bench --device cuda --cases $c \
    --backward --repeats 1 > $L/ncu-$c.csv 2>&1
  echo "-- $c (rc $?)" >> $S; python3 dev/cuda/ncu_summary.py $L/ncu-$c.csv >> $S 2>&1
done
stage end
(cd $L && tar czf $OUT/logs.tgz .)
