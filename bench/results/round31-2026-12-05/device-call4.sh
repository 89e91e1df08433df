#!/usr/bin/env bash
# Round 31, call 4: cross_scores_wgmma instantiated per store path (kParts: float32 partials where L
# is split, bf16 Pcross where not), against call 3's regression of it (BDH-base 0.039 -> 0.044 ms a
# launch with a branch on nsplit). (1) Build this tree with the tests; test_cuda; memcheck on the
# four quadratic tests (call 3's tree, fee8d37, changed quadratic_output's P staging and was not
# sanitized). (2) Nsight durations and warp instructions of cross_scores_wgmma, quadratic_output
# and quad_dv in this build and in main before the round (.gpucarry/base, d9f3628), BDH-base and
# BDH-8k; BDH-base and BDH-8k end to end, two alternating rounds.
# Carry .gpucarry (COMMIT, gtest-src, base); run as `bash bench/results/round31-2026-12-05/device-call4.sh`.
set -u
export RHOSCAN_COMMIT=$(cat .gpucarry/COMMIT)
BASE=$(cat .gpucarry/base/COMMIT)
S=$OUT/summary.txt
t0=$(date +%s)
stage() { echo "== $1 ($(( $(date +%s) - t0 )) s)"; }
late() { [ $(( $(date +%s) - t0 )) -gt ${1:-500} ]; }
{
nvidia-smi --query-gpu=name --format=csv,noheader
stage build
OUT=$OUT bash scripts/cuda_device_run.sh build || exit 1
(cmake -S .gpucarry/base -B /tmp/b_base -G Ninja -DRHOSCAN_VULKAN=OFF -DRHOSCAN_BUILD_TESTS=OFF -DCMAKE_CUDA_ARCHITECTURES=90a \
  > $OUT/base_configure.log 2>&1 && cmake --build /tmp/b_base -j8 --target rhoscan_cli > $OUT/base_build.log 2>&1;
  echo "base build rc=$?" > $OUT/base_rc.txt) &
grep -A2 -E "cross_scores_wgmma" $OUT/build.log | grep -E "registers|spill" | sort | uniq -c
stage tests
(cd /tmp/b && timeout 150 tests/test_cuda > $OUT/test_cuda.log 2>&1; echo "test_cuda rc=$?")
grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|Expected|Which is" $OUT/test_cuda.log | head -20
F='Cuda.QuadraticAndChunkedBackwardAgree:Cuda.CrossScoresKernelsMmaAndWgmmaAgree:Cuda.ForwardPathsQuadraticAndChunked:Cuda.SavedBufferReplacesTheRecomputation'
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 /tmp/b/tests/test_cuda --gtest_filter="$F" > $OUT/memcheck.log 2>&1
echo "memcheck rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" $OUT/memcheck.log | head -3
stage ncu
wait; cat $OUT/base_rc.txt
tool() { case $1 in new) echo /tmp/b/tools/rhoscan;; *) echo /tmp/b_$1/tools/rhoscan;; esac; }
for vc in new:BDH-base base:BDH-base new:BDH-8k base:BDH-8k; do
  v=${vc%%:*} c=${vc#*:}
  late 480 && { echo "(skipped: late) $vc"; continue; }
  timeout 60 ncu --clock-control none -k regex:"cross_scores|quadratic_output|quad_dv" \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,smsp__inst_executed.sum --csv \
    $(tool $v) bench --device cuda --cases $c --backward --repeats 1 > $OUT/ncu-$v-$c.csv 2>&1
  echo "-- $v $c"; python3 dev/cuda/ncu_summary.py $OUT/ncu-$v-$c.csv | sort -k4 -g -r
done
stage ab
J=$OUT/bench-ab.jsonl
for r in 1 2; do
  late 520 && { echo "(round $r skipped: late)"; break; }
  for v in new base; do
    c=$([ $v = new ] && echo $RHOSCAN_COMMIT || echo $BASE)
    echo "-- $c (round $r)"
    timeout 40 $(tool $v) bench --device cuda --cases BDH-base,BDH-8k --backward --repeats 5 --json $J --commit "$c" 2>&1 | grep -E "^BDH"
  done
done
stage end
} 2>&1 | tee $S
cd $OUT && tar czf logs.tgz --exclude=summary.txt --exclude='*.jsonl' --exclude=logs.tgz * && find . -type f ! -name summary.txt ! -name '*.jsonl' ! -name logs.tgz -delete
