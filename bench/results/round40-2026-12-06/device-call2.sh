#!/usr/bin/env bash
# Round 40, call 2 (carry .gpucarry with COMMIT and gtest-src; asked of an H200, the issues'
# card, whose figures in the README are round 29's): main after the finish's removal. (1) build
# with the tests, the CUDA suite and the harness's CUDA cases (the reverted bwd_local on a GPU);
# (2) main's figures, three rounds; (3) where the time goes per kernel at BDH-8k and long-T8192
# (Nsight Compute's duration, DRAM bytes and warp instructions of one `rhoscan bench --backward
# --repeats 1`), for the windowed long-sequence design's traffic model (docs/CUDA.md, What is left).
LOGS=/tmp/logs2 source bench/results/round32-prepared/call_common.sh
build_and_test
R=/tmp/b/tools/rhoscan
for r in 1 2 3; do late 300 || figures; done
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,smsp__inst_executed.sum
for c in long-T8192 BDH-8k; do
  late 430 && { echo "(skipped: late) ncu $c" >> $S; continue; }
  stage "ncu $c"
  timeout 100 ncu --clock-control none --metrics $M --csv $R bench --device cuda --cases $c \
    --backward --repeats 1 > $L/ncu-$c.csv 2>&1
  echo "-- $c (rc $?)" >> $S; python3 dev/cuda/ncu_summary.py $L/ncu-$c.csv >> $S 2>&1
  pack
done
stage end
pack
