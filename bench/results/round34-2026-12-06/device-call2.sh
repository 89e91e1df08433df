#!/usr/bin/env bash
# Round 34, call 2 (after call 1, round 33's device-call1.sh): where BDH-8k's largest kernels spend
# their time, for the next candidates. Nsight Compute's full set with source correlation, one launch
# each in BDH-8k's forward+backward, from a -lineinfo build of the CLI (scripts/cuda_device_run.sh
# source): bwd_local (1.5 ms of the 3.7, issue-bound), norm_scores_mma (0.38 ms against a 0.19
# floor), quad_readback_wgmma (0.72 against 0.38). Per kernel: the details page's headline rows and
# sass_hotspots.py's regions. $OUT: summary.txt, logs.tgz (details pages and source CSVs).
# Run from the repository root; no carry needed.
set -u
S=$OUT/summary.txt
t0=$(date +%s)
stage() { echo "== $1 ($(( $(date +%s) - t0 )) s)" >> $S; }
stage source
OUT=$OUT SOURCE_KERNELS="bwd_local_kernel@BDH-8k norm_scores_mma_kernel@BDH-8k quad_readback_wgmma_kernel@BDH-8k" \
  bash scripts/cuda_device_run.sh source >> $S 2>&1
for n in 1 2 3; do
  [ -f $OUT/source_${n}_sass.csv ] || continue
  echo "-- source_$n" >> $S
  python3 dev/cuda/sass_hotspots.py $OUT/source_${n}_sass.csv --top 30 --regions >> $S 2>&1
done
stage end
cd $OUT && rm -f *.ncu-rep && tar czf logs.tgz --exclude=summary.txt --exclude=logs.tgz * &&
  find . -type f ! -name summary.txt ! -name logs.tgz -delete
