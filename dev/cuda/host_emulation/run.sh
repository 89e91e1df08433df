#!/usr/bin/env bash
# Host emulation check (no GPU needed): the working tree's normaliser scan and bwd_local against
# the same kernels at BASE_REV (default 905c4ad, main before the chunk-parallel scan), and its
# token sums and normaliser scan bitwise against PREV_REV's (default b9ba242, before the paired
# norm_apply), except where q's latents pair up: there the token sums come from norm_sums_kernel
# (one read of q with the chunk sums, another order of adds), so s is held to a float64 sum (1e-6
# relative), Qp and Xq to PREV_REV's within 1e-5 / a bf16 step (also given the same s: norm_apply's
# N runs over batches of 8 tokens by a^8 N + z since norm_scores_mma), and N, rho_norm, Kq stay bitwise; norm_sums_kernel's own cases check s against
# float64 and its chunk sums bitwise against norm_chunk_sums_kernel<T, 2>'s. Planted bugs in it:
# mutants_norm_sums.sh.
#   dev/cuda/host_emulation/run.sh [BASE_REV [PREV_REV]]      (from the repository root)
# The tensor-core kernels: run_mma.sh (emulate_mma.cpp).
# Exit status 77 (ctest's skip) when the base revision is not in the clone (a shallow clone).
set -eu
cd "$(dirname "$0")/../../.."
base=${1:-905c4ad}
prev=${2:-b9ba242}
for rev in "$base" "$prev"; do
  if ! git cat-file -e "$rev^{commit}" 2>/dev/null; then
    echo "skipped: revision $rev is not in this clone (shallow?)"
    exit 77
  fi
done
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
python3 dev/cuda/host_emulation/extract.py "$base" "$dir/kernels.h" "$prev"
cp dev/cuda/host_emulation/shim.h "$dir/"
g++ -std=c++20 -O1 -pthread -w -I "$dir" dev/cuda/host_emulation/emulate.cpp -o "$dir/emulate"
timeout 600 "$dir/emulate"  # (for a kernel that loops forever; a barrier not every thread reaches is reported)
