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
stage ab
for r in 1 2 3; do
  late 330 && { echo "(round $r skipped: late)" >> $S; break; }
  for f in 0 1; do
    echo "-- scan fetch stepped=$f (round $r)" >> $S
    RHOSCAN_CUDA_SCAN_FETCH_STEPPED=$f timeout 40 $R bench --device cuda --cases BDH-base --shape 8,4,1,2048,256,256 \
      --backward --repeats 5 --json $J --commit "$RHOSCAN_COMMIT+scan_fetch_stepped=$f" 2>&1 | grep -E "^(BDH|shape)" >> $S
  done
done
pack
stage ncu
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,smsp__inst_executed.sum
for f in 0 1; do
  late 420 && { echo "(skipped: late) ncu stepped=$f" >> $S; continue; }
  RHOSCAN_CUDA_SCAN_FETCH_STEPPED=$f timeout 40 ncu --clock-control none -k regex:chunk_scan --metrics $M --csv $R bench \
    --device cuda --cases BDH-base --repeats 1 > $L/ncu-scan-stepped$f.csv 2>&1
  echo "-- scan fetch stepped=$f, BDH-base" >> $S; python3 dev/cuda/ncu_summary.py $L/ncu-scan-stepped$f.csv >> $S 2>&1
done
stage end
pack
