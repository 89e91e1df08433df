#!/usr/bin/env bash
# Round 22, call 6: the integrated build without Vulkan (CUDA, the PyTorch 2.11 extension, the BDH
# example) at main's kernels: the BDH example's GPU preset (bfloat16 attention) first, then the
# CUDA and libtorch ctest cases, the example's tests and the PyTorch suite on CUDA tensors.
set -u
export RHOSCAN_COMMIT=$(cat .gpucarry/COMMIT)
S=$OUT/summary.txt
B=/tmp/rhoscan-gpu
{
echo "commit $RHOSCAN_COMMIT"
(cmake -S .gpucarry/gtest-src -B /tmp/gtb -G Ninja -DCMAKE_INSTALL_PREFIX=/tmp/gtinst -DCMAKE_BUILD_TYPE=Release &&
   cmake --build /tmp/gtb -j16 --target install) > "$OUT/gtest.log" 2>&1 || echo "googletest build failed"
torch_prefix=$(cd / && python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
start=$(date +%s)
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DCMAKE_PREFIX_PATH="/tmp/gtinst;$torch_prefix" -DRHOSCAN_VULKAN=OFF \
  -DRHOSCAN_TORCH=ON -DRHOSCAN_TORCH_PYTHON="$(command -v python3)" -DRHOSCAN_BUILD_EXAMPLES=ON \
  > "$OUT/configure.log" 2>&1 || { echo "CONFIGURE FAILED"; tail -40 "$OUT/configure.log"; exit 1; }
cmake --build $B -j16 > "$OUT/build.log" 2>&1 || { echo "BUILD FAILED"; grep -E "error" "$OUT/build.log" | head -30; exit 1; }
echo "build: $(( $(date +%s) - start )) s"
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
} 2>&1 | tee $S
cd $OUT && tar czf logs.tgz --exclude=summary.txt --exclude=logs.tgz --exclude='*.jsonl' * && find . -type f ! -name summary.txt ! -name logs.tgz ! -name '*.jsonl' -delete
