#!/usr/bin/env bash
# Round 31, call 5 (no GPU work): the SASS of cross_scores_wgmma_kernel from this tree and from
# .gpucarry/base (d9f3628), compiled as the build compiles forward.cu for sm_90a, for a side-by-side
# reading of why the kernel is slower with bf16 Pcross (calls 2-4). Writes $OUT/sass_{new,base}.txt.
set -u
flags="-std=c++17 -O3 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a -DRHOSCAN_HAVE_CUDA -DRHOSCAN_CUDA_WGMMA=1"
for v in new base; do
  dir=$([ $v = new ] && echo . || echo .gpucarry/base)
  (cd $dir && nvcc $flags -Isrc -Iinclude -cubin src/cuda/forward.cu -o /tmp/fwd_$v.cubin > $OUT/nvcc_$v.log 2>&1 &&
    cuobjdump -sass /tmp/fwd_$v.cubin > /tmp/sass_$v.txt 2>&1; echo "$v rc=$?") &
done
wait
for v in new base; do
  python3 - /tmp/sass_$v.txt $OUT/sass_$v.txt <<'PY'
import re, sys
text = open(sys.argv[1]).read()
parts = re.split(r"\n(?=\s*Function : )", text)
keep = [p for p in parts if "cross_scores_wgmma_kernel" in p.split("\n", 1)[0]]
open(sys.argv[2], "w").write("\n".join(keep))
print(sys.argv[2], sum(p.count("\n") for p in keep), "lines")
PY
done
