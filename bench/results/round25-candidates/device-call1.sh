#!/usr/bin/env bash
# Rounds 24 and 25's candidates on the H200 (both prepared in sessions without a device; run from a
# checkout of branch r25-candidates, which holds round 24's, .gpucarry/COMMIT its commit). Round 24:
# quad_readback_wgmma's persistent grid and cross-item fetch cursor, the refill under the products
# in quad_readback_wgmma, final_state_wgmma and cross_scores_wgmma, norm_scores_mma's Kd_3 rows on
# warps 6 and 7, its shared running power and P slot zeros without a division. Round 25: bwd_local's
# power tables with constant exponents in full chunks, its epilogue without the last sub-block's
# selects, its segment loops unrolled under their bounds; norm_scores_mma's a^ex0 without the low
# bits' products in full chunks; quadratic_output_mma's and quad_dv_mma's longest items first and
# quad_dv_mma's P tile loaded before it is stored. Builds this tree (/tmp/b, with tests) and main's sources
# (.gpucarry/base24/src = 55f4a1f's kernels, main's since; /tmp/bb, CLI only); CUDA suites and
# sanitizers on the candidates, A/B, Nsight durations per kernel (each change is in its own kernels,
# norm_scores_mma's of both rounds together), counters of the changed kernels.
# Carry .gpucarry with: COMMIT (this branch's commit), gtest-src (googletest's sources) and
# base24/src (main's kernels: `git archive 55f4a1f src | tar -x -C .gpucarry/base24/`); run as
# `bash bench/results/round25-candidates/device-call1.sh` (about 8 minutes).
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
[ -x $B/tools/rhoscan ] || { echo "BUILD FAILED"; exit 1; }
grep -E "quad_readback_wgmma_kernelILb0ELi3ELb1E|final_state_wgmma_kernelILb0|cross_scores_wgmma|norm_scores_mma_kernelI13__nv_bfloat16Lb1|bwd_local_kernelI13__nv_bfloat16Lb1ELi5" -A3 $OUT/build.log | grep -E "registers|spill" | head -10
stage test
timeout 200 $B/tests/test_cuda > $OUT/test_cuda.log 2>&1; echo "test_cuda rc=$?"
grep -E "^\[  (PASSED|FAILED)|Failure|Expected|Which is|grad_" $OUT/test_cuda.log | head -30
timeout 150 $B/tests/test_backends --gtest_filter='*cuda*' > $OUT/harness.log 2>&1; echo "harness cuda rc=$?"; grep -E "^\[  (PASSED|FAILED)" $OUT/harness.log
stage sanitize
F='Cuda.QuadraticAndChunkedBackwardAgree:Cuda.ReadbackKernelsMmaAndWgmmaAgree:Cuda.NormScoresMatchesNormApplyAndScores:Cuda.FinalStateKernelsMmaAndWgmmaAgree:Cuda.CrossScoresKernelsMmaAndWgmmaAgree:Cuda.TailChunkAndHvEqualsH'
for tool in memcheck racecheck synccheck; do
  timeout 200 compute-sanitizer --tool $tool --error-exitcode 9 $B/tests/test_cuda --gtest_filter="$F" > $OUT/$tool.log 2>&1
  echo "$tool rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" $OUT/$tool.log | head -3
done
stage ab
for r in 1 2 3; do
  for v in bb:55f4a1f b:$RHOSCAN_COMMIT; do
    echo "-- ${v#*:} round $r"
    timeout 60 /tmp/${v%%:*}/tools/rhoscan bench --device cuda --cases BDH-8k,BDH-base,long-T8192 --backward --repeats 5 \
      --json $OUT/bench.jsonl --commit "${v#*:}" | grep -E "^(BDH|long)"
  done
done
stage ncu
for v in bb b; do
  for cs in BDH-8k long-T8192; do
    timeout 90 ncu --clock-control none --metrics gpu__time_duration.sum --csv /tmp/$v/tools/rhoscan bench --device cuda --cases $cs --backward --repeats 1 > $OUT/ncu_${v}_${cs}.csv 2>&1
    echo "-- $v $cs"; python3 dev/cuda/ncu_summary.py $OUT/ncu_${v}_${cs}.csv | sort -k4 -g -r | head -8
  done
done
M=smsp__inst_executed.sum,gpu__time_duration.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__warps_eligible.avg.per_cycle_active,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__warp_issue_stalled_barrier_per_warp_active.pct
for v in bb b; do
  echo "-- counters $v"
  timeout 120 ncu --clock-control none --metrics $M -k regex:"readback_wgmma|final_state_wgmma|cross_scores_wgmma|norm_scores_mma|bwd_local" -c 5 /tmp/$v/tools/rhoscan bench --device cuda --cases BDH-8k --backward --repeats 1 > $OUT/ncu_tmp_$v.txt 2>&1
  grep -E "_kernel|inst_executed|time_duration|issue_active|eligible|tensor|barrier" $OUT/ncu_tmp_$v.txt | cut -c1-120
done
stage end
} 2>&1 | tee $S
cd $OUT && tar czf logs.tgz --exclude=summary.txt --exclude='bench*.jsonl' --exclude=logs.tgz * && find . -type f ! -name summary.txt ! -name 'bench*.jsonl' ! -name logs.tgz -delete
