#!/usr/bin/env bash
# Round 23, call 4: the integrated build without Vulkan (CUDA, the PyTorch 2.11 extension, the BDH
# example) at 7ec5ec0 (bwd_local's epilogue by X, Y and the spread power tables) with an A/B against
# c347514's sources (CLI only): bench, bwd_local's Nsight durations; then the BDH GPU preset, the
# CUDA and libtorch ctest cases, the example's tests and the PyTorch suite on CUDA tensors.
set -u
export RHOSCAN_COMMIT=$(cat .gpucarry/COMMIT)
S=$OUT/summary.txt
B=/tmp/rhoscan-gpu
t0=$(date +%s)
stage() { echo "== $1 ($(( $(date +%s) - t0 )) s)"; }
{
echo "commit $RHOSCAN_COMMIT"
stage build
(cmake -S .gpucarry/gtest-src -B /tmp/gtb -G Ninja -DCMAKE_INSTALL_PREFIX=/tmp/gtinst -DCMAKE_BUILD_TYPE=Release &&
   cmake --build /tmp/gtb -j16 --target install) > "$OUT/gtest.log" 2>&1 || echo "googletest build failed"
torch_prefix=$(cd / && python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DCMAKE_PREFIX_PATH="/tmp/gtinst;$torch_prefix" -DRHOSCAN_VULKAN=OFF -DCMAKE_CUDA_FLAGS="-Xptxas -v" \
  -DRHOSCAN_TORCH=ON -DRHOSCAN_TORCH_PYTHON="$(command -v python3)" -DRHOSCAN_BUILD_EXAMPLES=ON \
  > "$OUT/configure.log" 2>&1 || { echo "CONFIGURE FAILED"; tail -40 "$OUT/configure.log"; exit 1; }
cmake --build $B -j16 > "$OUT/build.log" 2>&1 || { echo "BUILD FAILED"; grep -E "error" "$OUT/build.log" | head -30; exit 1; }
grep -E "bwd_local_kernelI13" -A3 $OUT/build.log | grep -E "registers|spill" | tail -2
mkdir -p /tmp/bt && tar --exclude=./.gpucarry -cf - . | tar -xf - -C /tmp/bt && rm -rf /tmp/bt/src && cp -r .gpucarry/base23c/src /tmp/bt/
(cd /tmp/bt && cmake -S . -B /tmp/bb -G Ninja -DRHOSCAN_VULKAN=OFF -DCMAKE_CUDA_ARCHITECTURES=90a -DRHOSCAN_BUILD_TESTS=OFF > $OUT/base_configure.log 2>&1 && cmake --build /tmp/bb -j16 --target rhoscan_cli > $OUT/base_build.log 2>&1) || { echo "BASE BUILD FAILED"; tail -5 $OUT/base_build.log; }
stage ab
for r in 1 2; do
  [ -x /tmp/bb/tools/rhoscan ] && { echo "-- base c347514 round $r"; timeout 60 /tmp/bb/tools/rhoscan bench --device cuda --cases BDH-8k,BDH-base,long-T8192 --backward --repeats 5 \
      --json $OUT/bench.jsonl --commit "c347514" | grep -E "^(BDH|long)"; }
  echo "-- new round $r"
  timeout 60 $B/tools/rhoscan bench --device cuda --cases BDH-8k,BDH-base,long-T8192 --backward --repeats 5 \
      --json $OUT/bench.jsonl --commit "$RHOSCAN_COMMIT" | grep -E "^(BDH|long)"
done
M=smsp__inst_executed.sum,gpu__time_duration.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__warp_issue_stalled_barrier_per_warp_active.pct
for x in /tmp/bb/tools/rhoscan $B/tools/rhoscan; do
  echo "-- $x BDH-8k"
  timeout 60 ncu --clock-control none --metrics $M -k regex:"bwd_local" -c 2 $x bench --device cuda --cases BDH-8k --backward --repeats 1 > $OUT/ncu_tmp.txt 2>&1
  grep -E "inst_executed|time_duration|issue_active|barrier" $OUT/ncu_tmp.txt | cut -c1-150
done
timeout 90 ncu --clock-control none --metrics gpu__time_duration.sum --csv $B/tools/rhoscan bench --device cuda --cases BDH-8k --backward --repeats 1 > $OUT/ncu.csv 2>&1
python3 dev/cuda/ncu_summary.py $OUT/ncu.csv | sort -k4 -g -r | tee $OUT/durations.txt | head -12
timeout 60 $B/tools/rhoscan bench --device cuda --cases step-8k --repeats 5 --json $OUT/bench.jsonl --commit "$RHOSCAN_COMMIT" | grep -E "^step"
timeout 60 $B/tools/rhoscan bench --device cuda --cases BDH-8k --backward --repeats 5 --save-keys --json $OUT/bench.jsonl --commit "$RHOSCAN_COMMIT+save-keys" | grep -E "^BDH"
timeout 60 $B/tools/rhoscan bench --device cuda --cases BDH-8k --backward --repeats 5 --dtype float16 --json $OUT/bench.jsonl --commit "$RHOSCAN_COMMIT" | grep -E "^BDH"
stage integrated
timeout 60 $B/examples/bdh train --preset gpu --device cuda --data .gpucarry/jargon.txt \
  --attention rhoscan-bf16 --steps 12 --time-limit 40 --eval-every 20 --eval-batches 2 \
  --out /tmp/bdh-gpu --bench-json "$OUT/bdh-gpu.jsonl" > "$OUT/bdh_gpu.log" 2>&1
echo "bdh gpu rhoscan-bf16 rc=$?"
grep -E "^model|^final|^training speed" "$OUT/bdh_gpu.log"
(cd $B && timeout 150 ctest -j8 -R 'cuda|Cuda|torch|Torch' --output-on-failure > "$OUT/ctest.log" 2>&1)
echo "ctest (cuda|Cuda|torch|Torch) rc=$?"; grep -E "tests passed|tests failed|\(Failed\)|Timeout|Not Run" "$OUT/ctest.log" | head -30
(cd $B && timeout 40 ctest -j8 -L example --output-on-failure > "$OUT/ctest_example.log" 2>&1)
echo "ctest (example) rc=$?"; grep -E "tests passed|tests failed|\(Failed\)" "$OUT/ctest_example.log" | head -10
library=$(find $B/torch -maxdepth 1 -name 'librhoscan_torch.so' | head -n 1)
(cd "$(mktemp -d)" && RHOSCAN_TORCH_LIBRARY=$library PYTHONPATH="$OLDPWD/python" RHOSCAN_REQUIRE_CUDA=1 \
   timeout 90 python3 -m pytest -q -rs -p no:cacheprovider "$OLDPWD/tests/python" > "$OUT/torch-tests.log" 2>&1)
echo "pytest (PyTorch, CUDA) rc=$?"; tail -4 "$OUT/torch-tests.log"
stage end
} 2>&1 | tee $S
cd $OUT && tar czf logs.tgz --exclude=summary.txt --exclude=logs.tgz --exclude='*.jsonl' * && find . -type f ! -name summary.txt ! -name logs.tgz ! -name '*.jsonl' -delete
