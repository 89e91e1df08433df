#!/usr/bin/env bash
# Sensitivity check of emulate.cpp's norm_sums cases (the fused token and chunk sums of
# src/cuda/chunk_kernels.cuh): plants known bugs, one at a time, in a copy of src/cuda and expects
# the emulation (EMU_ONLY=norm_sums) to fail on each; a mutant that passes is reported as MISSED.
#   dev/cuda/host_emulation/mutants_norm_sums.sh [NAME_SUBSTRING]      (from anywhere; ~1 min each)
set -u
cd "$(dirname "$0")/../../.."
root=$(pwd)
for rev in 905c4ad b9ba242; do  # run.sh's base revisions, which extract.py reads
  if ! git cat-file -e "$rev^{commit}" 2>/dev/null; then
    echo "skipped: revision $rev is not in this clone (shallow?)"
    exit 77
  fi
done
export GIT_DIR=$(git rev-parse --absolute-git-dir)  # extract.py runs in the copy's directory
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cp "$root/dev/cuda/host_emulation/shim.h" "$dir/"
# name | file | text | replacement
mutants=(
  "butterfly: the last stage's partner lane ^ 2 instead of lane ^ 1|src/cuda/chunk_kernels.cuh|x[j] = keep + __shfl_xor_sync(0xffffffffu, give, M);|x[j] = keep + __shfl_xor_sync(0xffffffffu, give, M == 1 ? 2 : M);"
  "butterfly: the first two stages swapped (tokens 16-31 dropped)|src/cuda/chunk_kernels.cuh|      sums_halve<16>(x, lane);\n      sums_halve<8>(x, lane);|      sums_halve<8>(x, lane);\n      sums_halve<16>(x, lane);"
  "butterfly: a lane keeps the half it gives away|src/cuda/chunk_kernels.cuh|const float keep = up ? x[j + M] : x[j], give = up ? x[j] : x[j + M];|const float keep = up ? x[j] : x[j + M], give = up ? x[j + M] : x[j];"
  "warps' sums: warp 1 skipped|src/cuda/chunk_kernels.cuh|for (int w = 1; w < nw; ++w) acc += red[w][k];|for (int w = 2; w < nw; ++w) acc += red[w][k];"
  "warps' sums: warp 0 added twice|src/cuda/chunk_kernels.cuh|for (int w = 1; w < nw; ++w) acc += red[w][k];|for (int w = 0; w < nw; ++w) acc += red[w][k];"
  "warps' sums: the second 32 tokens into the first slots|src/cuda/chunk_kernels.cuh|red[warp][k32 + lane] = x[0];|red[warp][lane] = x[0];"
  "last block: the latent blocks rounded down (L not a multiple of the width)|src/cuda/chunk_kernels.cuh|  return (L + width - 1) / width;|  return L / width;"
  "last block: the last pair below L left out|src/cuda/chunk_kernels.cuh|const bool active = l < d.L;|const bool active = l + 2 < d.L;"
  "reduce: eps added per latent block|src/cuda/chunk_kernels.cuh|acc += row[lb * d.T];\n    s[i] = acc + kEpsF;|acc += row[lb * d.T] + kEpsF;\n    s[i] = acc;"
  "partials: the chunk's first token (t0) left out of the index|src/cuda/chunk_kernels.cuh|parts[(bh * nlb + lb) * d.T + c * d.C + k] = acc;|parts[(bh * nlb + lb) * d.T + k] = acc;"
  "partials: the reduce's pair stride without the blocks|src/cuda/chunk_kernels.cuh|const float* row = parts + bh * nlb * d.T + t;|const float* row = parts + bh * d.T + t;"
  "token sums: one latent of the pair|src/cuda/chunk_kernels.cuh|= qv[k][0] + qv[k][1];|= qv[k][0];"
  "one block: s written without eps|src/cuda/chunk_kernels.cuh|s[bh * d.T + c * d.C + k] = acc + kEpsF;|s[bh * d.T + c * d.C + k] = acc;"
  "one block: s at the partials' index (the chunk's first token left out)|src/cuda/chunk_kernels.cuh|s[bh * d.T + c * d.C + k] = acc + kEpsF;|s[bh * d.T + k] = acc + kEpsF;"
  "chunk sums: the partial batch steps one token past the chunk|src/cuda/chunk_kernels.cuh|              if (k < n) {\n#pragma unroll\n                for (int v = 0; v < 2; ++v) z[v] = a[v] * z[v] + qv[k][v];|              if (k <= n) {\n#pragma unroll\n                for (int v = 0; v < 2; ++v) z[v] = a[v] * z[v] + qv[k][v];"
)
missed=0
for m in "${mutants[@]}"; do
  IFS='|' read -r name file from to <<<"$m"
  [[ "$name" == *"${1:-}"* ]] || continue
  rm -rf "$dir/src" && mkdir -p "$dir/src" && cp -r "$root/src/cuda" "$dir/src/"
  if ! python3 - "$dir/$file" "$from" "$to" <<'PY'
import sys
path, a, b = (x.replace("\\n", "\n") for x in sys.argv[1:4])
s = open(path).read()
if a not in s:
    sys.exit(f"mutant text not found in {path}: {a!r}")
open(path, "w").write(s.replace(a, b, 1))
PY
  then missed=$((missed + 1)); continue; fi
  (cd "$dir" && python3 "$root/dev/cuda/host_emulation/extract.py" 905c4ad kernels.h b9ba242) &&
    g++ -std=c++20 -O1 -pthread -w -I "$dir" "$root/dev/cuda/host_emulation/emulate.cpp" -o "$dir/emu" || exit 2
  if EMU_ONLY=norm_sums timeout 600 "$dir/emu" >"$dir/log" 2>&1; then
    echo "MISSED   $name"
    missed=$((missed + 1))
  else
    echo "ok caught $name  [$(grep -m1 -B1 'DIFFERENT\|emulation error' "$dir/log" | head -1 | sed 's/^ *//')]"
  fi
done
echo "$missed missed"
[ "$missed" = 0 ]
