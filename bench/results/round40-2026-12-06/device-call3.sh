#!/usr/bin/env bash
# Round 40, call 3 (carry .gpucarry with COMMIT): what a carried state costs. Training on a stream
# cut into segments starts each segment from the last one's state, and the backward then also takes
# the final state's gradient; the quadratic paths need neither (forward: no initial rho; backward:
# no initial rho and no grad_rho_out), so such calls take the chunked paths. (1) CLI-only build;
# (2) BDH-8k, BDH-base and long-T8192 with and without `--with-state`, two alternating rounds;
# (3) Nsight per kernel at BDH-8k and BDH-base with the state.
LOGS=/tmp/logs3 source bench/results/round32-prepared/call_common.sh
stage build
cmake -S . -B /tmp/bc -G Ninja -DRHOSCAN_VULKAN=OFF -DRHOSCAN_BUILD_TESTS=OFF -DCMAKE_CUDA_ARCHITECTURES=90a > $L/configure.log 2>&1 &&
  cmake --build /tmp/bc -j16 --target rhoscan_cli > $L/build.log 2>&1 || { tail -20 $L/build.log >> $S; pack; exit 1; }
R=/tmp/bc/tools/rhoscan
stage ab
for r in 1 2; do
  for st in "" --with-state; do
    echo "-- round $r ${st:-no state}" >> $S
    timeout 60 $R bench --device cuda --cases BDH-8k,BDH-base,long-T8192 --backward --repeats 5 $st --json $J \
      --commit "$RHOSCAN_COMMIT" 2>&1 | grep -E "^(BDH|long)" >> $S
  done
done
pack
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,smsp__inst_executed.sum
for c in BDH-8k BDH-base; do
  late 420 && { echo "(skipped: late) ncu $c" >> $S; continue; }
  stage "ncu $c with the state"
  timeout 120 ncu --clock-control none --metrics $M --csv $R bench --device cuda --cases $c \
    --backward --repeats 1 --with-state > $L/ncu-$c.csv 2>&1
  echo "-- $c +state (rc $?)" >> $S; python3 dev/cuda/ncu_summary.py $L/ncu-$c.csv >> $S 2>&1
  pack
done
stage end
pack
