#!/usr/bin/env bash
# Round 30, call 1: round30-prepared's candidates call (cross_values_mma version 2 and quad_dv_mma's
# P loads a step ahead: build, CUDA suite, harness, memcheck and racecheck, the A/B against main's
# tree in .gpucarry/base with Nsight durations at BDH-base), then a full Nsight profile with source
# lines of bwd_local (BDH-base's largest backward kernel, 0.153 ms) and of cross_values_mma version 2,
# for the next change. Carry .gpucarry; run as `bash bench/results/round30-2026-12-05/device-call1.sh`.
set -u
bash bench/results/round30-prepared/device-call1-candidates.sh > /dev/null 2>&1
mv $OUT/summary.txt $OUT/summary-candidates.txt
mv $OUT/logs.tgz $OUT/logs-candidates.tgz
{
echo "== source ($(date +%T))"
OUT=$OUT SOURCE_KERNELS="bwd_local_kernel@BDH-base cross_values_mma_kernel@BDH-base" bash scripts/cuda_device_run.sh source
for n in 1 2; do
  python3 dev/cuda/sass_hotspots.py $OUT/source_${n}_sass.csv --top 30 --regions 2>&1 | head -90
done
echo "== end ($(date +%T))"
} 2>&1 | tee $OUT/summary-source.txt
cd $OUT && mkdir -p keep && mv source_*_details.txt source_*_sass.csv source_*_cuda.csv keep/ 2>/dev/null
tar czf logs-source.tgz --exclude='summary*' --exclude='*.jsonl' --exclude='logs*.tgz' * && find . -type f ! -name 'summary*' ! -name '*.jsonl' ! -name 'logs*.tgz' -delete
