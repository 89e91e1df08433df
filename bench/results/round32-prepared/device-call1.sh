#!/usr/bin/env bash
# Prepared in round 31 for the next session (see README.md here). On main, with .gpucarry/base
# (d9f3628, main before round 31) and .gpucarry/cand (branch round32-candidates:
# cross_scores_wgmma's bf16 instantiation allocated without spills), each with a COMMIT file:
# (1) build main with the tests; the CUDA suite and the harness's CUDA cases;
# (2) main's figures (BDH-8k, long-T8192, BDH-base, the step) on the card this call gets;
# (3) CLI builds of base and cand; Nsight durations and warp instructions of cross_scores_wgmma in
#     all three at BDH-base and BDH-8k; the main loop's length and S2R count from each SASS;
#     BDH-base and BDH-8k end to end, two alternating rounds of the three builds.
# $OUT holds only summary.txt (written as it goes), bench.jsonl and logs.tgz: only 8 files come back.
# Carry .gpucarry; run as `bash bench/results/round32-prepared/device-call1.sh`.
LOGS=/tmp/logs source bench/results/round32-prepared/call_common.sh
stage build
OUT=$L bash scripts/cuda_device_run.sh build >> $S 2>&1 || { pack; exit 1; }
for v in base cand; do
  (cmake -S .gpucarry/$v -B /tmp/c_$v -G Ninja -DRHOSCAN_VULKAN=OFF -DRHOSCAN_BUILD_TESTS=OFF -DCMAKE_CUDA_ARCHITECTURES=90a \
    > $L/c_${v}_configure.log 2>&1 && cmake --build /tmp/c_$v -j6 --target rhoscan_cli > $L/c_${v}_build.log 2>&1;
    echo "$v cli rc=$?" >> $L/cli_rc.txt) &
done
stage tests
(cd /tmp/b && timeout 200 tests/test_cuda > $L/test_cuda.log 2>&1; echo "test_cuda rc=$?") >> $S
grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|Expected|Which is" $L/test_cuda.log | head -20 >> $S
(cd /tmp/b && timeout 200 tests/test_backends --gtest_filter='*cuda*' > $L/test_backends.log 2>&1; echo "test_backends (cuda) rc=$?") >> $S
grep -E "^\[  (PASSED|FAILED) " $L/test_backends.log | head -5 >> $S
stage figures
timeout 150 /tmp/b/tools/rhoscan bench --device cuda --cases BDH-8k,long-T8192,BDH-base,step-8k --backward --repeats 5 \
  --json $J --commit "$RHOSCAN_COMMIT" 2>&1 | grep -E "^(BDH|long|step)" >> $S
pack
stage cross_scores
wait; cat $L/cli_rc.txt >> $S
tool() { case $1 in main) echo /tmp/b/tools/rhoscan;; *) echo /tmp/c_$1/tools/rhoscan;; esac; }
label() { case $1 in main) echo $RHOSCAN_COMMIT;; *) cat .gpucarry/$1/COMMIT;; esac; }
for vc in main:BDH-base cand:BDH-base base:BDH-base main:BDH-8k cand:BDH-8k base:BDH-8k; do
  v=${vc%%:*} c=${vc#*:}
  late 480 && { echo "(skipped: late) $vc" >> $S; continue; }
  timeout 40 ncu --clock-control none -k regex:cross_scores --metrics gpu__time_duration.sum,smsp__inst_executed.sum --csv \
    $(tool $v) bench --device cuda --cases $c --backward --repeats 1 > $L/ncu-$v-$c.csv 2>&1
  echo "-- $v $c" >> $S; python3 dev/cuda/ncu_summary.py $L/ncu-$v-$c.csv >> $S 2>&1
done
for v in main cand base; do
  dir=$([ $v = main ] && echo /tmp/b || echo /tmp/c_$v)
  cuobjdump -sass $(find $dir -name 'forward.cu.o' | head -1) > $L/sass_$v.txt 2>&1
  python3 - $L/sass_$v.txt $v >> $S <<'PY'
import re, sys
text = open(sys.argv[1]).read()
for part in re.split(r"\n(?=\s*Function : )", text):
    head = part.split("\n", 1)[0]
    if "cross_scores_wgmma_kernel" not in head:
        continue
    ins = re.findall(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", part)
    hg = [i for i, (_, t) in enumerate(ins) if "HGMMA" in t]
    for i, (_, t) in enumerate(ins):
        m = re.search(r"BRA (0x[0-9a-f]+)", t)
        if m and hg and i > hg[-1] and int(m.group(1), 16) <= int(ins[hg[0]][0], 16):
            i0 = [k for k, (a, _) in enumerate(ins) if int(a, 16) == int(m.group(1), 16)][0]
            loop = [x for _, x in ins[i0:i + 1]]
            print(sys.argv[2], head.strip()[11:70], "main loop", len(loop), "instructions,",
                  sum("S2R" in x for x in loop), "S2R,", sum(("LDL" in x) or ("STL" in x) for x in loop), "LDL/STL")
            break
PY
done
stage ab
for r in 1 2; do
  late 520 && { echo "(round $r skipped: late)" >> $S; break; }
  for v in main cand base; do
    echo "-- $(label $v) (round $r)" >> $S
    timeout 40 $(tool $v) bench --device cuda --cases BDH-base,BDH-8k --backward --repeats 5 --json $J \
      --commit "$(label $v)" 2>&1 | grep -E "^BDH" >> $S
  done
done
stage end
pack
