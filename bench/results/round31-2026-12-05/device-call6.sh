#!/usr/bin/env bash
# Round 31, call 6: cross_scores_wgmma instantiated per store path with the bf16 one addressed as
# Pcross + sp plane + blk (ptxas here: no spills, against 8 bytes with the branch; call 5's SASS
# showed the spilling build reading threadIdx three times inside the main loop). In order of
# importance, the summary written as it goes: CLI builds of this tree and .gpucarry/base
# (d9f3628); Nsight durations of cross_scores_wgmma in both at BDH-base and BDH-8k; the main
# loop's S2R count in this build's SASS; then the tests build and test_cuda.
set -u
export RHOSCAN_COMMIT=$(cat .gpucarry/COMMIT)
S=$OUT/summary.txt
t0=$(date +%s)
stage() { echo "== $1 ($(( $(date +%s) - t0 )) s)" >> $S; }
nvidia-smi --query-gpu=name --format=csv,noheader >> $S
stage cli
for v in new base; do
  dir=$([ $v = new ] && echo . || echo .gpucarry/base)
  (cmake -S $dir -B /tmp/c_$v -G Ninja -DRHOSCAN_VULKAN=OFF -DRHOSCAN_BUILD_TESTS=OFF -DCMAKE_CUDA_ARCHITECTURES=90a \
    > $OUT/c_${v}_configure.log 2>&1 && cmake --build /tmp/c_$v -j8 --target rhoscan_cli > $OUT/c_${v}_build.log 2>&1;
    echo "$v cli rc=$?" >> $S) &
done
wait
stage ncu
for vc in new:BDH-base base:BDH-base new:BDH-8k base:BDH-8k; do
  v=${vc%%:*} c=${vc#*:}
  timeout 40 ncu --clock-control none -k regex:cross_scores --metrics gpu__time_duration.sum,smsp__inst_executed.sum --csv \
    /tmp/c_$v/tools/rhoscan bench --device cuda --cases $c --backward --repeats 1 > $OUT/ncu-$v-$c.csv 2>&1
  echo "-- $v $c" >> $S; python3 dev/cuda/ncu_summary.py $OUT/ncu-$v-$c.csv >> $S 2>&1
done
stage sass
obj=$(find /tmp/c_new -name 'forward.cu.o' | head -1)
cuobjdump -sass "$obj" > $OUT/sass_new_all.txt 2>&1
python3 - $OUT/sass_new_all.txt >> $S <<'PY'
import re, sys
text = open(sys.argv[1]).read()
for part in re.split(r"\n(?=\s*Function : )", text):
    head = part.split("\n", 1)[0]
    if "cross_scores_wgmma_kernel" not in head:
        continue
    ins = re.findall(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", part)
    hg = [i for i, (_, t) in enumerate(ins) if "HGMMA" in t]
    back = [(i, int(m.group(1), 16)) for i, (_, t) in enumerate(ins) if (m := re.search(r"BRA (0x[0-9a-f]+)", t))
            and hg and i > hg[-1] and int(m.group(1), 16) < int(ins[hg[0]][0], 16)]
    if back:
        i1, a0 = back[0]
        i0 = [i for i, (a, _) in enumerate(ins) if int(a, 16) == a0][0]
        loop = [t for _, t in ins[i0:i1 + 1]]
        print(head.strip()[:80], "loop", len(loop), "S2R", sum("S2R" in t for t in loop),
              "LDL/STL", sum(("LDL" in t) or ("STL" in t) for t in loop))
PY
stage tests
OUT=$OUT bash scripts/cuda_device_run.sh build >> $OUT/tests_build.txt 2>&1 && echo "tests build ok" >> $S
(cd /tmp/b && timeout 100 tests/test_cuda > $OUT/test_cuda.log 2>&1; echo "test_cuda rc=$?") >> $S
grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure" $OUT/test_cuda.log | head -10 >> $S
stage end
cd $OUT && tar czf logs.tgz --exclude=summary.txt --exclude=logs.tgz * && find . -type f ! -name summary.txt ! -name logs.tgz -delete
