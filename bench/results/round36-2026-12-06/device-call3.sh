#!/usr/bin/env bash
# Round 36, call 3 (run from the repository root; carry .gpucarry with COMMIT and gtest-src):
# (1) build with the tests; the CUDA suite (ChunkScanMatchesTheTwoKernels now also runs scan v3 with
# its update deferred, RHOSCAN_CUDA_SCAN_DEFER=1, bitwise against the two kernels) and the harness's
# CUDA cases; (2) memcheck of that test; (3) on an H200, main's figures; (4) A/B of the deferred
# update, alternating, three rounds: BDH-base and B8 H4 T2048 L256 E256; (5) Nsight durations of the
# scan kernel both ways; (6) if time is left, call 2's source profiles (bwd_local, norm_scores_mma,
# final_state_wgmma, cross_scores_wgmma at BDH-8k) with their CSVs in src.tgz.
LOGS=/tmp/logs3 source bench/results/round32-prepared/call_common.sh
TEST_CUDA_S=150 TEST_BACKENDS_S=90 build_and_test
grep -A2 "chunk_scan_wgmma_kernelILi256E13__nv_bfloat16Lb1EEE" $L/build.log | grep -E "registers|spill" | head -2 >> $S
R=/tmp/b/tools/rhoscan
sanitize ChunkScanMatchesTheTwoKernels 200 60 memcheck
grep -q H200 $S && figures
ab RHOSCAN_CUDA_SCAN_DEFER "0 1" 3 330 --cases BDH-base --shape 8,4,1,2048,256,256 --backward
ncu_durations RHOSCAN_CUDA_SCAN_DEFER "0 1" chunk_scan BDH-base 400
if ! late 330; then
  stage source
  OUT=$L SOURCE_KERNELS="bwd_local_kernel@BDH-8k norm_scores_mma_kernel@BDH-8k final_state_wgmma@BDH-8k cross_scores_wgmma@BDH-8k" \
    timeout 200 bash scripts/cuda_device_run.sh source >> $S 2>&1
  for n in 1 2 3 4; do
    [ -f $L/source_${n}_sass.csv ] && python3 dev/cuda/sass_hotspots.py --regions $L/source_${n}_sass.csv > $L/source_${n}_hot.txt 2>&1
  done
  (cd $L && tar czf $OUT/src.tgz source_*_details.txt source_*_cuda.csv source_*_sass.csv source_*_hot.txt 2>/dev/null)
  rm -f $L/*.ncu-rep
fi
stage end
pack
