#!/usr/bin/env bash
# Prepared in round 29 (its device time ran out) for the next session (with quad_dv_mma's P loads a step
# ahead, the same branch): cross_values_mma with hoisted
# fetch offsets, staged 16-byte stores of M's hi and lo blocks, float2 stores of the diagonal blocks
# and the pair decoded by rows (bitwise the same M in the host emulation), on branch round29-candidates.
# Run it on a tree with that branch merged, main's tree without it in .gpucarry/base (with a COMMIT
# file: `git archive main | tar -x -C .gpucarry/base`). (1) Build with the tests; the whole CUDA suite, the harness's CUDA cases,
# memcheck and racecheck on the tests that run the kernel on both backward paths. (2) The A/B
# against main (the tree carried in .gpucarry/base): BDH-base and BDH-8k forward+backward, three
# alternating rounds, and Nsight durations per kernel of BDH-base in both builds.
# Carry .gpucarry (COMMIT, gtest-src, base); run as `bash bench/results/round30-prepared/device-call1-candidates.sh`.
set -u
export RHOSCAN_COMMIT=$(cat .gpucarry/COMMIT)
S=$OUT/summary.txt
t0=$(date +%s)
stage() { echo "== $1 ($(( $(date +%s) - t0 )) s)"; }
{
stage build
OUT=$OUT bash scripts/cuda_device_run.sh build || exit 1
grep -A2 "cross_values_mma" $OUT/build.log | grep -E "registers|spill" | head -4
stage tests
(cd /tmp/b && timeout 200 tests/test_cuda > $OUT/test_cuda.log 2>&1; echo "test_cuda rc=$?")
grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|Expected|Which is" $OUT/test_cuda.log | head -30
(cd /tmp/b && timeout 200 tests/test_backends --gtest_filter='*cuda*' > $OUT/test_backends.log 2>&1; echo "test_backends (cuda) rc=$?")
grep -E "^\[  (PASSED|FAILED) " $OUT/test_backends.log | head -10
for tool in memcheck racecheck; do
  timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 /tmp/b/tests/test_cuda \
    --gtest_filter='Cuda.ValuesReadInPlaceGiveTheCopysResults:Cuda.QuadraticBackwardUnderACapIsBitwiseUnchanged' > $OUT/$tool.log 2>&1
  echo "$tool rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" $OUT/$tool.log | head -3
done
stage ab
OUT=$OUT AB_TREES=.gpucarry/base AB_CASES=BDH-base,BDH-8k AB_ROUNDS=3 AB_NCU_CASES=BDH-base bash scripts/cuda_device_run.sh ab
stage end
} 2>&1 | tee $S
cd $OUT && tar czf logs.tgz --exclude=summary.txt --exclude='*.jsonl' --exclude=logs.tgz * && find . -type f ! -name summary.txt ! -name '*.jsonl' ! -name logs.tgz -delete
