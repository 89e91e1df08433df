#!/usr/bin/env bash
# Round 22, call 1: bwd_local's divisions (the forward's read weights; gw by div.approx.ftz) and
# quad_readback_wgmma's operand as A from registers. Builds this tree (/tmp/b) and the base
# 30738d3's backward sources (/tmp/bb, rhoscan tool only); CUDA suites, sanitizers of the readback
# test, A/B (base, new with RHOSCAN_CUDA_READBACK_REGA=0, new), durations, bench.
set -u
export RHOSCAN_COMMIT=$(cat .gpucarry/COMMIT)
B=/tmp/b
S=$OUT/summary.txt
t0=$(date +%s)
stage() { echo "== $1 ($(( $(date +%s) - t0 )) s)"; }
{
stage build
bash scripts/cuda_device_run.sh build || exit 1
grep -E "bwd_local_kernelI13|quad_readback_wgmma_kernelILb0" -A3 $OUT/build.log | grep -E "Compiling|registers|spill" | sed 's/_ZN7rhoscan11cuda_detail//' | cut -c1-160 | head -12
mkdir -p /tmp/bt && tar --exclude=./.gpucarry -cf - . | tar -xf - -C /tmp/bt && cp -r .gpucarry/base22/src /tmp/bt/
(cd /tmp/bt && cmake -S . -B /tmp/bb -G Ninja -DRHOSCAN_VULKAN=OFF -DCMAKE_CUDA_ARCHITECTURES=90a -DRHOSCAN_BUILD_TESTS=OFF > $OUT/base_configure.log 2>&1 && cmake --build /tmp/bb -j16 --target rhoscan_cli > $OUT/base_build.log 2>&1) || { echo "BASE BUILD FAILED"; tail -5 $OUT/base_build.log; }
stage test
timeout 150 $B/tests/test_cuda --gtest_filter='Cuda.Readback*:Cuda.QuadraticAndChunked*:Cuda.BackwardIsBitwise*:Cuda.SavedKeys*' > $OUT/new_tests.log 2>&1; echo "new tests rc=$?"
grep -E "^\[  (PASSED|FAILED)|Failure|Expected|Which is|grad_" $OUT/new_tests.log | head -30
(cd $B && timeout 240 ctest -j8 -L 'cuda|cli' > $OUT/ctest.log 2>&1); echo "ctest -L cuda|cli rc=$?"
grep -E "tests passed|tests failed|\*\*\*Failed|Timeout" $OUT/ctest.log | head -20
timeout 120 $B/tests/test_backends --gtest_filter='*cuda*' > $OUT/harness.log 2>&1; echo "harness cuda rc=$?"; grep -E "^\[  (PASSED|FAILED)" $OUT/harness.log
stage sanitize
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 $B/tests/test_cuda --gtest_filter='Cuda.ReadbackKernelsMmaAndWgmmaAgree' > $OUT/memcheck.log 2>&1
echo "memcheck rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" $OUT/memcheck.log | head -3
timeout 150 compute-sanitizer --tool racecheck --error-exitcode 9 $B/tests/test_cuda --gtest_filter='Cuda.ReadbackKernelsMmaAndWgmmaAgree' > $OUT/racecheck.log 2>&1
echo "racecheck rc=$?"; grep -E "RACECHECK SUMMARY|PASSED|FAILED" $OUT/racecheck.log | head -3
stage ab
for r in 1 2; do
  if [ -x /tmp/bb/tools/rhoscan ]; then
    echo "-- base 30738d3 round $r"
    timeout 60 /tmp/bb/tools/rhoscan bench --device cuda --cases BDH-8k,BDH-base,long-T8192 --backward --repeats 5 \
      --json $OUT/bench.jsonl --commit "30738d3" | grep -E "^(BDH|long)"
  fi
  for v in 0 1; do
    echo "-- new, RHOSCAN_CUDA_READBACK_REGA=$v round $r"
    RHOSCAN_CUDA_READBACK_REGA=$v timeout 60 $B/tools/rhoscan bench --device cuda --cases BDH-8k,BDH-base,long-T8192 --backward --repeats 5 \
      --json $OUT/bench.jsonl --commit "$RHOSCAN_COMMIT+RHOSCAN_CUDA_READBACK_REGA=$v" | grep -E "^(BDH|long)"
  done
done
stage durations
timeout 90 ncu --clock-control none --metrics gpu__time_duration.sum --csv $B/tools/rhoscan bench --device cuda --cases BDH-8k --backward --repeats 1 > $OUT/ncu.csv 2>&1
echo "rc=$?"; python3 dev/cuda/ncu_summary.py $OUT/ncu.csv | sort -k4 -g -r | tee $OUT/durations.txt | head -12
M=smsp__inst_executed.sum,gpu__time_duration.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__throughput.avg.pct_of_peak_sustained_active
for v in 0 1; do
  echo "-- readback and bwd_local, RHOSCAN_CUDA_READBACK_REGA=$v"
  RHOSCAN_CUDA_READBACK_REGA=$v timeout 60 ncu --clock-control none --metrics $M -k regex:"quad_readback_wgmma|bwd_local" -c 2 $B/tools/rhoscan bench --device cuda --cases BDH-8k --backward --repeats 1 > $OUT/ncu_inst$v.txt 2>&1
  grep -E "quad_readback_wgmma_kernel|bwd_local_kernel|inst_executed|time_duration|issue_active|hmma|wavefronts|l1tex__throughput" $OUT/ncu_inst$v.txt | sed 's/(Dims.*//' | cut -c1-150
done
if [ -x /tmp/bb/tools/rhoscan ]; then
  echo "-- base bwd_local"
  timeout 60 ncu --clock-control none --metrics $M -k regex:"bwd_local" -c 1 /tmp/bb/tools/rhoscan bench --device cuda --cases BDH-8k --backward --repeats 1 > $OUT/ncu_base.txt 2>&1
  grep -E "bwd_local_kernel|inst_executed|time_duration|issue_active|wavefronts|l1tex__throughput" $OUT/ncu_base.txt | sed 's/(Dims.*//' | cut -c1-150
fi
stage bench
bash scripts/cuda_device_run.sh bench | grep -E "^(case|BDH|long|step)"
timeout 60 $B/tools/rhoscan bench --device cuda --cases BDH-8k --backward --repeats 5 --save-keys --json $OUT/bench.jsonl --commit "$RHOSCAN_COMMIT+save-keys" | grep -E "^BDH"
timeout 60 $B/tools/rhoscan bench --device cuda --cases BDH-8k --backward --repeats 5 --dtype float16 --json $OUT/bench.jsonl --commit "$RHOSCAN_COMMIT" | grep -E "^BDH"
stage end
} 2>&1 | tee $S
cd $OUT && tar czf logs.tgz --exclude=summary.txt --exclude='bench*.jsonl' --exclude=logs.tgz --exclude=durations.txt * && find . -type f ! -name summary.txt ! -name 'bench*.jsonl' ! -name logs.tgz ! -name durations.txt -delete
