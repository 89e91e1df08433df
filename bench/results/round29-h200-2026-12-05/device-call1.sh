#!/usr/bin/env bash
# Round 29, call 1: the backward's quadratic path from L >= T/2 up to T = 512 (quadratic.cuh,
# quadratic_backward_shape). (1) Build with the tests; the whole CUDA suite and the harness's CUDA
# cases. (2) The A/B: forward+backward with the new default against the backward forced chunked
# (RHOSCAN_CUDA_BACKWARD_PATH=chunked, the old default at L < T), three alternating rounds, at
# BDH-base, L = T/2 for T = 256 and 384, L = T/4 at T = 512 (still chunked by the rule: the forced
# quadratic run says whether it should be), T = 1024 at L = T/2 (unchanged, chunked). (3) Main's
# figures (BDH-8k, long, the step). (4) Nsight durations per kernel of one BDH-base
# forward+backward on the new default. Also the bfloat16 values read in place where they are the
# packed rows already (chunk_products.cuh, values_in_place): its test under memcheck, and the A/B
# against the copy (RHOSCAN_CUDA_VALUES_IN_PLACE=0) in (2). Carry .gpucarry with COMMIT (and gtest-src); run as
# `bash bench/results/round29-h200-2026-12-05/device-call1.sh`.
set -u
export RHOSCAN_COMMIT=$(cat .gpucarry/COMMIT)
S=$OUT/summary.txt
t0=$(date +%s)
stage() { echo "== $1 ($(( $(date +%s) - t0 )) s)"; }
{
stage build
OUT=$OUT bash scripts/cuda_device_run.sh build || exit 1
R=/tmp/b/tools/rhoscan
stage tests
(cd /tmp/b && timeout 200 tests/test_cuda > $OUT/test_cuda.log 2>&1; echo "test_cuda rc=$?")
grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|Expected|Which is" $OUT/test_cuda.log | head -30
(cd /tmp/b && timeout 200 tests/test_backends --gtest_filter='*cuda*' > $OUT/test_backends.log 2>&1; echo "test_backends (cuda) rc=$?")
grep -E "^\[  (PASSED|FAILED) " $OUT/test_backends.log | head -10
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 /tmp/b/tests/test_cuda \
  --gtest_filter='Cuda.ValuesReadInPlaceGiveTheCopysResults:Cuda.QuadraticAndChunkedBackwardAgree' > $OUT/memcheck.log 2>&1
echo "memcheck rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" $OUT/memcheck.log | head -3
stage ab
for r in 1 2 3; do
  for path in default chunked quadratic copy; do
    echo "-- backward $path, round $r"
    if [ $path = default ]; then env=(); elif [ $path = copy ]; then env=(RHOSCAN_CUDA_VALUES_IN_PLACE=0);
    else env=(RHOSCAN_CUDA_BACKWARD_PATH=$path); fi
    env "${env[@]}" timeout 90 $R bench --device cuda --cases BDH-base --shape 32,4,1,256,128,256 \
      --shape 32,4,1,384,192,256 --shape 24,4,1,512,128,256 --shape 12,4,1,1024,512,256 \
      --backward --repeats 5 --json $OUT/bench.jsonl --commit "$RHOSCAN_COMMIT+$([ $path = copy ] && echo values=copy || echo backward=$path)" | grep -E "^(BDH|shape)"
  done
done
stage main
timeout 120 $R bench --device cuda --cases BDH-8k,long-T8192,step-8k --backward --repeats 5 --json $OUT/bench.jsonl \
  --commit "$RHOSCAN_COMMIT" | grep -E "^(BDH|long|step)"
stage ncu
timeout 150 ncu --clock-control none --csv --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,smsp__inst_executed.sum \
  $R bench --device cuda --cases BDH-base --backward --repeats 1 > $OUT/ncu_BDH-base.csv 2>&1
echo "-- BDH-base forward+backward (and its warm-up), per kernel"; python3 dev/cuda/ncu_summary.py $OUT/ncu_BDH-base.csv | sort -k4 -g -r | head -24
stage end
} 2>&1 | tee $S
cd $OUT && tar czf logs.tgz --exclude=summary.txt --exclude='*.jsonl' --exclude=logs.tgz * && find . -type f ! -name summary.txt ! -name '*.jsonl' ! -name logs.tgz -delete
