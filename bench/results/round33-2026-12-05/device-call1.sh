#!/usr/bin/env bash
# Round 33, call 1: round 32's three prepared calls (../round32-prepared/) folded into one, because
# the machine came late (four refusals, ~90 s of device time each) and one start is cheaper than
# three. Order: what decides a default first, the profiles last.
# (1) build main with the tests, the cross-scores candidate's CLI (.gpucarry/cand) beside it;
# (2) the CUDA suite (it compares both readback orders and both scan versions bitwise);
# (3) Cuda.ChunkScanVersionsAgree under memcheck and racecheck;
# (4) main's figures on this card;
# (5) A/B, alternating: scan v1/v2 at BDH-base (3 rounds), readback order at BDH-8k + BDH-base
#     (2 rounds), main vs cand at BDH-base + BDH-8k (2 rounds);
# (6) Nsight durations, DRAM bytes, warp instructions of the three kernels in both variants.
# $OUT: summary.txt, bench.jsonl, logs.tgz. Carry .gpucarry. Run from the repository root.
LOGS=/tmp/logs1 source bench/results/round32-prepared/call_common.sh
stage build
(cmake -S .gpucarry/cand -B /tmp/c_cand -G Ninja -DRHOSCAN_VULKAN=OFF -DRHOSCAN_BUILD_TESTS=OFF -DCMAKE_CUDA_ARCHITECTURES=90a \
  > $L/c_cand_configure.log 2>&1 && cmake --build /tmp/c_cand -j6 --target rhoscan_cli > $L/c_cand_build.log 2>&1;
  echo "cand cli rc=$?" > $L/cli_rc.txt) &
OUT=$L bash scripts/cuda_device_run.sh build >> $S 2>&1 || { pack; exit 1; }
R=/tmp/b/tools/rhoscan C=/tmp/c_cand/tools/rhoscan
stage tests
(cd /tmp/b && timeout 150 tests/test_cuda > $L/test_cuda.log 2>&1; echo "test_cuda rc=$?") >> $S
grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|Expected|Which is" $L/test_cuda.log | head -20 >> $S
(cd /tmp/b && timeout 120 tests/test_backends --gtest_filter='*cuda*' > $L/test_backends.log 2>&1; echo "test_backends (cuda) rc=$?") >> $S
grep -E "^\[  (PASSED|FAILED) " $L/test_backends.log | head -5 >> $S
pack
stage sanitize
for tool in memcheck racecheck; do
  late 260 && { echo "(skipped: late) $tool" >> $S; continue; }
  timeout 60 compute-sanitizer --tool $tool --error-exitcode 9 /tmp/b/tests/test_cuda \
    --gtest_filter='Cuda.ChunkScanVersionsAgree' > $L/$tool.log 2>&1
  echo "$tool (ChunkScanVersionsAgree) rc=$?" >> $S; grep -E "ERROR SUMMARY|RACECHECK SUMMARY" $L/$tool.log | head -3 >> $S
done
pack
stage figures
timeout 60 $R bench --device cuda --cases BDH-8k,long-T8192,BDH-base,step-8k --backward --repeats 5 \
  --json $J --commit "$RHOSCAN_COMMIT" 2>&1 | grep -E "^(BDH|long|step)" >> $S
pack
stage ab
wait; cat $L/cli_rc.txt >> $S
for r in 1 2 3; do
  late 470 && { echo "(round $r skipped: late)" >> $S; break; }
  for v in 1 2; do
    echo "-- scan v$v (round $r)" >> $S
    RHOSCAN_CUDA_SCAN_VERSION=$v timeout 30 $R bench --device cuda --cases BDH-base --backward --repeats 5 \
      --json $J --commit "$RHOSCAN_COMMIT+scan=v$v" 2>&1 | grep -E "^BDH" >> $S
  done
  [ $r = 3 ] && break
  for o in 0 1; do
    echo "-- readback chunks_inner=$o (round $r)" >> $S
    RHOSCAN_CUDA_READBACK_CHUNKS_INNER=$o timeout 30 $R bench --device cuda --cases BDH-base,BDH-8k --backward \
      --repeats 5 --json $J --commit "$RHOSCAN_COMMIT+readback=$([ $o = 1 ] && echo chunks || echo latent_tiles)_inner" 2>&1 | grep -E "^BDH" >> $S
  done
  if [ -x $C ]; then
    echo "-- cand $(cat .gpucarry/cand/COMMIT) (round $r)" >> $S
    timeout 30 $C bench --device cuda --cases BDH-base,BDH-8k --backward --repeats 5 --json $J \
      --commit "$(cat .gpucarry/cand/COMMIT)" 2>&1 | grep -E "^BDH" >> $S
  fi
done
pack
stage ncu
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,smsp__inst_executed.sum
prof() {  # label, kernel regex, case, VAR=value, tool
  local lab=$1 k=$2 c=$3 var=$4 tool=$5
  late 540 && { echo "(skipped: late) $lab" >> $S; return; }
  env $var timeout 40 ncu --clock-control none -k regex:$k --metrics $M --csv $tool bench --device cuda --cases $c \
    --backward --repeats 1 > $L/ncu-$lab.csv 2>&1
  echo "-- $lab" >> $S; python3 dev/cuda/ncu_summary.py $L/ncu-$lab.csv >> $S 2>&1
}
prof scan-v1-base chunk_scan BDH-base RHOSCAN_CUDA_SCAN_VERSION=1 $R
prof scan-v2-base chunk_scan BDH-base RHOSCAN_CUDA_SCAN_VERSION=2 $R
prof readback-latent-8k quad_readback BDH-8k RHOSCAN_CUDA_READBACK_CHUNKS_INNER=0 $R
prof readback-chunks-8k quad_readback BDH-8k RHOSCAN_CUDA_READBACK_CHUNKS_INNER=1 $R
prof cross-main-base cross_scores BDH-base X=0 $R
prof cross-cand-base cross_scores BDH-base X=0 $C
stage end
pack
