#!/usr/bin/env bash
# Round 21, call 8: the BDH example's GPU preset (bfloat16 attention) at main's kernels.
set -u
export RHOSCAN_COMMIT=$(cat .gpucarry/COMMIT)
S=$OUT/summary.txt
B=/tmp/rhoscan-bdh
{
echo "commit $RHOSCAN_COMMIT"
start=$(date +%s)
torch_prefix=$(cd / && python3 -c "import torch; print(torch.utils.cmake_prefix_path)")
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a -DRHOSCAN_VULKAN=OFF -DCMAKE_PREFIX_PATH="$torch_prefix" \
  -DRHOSCAN_BUILD_TESTS=OFF -DRHOSCAN_BUILD_EXAMPLES=ON -DRHOSCAN_TORCH=ON -DRHOSCAN_TORCH_PYTHON="$(command -v python3)" > "$OUT/configure.log" 2>&1 || { echo "CONFIGURE FAILED"; tail -20 "$OUT/configure.log"; exit 1; }
cmake --build $B -j16 --target bdh rhoscan_torch > "$OUT/build.log" 2>&1 || { echo "BUILD FAILED"; grep -E "error" "$OUT/build.log" | head; exit 1; }
echo "build: $(( $(date +%s) - start )) s"
for attention in rhoscan-bf16; do
  timeout 60 $B/examples/bdh train --preset gpu --device cuda --data .gpucarry/jargon.txt \
    --attention $attention --steps 12 --time-limit 40 --eval-every 20 --eval-batches 2 \
    --out /tmp/bdh-gpu-$attention --bench-json "$OUT/bdh-gpu.jsonl" > "$OUT/bdh_gpu_$attention.log" 2>&1
  echo "bdh gpu $attention rc=$?"
  grep -E "^model|^final|^training speed" "$OUT/bdh_gpu_$attention.log"
done
} 2>&1 | tee $S
