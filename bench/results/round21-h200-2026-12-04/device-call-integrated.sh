#!/usr/bin/env bash
# Round 21, call 7: the integrated build without Vulkan (CUDA, the PyTorch 2.11 extension, the BDH
# example): the CUDA and libtorch ctest cases, the example's tests, the PyTorch suite on CUDA tensors.
set -u
export RHOSCAN_COMMIT=$(cat .gpucarry/COMMIT)
S=$OUT/summary.txt
B=/tmp/rhoscan-gpu
{
echo "commit $RHOSCAN_COMMIT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
(cmake -S .gpucarry/gtest-src -B /tmp/gtb -G Ninja -DCMAKE_INSTALL_PREFIX=/tmp/gtinst -DCMAKE_BUILD_TYPE=Release &&
   cmake --build /tmp/gtb -j16 --target install) > "$OUT/gtest.log" 2>&1 || echo "googletest build failed"
torch_prefix=$(cd / && python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
echo "torch $(cd / && python3 -c 'import torch; print(torch.__version__, torch.version.cuda)')"
start=$(date +%s)
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DCMAKE_PREFIX_PATH="/tmp/gtinst;$torch_prefix" -DRHOSCAN_VULKAN=OFF \
  -DRHOSCAN_TORCH=ON -DRHOSCAN_TORCH_PYTHON="$(command -v python3)" -DRHOSCAN_BUILD_EXAMPLES=ON \
  > "$OUT/configure.log" 2>&1 || { echo "CONFIGURE FAILED"; tail -40 "$OUT/configure.log"; exit 1; }
cmake --build $B -j16 > "$OUT/build.log" 2>&1 || { echo "BUILD FAILED"; grep -E "error" "$OUT/build.log" | head -30; exit 1; }
echo "build: $(( $(date +%s) - start )) s"
(cd $B && timeout 200 ctest -j8 -R 'cuda|Cuda|torch|Torch' --output-on-failure > "$OUT/ctest.log" 2>&1)
echo "ctest (cuda|Cuda|torch|Torch) rc=$?"; grep -E "tests passed|tests failed|\(Failed\)|Timeout|Not Run" "$OUT/ctest.log" | head -30
(cd $B && timeout 60 ctest -j8 -L example --output-on-failure > "$OUT/ctest_example.log" 2>&1)
echo "ctest (example) rc=$?"; grep -E "tests passed|tests failed|\(Failed\)" "$OUT/ctest_example.log" | head -10
library=$(find $B/torch -maxdepth 1 -name 'librhoscan_torch.so' | head -n 1)
(cd "$(mktemp -d)" && RHOSCAN_TORCH_LIBRARY=$library PYTHONPATH="$OLDPWD/python" RHOSCAN_REQUIRE_CUDA=1 \
   timeout 200 python3 -m pytest -q -rs -p no:cacheprovider "$OLDPWD/tests/python" > "$OUT/torch-tests.log" 2>&1)
echo "pytest (PyTorch, CUDA) rc=$?"; tail -12 "$OUT/torch-tests.log"
} 2>&1 | tee $S
cd $OUT && tar czf logs.tgz --exclude=summary.txt --exclude=logs.tgz * && find . -type f ! -name summary.txt ! -name logs.tgz -delete
