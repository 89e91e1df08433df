#!/usr/bin/env bash
# Round 31, call 2: Pcross as bf16 (cross_scores writes it, or cross_reduce rounds the L splits' float32
# sum into it; quadratic_output and quad_dv read half the bytes, the same bf16 operands) and quad_dv's
# 8-byte dv stores (.gpucarry/v1), then quad_dv's Pcross pieces two steps ahead (this tree).
# (1) Build this tree with the tests; the whole CUDA suite and the harness's CUDA cases; memcheck and
# racecheck on the tests that run cross_scores, quadratic_output and quad_dv. (2) A/B of this tree,
# v1 and main before them (.gpucarry/base, d9f3628): BDH-base and BDH-8k forward and
# forward+backward, three alternating rounds; Nsight per kernel at BDH-base and BDH-8k for each.
# Carry .gpucarry (COMMIT, gtest-src, base, v1); run as `bash bench/results/round31-2026-12-05/device-call2.sh`.
set -u
export RHOSCAN_COMMIT=$(cat .gpucarry/COMMIT)
BASE=$(cat .gpucarry/base/COMMIT) V1=$(cat .gpucarry/v1/COMMIT)
S=$OUT/summary.txt
t0=$(date +%s)
stage() { echo "== $1 ($(( $(date +%s) - t0 )) s)"; }
late() { [ $(( $(date +%s) - t0 )) -gt ${1:-500} ]; }  # (the call's limit is 600 s: leave time to pack)
{
nvidia-smi --query-gpu=name --format=csv,noheader
stage build
OUT=$OUT bash scripts/cuda_device_run.sh build || exit 1
(for t in base v1; do
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
F='Cuda.QuadraticAndChunkedBackwardAgree:Cuda.CrossScoresKernelsMmaAndWgmmaAgree:Cuda.ForwardPathsQuadraticAndChunked:Cuda.SavedBufferReplacesTheRecomputation'
for tool in memcheck racecheck; do
  timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 /tmp/b/tests/test_cuda --gtest_filter="$F" > $OUT/$tool.log 2>&1
  echo "$tool rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" $OUT/$tool.log | head -3
done
stage ab
wait; cat $OUT/base_rc.txt
J=$OUT/bench-ab.jsonl
tool() { case $1 in new) echo /tmp/b/tools/rhoscan;; *) echo /tmp/b_$1/tools/rhoscan;; esac; }
label() { case $1 in new) echo $RHOSCAN_COMMIT;; base) echo $BASE;; v1) echo $V1;; esac; }
for r in 1 2 3; do
  late 440 && { echo "(round $r skipped: late)"; break; }
  for v in new v1 base; do
    R=$(tool $v); c=$(label $v)
    echo "-- $c (round $r)"
    timeout 60 $R bench --device cuda --cases BDH-base,BDH-8k --backward --repeats 5 --json $J --commit "$c" 2>&1 | grep -E "^BDH"
  done
done
echo "-- $RHOSCAN_COMMIT, the forward forced quadratic at BDH-base (Pcross now bf16; the scan forward is the default there)"
for r in 1 2; do
  RHOSCAN_CUDA_FORWARD_PATH=quadratic timeout 60 /tmp/b/tools/rhoscan bench --device cuda --cases BDH-base --repeats 5 \
    --json $J --commit "$RHOSCAN_COMMIT+forward=quadratic" 2>&1 | grep -E "^BDH"
  timeout 60 /tmp/b/tools/rhoscan bench --device cuda --cases BDH-base --repeats 5 2>&1 | grep -E "^BDH"
done
stage ncu
for vc in new:BDH-base v1:BDH-base base:BDH-base new:BDH-8k base:BDH-8k; do
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
