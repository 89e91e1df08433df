#!/usr/bin/env bash
# Call 2 of round 26 (after device-call1.sh): which of the candidates inside one kernel pays. In call
# 1, norm_scores_mma with all four of its candidates was 2 % slower at BDH-8k (barrier stalls 11.6 ->
# 17.9 %) and the readback (persistent grid + refill) 1 % slower; cross_scores_wgmma's refill was
# 6 % faster. Here each candidate is taken out of the branch alone (.gpucarry/var/<name>/src, made
# by reverting its commit's src part; ns_kd3 by kKd3Moved = false), every tree's CLI is built, and
# Nsight Compute gives each build's kernel durations at BDH-8k and long-T8192 (forward+backward).
# Variants: ns_lowbits (90d63d0), ns_pzeros (9f98147), ns_power (0d24e9a), ns_kd3 (cc77a53), refill
# (5b97ec4 + 84820e0: the readback, final_state_wgmma, cross_scores_wgmma without the refill under
# the products). Then one round of the quadratic paths' crossover on the branch's build while time
# is left. Carry .gpucarry (COMMIT, var/); run as `bash bench/results/round26-h200-2026-12-05/device-call2-variants.sh`.
set -u
export RHOSCAN_COMMIT=$(cat .gpucarry/COMMIT)
S=$OUT/summary.txt
t0=$(date +%s)
stage() { echo "== $1 ($(( $(date +%s) - t0 )) s)"; }
VARS="head $(ls .gpucarry/var)"
{
stage build
for v in $VARS; do
  (mkdir -p /tmp/t_$v && tar --exclude=./.gpucarry -cf - . | tar -xf - -C /tmp/t_$v
   [ $v = head ] || { rm -rf /tmp/t_$v/src && cp -r .gpucarry/var/$v/src /tmp/t_$v/; }
   cd /tmp/t_$v && cmake -S . -B /tmp/b_$v -G Ninja -DRHOSCAN_VULKAN=OFF -DCMAKE_CUDA_ARCHITECTURES=90a \
     -DRHOSCAN_BUILD_TESTS=OFF > $OUT/configure_$v.log 2>&1 &&
   timeout 300 cmake --build /tmp/b_$v -j3 --target rhoscan_cli > $OUT/build_$v.log 2>&1 || echo "BUILD FAILED $v") &
done
wait
grep -h -E "norm_scores_mma_kernelI13__nv_bfloat16Lb1" -A3 $OUT/build_*.log | grep -E "registers|spill" | head -12
stage ncu
for v in $VARS; do
  for cs in BDH-8k long-T8192; do
    timeout 60 ncu --clock-control none --metrics gpu__time_duration.sum --csv /tmp/b_$v/tools/rhoscan bench --device cuda \
      --cases $cs --backward --repeats 1 > $OUT/ncu_${v}_${cs}.csv 2>&1
    echo "-- $v $cs"; python3 dev/cuda/ncu_summary.py $OUT/ncu_${v}_${cs}.csv | sort -k4 -g -r | grep -E "norm_scores|readback_wgmma|final_state_wgmma|cross_scores_wgmma"
  done
done
M=smsp__inst_executed.sum,gpu__time_duration.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__warp_issue_stalled_barrier_per_warp_active.pct
for v in $VARS; do
  echo "-- counters norm_scores $v"
  timeout 40 ncu --clock-control none --metrics $M -k regex:norm_scores_mma -c 1 /tmp/b_$v/tools/rhoscan bench --device cuda \
    --cases BDH-8k --repeats 1 > $OUT/ncu_counters_$v.txt 2>&1
  grep -E "inst_executed|time_duration|issue_active|barrier" $OUT/ncu_counters_$v.txt | cut -c1-120
done
stage crossover
if [ $(( $(date +%s) - t0 )) -lt 360 ]; then
  ln -sfn /tmp/b_head /tmp/b && cd /tmp/t_head && CROSSOVER_SHAPES="24,4,1,512,256,256 24,4,1,512,512,256 16,4,1,512,1024,256 8,4,1,512,2048,256 8,4,1,512,4096,256 8,4,1,512,8192,256 12,4,1,1024,512,256" \
    timeout 190 bash scripts/cuda_device_run.sh crossover
fi
stage end
} 2>&1 | tee $S
cd $OUT && tar czf logs.tgz --exclude=summary.txt --exclude='*.jsonl' --exclude=logs.tgz * && find . -type f ! -name summary.txt ! -name '*.jsonl' ! -name logs.tgz -delete
