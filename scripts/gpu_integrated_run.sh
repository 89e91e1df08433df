#!/usr/bin/env bash
# The integrated run on the GPU machine (H200, CUDA 13, PyTorch 2.11): one build with every
# backend and the PyTorch extension, then the GPU-only checks and benchmarks. Two stages, so
# that each fits one device call; the build directory is shared between them.
#
#   bash scripts/gpu_integrated_run.sh build-test   # build; CUDA + Vulkan tests; PyTorch GPU tests
#   bash scripts/gpu_integrated_run.sh bench        # CUDA and Vulkan benchmarks; BDH GPU preset
#   bash scripts/gpu_integrated_run.sh ncu          # Nsight Compute detail of the heavy kernels
#
# Needs, carried from the build machine: .gpucarry/gtest-src (googletest sources: the GPU image has
# none) and .gpucarry/jargon.txt (the BDH corpus, uncompressed), .gl/ and .vkbench/ (Vulkan loader
# packages, headers and SPIR-V: scripts/bench_vulkan_gpu.sh --prepare). Logs and JSON lines go
# to $OUT.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
B=/tmp/rhoscan-gpu
commit=${RHOSCAN_COMMIT:-unknown}
stage=${1:-build-test}

# Vulkan loader (the driver is on the image; the loader is not).
if ! ldconfig -p | grep -q 'libvulkan.so.1 '; then
  for f in .gl/*.deb; do dpkg -x "$f" /; done
  ldconfig
fi
icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
[ -f "$icd" ] && export VK_DRIVER_FILES="$icd"

case $stage in
  build-test)
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
    (cmake -S .gpucarry/gtest-src -B /tmp/gtb -G Ninja -DCMAKE_INSTALL_PREFIX=/tmp/gtinst -DCMAKE_BUILD_TYPE=Release &&
       cmake --build /tmp/gtb -j16 --target install) > "$OUT/gtest.log" 2>&1 || echo "googletest build failed"
    torch_prefix=$(cd / && python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
    echo "torch $(cd / && python3 -c 'import torch; print(torch.__version__, torch.version.cuda)')"
    start=$(date +%s)
    cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
      -DCMAKE_PREFIX_PATH="/tmp/gtinst;$torch_prefix" \
      -DRHOSCAN_VULKAN=ON -DRHOSCAN_VULKAN_SPIRV_DIR="$PWD/.vkbench/spv" \
      -DRHOSCAN_VULKAN_INCLUDE_DIR="$PWD/.vkbench/include" \
      -DRHOSCAN_TORCH=ON -DRHOSCAN_TORCH_PYTHON="$(command -v python3)" -DRHOSCAN_BUILD_EXAMPLES=ON \
      > "$OUT/configure.log" 2>&1 || { echo "CONFIGURE FAILED"; tail -40 "$OUT/configure.log"; exit 1; }
    cmake --build $B -j16 > "$OUT/build.log" 2>&1 || { echo "BUILD FAILED"; grep -E "error" "$OUT/build.log" | head -30; tail -20 "$OUT/build.log"; exit 1; }
    echo "build: $(( $(date +%s) - start )) s"
    # Everything that needs the GPU: the CUDA and Vulkan suites and their harness cases.
    (cd $B && timeout 200 ctest -j8 -R "${GPU_CTEST_REGEX:-cuda|vulkan|Cuda|Vulkan}" --output-on-failure > "$OUT/ctest.log" 2>&1)
    echo "ctest (${GPU_CTEST_REGEX:-cuda|vulkan|Cuda|Vulkan}) rc=$?"; grep -E "tests passed|tests failed|\(Failed\)|Timeout|Not Run" "$OUT/ctest.log" | head -30
    (cd $B && timeout 60 ctest -j8 -L example --output-on-failure > "$OUT/ctest_example.log" 2>&1)
    echo "ctest (example) rc=$?"; grep -E "tests passed|tests failed|\(Failed\)" "$OUT/ctest_example.log" | head -10
    library=$(find $B/torch -maxdepth 1 -name 'librhoscan_torch.so' | head -n 1)
    (cd "$(mktemp -d)" && RHOSCAN_TORCH_LIBRARY=$library PYTHONPATH="$OLDPWD/python" RHOSCAN_REQUIRE_CUDA=1 \
       timeout 200 python3 -m pytest -q -rs -p no:cacheprovider "$OLDPWD/tests/python" > "$OUT/torch-tests.log" 2>&1)
    echo "pytest (PyTorch, CUDA) rc=$?"; tail -25 "$OUT/torch-tests.log"
    ;;
  bench)
    # BENCH_DTYPES: input dtypes to time (the cases' own, bfloat16, when unset); BENCH_VULKAN=0
    # skips the Vulkan benchmark; BDH_STEPS: training steps of the BDH GPU preset.
    for dt in ${BENCH_DTYPES:-bf16}; do
      timeout 150 $B/tools/rhoscan bench --device cuda --backward --repeats 5 --dtype $dt \
        --json "$OUT/cuda-h200.jsonl" --commit "$commit" > "$OUT/bench_cuda_$dt.log" 2>&1
      echo "bench cuda $dt rc=$?"; grep -E "ms|fraction" "$OUT/bench_cuda_$dt.log" | tail -14
    done
    if [ "${BENCH_VULKAN:-1}" = 1 ] && [ -x $B/bench/rhoscan_vulkan_bench ]; then
      timeout 120 $B/bench/rhoscan_vulkan_bench --repeats 5 --peak-tflops 67 --commit "$commit" \
        > "$OUT/vulkan-h200.jsonl" 2> "$OUT/bench_vulkan.log"
      echo "bench vulkan rc=$?"; cat "$OUT/vulkan-h200.jsonl"; tail -5 "$OUT/bench_vulkan.log"
    fi
    # BDH_ATTENTION: the example's attention forms to time (rhoscan: float32; rhoscan-bf16).
    if [ -x $B/examples/bdh ]; then
      for attention in ${BDH_ATTENTION:-rhoscan}; do
        timeout 150 $B/examples/bdh train --preset gpu --device cuda --data .gpucarry/jargon.txt \
          --attention $attention --steps ${BDH_STEPS:-40} --time-limit 100 --eval-every 20 --eval-batches 2 \
          --out /tmp/bdh-gpu-$attention --bench-json "$OUT/bdh-gpu.jsonl" > "$OUT/bdh_gpu_$attention.log" 2>&1
        echo "bdh gpu $attention rc=$? (the loss plot needs matplotlib, which the GPU image lacks)"
        grep -E "^model|^final|^training speed" "$OUT/bdh_gpu_$attention.log"
      done
    fi
    ;;
  ncu)
    # One launch of each heavy kernel at BDH-8k (bfloat16 forward+backward) with the sections that
    # say where its time goes (stall reasons, the source lines they sit on): $OUT/ncu-KERNEL.txt.
    for k in ${NCU_KERNELS:-chunk_states_mma bwd_local_kernel chunk_scores_mma norm_apply_kernel chunk_readback_mma}; do
      timeout 120 ncu --clock-control none -k regex:$k -c 1 --section SpeedOfLight --section Occupancy \
        --section LaunchStats --section WarpStateStats --section SchedulerStats --section SourceCounters \
        $B/tools/rhoscan bench --device cuda --cases BDH-8k --backward --repeats 1 > "$OUT/ncu-$k.txt" 2>&1
      echo "ncu $k rc=$?"; grep -E "Duration|Warp Cycles Per Issued|Issued Warp|No Eligible" "$OUT/ncu-$k.txt" | head -5
    done
    ;;
esac
