#!/usr/bin/env bash
# Round 36, call 2: source-level Nsight Compute profiles (full set, -lineinfo CLI build) of the
# kernels that hold BDH-8k's time, with the CSVs kept this time (round 34 kept only the summaries):
# bwd_local, norm_scores_mma, final_state_wgmma, cross_scores_wgmma. $OUT: summary.txt, src.tgz
# (details pages and the cuda / sass CSVs, gzip'd), logs.tgz, and on an H200 main's figures (bench.jsonl).
LOGS=/tmp/logs2 source bench/results/round32-prepared/call_common.sh
stage source
OUT=$L SOURCE_KERNELS="bwd_local_kernel@BDH-8k norm_scores_mma_kernel@BDH-8k final_state_wgmma@BDH-8k cross_scores_wgmma@BDH-8k" \
  bash scripts/cuda_device_run.sh source >> $S 2>&1
for n in 1 2 3 4; do
  [ -f $L/source_${n}_sass.csv ] && python3 dev/cuda/sass_hotspots.py --regions $L/source_${n}_sass.csv > $L/source_${n}_hot.txt 2>&1
done
(cd $L && tar czf $OUT/src.tgz source_*_details.txt source_*_cuda.csv source_*_sass.csv source_*_hot.txt 2>/dev/null)
rm -f $L/*.ncu-rep
# on an H200, main's figures for the README (the -lineinfo build: line tables only, the same code)
if grep -q H200 $S; then R=/tmp/b_lineinfo/tools/rhoscan; figures; fi
stage end
pack
