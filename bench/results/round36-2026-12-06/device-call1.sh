#!/usr/bin/env bash
# Prepared in round 35 for the next device session (run from the repository root; carry .gpucarry
# with COMMIT and gtest-src). (1) build with the tests; (2) the CUDA suite (ChunkScanMatchesTheTwoKernels
# now also runs scan version 3 with its fetch's addresses stepped, RHOSCAN_CUDA_SCAN_FETCH_STEPPED=1,
# bitwise against the two kernels) and the harness's CUDA cases; (3) memcheck of that test;
# (4) main's figures (on an H200 they replace the README's round-29 figures); (5) A/B of the stepped
# fetch, alternating, three rounds: BDH-base and B8 H4 T2048 L256 E256 (32 chunk steps an item);
# (6) Nsight durations of the scan kernel both ways at BDH-base. $OUT: summary.txt, bench.jsonl, logs.tgz.
LOGS=/tmp/logs1 source bench/results/round32-prepared/call_common.sh
TEST_CUDA_S=150 TEST_BACKENDS_S=90 build_and_test
grep -A2 "chunk_scan_wgmma_kernelILi256E13__nv_bfloat16Lb1E" $L/build.log | grep -E "registers|spill" | head -2 >> $S
R=/tmp/b/tools/rhoscan
sanitize ChunkScanMatchesTheTwoKernels 200 60 memcheck
figures
ab RHOSCAN_CUDA_SCAN_FETCH_STEPPED "0 1" 3 330 --cases BDH-base --shape 8,4,1,2048,256,256 --backward
ncu_durations RHOSCAN_CUDA_SCAN_FETCH_STEPPED "0 1" chunk_scan BDH-base 420
stage end
pack
