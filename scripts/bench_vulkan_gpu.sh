#!/usr/bin/env bash
# The Vulkan backend on the GPU machine (NVIDIA's Vulkan driver): its tests, then its benchmark
# with the CUDA backend timed on the same float32 problems in the same run: BDH-8k (B8 H4 T512
# L8192 E256) and BDH-base (B24 H4 T512 L256 E256), forward and forward+backward, on Vulkan
# tensors (device-resident) and on host tensors. Writes JSON lines (bench/vulkan_bench.cpp).
#
# 1. Here, once, in the checkout that the device tool sends (again after a shader changes):
#        bash scripts/bench_vulkan_gpu.sh --prepare
#    makes two git-ignored folders: .gl (the Vulkan loader .debs, per the device README: the GPU
#    image has NVIDIA's driver but no loader) and .vkbench (the Vulkan headers and the SPIR-V of
#    src/vulkan/shaders compiled here: the GPU image has no glslc and no libvulkan-dev).
#    Optionally also a build made here with CUDA 13 (the GPU image's version) for sm_90a, which
#    saves the device the build: configure with -DRHOSCAN_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a
#    -DRHOSCAN_VULKAN=ON -DRHOSCAN_BLAS=OFF, build test_vulkan test_vulkan_tensors test_backends
#    rhoscan_vulkan_bench, and pass its folder as RHOSCAN_PREBUILT (carried).
# 2. There, through the device tool with carry [".gl", ".vkbench"] (and .gpucarry for
#    googletest's sources when building there, or the prebuilt folder):
#        bash scripts/bench_vulkan_gpu.sh
#    A prebuilt folder whose programs do not load there is ignored and the tree is built there.
#    Results go to $OUT (the device tool's folder) or bench/results: vulkan_h200.jsonl, the tests'
#    log (vulkan_tests.log), a per-kernel profile of BDH-8k (vulkan_profile.txt) and the build log.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = "--prepare" ]; then
  exclude="$(git rev-parse --git-common-dir)/info/exclude"
  mkdir -p "$(dirname "$exclude")"
  for d in /.gl/ /.vkbench/; do grep -qxF "$d" "$exclude" 2>/dev/null || echo "$d" >>"$exclude"; done
  rm -rf .gl .vkbench
  mkdir -p .gl .vkbench/spv .vkbench/include /tmp/amd64/partial
  o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
  apt-get $o update -qq
  (cd .gl && apt-get $o download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
  for f in src/vulkan/shaders/*.comp; do
    glslc -O --target-env=vulkan1.1 -I src/vulkan/shaders -o ".vkbench/spv/$(basename "$f" .comp).spv" "$f"
  done
  cp -r /usr/include/vulkan .vkbench/include/
  [ -d /usr/include/vk_video ] && cp -r /usr/include/vk_video .vkbench/include/
  echo "prepared: $(ls .gl | wc -l) loader packages in .gl, $(ls .vkbench/spv | wc -l) shaders in .vkbench/spv"
  exit 0
fi

out="${OUT:-bench/results}"
mkdir -p "$out"
[ -d .gl ] && [ -d .vkbench ] || { echo "run 'bash scripts/bench_vulkan_gpu.sh --prepare' here first, then carry .gl and .vkbench" >&2; exit 2; }
if ! ldconfig -p | grep -q 'libvulkan.so.1 '; then
  for f in .gl/*.deb; do dpkg -x "$f" /; done
  ldconfig
fi
icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
if [ -z "${VK_DRIVER_FILES:-}" ] && [ -f "$icd" ] && ! ls /usr/share/vulkan/icd.d/nvidia* /etc/vulkan/icd.d/nvidia* >/dev/null 2>&1; then
  export VK_DRIVER_FILES="$icd"
fi
nvidia-smi -L || true

build=""
if [ -n "${RHOSCAN_PREBUILT:-}" ] && [ -x "$RHOSCAN_PREBUILT/bench/rhoscan_vulkan_bench" ]; then
  export LD_LIBRARY_PATH="$RHOSCAN_PREBUILT:${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64"
  if "$RHOSCAN_PREBUILT/tests/test_vulkan" --gtest_list_tests >/dev/null 2>"$out/prebuilt.log"; then
    build="$RHOSCAN_PREBUILT"; echo "using the prebuilt $build"
  else
    echo "the prebuilt programs do not load here:"; head -5 "$out/prebuilt.log"
  fi
fi
if [ -z "$build" ]; then
  build="$PWD/build-vkbench"
  extra=()
  if [ -d .gpucarry/gtest-src ]; then
    (cmake -S .gpucarry/gtest-src -B /tmp/gtb -G Ninja -DCMAKE_INSTALL_PREFIX=/tmp/gtinst -DCMAKE_BUILD_TYPE=Release &&
       cmake --build /tmp/gtb -j "$(nproc)" --target install) >"$out/vulkan_build.log" 2>&1 && extra+=(-DCMAKE_PREFIX_PATH=/tmp/gtinst)
  fi
  [ ${#extra[@]} -gt 0 ] || extra+=(-DRHOSCAN_BUILD_TESTS=OFF)
  cmake -S . -B $build -G Ninja -DCMAKE_BUILD_TYPE=Release -DRHOSCAN_VULKAN=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
    -DRHOSCAN_VULKAN_SPIRV_DIR="$PWD/.vkbench/spv" -DRHOSCAN_VULKAN_INCLUDE_DIR="$PWD/.vkbench/include" \
    -DRHOSCAN_BUILD_TOOLS=OFF -DRHOSCAN_TORCH=OFF "${extra[@]}" >>"$out/vulkan_build.log" 2>&1 || { tail -30 "$out/vulkan_build.log"; exit 1; }
  targets=(rhoscan_vulkan_bench)
  [ -d .gpucarry/gtest-src ] && targets+=(test_vulkan test_vulkan_tensors test_backends)
  cmake --build $build -j "$(nproc)" --target "${targets[@]}" >>"$out/vulkan_build.log" 2>&1 || { tail -30 "$out/vulkan_build.log"; exit 1; }
fi

# The Vulkan tests on this GPU: the backend's own, Vulkan tensors, and the harness's Vulkan cases.
if [ -x $build/tests/test_vulkan ]; then
  : >"$out/vulkan_tests.log"
  for t in "test_vulkan" "test_vulkan_tensors" "test_backends --gtest_filter=*vulkan*"; do
    rc=0; (cd "$build/tests" && timeout 60 ./$t >>"$out/vulkan_tests.log" 2>&1) || rc=$?; echo "tests $t: rc=$rc"
  done
  grep -E "^\[  (PASSED|FAILED) |tests? from .* ran" "$out/vulkan_tests.log" || true
fi

cases="${RHOSCAN_BENCH_CASES:-BDH-8k,BDH-base}"  # "small" for a try on lavapipe
commit="${RHOSCAN_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
# 67 TFLOP/s: the H200's float32 rate without tensor cores (the shaders use plain FMAs).
timeout 200 "$build"/bench/rhoscan_vulkan_bench --cases "$cases" --repeats 7 --host-repeats 3 --peak-tflops 67 --commit "$commit" | tee "$out/vulkan_h200.jsonl" ||
  echo "bench rc=$? (3: the check against the reference failed)"
RHOSCAN_VULKAN_PROFILE=1 timeout 100 "$build"/bench/rhoscan_vulkan_bench --cases "${cases%%,*}" --repeats 1 --host-repeats 1 --warmup-ms 300 \
  --commit "$commit" >/dev/null 2>"$out/vulkan_profile.txt" || true
# every call of that run (check, Vulkan and host tensors, forward and backward), summed per command
awk '/profile\]/ {a[$4]+=$5; n[$4]++} END {for (k in a) printf "%-18s %10.3f ms  %d\n", k, a[k], n[k]}' "$out/vulkan_profile.txt" | sort -k2 -n -r
