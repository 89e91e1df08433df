#!/usr/bin/env bash
# Prepared in round 26 (no device time left) for the next session's first call, on main as it is:
# what round 26 did not measure. (1) BDH-base with the backward alone forced quadratic against the
# default (chunked below L = T): round 26's crossover forced both paths together, and the difference
# of two runs put the quadratic backward at ~0.66 against 0.71 ms at T = 512, L = T/2, while it lost
# at T = 1024. (2) The figures not re-run in round 26: --save-keys, float16, the step. (3) Nsight
# durations per kernel of main's kernels at BDH-8k, long-T8192 and BDH-base (round 26's kept
# combination has none of its own), each with its DRAM bytes and warp instructions (round 27: how
# far each kernel is from its own traffic floor, dev/cuda/traffic_floor.py, and what a fusion of two
# passes would save). CLI only, about 6 minutes.
# Carry .gpucarry with COMMIT; run as `bash bench/results/round27-prepared/device-call1.sh`.
set -u
export RHOSCAN_COMMIT=$(cat .gpucarry/COMMIT)
S=$OUT/summary.txt
t0=$(date +%s)
stage() { echo "== $1 ($(( $(date +%s) - t0 )) s)"; }
{
stage build
cmake -S . -B /tmp/b -G Ninja -DRHOSCAN_VULKAN=OFF -DCMAKE_CUDA_ARCHITECTURES=90a -DRHOSCAN_BUILD_TESTS=OFF \
  > $OUT/configure.log 2>&1 && cmake --build /tmp/b -j16 --target rhoscan_cli > $OUT/build.log 2>&1 \
  || { echo "BUILD FAILED"; tail -20 $OUT/build.log; exit 1; }
R=/tmp/b/tools/rhoscan
stage backward-path
for r in 1 2 3; do
  for path in default quadratic; do
    echo "-- backward $path, round $r"
    if [ $path = default ]; then env=(); else env=(RHOSCAN_CUDA_BACKWARD_PATH=quadratic); fi
    env "${env[@]}" timeout 60 $R bench --device cuda --cases BDH-base --shape 12,4,1,1024,512,256 --shape 32,4,1,256,128,256 \
      --backward --repeats 5 --json $OUT/bench.jsonl --commit "$RHOSCAN_COMMIT+backward=$path" | grep -E "^(BDH|shape)"
  done
done
stage figures
timeout 60 $R bench --device cuda --cases BDH-8k --backward --repeats 5 --save-keys --json $OUT/bench.jsonl --commit "$RHOSCAN_COMMIT+save-keys" | grep -E "^BDH"
timeout 60 $R bench --device cuda --cases BDH-8k --backward --repeats 5 --dtype float16 --json $OUT/bench.jsonl --commit "$RHOSCAN_COMMIT" | grep -E "^BDH"
timeout 60 $R bench --device cuda --cases BDH-8k,BDH-base,long-T8192,step-8k --backward --repeats 5 --json $OUT/bench.jsonl --commit "$RHOSCAN_COMMIT" | grep -E "^(BDH|long|step)"
stage ncu
for cs in BDH-8k long-T8192 BDH-base; do
  timeout 180 ncu --clock-control none --csv \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,smsp__inst_executed.sum \
    $R bench --device cuda --cases $cs --backward --repeats 1 > $OUT/ncu_$cs.csv 2>&1
  echo "-- $cs"; python3 dev/cuda/ncu_summary.py $OUT/ncu_$cs.csv | sort -k4 -g -r | head -14
done
stage end
} 2>&1 | tee $S
cd $OUT && tar czf logs.tgz --exclude=summary.txt --exclude='*.jsonl' --exclude=logs.tgz * && find . -type f ! -name summary.txt ! -name '*.jsonl' ! -name logs.tgz -delete
