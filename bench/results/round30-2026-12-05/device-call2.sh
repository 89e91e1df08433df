#!/usr/bin/env bash
# (Ran at 9e4380d, branch cv-cursor: its RHOSCAN_CUDA_CV_PERSISTENT switch is not on main, see README.md.)
# Round 30, call 2: dq_final on token segments (L / V under 256: BDH-base) and cross_values_mma's
# fetch cursor across items on a persistent grid (RHOSCAN_CUDA_CV_PERSISTENT, default off until
# measured). (1) Build with the tests; the whole CUDA suite and the harness's CUDA cases, then
# test_cuda again with the persistent grid; memcheck and racecheck (persistent grid) on the tests
# that run both kernels. (2) A/B: this build with the grid per item and persistent (the env
# switch), and main before these changes (.gpucarry/base, 63482d0), BDH-base and BDH-8k
# forward+backward in three alternating rounds; Nsight durations per kernel at BDH-base for each.
# Carry .gpucarry (COMMIT, gtest-src, base); run as `bash bench/results/round30-2026-12-05/device-call2.sh`.
set -u
export RHOSCAN_COMMIT=$(cat .gpucarry/COMMIT)
S=$OUT/summary.txt
t0=$(date +%s)
stage() { echo "== $1 ($(( $(date +%s) - t0 )) s)"; }
{
stage build
OUT=$OUT bash scripts/cuda_device_run.sh build || exit 1
(cmake -S .gpucarry/base -B /tmp/b_base -G Ninja -DRHOSCAN_VULKAN=OFF -DRHOSCAN_BUILD_TESTS=OFF -DCMAKE_CUDA_ARCHITECTURES=90a \
  > $OUT/base_configure.log 2>&1 && cmake --build /tmp/b_base -j8 --target rhoscan_cli > $OUT/base_build.log 2>&1;
  echo "base build rc=$?" > $OUT/base_rc.txt) &
grep -A2 -E "cross_values_mma|dq_final" $OUT/build.log | grep -E "registers|spill" | sort | uniq -c | head -8
stage tests
(cd /tmp/b && timeout 200 tests/test_cuda > $OUT/test_cuda.log 2>&1; echo "test_cuda rc=$?")
grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|Expected|Which is" $OUT/test_cuda.log | head -30
(cd /tmp/b && timeout 200 tests/test_backends --gtest_filter='*cuda*' > $OUT/test_backends.log 2>&1; echo "test_backends (cuda) rc=$?")
grep -E "^\[  (PASSED|FAILED) " $OUT/test_backends.log | head -10
(cd /tmp/b && RHOSCAN_CUDA_CV_PERSISTENT=1 timeout 200 tests/test_cuda > $OUT/test_cuda_persistent.log 2>&1; echo "test_cuda (persistent cross_values) rc=$?")
grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|Expected|Which is" $OUT/test_cuda_persistent.log | head -30
F='Cuda.QuadraticAndChunkedBackwardAgree:Cuda.QuadraticBackwardUnderACapIsBitwiseUnchanged:Cuda.DqFinalTokenSegmentsAtSmallL'
for tool in memcheck racecheck; do
  RHOSCAN_CUDA_CV_PERSISTENT=1 timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 /tmp/b/tests/test_cuda \
    --gtest_filter="$F" > $OUT/$tool.log 2>&1
  echo "$tool (persistent) rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" $OUT/$tool.log | head -3
done
stage ab
wait; cat $OUT/base_rc.txt
B0=/tmp/b/tools/rhoscan; BB=/tmp/b_base/tools/rhoscan; J=$OUT/bench-ab.jsonl
for r in 1 2 3; do
  for v in 0 1 base; do
    echo "-- $([ $v = base ] && echo 63482d0 || echo "$RHOSCAN_COMMIT persistent=$v") (round $r)"
    if [ $v = base ]; then R=$BB; c=63482d0; else R=$B0; c="$RHOSCAN_COMMIT+cv_persistent=$v"; fi
    RHOSCAN_CUDA_CV_PERSISTENT=${v/base/0} timeout 60 $R bench --device cuda --cases BDH-base,BDH-8k --backward --repeats 5 \
      --json $J --commit "$c" 2>&1 | grep -E "^BDH"
  done
done
stage ncu
for v in 0 1 base; do
  if [ $v = base ]; then R=$BB; else R=$B0; fi
  RHOSCAN_CUDA_CV_PERSISTENT=${v/base/0} timeout 90 ncu --clock-control none --metrics gpu__time_duration.sum --csv \
    $R bench --device cuda --cases BDH-base --backward --repeats 1 > $OUT/ncu-$v.csv 2>&1
  echo "-- $v BDH-base"; python3 dev/cuda/ncu_summary.py $OUT/ncu-$v.csv | sort -k4 -g -r | head -12
done
stage end
} 2>&1 | tee $S
cd $OUT && tar czf logs.tgz --exclude=summary.txt --exclude='*.jsonl' --exclude=logs.tgz * && find . -type f ! -name summary.txt ! -name '*.jsonl' ! -name logs.tgz -delete
