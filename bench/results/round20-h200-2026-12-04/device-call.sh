#!/usr/bin/env bash
# Round 20, call 6: main at the round's end (f42463c): CUDA suites, sanitizers of the new tests,
# durations, bench (bfloat16, --save-keys, float16 BDH-8k).
set -u
export RHOSCAN_COMMIT=$(cat .gpucarry/COMMIT)
B=/tmp/b
S=$OUT/summary.txt
t0=$(date +%s)
stage() { echo "== $1 ($(( $(date +%s) - t0 )) s)"; }
{
stage build
bash scripts/cuda_device_run.sh build || exit 1
grep -E "cross_scores_wgmma|final_state_wgmma" -A3 $OUT/build.log | grep -E "Compiling|registers|spill" | sed 's/_ZN7rhoscan11cuda_detail//' | head -9
stage test
(cd $B && timeout 200 ctest -j8 -L 'cuda|cli' > $OUT/ctest.log 2>&1); echo "ctest -L cuda|cli rc=$?"
grep -E "tests passed|tests failed|\*\*\*Failed|Timeout" $OUT/ctest.log | head -20
timeout 100 $B/tests/test_backends --gtest_filter='*cuda*' > $OUT/harness.log 2>&1; echo "harness cuda rc=$?"; grep -E "^\[  (PASSED|FAILED)" $OUT/harness.log
stage sanitize
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 $B/tests/test_cuda --gtest_filter='Cuda.CrossScoresKernelsMmaAndWgmmaAgree:Cuda.FinalStateKernelsMmaAndWgmmaAgree:Cuda.QuadraticSideStreamsJoinTheCallersStream' > $OUT/memcheck.log 2>&1
echo "memcheck rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" $OUT/memcheck.log | head -3
timeout 100 compute-sanitizer --tool racecheck --error-exitcode 9 $B/tests/test_cuda --gtest_filter='Cuda.CrossScoresKernelsMmaAndWgmmaAgree:Cuda.FinalStateKernelsMmaAndWgmmaAgree' > $OUT/racecheck.log 2>&1
echo "racecheck rc=$?"; grep -E "RACECHECK SUMMARY|PASSED|FAILED" $OUT/racecheck.log | head -3
stage durations
timeout 90 ncu --clock-control none --metrics gpu__time_duration.sum --csv $B/tools/rhoscan bench --device cuda --cases BDH-8k --backward --repeats 1 > $OUT/ncu.csv 2>&1
echo "rc=$?"; python3 dev/cuda/ncu_summary.py $OUT/ncu.csv | sort -k4 -g -r | tee $OUT/durations.txt | head -16
stage bench
bash scripts/cuda_device_run.sh bench | grep -E "^(case|BDH|long|step)"
timeout 60 $B/tools/rhoscan bench --device cuda --cases BDH-8k --backward --repeats 5 --save-keys --json $OUT/bench.jsonl --commit "$RHOSCAN_COMMIT+save-keys" | grep -E "^BDH"
timeout 60 $B/tools/rhoscan bench --device cuda --cases BDH-8k --backward --repeats 5 --dtype float16 --json $OUT/bench.jsonl --commit "$RHOSCAN_COMMIT" | grep -E "^BDH"
stage end
} 2>&1 | tee $S
cd $OUT && tar czf logs.tgz --exclude=summary.txt --exclude='bench*.jsonl' --exclude=logs.tgz --exclude=durations.txt * && find . -type f ! -name summary.txt ! -name 'bench*.jsonl' ! -name logs.tgz ! -name durations.txt -delete
