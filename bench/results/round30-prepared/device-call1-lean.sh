#!/usr/bin/env bash
# Prepared in round 29 (lean: under 5 minutes of device time were left, and then none; branch
# round29-candidates): quad_dv_mma's P loads a step ahead, and cross_values_mma with hoisted
# fetch offsets, staged 16-byte stores of M's blocks, float2 diagonal stores and the pair decoded by
# rows. Build with the tests; the CUDA suite; memcheck on the in-place values test (both backward
# paths run the kernel); BDH-base and BDH-8k forward+backward; Nsight durations of BDH-base. The
# summary is written as it goes, so a cut-off call still returns what ran.
# Carry .gpucarry (COMMIT, gtest-src); run as `bash bench/results/round30-prepared/device-call1-lean.sh`.
set -u
export RHOSCAN_COMMIT=$(cat .gpucarry/COMMIT)
S=$OUT/summary.txt
t0=$(date +%s)
stage() { echo "== $1 ($(( $(date +%s) - t0 )) s)" >> $S; }
stage build
OUT=$OUT bash scripts/cuda_device_run.sh build >> $S 2>&1 || exit 1
grep -A2 "cross_values_mma" $OUT/build.log | grep -E "registers|spill" | head -4 >> $S
stage tests
(cd /tmp/b && timeout 100 tests/test_cuda > $OUT/test_cuda.log 2>&1; echo "test_cuda rc=$?") >> $S
grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|Expected|Which is" $OUT/test_cuda.log | head -20 >> $S
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 /tmp/b/tests/test_cuda \
  --gtest_filter='Cuda.ValuesReadInPlaceGiveTheCopysResults' > $OUT/memcheck.log 2>&1
echo "memcheck rc=$?" >> $S; grep -E "ERROR SUMMARY|PASSED|FAILED" $OUT/memcheck.log | head -3 >> $S
stage bench
timeout 40 /tmp/b/tools/rhoscan bench --device cuda --cases BDH-base,BDH-8k --backward --repeats 5 --json $OUT/bench.jsonl \
  --commit "$RHOSCAN_COMMIT" 2>&1 | grep -E "^(BDH|long)" >> $S
stage ncu
timeout 60 ncu --clock-control none --csv --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,smsp__inst_executed.sum \
  /tmp/b/tools/rhoscan bench --device cuda --cases BDH-base --backward --repeats 1 > $OUT/ncu_BDH-base.csv 2>&1
python3 dev/cuda/ncu_summary.py $OUT/ncu_BDH-base.csv | sort -k4 -g -r | head -12 >> $S
stage end
cat $S
cd $OUT && rm -f *.ncu-rep && tar czf logs.tgz --exclude=summary.txt --exclude='*.jsonl' --exclude=logs.tgz * && find . -type f ! -name summary.txt ! -name '*.jsonl' ! -name logs.tgz -delete
