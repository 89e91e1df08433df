#!/usr/bin/env bash
# Prepared in round 32 (no device that session; see README.md here): the readback's item order.
# quad_readback_wgmma with the chunks K inner (RHOSCAN_CUDA_READBACK_CHUNKS_INNER=1) against the
# latent tiles inner (the default), on main's build, both in one build:
# (1) main's CLI (reused from call 1 at /tmp/b when the machine is still warm, else built alone);
# (2) Nsight durations, DRAM bytes and warp instructions of quad_readback_wgmma in both orders at
#     BDH-8k and BDH-base (round 28 counted 1.94 GB a backward at BDH-8k against the 1.63 GB of
#     its arrays: re-reads that missed the L2, which the chunks-inner order is meant to turn into
#     hits);
# (3) BDH-8k and BDH-base forward+backward in both orders, three alternating rounds.
# The gradients are bitwise the same either way (emulated; on the GPU Cuda.ReadbackKernelsMmaAndWgmmaAgree
# compares them: call 1 runs it). If the chunks-inner order wins, make it the default
# (RHOSCAN_QR_CHUNKS_INNER 1 in quadratic_backward.cuh) and say so in docs/CUDA.md.
# $OUT holds only summary.txt, bench.jsonl and logs.tgz. Carry .gpucarry (its COMMIT: main's head).
LOGS=/tmp/logs2 source bench/results/round32-prepared/call_common.sh
R=/tmp/b/tools/rhoscan
if [ ! -x $R ]; then
  stage "build (CLI only)"
  R=/tmp/c_main/tools/rhoscan
  (cmake -S . -B /tmp/c_main -G Ninja -DRHOSCAN_VULKAN=OFF -DRHOSCAN_BUILD_TESTS=OFF -DCMAKE_CUDA_ARCHITECTURES=90a \
    > $L/configure.log 2>&1 && cmake --build /tmp/c_main -j16 --target rhoscan_cli > $L/build.log 2>&1) ||
    { echo "BUILD FAILED" >> $S; tail -20 $L/build.log >> $S; pack; exit 1; }
fi
stage ncu
for c in BDH-8k BDH-base; do
  for o in 0 1; do
    late 300 && { echo "(skipped: late) $c order $o" >> $S; continue; }
    RHOSCAN_CUDA_READBACK_CHUNKS_INNER=$o timeout 60 ncu --clock-control none -k regex:quad_readback_wgmma \
      --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,smsp__inst_executed.sum --csv \
      $R bench --device cuda --cases $c --backward --repeats 1 > $L/ncu-$c-$o.csv 2>&1
    echo "-- $c chunks_inner=$o" >> $S; python3 dev/cuda/ncu_summary.py $L/ncu-$c-$o.csv >> $S 2>&1
  done
done
pack
stage ab
for r in 1 2 3; do
  late 480 && { echo "(round $r skipped: late)" >> $S; break; }
  for o in 0 1; do
    echo "-- chunks_inner=$o (round $r)" >> $S
    RHOSCAN_CUDA_READBACK_CHUNKS_INNER=$o timeout 40 $R bench --device cuda --cases BDH-base,BDH-8k --backward \
      --repeats 5 --json $J --commit "$RHOSCAN_COMMIT+readback=$([ $o = 1 ] && echo chunks || echo latent_tiles)_inner" 2>&1 | grep -E "^BDH" >> $S
  done
done
stage end
pack
