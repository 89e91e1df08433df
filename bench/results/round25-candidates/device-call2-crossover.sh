#!/usr/bin/env bash
# The quadratic paths' shape rules re-measured with today's kernels. The forward takes its quadratic
# path from L = 8 T and the backward from L = T (quadratic.cuh), rules set from `crossover` at
# c00d7c4 (round 5), before the wgmma kernels, norm_scores_mma and chunk_scan_mma changed both
# paths; BDH-base (L = T/2) runs the chunked forward at 8.6 % of its limit. Both paths forced per
# call on T = 512 from L = T/2 to 16 T, and one T = 1024 shape, two rounds (cuda_device_run.sh
# crossover, JSON lines `<commit>+paths=chunked|quadratic`). Builds the CLI of this tree only.
# Carry .gpucarry with COMMIT; run as `bash bench/results/round25-candidates/device-call2-crossover.sh`
# (about 4 minutes).
set -u
export RHOSCAN_COMMIT=$(cat .gpucarry/COMMIT)
S=$OUT/summary.txt
t0=$(date +%s)
{
echo "== build"
cmake -S . -B /tmp/b -G Ninja -DRHOSCAN_VULKAN=OFF -DCMAKE_CUDA_ARCHITECTURES=90a -DRHOSCAN_BUILD_TESTS=OFF \
  > $OUT/configure.log 2>&1 && cmake --build /tmp/b -j16 --target rhoscan_cli > $OUT/build.log 2>&1 \
  || { echo "BUILD FAILED"; tail -20 $OUT/build.log; exit 1; }
for r in 1 2; do
  echo "== crossover round $r ($(( $(date +%s) - t0 )) s)"
  CROSSOVER_SHAPES="24,4,1,512,256,256 24,4,1,512,512,256 16,4,1,512,1024,256 8,4,1,512,2048,256 8,4,1,512,4096,256 8,4,1,512,8192,256 12,4,1,1024,512,256" \
    bash scripts/cuda_device_run.sh crossover
done
echo "== end ($(( $(date +%s) - t0 )) s)"
} 2>&1 | tee $S
