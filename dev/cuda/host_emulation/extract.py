#!/usr/bin/env python3
"""Writes the kernel header of the host emulation, cut out of the sources by their section
comments (a missing marker stops with its name); run from the repository root.
  extract.py BASE_REV OUT_FILE [PREV_REV]
                                 kernels.h for emulate.cpp: the token-sum, normaliser-scan and
                                 bwd_local kernels of the working tree, the same kernels at
                                 BASE_REV renamed with the suffix _old, and the token-sum and
                                 chunk-parallel normaliser-scan kernels at PREV_REV (default
                                 b9ba242, before the paired norm_apply) in namespace prev
  extract.py --mma OUT_FILE      kernels_mma.h for emulate_mma.cpp: the tensor-core kernels of the
                                 working tree (MMA_PARTS below, bwd_local included for its version 5,
                                 norm_apply for norm_scores_mma;
                                 a kernel added between the pack_bf16
                                 section and the launchers of chunk_products.cuh, or before the
                                 launchers of quadratic.cuh, comes along)"""
import re
import subprocess
import sys

base, out = sys.argv[1], sys.argv[2]
# the kernels' dynamic shared memory, at any alignment (emu::smem: offset 0 of a 16-byte aligned
# buffer, so that a kernel's 32-bit shared addresses are offsets from 0, aligned as on the GPU)
SHARED = re.compile(r"extern __shared__ __align__\((\d+)\) unsigned char smem_raw\[\];")
LOCAL = "unsigned char* smem_raw = emu::smem;"


def tree(path):
    return open(path).read()


def at_base(path):
    return subprocess.run(["git", "show", f"{base}:{path}"], check=True, capture_output=True, text=True).stdout


def cut(text, begin, end, where):
    try:
        a = text.index(begin)
        return text[a:text.index(end, a)]
    except ValueError:
        sys.exit(f"extract.py: marker not found in {where}: {begin!r} .. {end!r}")


kernels, backward = "src/cuda/chunk_kernels.cuh", "src/cuda/backward.cu"
products, mma = "src/cuda/chunk_products.cuh", "src/cuda/mma.cuh"

# (file, first line's start, the text that ends the part): the working tree's tensor-core kernels.
MMA_PARTS = [
    ("src/cuda/common.cuh", "// a^n for n >= 0", "// Block counts"),
    (kernels, "// A strided tensor", "// How many slices of L"),
    (kernels, "// Tokens per batch of loads", "// One thread per (bh, c, V latents)."),
    # norm_apply, for norm_scores_mma's bitwise comparison with it
    (kernels, "// Qp is float32 where FFMA kernels", "// The three passes of the normaliser scan"),
    (kernels, "// f(n) = d/da a^n", "// ---- decay to float32"),
    (mma, "// One warp's 32", "}  // namespace rhoscan::cuda_detail"),
    (products, "constexpr int kMmaThreads", "// Sets the state and operand padding"),
    (products, "// ---- y (v or G", "// ---- launchers"),
    ("src/cuda/quadratic.cuh", "// ---- cross_scores", "// ---- launchers (quadratic)"),
    ("src/cuda/chunk_scan.cuh", "// ---- chunk_scan_mma", "// ---- launchers (chunk_scan)"),
    (backward, "constexpr int kLocalThreads", "\n\n"),
    (backward, "// ---- bwd_local's contractions over E on tensor cores", "// gc_t = sum_l"),
    (backward, "// gc_t = sum_l", "// ---- bwd_local: one block per"),
    (backward, "// ---- bwd_local: one block per", "// The normaliser gradient across chunks"),
    (backward, "// The normaliser gradient across chunks", "// dq_t[l] = partial"),
    ("src/cuda/quadratic_backward.cuh", "// ---- cross values", "// ---- end of the quadratic backward's kernels"),
]
if base == "--mma":
    text = "\n".join(['#include "shim.h"'] + [cut(tree(f), b, e, f) for f, b, e in MMA_PARTS])
    open(out, "w").write(SHARED.sub(LOCAL, text))
    sys.exit(0)

new_k, old_k, new_b, old_b = tree(kernels), at_base(kernels), tree(backward), at_base(backward)
prev = sys.argv[3] if len(sys.argv) > 3 else "b9ba242"
prev_k = subprocess.run(["git", "show", f"{prev}:{kernels}"], check=True, capture_output=True, text=True).stdout
parts = [
    '#include "shim.h"',
    cut(tree("src/cuda/common.cuh"), "// a^n for n >= 0", "// Block counts", "src/cuda/common.cuh"),
    cut(new_k, "// A strided tensor", "// How many slices of L", kernels),
    cut(new_k, "// f(n) = d/da a^n", "// ---- decay to float32", kernels),
    cut(new_k, "// ---- s_t = eps", "// ---- normaliser scan, chunk-parallel", kernels),
    cut(new_k, "// ---- normaliser scan, chunk-parallel", "// The three passes of the normaliser scan", kernels),
    "namespace prev {",
    cut(prev_k, "// ---- s_t = eps", "// The three passes of the normaliser scan", f"{prev}:{kernels}"),
    "}  // namespace prev",
    cut(old_k, "// ---- normaliser scan: one thread per", "// ---- intra-chunk scores", f"{base}:{kernels}")
    .replace("norm_scan_kernel", "norm_scan_kernel_old"),
    cut(new_b, "constexpr int kLocalThreads", "\n\n", backward),
    cut(new_b, "// ---- bwd_local: one block per", "// The normaliser gradient across chunks", backward),
    # the base's bwd_local (a block per 16 latents), with its own copies of the tile constants
    "constexpr int kLocalLTOld = 16, kLocalETOld = 32;",
    cut(old_b, "// One block per (bh, chunk, 16 latents)", "// The normaliser gradient across chunks",
        f"{base}:{backward}").replace("LocalSmem", "LocalSmemOld").replace("bwd_local_kernel", "bwd_local_kernel_old")
    .replace("kLocalLT", "kLocalLTOld").replace("kLocalET", "kLocalETOld"),
]
text = SHARED.sub(LOCAL, "\n".join(parts))
open(out, "w").write(text)
