// The forward's saved buffer (ForwardArgs::saved, BackwardArgs::saved; docs/API.md): what the
// CUDA backward would otherwise recompute from q, decay and rho_norm. Its size is a function of
// the shapes alone (so that PyTorch's Meta kernels can allocate it without knowing the backend);
// which sections a forward filled is recorded in the header.
//
// Layout, in float32 elements (sections of bf16 elements: two per float), per (b, h) pair bh = b·H + h:
//   header   [kSavedHeaderFloats]              SavedHeader, then zeros
//   s        [B·H][T]                          token sums sum_l q_t[l]
//   Nc       [B·H][nC + 1][L]                  chunk-start normalisers (after the carry)
//   P        [B·H][nC][C][C]                   intra-chunk scores          (only if `diag_scores`)
//   Pcross   [B·H][nC][nC][C][C] bf16          cross-chunk scores          (only if `cross_scores`)
//   Xq, Kq   [B·H][T][Lp] bf16 each            the normalised keys         (only if `keys`)
// where C is the chunk (options.chunk_size, 0: 64, at most 64), nC = ceil(T / C) and Lp is L
// rounded up to 64 (the CUDA tensor-core operands' rows, their padding latents zero).
// The keys are reserved only when asked for (saved_numel's with_keys) and where the intra-chunk
// scores are: they are twice q's bytes (537 MB at BDH-8k), a memory-for-time trade the caller
// makes (the backward's norm_apply, about 0.25 ms at BDH-8k on the H200, need not run). A buffer's
// length says which layout it has.
// The cross-chunk scores are reserved only where the CUDA forward takes its quadratic path by
// default and L >= 8 T (16-bit inputs, no initial rho, C = 64, T <= 1024): there they are at most an
// eighth of q's bytes (a quarter until version 4 kept them as float32), and the backward's
// cross_scores (about 0.3 ms at BDH-8k) need not run again. (The forward takes that path from
// L = 2 T, where the scores would be up to half of q's bytes: from 2 T to 8 T it does not save them
// and the backward computes them.) The intra-chunk scores (T C
// floats per pair) are reserved there and wherever the inputs are 16-bit and L >= 4 C, where they
// are at most half of q's bytes: the backward's chunk_scores (0.14 ms at B=1, H=4, T=8192, L=2048
// and 0.04 ms at B=24, H=4, T=512, L=256 on the H200) need not run either. s and Nc are always
// reserved (T + (nC + 1) L floats per pair, about 1/60 of q).
#pragma once

#include <cstdint>

#include "rhoscan/rhoscan.h"

namespace rhoscan::detail {

inline constexpr int64_t kSavedHeaderFloats = 64;  // 256 bytes: sections stay 256-byte aligned
inline constexpr uint32_t kSavedMagic = 0x53564852u;  // "RHVS" little-endian
// 2: P reserved apart from Pcross; 3: the keys; 4: Pcross as bf16 (its consumers round it to bf16:
// the same operands in half the bytes)
inline constexpr uint32_t kSavedVersion = 4;

// Section flags of SavedHeader::filled.
inline constexpr uint32_t kSavedNorm = 1u;         // s and Nc
inline constexpr uint32_t kSavedDiagScores = 2u;   // P
inline constexpr uint32_t kSavedCrossScores = 4u;  // Pcross
inline constexpr uint32_t kSavedKeys = 8u;         // Xq and Kq

struct SavedHeader {
  uint32_t magic = 0, version = 0;
  int64_t B = 0, H = 0, T = 0, L = 0, C = 0;
  int32_t dtype = 0;         // DType of q
  int32_t has_rho_norm = 0;  // whether the forward had an initial rho_norm (Nc depends on it)
  uint32_t filled = 0;       // kSavedNorm | kSavedDiagScores | kSavedCrossScores: what the forward wrote
  uint32_t reserved = 0;
};
static_assert(sizeof(SavedHeader) <= kSavedHeaderFloats * 4, "the header fits its floats");

struct SavedLayout {
  int64_t C = 0, nC = 0;
  bool diag_scores = false;   // whether P is reserved
  bool cross_scores = false;  // whether Pcross is reserved
  bool keys = false;          // whether Xq and Kq are reserved
  // offsets in floats from the buffer's start (bh 0), and per-pair sizes in floats (Pcross_pair
  // and keys_pair: in bf16 elements, nC²·C² and T·Lp, the latter the same for Xq and Kq)
  int64_t s = 0, Nc = 0, P = 0, Pcross = 0, Xq = 0, Kq = 0, total = 0;
  int64_t s_pair = 0, Nc_pair = 0, P_pair = 0, Pcross_pair = 0, keys_pair = 0;
};

// The chunk the CUDA backend runs (and the saved layout assumes) for options.chunk_size.
inline int64_t saved_chunk(int64_t chunk_size) { return chunk_size > 0 ? (chunk_size < 64 ? chunk_size : 64) : 64; }

// total == 0 when there is nothing to save (B·H·T == 0): the buffer must then be empty.
inline SavedLayout saved_layout(int64_t B, int64_t H, int64_t T, int64_t L, DType dtype, bool has_rho,
                                int64_t chunk_size, bool with_keys = false) {
  SavedLayout g;
  g.C = saved_chunk(chunk_size);
  g.nC = (T + g.C - 1) / g.C;
  if (B * H * T == 0) return g;
  const bool sixteen = dtype == DType::bfloat16 || dtype == DType::float16;
  g.cross_scores = sixteen && !has_rho && g.C == 64 && T <= 1024 && L >= 8 * T;
  g.diag_scores = g.cross_scores || (sixteen && L >= 4 * g.C);
  g.s_pair = T;
  g.Nc_pair = (g.nC + 1) * L;
  g.P_pair = g.diag_scores ? g.nC * g.C * g.C : 0;
  g.Pcross_pair = g.cross_scores ? g.nC * g.nC * g.C * g.C : 0;
  g.keys = with_keys && g.diag_scores;
  g.keys_pair = g.keys ? T * ((L + 63) / 64 * 64) : 0;
  auto aligned = [](int64_t floats) { return (floats + 63) / 64 * 64; };  // 256-byte sections
  const int64_t BH = B * H;
  g.s = kSavedHeaderFloats;
  g.Nc = g.s + aligned(BH * g.s_pair);
  g.P = g.Nc + aligned(BH * g.Nc_pair);
  g.Pcross = g.P + aligned(BH * g.P_pair);
  g.Xq = g.Pcross + aligned((BH * g.Pcross_pair + 1) / 2);
  g.Kq = g.Xq + aligned(BH * g.keys_pair / 2);  // (Lp even: two bf16 per float)
  g.total = g.Kq + aligned(BH * g.keys_pair / 2);
  return g;
}

}  // namespace rhoscan::detail
