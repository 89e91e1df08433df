#!/usr/bin/env bash
# One device call that checks merged main on the GPU machine before a session closes: the
# integrated build (CUDA, Vulkan, the PyTorch 2.11 extension, the BDH example), the CUDA and
# libtorch tests, the example's tests, the PyTorch suite on CUDA tensors, the CUDA benchmarks in
# the three input dtypes, the BDH GPU preset with bfloat16 and float32 attention, and Nsight
# Compute detail of the heavy kernels (for the next round of tuning). Stages of
# scripts/gpu_integrated_run.sh under one deadline (RELEASE_BUDGET_S, default 540 s); what each
# stage printed goes to $OUT/summary.txt, every log and JSON file into $OUT/logs.tgz, the JSON lines
# also to $OUT directly. Carry .gl, .vkbench and .gpucarry (see gpu_integrated_run.sh):
#
#   run(carry=[".gl", ".vkbench", ".gpucarry"], command="RHOSCAN_COMMIT=<hash> bash scripts/gpu_release_check.sh")
set -u
cd "$(dirname "$0")/.."
FINAL_OUT=${OUT:-/tmp/out}
export OUT=/tmp/release-logs
rm -rf "$OUT" && mkdir -p "$OUT" "$FINAL_OUT"
summary=$FINAL_OUT/summary.txt
budget=${RELEASE_BUDGET_S:-540}
start=$(date +%s)
echo "commit ${RHOSCAN_COMMIT:-unknown}" > "$summary"
export GPU_CTEST_REGEX=${GPU_CTEST_REGEX:-cuda|Cuda|torch|Torch}
export BENCH_DTYPES=${BENCH_DTYPES:-bf16 f32 f16} BENCH_VULKAN=${BENCH_VULKAN:-0}
export BDH_STEPS=${BDH_STEPS:-12} BDH_ATTENTION=${BDH_ATTENTION:-rhoscan-bf16 rhoscan}

for stage in ${RELEASE_STAGES:-build-test bench ncu}; do
  left=$((budget - ($(date +%s) - start)))
  if [ "$left" -lt 30 ]; then
    echo "== $stage: skipped (${left} s left of ${budget})" | tee -a "$summary"
    continue
  fi
  echo "== $stage (${left} s left)" | tee -a "$summary"
  t0=$(date +%s)
  timeout "$left" bash scripts/gpu_integrated_run.sh "$stage" 2>&1 | tee -a "$summary"
  echo "   ($stage: $(($(date +%s) - t0)) s)" | tee -a "$summary"
  tar -czf "$FINAL_OUT/logs.tgz" -C "$OUT" . 2>/dev/null
  cp -f "$OUT"/*.jsonl "$FINAL_OUT/" 2>/dev/null
done
exit 0
