#!/usr/bin/env bash
# Round 21, call 6 (the staged fetch: cp.async of the next tile's q, decays and N_0 at the tile's start): norm_scores_mma (norm_apply + chunk_scores_mma in one pass, the forward's
# default) against the two kernels (RHOSCAN_CUDA_NORM_SCORES=0): CUDA suites, sanitizers of the
# new test, alternating A/B, durations, bench.
set -u
export RHOSCAN_COMMIT=$(cat .gpucarry/COMMIT)
B=/tmp/b
S=$OUT/summary.txt
t0=$(date +%s)
stage() { echo "== $1 ($(( $(date +%s) - t0 )) s)"; }
{
stage build
bash scripts/cuda_device_run.sh build || exit 1
grep -E "norm_scores_mma|chunk_scores_mma_kernelI13|norm_apply_kernelI13__nv_bfloat16S2_Li2ELb1ELb1ELb1" -A3 $OUT/build.log | grep -E "Compiling|registers|spill" | sed 's/_ZN7rhoscan11cuda_detail//' | head -12
stage test
timeout 100 $B/tests/test_cuda --gtest_filter='Cuda.NormScores*:Cuda.SavedKeys*' > $OUT/new_tests.log 2>&1; echo "new tests rc=$?"
grep -E "^\[  (PASSED|FAILED)|Failure|Expected|Which is|context|saved" $OUT/new_tests.log | head -30
(cd $B && timeout 200 ctest -j8 -L 'cuda|cli' > $OUT/ctest.log 2>&1); echo "ctest -L cuda|cli rc=$?"
grep -E "tests passed|tests failed|\*\*\*Failed|Timeout" $OUT/ctest.log | head -20
timeout 100 $B/tests/test_backends --gtest_filter='*cuda*' > $OUT/harness.log 2>&1; echo "harness cuda rc=$?"; grep -E "^\[  (PASSED|FAILED)" $OUT/harness.log
stage sanitize
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 $B/tests/test_cuda --gtest_filter='Cuda.NormScoresMatchesNormApplyAndScores:Cuda.SavedKeysReplaceTheNormaliserPass' > $OUT/memcheck.log 2>&1
echo "memcheck rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" $OUT/memcheck.log | head -3
timeout 120 compute-sanitizer --tool racecheck --error-exitcode 9 $B/tests/test_cuda --gtest_filter='Cuda.NormScoresMatchesNormApplyAndScores' > $OUT/racecheck.log 2>&1
echo "racecheck rc=$?"; grep -E "RACECHECK SUMMARY|PASSED|FAILED" $OUT/racecheck.log | head -3
stage ab
for r in 1 2; do
  for v in 0 1; do
    echo "-- RHOSCAN_CUDA_NORM_SCORES=$v round $r"
    RHOSCAN_CUDA_NORM_SCORES=$v timeout 60 $B/tools/rhoscan bench --device cuda --cases BDH-8k,BDH-base,long-T8192 --backward --repeats 5 \
      --json $OUT/bench.jsonl --commit "$RHOSCAN_COMMIT+RHOSCAN_CUDA_NORM_SCORES=$v" | grep -E "^(BDH|long)"
  done
done
stage durations
timeout 90 ncu --clock-control none --metrics gpu__time_duration.sum --csv $B/tools/rhoscan bench --device cuda --cases BDH-8k --backward --repeats 1 > $OUT/ncu.csv 2>&1
echo "rc=$?"; python3 dev/cuda/ncu_summary.py $OUT/ncu.csv | sort -k4 -g -r | tee $OUT/durations.txt | head -16
echo "-- instructions, norm_scores_mma (default) and the two kernels it replaces (RHOSCAN_CUDA_NORM_SCORES=0)"
timeout 60 ncu --clock-control none --metrics smsp__inst_executed.sum,gpu__time_duration.sum,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active -k regex:"norm_scores_mma|chunk_scores_mma|norm_apply" -c 3 $B/tools/rhoscan bench --device cuda --cases BDH-8k --repeats 1 > $OUT/ncu_inst1.txt 2>&1
RHOSCAN_CUDA_NORM_SCORES=0 timeout 60 ncu --clock-control none --metrics smsp__inst_executed.sum,gpu__time_duration.sum,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active -k regex:"norm_scores_mma|chunk_scores_mma|norm_apply" -c 4 $B/tools/rhoscan bench --device cuda --cases BDH-8k --repeats 1 > $OUT/ncu_inst0.txt 2>&1
grep -E "norm_scores_mma_kernel|chunk_scores_mma_kernel|norm_apply_kernel|inst_executed|time_duration|warps_active|issue_active" $OUT/ncu_inst1.txt $OUT/ncu_inst0.txt | sed 's/(Dims.*//' | cut -c1-150
stage bench
bash scripts/cuda_device_run.sh bench | grep -E "^(case|BDH|long|step)"
timeout 60 $B/tools/rhoscan bench --device cuda --cases BDH-8k --backward --repeats 5 --save-keys --json $OUT/bench.jsonl --commit "$RHOSCAN_COMMIT+save-keys" | grep -E "^BDH"
timeout 60 $B/tools/rhoscan bench --device cuda --cases BDH-8k --backward --repeats 5 --dtype float16 --json $OUT/bench.jsonl --commit "$RHOSCAN_COMMIT" | grep -E "^BDH"
stage end
} 2>&1 | tee $S
cd $OUT && tar czf logs.tgz --exclude=summary.txt --exclude='bench*.jsonl' --exclude=logs.tgz --exclude=durations.txt * && find . -type f ! -name summary.txt ! -name 'bench*.jsonl' ! -name logs.tgz ! -name durations.txt -delete
