#!/usr/bin/env bash
# Round 31, call 3: call 2's kernels (Pcross as bf16, quad_dv's pieces two steps ahead: .gpucarry/v2,
# cc6edc5) with cross_scores' stores choosing their destination once per block (call 2 measured
# cross_scores_wgmma 0.039 -> 0.044 ms a launch at BDH-base with a choice per store) and
# quadratic_output moving Pcross's bf16 pieces as they are (no widening and rounding back).
# (1) Build this tree with the tests; the CUDA suite and the harness's CUDA cases; racecheck on the
# two tests that call 2's timed out on. (2) A/B of this tree, v2 and main before them (.gpucarry/base,
# d9f3628): BDH-base and BDH-8k, three alternating rounds; this tree's long-T8192 and step figures;
# Nsight per kernel at BDH-base and BDH-8k for this tree and the base.
# Carry .gpucarry (COMMIT, gtest-src, base, v2); run as `bash bench/results/round31-2026-12-05/device-call3.sh`.
set -u
export RHOSCAN_COMMIT=$(cat .gpucarry/COMMIT)
BASE=$(cat .gpucarry/base/COMMIT) V2=$(cat .gpucarry/v2/COMMIT)
S=$OUT/summary.txt
t0=$(date +%s)
stage() { echo "== $1 ($(( $(date +%s) - t0 )) s)"; }
late() { [ $(( $(date +%s) - t0 )) -gt ${1:-500} ]; }  # (the call's limit is 600 s: leave time to pack)
{
nvidia-smi --query-gpu=name --format=csv,noheader
stage build
OUT=$OUT bash scripts/cuda_device_run.sh build || exit 1
(for t in base v2; do
  cmake -S .gpucarry/$t -B /tmp/b_$t -G Ninja -DRHOSCAN_VULKAN=OFF -DRHOSCAN_BUILD_TESTS=OFF -DCMAKE_CUDA_ARCHITECTURES=90a \
    > $OUT/${t}_configure.log 2>&1 && cmake --build /tmp/b_$t -j8 --target rhoscan_cli > $OUT/${t}_build.log 2>&1
  echo "$t build rc=$?" >> $OUT/base_rc.txt
done) &
grep -A2 -E "quad_dv_mma|cross_scores_wgmma|quadratic_output_mma_kernelI13" $OUT/build.log | grep -E "registers|spill" | sort | uniq -c | head -8
stage tests
(cd /tmp/b && timeout 200 tests/test_cuda > $OUT/test_cuda.log 2>&1; echo "test_cuda rc=$?")
grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|Expected|Which is" $OUT/test_cuda.log | head -30
(cd /tmp/b && timeout 200 tests/test_backends --gtest_filter='*cuda*' > $OUT/test_backends.log 2>&1; echo "test_backends (cuda) rc=$?")
grep -E "^\[  (PASSED|FAILED) " $OUT/test_backends.log | head -10
F='Cuda.SavedBufferReplacesTheRecomputation:Cuda.QuadraticAndChunkedBackwardAgree'
timeout 170 compute-sanitizer --tool racecheck --error-exitcode 9 /tmp/b/tests/test_cuda --gtest_filter="$F" > $OUT/racecheck.log 2>&1
echo "racecheck rc=$?"; grep -E "RACECHECK SUMMARY|ERROR SUMMARY|PASSED|FAILED|OK \]" $OUT/racecheck.log | head -5
stage ab
wait; cat $OUT/base_rc.txt
J=$OUT/bench-ab.jsonl
tool() { case $1 in new) echo /tmp/b/tools/rhoscan;; *) echo /tmp/b_$1/tools/rhoscan;; esac; }
label() { case $1 in new) echo $RHOSCAN_COMMIT;; base) echo $BASE;; v2) echo $V2;; esac; }
for r in 1 2 3; do
  late 440 && { echo "(round $r skipped: late)"; break; }
  for v in new v2 base; do
    R=$(tool $v); c=$(label $v)
    echo "-- $c (round $r)"
    timeout 60 $R bench --device cuda --cases BDH-base,BDH-8k --backward --repeats 5 --json $J --commit "$c" 2>&1 | grep -E "^BDH"
  done
done
echo "-- $RHOSCAN_COMMIT: long-T8192 and the step"
timeout 90 /tmp/b/tools/rhoscan bench --device cuda --cases long-T8192,step-8k --backward --repeats 5 --json $J \
  --commit "$RHOSCAN_COMMIT" 2>&1 | grep -E "^(long|step)"
stage ncu
for vc in new:BDH-base base:BDH-base new:BDH-8k base:BDH-8k; do
  v=${vc%%:*} c=${vc#*:}
  R=$(tool $v)
  late 520 && { echo "(skipped: late) $vc"; continue; }
  {
    timeout 60 ncu --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,smsp__inst_executed.sum --csv \
      $R bench --device cuda --cases $c --backward --repeats 1 > $OUT/ncu-$v-$c.csv 2>&1
    echo "-- $v $c"; python3 dev/cuda/ncu_summary.py $OUT/ncu-$v-$c.csv | sort -k4 -g -r | grep -E "quad_dv|cross_scores|cross_reduce|quadratic_output|bwd_local|readback"
  }
done
stage end
} 2>&1 | tee $S
cd $OUT && tar czf logs.tgz --exclude=summary.txt --exclude='*.jsonl' --exclude=logs.tgz * && find . -type f ! -name summary.txt ! -name '*.jsonl' ! -name logs.tgz -delete
