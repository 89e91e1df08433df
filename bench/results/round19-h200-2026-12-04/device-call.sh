#!/usr/bin/env bash
# Round 19, call 3: main's build, CUDA suites, sanitizers, readback A/B, durations, bench.
set -u
export RHOSCAN_COMMIT=$(cat .gpucarry/COMMIT)
B=/tmp/b
S=$OUT/summary.txt
t0=$(date +%s)
stage() { echo "== $1 ($(( $(date +%s) - t0 )) s)"; }
{
stage build
bash scripts/cuda_device_run.sh build
grep -E "quad_readback_wgmma" -A3 $OUT/build.log | grep -E "registers|spill" | head -4
stage test
(cd $B && timeout 200 ctest -j8 -L 'cuda|cli' > $OUT/ctest.log 2>&1); echo "ctest -L cuda|cli rc=$?"
grep -E "tests passed|tests failed|\*\*\*Failed|Timeout" $OUT/ctest.log | head -20
timeout 100 $B/tests/test_backends --gtest_filter='*cuda*' > $OUT/harness.log 2>&1; echo "harness cuda rc=$?"; grep -E "^\[  (PASSED|FAILED)" $OUT/harness.log
stage sanitize
SANITIZE_MEMCHECK_FILTER='Cuda.ReadbackKernelsMmaAndWgmmaAgree:Cuda.QuadraticBackwardUnderACapIsBitwiseUnchanged:Cuda.SavedKeysReplaceTheNormaliserPass' \
SANITIZE_RACECHECK_FILTER='Cuda.QuadraticBackwardUnderACapIsBitwiseUnchanged' bash scripts/cuda_device_run.sh sanitize
stage ab
for r in 1 2 3; do for k in mma wgmma; do for keys in "" "--save-keys"; do
  RHOSCAN_CUDA_READBACK=$k timeout 60 $B/tools/rhoscan bench --device cuda --cases BDH-8k --backward --repeats 5 $keys \
    --json $OUT/bench-ab.jsonl --commit "$RHOSCAN_COMMIT+readback=$k${keys:++save-keys}" 2>&1 | grep -E "^BDH-8k +forward\+" | sed "s/^/$k $keys r$r: /"
done; done; done
stage durations
for k in mma wgmma; do
  RHOSCAN_CUDA_READBACK=$k timeout 90 ncu --clock-control none --metrics gpu__time_duration.sum --csv \
    $B/tools/rhoscan bench --device cuda --cases BDH-8k --backward --repeats 1 > $OUT/ncu-readback-$k.csv 2>&1
  echo "-- $k rc=$?"; python3 dev/cuda/ncu_summary.py $OUT/ncu-readback-$k.csv | sort -k4 -g -r | head -12
done
stage bench
bash scripts/cuda_device_run.sh bench | grep -E "^(case|BDH|long|step)"
timeout 60 $B/tools/rhoscan bench --device cuda --cases BDH-8k --backward --repeats 5 --save-keys --json $OUT/bench.jsonl --commit "$RHOSCAN_COMMIT+save-keys" | grep -E "^BDH"
stage end
} 2>&1 | tee $S
