#!/usr/bin/env bash
# Round 34, call 3: main with scan version 2 as the default, the cross-scores candidate merged
# (46ee28d, now 2fedd40) and quad_readback_wgmma's fetch after the products behind
# RHOSCAN_CUDA_READBACK_FETCH_LATE. (1) build with the tests; (2) the CUDA suite (it compares the
# late fetch's gradients with the default's bitwise) and the harness's CUDA cases; (3) memcheck and
# racecheck of Cuda.ReadbackKernelsMmaAndWgmmaAgree; (4) main's figures; (5) A/B of the fetch,
# alternating, BDH-8k and BDH-base forward+backward, 3 rounds; (6) Nsight durations of the readback
# both ways at BDH-8k. $OUT: summary.txt, bench.jsonl, logs.tgz. Carry .gpucarry (COMMIT, gtest-src).
LOGS=/tmp/logs3 source bench/results/round32-prepared/call_common.sh
build_and_test
grep -A2 "quad_readback_wgmma_kernelILb0ELi3ELb1ELb1E" $L/build.log | grep -E "registers|spill" | head -2 >> $S
R=/tmp/b/tools/rhoscan
sanitize ReadbackKernelsMmaAndWgmmaAgree 190 80 memcheck racecheck
figures
stage ab
for r in 1 2 3; do
  late 300 && { echo "(round $r skipped: late)" >> $S; break; }
  for f in 0 1; do
    echo "-- readback fetch late=$f (round $r)" >> $S
    RHOSCAN_CUDA_READBACK_FETCH_LATE=$f timeout 30 $R bench --device cuda --cases BDH-8k,BDH-base --backward \
      --repeats 5 --json $J --commit "$RHOSCAN_COMMIT+readback_fetch=$([ $f = 1 ] && echo late || echo early)" 2>&1 | grep -E "^BDH" >> $S
  done
done
pack
stage ncu
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,smsp__inst_executed.sum
for f in 0 1; do
  late 350 && { echo "(skipped: late) ncu late=$f" >> $S; continue; }
  RHOSCAN_CUDA_READBACK_FETCH_LATE=$f timeout 40 ncu --clock-control none -k regex:quad_readback --metrics $M --csv $R bench \
    --device cuda --cases BDH-8k --backward --repeats 1 > $L/ncu-readback-late$f.csv 2>&1
  echo "-- readback fetch late=$f, BDH-8k" >> $S; python3 dev/cuda/ncu_summary.py $L/ncu-readback-late$f.csv >> $S 2>&1
done
stage end
pack
