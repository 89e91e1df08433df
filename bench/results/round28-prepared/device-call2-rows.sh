#!/usr/bin/env bash
# Prepared in round 28 (no device again) for the session after it, as its second call (the first:
# bench/results/round27-prepared/device-call1.sh). The quadratic forward's rows variant
# (quadratic_rows_mma: a row block's cross scores and context in one kernel, bfloat16, Lp <= 256),
# written and emulated in round 28, has not run on a GPU. (1) Build with the tests; the CUDA tests
# of the forward paths (ForwardPathRowsAgreesWithQuadratic first) and the harness's bfloat16 cases;
# memcheck and racecheck on the rows test. (2) The A/B: the forward and forward+backward with the
# forward forced to rows (RHOSCAN_CUDA_FORWARD_PATH=rows) against the default, three alternating
# rounds, at BDH-base (where the default is chunk_scan_mma) and at shapes around it (L = T/4 .. 2 T
# at T = 512; T = 256 and 1024 at L = T/2). (3) Nsight durations of both forwards at BDH-base.
# About 8 minutes. Carry .gpucarry with COMMIT (and gtest-src); run as
# `bash bench/results/round28-prepared/device-call2-rows.sh`.
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
(cd /tmp/b && timeout 200 tests/test_cuda --gtest_filter='Cuda.ForwardPathRows*:Cuda.ForwardPath*:Cuda.NormScores*:Cuda.SavedBuffer*:Cuda.QuadraticSideStreams*' \
  > $OUT/test_cuda_paths.log 2>&1; echo "test_cuda (paths) rc=$?")
grep -E "^\[  (PASSED|FAILED) |Failure|Expected|Which is" $OUT/test_cuda_paths.log | head -30
(cd /tmp/b && timeout 120 tests/test_backends --gtest_filter='*cuda*bfloat16*' > $OUT/test_backends.log 2>&1; echo "test_backends (cuda bf16) rc=$?")
grep -E "^\[  (PASSED|FAILED) " $OUT/test_backends.log | head -5
for tool in memcheck racecheck; do
  timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 /tmp/b/tests/test_cuda \
    --gtest_filter='Cuda.ForwardPathRowsAgreesWithQuadratic' > $OUT/$tool.log 2>&1
  echo "$tool rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" $OUT/$tool.log | head -3
done
stage ab
for r in 1 2 3; do
  for path in default rows; do
    echo "-- forward $path, round $r"
    if [ $path = default ]; then env=(); else env=(RHOSCAN_CUDA_FORWARD_PATH=rows); fi
    env "${env[@]}" timeout 90 $R bench --device cuda --cases BDH-base --shape 24,4,1,512,128,256 --shape 16,4,1,512,512,256 \
      --shape 8,4,1,512,1024,256 --shape 32,4,1,256,128,256 --shape 12,4,1,1024,512,256 \
      --backward --repeats 5 --json $OUT/bench.jsonl --commit "$RHOSCAN_COMMIT+forward=$path" | grep -E "^(BDH|shape)"
  done
done
stage ncu
for path in default rows; do
  if [ $path = default ]; then env=(); else env=(RHOSCAN_CUDA_FORWARD_PATH=rows); fi
  env "${env[@]}" timeout 120 ncu --clock-control none --csv --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,smsp__inst_executed.sum \
    $R bench --device cuda --cases BDH-base --repeats 1 > $OUT/ncu_BDH-base_$path.csv 2>&1
  echo "-- BDH-base forward, $path"; python3 dev/cuda/ncu_summary.py $OUT/ncu_BDH-base_$path.csv | sort -k4 -g -r | head -10
done
stage end
} 2>&1 | tee $S
cd $OUT && tar czf logs.tgz --exclude=summary.txt --exclude='*.jsonl' --exclude=logs.tgz * && find . -type f ! -name summary.txt ! -name '*.jsonl' ! -name logs.tgz -delete
