#!/usr/bin/env bash
# The Vulkan backend's benchmark on the GPU machine (NVIDIA's Vulkan driver), with the CUDA
# backend timed in the same run when the tree has one: BDH-8k (B8 H4 T512 L8192 E256) and
# BDH-base (B24 H4 T512 L256 E256), float32, forward and forward+backward. Writes JSON lines.
#
# 1. Here, once, in the checkout that the device tool sends (again after a shader changes):
#        bash scripts/bench_vulkan_gpu.sh --prepare
#    makes two git-ignored folders: .gl (the Vulkan loader .debs, per the device README: the GPU
#    image has NVIDIA's driver but no loader) and .vkbench (the Vulkan headers and the SPIR-V of
#    src/vulkan/shaders compiled here: the GPU image has no glslc and no libvulkan-dev).
# 2. There, through the device tool with carry [".gl", ".vkbench"]:
#        bash scripts/bench_vulkan_gpu.sh
#    Results go to $OUT (the device tool's folder) or bench/results, as vulkan_h200.jsonl, with a
#    per-kernel profile of BDH-8k (vulkan_profile.txt) and the build log.
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

cmake -S . -B build-vkbench -G Ninja -DCMAKE_BUILD_TYPE=Release -DRHOSCAN_VULKAN=ON \
  -DRHOSCAN_VULKAN_SPIRV_DIR="$PWD/.vkbench/spv" -DRHOSCAN_VULKAN_INCLUDE_DIR="$PWD/.vkbench/include" \
  -DRHOSCAN_BUILD_TESTS=OFF -DRHOSCAN_BUILD_TOOLS=OFF >"$out/vulkan_build.log" 2>&1 || { tail -30 "$out/vulkan_build.log"; exit 1; }
cmake --build build-vkbench -j "$(nproc)" --target rhoscan_vulkan_bench >>"$out/vulkan_build.log" 2>&1 || { tail -30 "$out/vulkan_build.log"; exit 1; }

commit="${RHOSCAN_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
# 67 TFLOP/s: the H200's float32 rate without tensor cores (the shaders use plain FMAs).
./build-vkbench/bench/rhoscan_vulkan_bench --repeats 5 --peak-tflops 67 --commit "$commit" | tee "$out/vulkan_h200.jsonl"
RHOSCAN_VULKAN_PROFILE=1 ./build-vkbench/bench/rhoscan_vulkan_bench --cases BDH-8k --repeats 1 --commit "$commit" \
  >/dev/null 2>"$out/vulkan_profile.txt" || true
grep -v ' copy ' "$out/vulkan_profile.txt" | tail -40
