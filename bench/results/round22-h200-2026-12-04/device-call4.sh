#!/usr/bin/env bash
# Round 22, call 4: dq_final by four latents and norm_sums with 16 tokens' loads in flight, against
# 2cf8688 (the base build /tmp/bb: this tree with 2cf8688's backward.cu and chunk_kernels.cuh, the
# rhoscan tool only). CUDA suites, memcheck, A/B, Nsight Compute durations, bench.
set -u
export RHOSCAN_COMMIT=$(cat .gpucarry/COMMIT)
B=/tmp/b
S=$OUT/summary.txt
t0=$(date +%s)
stage() { echo "== $1 ($(( $(date +%s) - t0 )) s)"; }
{
stage build
bash scripts/cuda_device_run.sh build || exit 1
grep -E "norm_sums_kernelI13|dq_final_kernelI13__nv_bfloat16Li4" -A3 $OUT/build.log | grep -E "registers|spill" | head -4
mkdir -p /tmp/bt && tar --exclude=./.gpucarry -cf - . | tar -xf - -C /tmp/bt && cp -r .gpucarry/base22b/src /tmp/bt/
(cd /tmp/bt && cmake -S . -B /tmp/bb -G Ninja -DRHOSCAN_VULKAN=OFF -DCMAKE_CUDA_ARCHITECTURES=90a -DRHOSCAN_BUILD_TESTS=OFF > $OUT/base_configure.log 2>&1 && cmake --build /tmp/bb -j16 --target rhoscan_cli > $OUT/base_build.log 2>&1) || { echo "BASE BUILD FAILED"; tail -5 $OUT/base_build.log; }
stage test
(cd $B && timeout 240 ctest -j8 -L 'cuda|cli' > $OUT/ctest.log 2>&1); echo "ctest -L cuda|cli rc=$?"
grep -E "tests passed|tests failed|\*\*\*Failed|Timeout" $OUT/ctest.log | head -20
timeout 120 $B/tests/test_backends --gtest_filter='*cuda*' > $OUT/harness.log 2>&1; echo "harness cuda rc=$?"; grep -E "^\[  (PASSED|FAILED)" $OUT/harness.log
stage sanitize
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 $B/tests/test_cuda --gtest_filter='Cuda.BackwardIsBitwiseDeterministic:Cuda.TailChunkAndHvEqualsH:Cuda.SequenceFirstLayout:Cuda.QuadraticAndChunkedBackwardAgree' > $OUT/memcheck.log 2>&1
echo "memcheck rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" $OUT/memcheck.log | head -3
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 $B/tests/test_backends --gtest_filter='*cuda*bfloat16*' > $OUT/memcheck_harness.log 2>&1
echo "memcheck harness rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" $OUT/memcheck_harness.log | head -3
stage ab
for r in 1 2 3; do
  if [ -x /tmp/bb/tools/rhoscan ]; then
    echo "-- base 2cf8688 round $r"
    timeout 60 /tmp/bb/tools/rhoscan bench --device cuda --cases BDH-8k,BDH-base,long-T8192 --backward --repeats 5 \
      --json $OUT/bench.jsonl --commit "2cf8688" | grep -E "^(BDH|long)"
  fi
  echo "-- new round $r"
  timeout 60 $B/tools/rhoscan bench --device cuda --cases BDH-8k,BDH-base,long-T8192 --backward --repeats 5 \
    --json $OUT/bench.jsonl --commit "$RHOSCAN_COMMIT" | grep -E "^(BDH|long)"
done
stage durations
M=gpu__time_duration.sum,smsp__inst_executed.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed
for tool in $B/tools/rhoscan /tmp/bb/tools/rhoscan; do
  echo "-- $tool"
  timeout 60 ncu --clock-control none --metrics $M -k regex:"norm_sums|dq_final" -c 2 $tool bench --device cuda --cases BDH-8k --backward --repeats 1 > $OUT/ncu_k.txt 2>&1
  grep -E "norm_sums_kernel|dq_final_kernel|time_duration|inst_executed|dram__" $OUT/ncu_k.txt | sed 's/(Dims.*//' | cut -c1-150
done
timeout 90 ncu --clock-control none --metrics gpu__time_duration.sum --csv $B/tools/rhoscan bench --device cuda --cases BDH-8k --backward --repeats 1 > $OUT/ncu.csv 2>&1
echo "rc=$?"; python3 dev/cuda/ncu_summary.py $OUT/ncu.csv | sort -k4 -g -r | tee $OUT/durations.txt | head -14
stage bench
bash scripts/cuda_device_run.sh bench | grep -E "^(case|BDH|long|step)"
timeout 60 $B/tools/rhoscan bench --device cuda --cases BDH-8k --backward --repeats 5 --save-keys --json $OUT/bench.jsonl --commit "$RHOSCAN_COMMIT+save-keys" | grep -E "^BDH"
timeout 60 $B/tools/rhoscan bench --device cuda --cases BDH-8k --backward --repeats 5 --dtype float16 --json $OUT/bench.jsonl --commit "$RHOSCAN_COMMIT" | grep -E "^BDH"
stage end
} 2>&1 | tee $S
cd $OUT && tar czf logs.tgz --exclude=summary.txt --exclude='bench*.jsonl' --exclude=logs.tgz --exclude=durations.txt * && find . -type f ! -name summary.txt ! -name 'bench*.jsonl' ! -name logs.tgz ! -name durations.txt -delete
