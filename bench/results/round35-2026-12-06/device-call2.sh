#!/usr/bin/env bash
# Round 35, call 2: chunk_scan_mma version 3 (chunk_scan_wgmma_kernel: version 2's products on
# warpgroup MMA, behind RHOSCAN_CUDA_SCAN=wgmma; the default stays version 2). (1) build with the
# tests, ptxas's registers and spills for Lp = 256; (2) the CUDA suite (Cuda.ChunkScanWgmmaMatchesVersion2
# prints whether version 3 is bitwise version 2 on the GPU) and the harness's CUDA cases;
# (3) memcheck and racecheck of that test; (4) A/B alternating, three rounds: BDH-base and two more
# shapes where the scan runs (T 2048 L 256: 32 chunk steps an item; T 512 L 128); (5) Nsight
# durations of the scan kernel both ways at BDH-base. $OUT: summary.txt, bench.jsonl, logs.tgz.
# Carry .gpucarry (COMMIT, gtest-src).
LOGS=/tmp/logs2 source bench/results/round32-prepared/call_common.sh
TEST_CUDA_S=150 TEST_BACKENDS_S=90 build_and_test
for lp in 256 64; do
  grep -A2 "chunk_scan_wgmma_kernelILi${lp}E" $L/build.log | grep -E "registers|spill" | head -2 >> $S
done
grep -E "ChunkScanWgmma|version 3 vs 2" $L/test_cuda.log | head -12 >> $S
R=/tmp/b/tools/rhoscan
sanitize ChunkScanWgmmaMatchesVersion2 200 70 memcheck racecheck
stage ab
for r in 1 2 3; do
  late 340 && { echo "(round $r skipped: late)" >> $S; break; }
  for v in mma wgmma; do
    echo "-- scan $v (round $r)" >> $S
    RHOSCAN_CUDA_SCAN=$v timeout 40 $R bench --device cuda --cases BDH-base --shape 8,4,1,2048,256,256 \
      --shape 32,4,1,512,128,256 --backward --repeats 5 --json $J --commit "$RHOSCAN_COMMIT+scan=$v" 2>&1 |
      grep -E "^(BDH|shape)" >> $S
  done
done
pack
stage ncu
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,smsp__inst_executed.sum
for v in mma wgmma; do
  late 420 && { echo "(skipped: late) ncu $v" >> $S; continue; }
  RHOSCAN_CUDA_SCAN=$v timeout 40 ncu --clock-control none -k regex:chunk_scan --metrics $M --csv $R bench \
    --device cuda --cases BDH-base --repeats 1 > $L/ncu-scan-$v.csv 2>&1
  echo "-- scan $v, BDH-base" >> $S; python3 dev/cuda/ncu_summary.py $L/ncu-scan-$v.csv >> $S 2>&1
done
stage end
pack
