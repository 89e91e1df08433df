#!/usr/bin/env bash
# Round 30, call 2: dq_final on token segments (L / V under 256: BDH-base) and cross_values_mma's
# fetch cursor across items on a persistent grid (RHOSCAN_CUDA_CV_PERSISTENT, default off until
# measured). (1) Build with the tests; the whole CUDA suite and the harness's CUDA cases, then
# test_cuda again with the persistent grid; memcheck and racecheck on the tests that run both
# kernels, both ways. (2) A/B: this tree, this tree built with -DRHOSCAN_CV_PERSISTENT=1, and
# main before these changes (.gpucarry/base, 63482d0), BDH-base and BDH-8k forward+backward in
# three alternating rounds, Nsight durations per kernel at BDH-base in each build.
# Carry .gpucarry (COMMIT, gtest-src, base); run as `bash bench/results/round30-2026-12-05/device-call2.sh`.
set -u
export RHOSCAN_COMMIT=$(cat .gpucarry/COMMIT)
S=$OUT/summary.txt
t0=$(date +%s)
stage() { echo "== $1 ($(( $(date +%s) - t0 )) s)"; }
{
stage build
OUT=$OUT bash scripts/cuda_device_run.sh build || exit 1
grep -A2 -E "cross_values_mma|dq_final" $OUT/build.log | grep -E "registers|spill" | sort | uniq -c | head -8
stage tests
(cd /tmp/b && timeout 200 tests/test_cuda > $OUT/test_cuda.log 2>&1; echo "test_cuda rc=$?")
grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|Expected|Which is" $OUT/test_cuda.log | head -30
(cd /tmp/b && timeout 200 tests/test_backends --gtest_filter='*cuda*' > $OUT/test_backends.log 2>&1; echo "test_backends (cuda) rc=$?")
grep -E "^\[  (PASSED|FAILED) " $OUT/test_backends.log | head -10
(cd /tmp/b && RHOSCAN_CUDA_CV_PERSISTENT=1 timeout 200 tests/test_cuda > $OUT/test_cuda_persistent.log 2>&1; echo "test_cuda (persistent cross_values) rc=$?")
grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|Expected|Which is" $OUT/test_cuda_persistent.log | head -30
F='Cuda.QuadraticAndChunkedBackwardAgree:Cuda.QuadraticBackwardUnderACapIsBitwiseUnchanged:Cuda.DqFinalTokenSegmentsAtSmallL'
for p in 0 1; do
  for tool in memcheck racecheck; do
    RHOSCAN_CUDA_CV_PERSISTENT=$p timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 /tmp/b/tests/test_cuda \
      --gtest_filter="$F" > $OUT/$tool-$p.log 2>&1
    echo "$tool (persistent=$p) rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" $OUT/$tool-$p.log | head -3
  done
done
stage ab
OUT=$OUT AB_VARIANTS="-DRHOSCAN_CV_PERSISTENT=1" AB_TREES=.gpucarry/base AB_CASES=BDH-base,BDH-8k AB_ROUNDS=3 \
  AB_NCU_CASES=BDH-base bash scripts/cuda_device_run.sh ab
stage end
} 2>&1 | tee $S
cd $OUT && tar czf logs.tgz --exclude=summary.txt --exclude='*.jsonl' --exclude=logs.tgz * && find . -type f ! -name summary.txt ! -name '*.jsonl' ! -name logs.tgz -delete
