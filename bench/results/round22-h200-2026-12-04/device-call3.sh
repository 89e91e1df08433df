#!/usr/bin/env bash
# Round 22, call 3: quad_readback_wgmma's deferred wait (RHOSCAN_CUDA_READBACK_DEFERRED=1) against
# the default: the readback test, sanitizers, Nsight Compute durations and an alternating A/B.
set -u
export RHOSCAN_COMMIT=$(cat .gpucarry/COMMIT)
B=/tmp/b
S=$OUT/summary.txt
t0=$(date +%s)
stage() { echo "== $1 ($(( $(date +%s) - t0 )) s)"; }
{
stage build
bash scripts/cuda_device_run.sh build || exit 1
grep -E "quad_readback_wgmma_kernelILb0ELi3ELb1ELb1" -A3 $OUT/build.log | grep -E "registers|spill" | head -3
stage test
timeout 150 $B/tests/test_cuda --gtest_filter='Cuda.Readback*:Cuda.QuadraticBackward*' > $OUT/new_tests.log 2>&1; echo "tests rc=$?"
grep -E "^\[  (PASSED|FAILED)|^\[       OK|Failure|Expected|Which is" $OUT/new_tests.log | head -30
RHOSCAN_CUDA_READBACK_DEFERRED=1 timeout 150 compute-sanitizer --tool racecheck --error-exitcode 9 $B/tests/test_cuda --gtest_filter='Cuda.QuadraticAndChunkedBackwardAgree' > $OUT/racecheck.log 2>&1
echo "racecheck (deferred) rc=$?"; grep -E "RACECHECK SUMMARY|PASSED|FAILED" $OUT/racecheck.log | head -3
RHOSCAN_CUDA_READBACK_DEFERRED=1 timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 $B/tests/test_cuda --gtest_filter='Cuda.QuadraticAndChunkedBackwardAgree' > $OUT/memcheck.log 2>&1
echo "memcheck (deferred) rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" $OUT/memcheck.log | head -3
stage durations
M=gpu__time_duration.sum,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
for v in 0 1; do
  echo "-- RHOSCAN_CUDA_READBACK_DEFERRED=$v"
  RHOSCAN_CUDA_READBACK_DEFERRED=$v timeout 60 ncu --clock-control none --metrics $M -k regex:"quad_readback_wgmma" -c 2 $B/tools/rhoscan bench --device cuda --cases BDH-8k,long-T8192 --backward --repeats 1 > $OUT/ncu_$v.txt 2>&1
  grep -E "quad_readback_wgmma_kernel|time_duration|inst_executed|issue_active|hmma" $OUT/ncu_$v.txt | sed 's/(Dims.*//' | cut -c1-150
done
stage ab
for r in 1 2 3; do
  for v in 0 1; do
    echo "-- RHOSCAN_CUDA_READBACK_DEFERRED=$v round $r"
    RHOSCAN_CUDA_READBACK_DEFERRED=$v timeout 60 $B/tools/rhoscan bench --device cuda --cases BDH-8k,BDH-base,long-T8192 --backward --repeats 5 \
      --json $OUT/bench.jsonl --commit "$RHOSCAN_COMMIT+RHOSCAN_CUDA_READBACK_DEFERRED=$v" | grep -E "^(BDH|long).*backward"
  done
done
stage end
} 2>&1 | tee $S
cd $OUT && tar czf logs.tgz --exclude=summary.txt --exclude='bench*.jsonl' --exclude=logs.tgz * && find . -type f ! -name summary.txt ! -name 'bench*.jsonl' ! -name logs.tgz -delete
