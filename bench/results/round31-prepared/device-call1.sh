#!/usr/bin/env bash
# Prepared in round 30 for the next session (round 30's two calls both landed on an H100). On main:
# (1) build with the tests, the whole CUDA suite and the harness's CUDA cases; (2) main's figures
# (BDH-8k, long-T8192, BDH-base forward and forward+backward, the step) on the card this call gets
# (gpu.txt names it): the README's H200 figures are round 29's; (3) Nsight per kernel at BDH-base
# (durations, DRAM bytes, warp instructions); (4) full Nsight profiles with source of the next
# candidates at BDH-base: quad_readback_wgmma and quad_dv_mma (after bwd_local, the backward's two
# largest kernels there). The summary is written as it goes, so a cut-off call still returns what ran.
# Carry .gpucarry (COMMIT, gtest-src); run as `bash bench/results/round31-prepared/device-call1.sh`.
set -u
export RHOSCAN_COMMIT=$(cat .gpucarry/COMMIT)
S=$OUT/summary.txt
t0=$(date +%s)
stage() { echo "== $1 ($(( $(date +%s) - t0 )) s)" >> $S; }
cat $OUT/gpu.txt >> $S 2>/dev/null
stage build
OUT=$OUT bash scripts/cuda_device_run.sh build >> $S 2>&1 || exit 1
stage tests
(cd /tmp/b && timeout 200 tests/test_cuda > $OUT/test_cuda.log 2>&1; echo "test_cuda rc=$?") >> $S
grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|Expected|Which is" $OUT/test_cuda.log | head -20 >> $S
(cd /tmp/b && timeout 200 tests/test_backends --gtest_filter='*cuda*' > $OUT/test_backends.log 2>&1; echo "test_backends (cuda) rc=$?") >> $S
grep -E "^\[  (PASSED|FAILED) " $OUT/test_backends.log | head -5 >> $S
stage bench
timeout 150 /tmp/b/tools/rhoscan bench --device cuda --cases BDH-8k,long-T8192,BDH-base,step-8k --backward --repeats 5 \
  --json $OUT/bench.jsonl --commit "$RHOSCAN_COMMIT" 2>&1 | grep -E "^(BDH|long|step)" >> $S
stage ncu
timeout 90 ncu --clock-control none --csv --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,smsp__inst_executed.sum \
  /tmp/b/tools/rhoscan bench --device cuda --cases BDH-base --backward --repeats 1 > $OUT/ncu_BDH-base.csv 2>&1
python3 dev/cuda/ncu_summary.py $OUT/ncu_BDH-base.csv | sort -k4 -g -r | head -16 >> $S
stage source
OUT=$OUT SOURCE_KERNELS="quad_readback_wgmma_kernel@BDH-base quad_dv_mma_kernel@BDH-base" bash scripts/cuda_device_run.sh source >> $S 2>&1
for n in 1 2; do python3 dev/cuda/sass_hotspots.py $OUT/source_${n}_sass.csv --top 25 --regions >> $S 2>&1; done
stage end
cd $OUT && tar czf logs.tgz --exclude=summary.txt --exclude='*.jsonl' --exclude='*.ncu-rep' --exclude=logs.tgz * &&
  find . -type f ! -name summary.txt ! -name '*.jsonl' ! -name logs.tgz -delete
