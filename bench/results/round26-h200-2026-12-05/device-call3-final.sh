#!/usr/bin/env bash
# Call 3 of round 26: the combination kept after calls 1 and 2 (branch r26: round 24's and 25's
# candidates without norm_scores_mma's Kd_3 rows on warps 6 and 7 and its shared running power,
# the refill under the products in cross_scores_wgmma only) and the forward's quadratic path from
# L = 2 T. Builds this tree (with tests) and main's sources (.gpucarry/base24/src, CLI only); the CUDA
# suites, racecheck on the changed kernels' tests, two A/B rounds at BDH-8k, BDH-base,
# long-T8192 and T = 512 with L = 2 T and 4 T (where the path rule changed). Carry .gpucarry (COMMIT,
# gtest-src, base24/src); run as `bash bench/results/round26-h200-2026-12-05/device-call3-final.sh`.
set -u
export RHOSCAN_COMMIT=$(cat .gpucarry/COMMIT)
B=/tmp/b
S=$OUT/summary.txt
t0=$(date +%s)
stage() { echo "== $1 ($(( $(date +%s) - t0 )) s)"; }
{
stage build
bash scripts/cuda_device_run.sh build &
mkdir -p /tmp/tbb && tar --exclude=./.gpucarry -cf - . | tar -xf - -C /tmp/tbb && rm -rf /tmp/tbb/src && cp -r .gpucarry/base24/src /tmp/tbb/
(cd /tmp/tbb && cmake -S . -B /tmp/bb -G Ninja -DRHOSCAN_VULKAN=OFF -DCMAKE_CUDA_ARCHITECTURES=90a -DRHOSCAN_BUILD_TESTS=OFF > $OUT/bb_configure.log 2>&1 && cmake --build /tmp/bb -j6 --target rhoscan_cli > $OUT/bb_build.log 2>&1) || { echo "BASE BUILD FAILED"; tail -5 $OUT/bb_build.log; }
wait
[ -x $B/tools/rhoscan ] || { echo "BUILD FAILED"; tail -30 $OUT/build.log; exit 1; }
grep -E "quad_readback_wgmma_kernelILb0ELi3ELb1E|final_state_wgmma_kernelILb0|norm_scores_mma_kernelI13__nv_bfloat16Lb1" -A3 $OUT/build.log | grep -E "registers|spill" | head -8
stage test
timeout 200 $B/tests/test_cuda > $OUT/test_cuda.log 2>&1; echo "test_cuda rc=$?"
grep -E "^\[  (PASSED|FAILED)|Failure|Expected|Which is|grad_" $OUT/test_cuda.log | head -30
timeout 150 $B/tests/test_backends --gtest_filter='*cuda*' > $OUT/harness.log 2>&1; echo "harness cuda rc=$?"; grep -E "^\[  (PASSED|FAILED)" $OUT/harness.log
stage sanitize
timeout 100 compute-sanitizer --tool racecheck --error-exitcode 9 $B/tests/test_cuda \
  --gtest_filter='Cuda.ReadbackKernelsMmaAndWgmmaAgree:Cuda.FinalStateKernelsMmaAndWgmmaAgree:Cuda.NormScoresMatchesNormApplyAndScores' > $OUT/racecheck.log 2>&1
echo "racecheck rc=$?"; grep -E "RACECHECK SUMMARY|PASSED|FAILED" $OUT/racecheck.log | head -3
stage ab
for r in $(seq ${AB_ROUNDS:-2}); do
  for v in bb:55f4a1f b:$RHOSCAN_COMMIT; do
    echo "-- ${v#*:} round $r"
    timeout 70 /tmp/${v%%:*}/tools/rhoscan bench --device cuda --cases BDH-8k,BDH-base,long-T8192 \
      --shape 16,4,1,512,1024,256 --shape 8,4,1,512,2048,256 --backward --repeats 5 \
      --json $OUT/bench.jsonl --commit "${v#*:}" | grep -E "^(BDH|long|shape)"
  done
done
stage end
} 2>&1 | tee $S
cd $OUT && tar czf logs.tgz --exclude=summary.txt --exclude='bench*.jsonl' --exclude=logs.tgz * && find . -type f ! -name summary.txt ! -name 'bench*.jsonl' ! -name logs.tgz -delete
