#!/usr/bin/env bash
# Round 23, call 5: bwd_local with the next item's M fetched ahead (91f052c) against 7ec5ec0 (call 4's build):
# builds this tree (/tmp/b) and 7ec5ec0's sources (/tmp/bb, CLI only); CUDA suite, harness, sanitizers,
# A/B, bwd_local's Nsight counters.
set -u
export RHOSCAN_COMMIT=$(cat .gpucarry/COMMIT)
B=/tmp/b
S=$OUT/summary.txt
t0=$(date +%s)
stage() { echo "== $1 ($(( $(date +%s) - t0 )) s)"; }
{
stage build
bash scripts/cuda_device_run.sh build || exit 1
grep -E "bwd_local_kernelI13" -A3 $OUT/build.log | grep -E "registers|spill|stack" | head -4
mkdir -p /tmp/bt && tar --exclude=./.gpucarry -cf - . | tar -xf - -C /tmp/bt && rm -rf /tmp/bt/src && cp -r .gpucarry/base23d/src /tmp/bt/
(cd /tmp/bt && cmake -S . -B /tmp/bb -G Ninja -DRHOSCAN_VULKAN=OFF -DCMAKE_CUDA_ARCHITECTURES=90a -DRHOSCAN_BUILD_TESTS=OFF > $OUT/base_configure.log 2>&1 && cmake --build /tmp/bb -j16 --target rhoscan_cli > $OUT/base_build.log 2>&1) || { echo "BASE BUILD FAILED"; tail -5 $OUT/base_build.log; }
stage test
timeout 200 $B/tests/test_cuda > $OUT/test_cuda.log 2>&1; echo "test_cuda rc=$?"
grep -E "^\[  (PASSED|FAILED)|Failure|Expected|Which is|grad_" $OUT/test_cuda.log | head -30
timeout 150 $B/tests/test_backends --gtest_filter='*cuda*' > $OUT/harness.log 2>&1; echo "harness cuda rc=$?"; grep -E "^\[  (PASSED|FAILED)" $OUT/harness.log
stage sanitize
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 $B/tests/test_cuda --gtest_filter='Cuda.QuadraticAndChunkedBackwardAgree:Cuda.BackwardIsBitwiseDeterministic:Cuda.TailChunkAndHvEqualsH' > $OUT/memcheck.log 2>&1
echo "memcheck rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" $OUT/memcheck.log | head -3
timeout 200 compute-sanitizer --tool racecheck --error-exitcode 9 $B/tests/test_cuda --gtest_filter='Cuda.QuadraticAndChunkedBackwardAgree' > $OUT/racecheck.log 2>&1
echo "racecheck rc=$?"; grep -E "RACECHECK SUMMARY|PASSED|FAILED" $OUT/racecheck.log | head -3
stage ab
for r in 1 2; do
  [ -x /tmp/bb/tools/rhoscan ] && { echo "-- base 7ec5ec0 round $r"; timeout 60 /tmp/bb/tools/rhoscan bench --device cuda --cases BDH-8k,BDH-base,long-T8192 --backward --repeats 5 \
      --json $OUT/bench.jsonl --commit "7ec5ec0" | grep -E "^(BDH|long)"; }
  echo "-- new round $r"
  timeout 60 $B/tools/rhoscan bench --device cuda --cases BDH-8k,BDH-base,long-T8192 --backward --repeats 5 \
      --json $OUT/bench.jsonl --commit "$RHOSCAN_COMMIT" | grep -E "^(BDH|long)"
done
stage ncu
M=smsp__inst_executed.sum,gpu__time_duration.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__warp_issue_stalled_barrier_per_warp_active.pct,smsp__warps_eligible.avg.per_cycle_active
for x in /tmp/bb/tools/rhoscan $B/tools/rhoscan; do
  for cs in BDH-8k; do
  echo "-- $x $cs"
  timeout 60 ncu --clock-control none --metrics $M -k regex:"bwd_local" -c 2 $x bench --device cuda --cases $cs --backward --repeats 1 > $OUT/ncu_tmp.txt 2>&1
  grep -E "inst_executed|time_duration|issue_active|barrier|eligible" $OUT/ncu_tmp.txt | cut -c1-150
  done
done
stage end
} 2>&1 | tee $S
cd $OUT && tar czf logs.tgz --exclude=summary.txt --exclude='bench*.jsonl' --exclude=logs.tgz * && find . -type f ! -name summary.txt ! -name 'bench*.jsonl' ! -name logs.tgz -delete
