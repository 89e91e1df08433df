#!/usr/bin/env bash
# Round 23, call 1: source-level Nsight Compute profiles (full set, SASS and CUDA lines) of bwd_local,
# the readback and norm_scores_mma at BDH-8k, main at 98439fe; a baseline bench from the same build.
set -u
export RHOSCAN_COMMIT=$(cat .gpucarry/COMMIT)
S=$OUT/summary.txt
t0=$(date +%s)
stage() { echo "== $1 ($(( $(date +%s) - t0 )) s)"; }
{
stage source
SOURCE_KERNELS="bwd_local_kernel quad_readback_wgmma norm_scores_mma" bash scripts/cuda_device_run.sh source
stage bench
for r in 1 2; do
timeout 60 /tmp/b_lineinfo/tools/rhoscan bench --device cuda --cases BDH-8k,BDH-base,long-T8192 --backward --repeats 5 | grep -E "^(BDH|long)"
done
stage end
} 2>&1 | tee $S
cd $OUT && rm -f *.ncu-rep && gzip -9 *.csv
