#!/usr/bin/env bash
# Round 22, call 2: the measurement switches. bwd_local and the readback at one block per
# multiprocessor (Nsight Compute durations), and the readback / bwd_local sub-batch pipeline on two
# streams (RHOSCAN_CUDA_BWD_OVERLAP) with and without the one-block grids; the new test.
set -u
export RHOSCAN_COMMIT=$(cat .gpucarry/COMMIT)
B=/tmp/b
S=$OUT/summary.txt
t0=$(date +%s)
stage() { echo "== $1 ($(( $(date +%s) - t0 )) s)"; }
{
stage build
bash scripts/cuda_device_run.sh build || exit 1
stage test
timeout 150 $B/tests/test_cuda --gtest_filter='Cuda.QuadraticBackward*:Cuda.Readback*:Cuda.BackwardIsBitwise*' > $OUT/new_tests.log 2>&1; echo "tests rc=$?"
grep -E "^\[  (PASSED|FAILED)|^\[       OK|Failure|Expected|Which is" $OUT/new_tests.log | head -30
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 $B/tests/test_cuda --gtest_filter='Cuda.QuadraticBackwardSubBatchesAndGridsChangeNoBit' > $OUT/memcheck.log 2>&1
echo "memcheck rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" $OUT/memcheck.log | head -3
stage durations
M=gpu__time_duration.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active
for cfg in "0 0" "1 1"; do
  set -- $cfg
  echo "-- RHOSCAN_CUDA_BWD_LOCAL_PER_SM=$1 RHOSCAN_CUDA_READBACK_ONE_PER_SM=$2"
  RHOSCAN_CUDA_BWD_LOCAL_PER_SM=$1 RHOSCAN_CUDA_READBACK_ONE_PER_SM=$2 timeout 60 ncu --clock-control none --metrics $M -k regex:"quad_readback_wgmma|bwd_local" -c 2 $B/tools/rhoscan bench --device cuda --cases BDH-8k --backward --repeats 1 > $OUT/ncu_$1.txt 2>&1
  grep -E "quad_readback_wgmma_kernel|bwd_local_kernel|time_duration|issue_active|warps_active" $OUT/ncu_$1.txt | sed 's/(Dims.*//' | cut -c1-150
done
stage ab
for r in 1 2; do
  for cfg in "1 0 0" "2 0 0" "4 0 0" "8 0 0" "2 1 1" "4 1 1" "8 1 1" "4 1 0" "4 0 1"; do
    set -- $cfg
    echo "-- overlap $1, bwd_local per SM $2, readback one per SM $3, round $r"
    RHOSCAN_CUDA_BWD_OVERLAP=$1 RHOSCAN_CUDA_BWD_LOCAL_PER_SM=$2 RHOSCAN_CUDA_READBACK_ONE_PER_SM=$3 timeout 60 $B/tools/rhoscan bench --device cuda --cases BDH-8k,long-T8192 --backward --repeats 5 \
      --json $OUT/bench.jsonl --commit "$RHOSCAN_COMMIT+overlap=$1,local_per_sm=$2,readback_one=$3" | grep -E "^(BDH|long).*backward"
  done
done
stage nsys
if command -v nsys > /dev/null; then
  RHOSCAN_CUDA_BWD_OVERLAP=4 RHOSCAN_CUDA_BWD_LOCAL_PER_SM=1 RHOSCAN_CUDA_READBACK_ONE_PER_SM=1 timeout 90 nsys profile -o $OUT/overlap4 --force-overwrite true $B/tools/rhoscan bench --device cuda --cases BDH-8k --backward --repeats 1 > $OUT/nsys.log 2>&1
  timeout 60 nsys stats --report cuda_gpu_trace --format csv $OUT/overlap4.nsys-rep > $OUT/trace.csv 2>/dev/null
  grep -E "readback|bwd_local" $OUT/trace.csv | tail -16 | cut -d, -f1,2,19- | cut -c1-140
  rm -f $OUT/*.nsys-rep $OUT/*.sqlite
fi
stage end
} 2>&1 | tee $S
cd $OUT && tar czf logs.tgz --exclude=summary.txt --exclude='bench*.jsonl' --exclude=logs.tgz * && find . -type f ! -name summary.txt ! -name 'bench*.jsonl' ! -name logs.tgz -delete
