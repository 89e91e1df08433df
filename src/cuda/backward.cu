// The CUDA backward. For bfloat16 and float16 inputs the chunk states, dv and bwd_local's
// contractions over E run on tensor cores (chunk_products.cuh, chunk_readback_mma_kernel; float16
// values and upstream gradients as bf16 hi + lo pairs, see kSplitValues), and so do the scores
// M = G v^T (cross_values_mma's diagonal items); float32 keeps FFMA. The rest of bwd_local's row
// phase is FFMA on every path.
// Per batch of (b, h) pairs (bounded by options.max_workspace_bytes):
//   1. the forward's scan, scores P (and M[i][j] = G_i·v_j), chunk-start states H_c (float32);
//   2. chunk-end states of the reverse recurrence A (chunk_states<reverse>), dR_0 = A_0;
//   3. dv_t = (q_t a^(Cn-1-i))·A_end + sum_{k>i} P[k][i] G_k (chunk_output<dv>);
//   4. per (chunk, 64 latents): gw_t, sum_e A_{t+1} v_t, the normaliser gradient inside the
//      chunk, the partial dq, the chunk's share of da, and the block's share of
//      gc_t = sum_l gw_t[l] w_t[l] (= G_t·c_t) (bwd_local_kernel, then gc_reduce_kernel);
//   5. the normaliser gradient across chunks (bscan_kernel), dN_0 = B_0, and dq.
// The 16-bit backward of short sequences without rho0 and grad_rho_out replaces steps 1-3's
// chunk states, the readback and dv by products of blocks between chunks (quadratic_backward.cuh,
// backward_path below); steps 4 and 5 are the same.
// gc comes from the same gw that dq subtracts it from, so the difference gw - gc, which is small
// where the read weights are spread evenly, carries no error of a separately computed context.
// Reductions over heads (dv when Hv = 1) and over batch rows and chunks (da) are sums in a fixed
// order in one thread each: no atomics, so two runs give bitwise-identical gradients.
//
// Inside a chunk of length Cn, with local indices i, j, k:
//   R_i     = a^i H + sum_{j<i} a^(i-1-j) q_j ⊗ v_j
//   A_{i+1} = a^(Cn-1-i) A_end + sum_{k>i} a^(k-i-1) Qp_k ⊗ G_k
//   gw_i (N_i + eps) = a^i (H G_i) + sum_{j<i} a^(i-1-j) q_j M[i][j]
//   (A_{i+1} v_i)    = a^(Cn-1-i) (A_end v_i) + sum_{k>i} a^(k-i-1) Qp_k M[k][i]
//   da = sum_i <A_{i+1}, R_i> = f(Cn)<A_end, H> + sum_j q_j (A_end v_j) f(Cn-1-j)
//        + sum_k Qp_k (H G_k) f(k) + sum_{j<k} Qp_k q_j M[k][j] f(k-j-1),   f(n) = n a^(n-1).
#include <cstdlib>
#include <cstring>

#include "cuda/chunk_products.cuh"
#include "cuda/ops.h"
#include "cuda/quadratic_backward.cuh"
#include "cuda/side_streams.h"
#include "cuda/value_gate.h"
#include "cuda/workspace.h"

namespace rhoscan::cuda_detail {
namespace {


constexpr int kLocalThreads = 256;
constexpr int kLocalLT = 64, kLocalET = 32;

// ---- bwd_local's contractions over E on tensor cores (bfloat16 and float16 backward) ---------
// Per (bh, chunk, 64 latents): W[t][l] = H_c[l,:]·G_t and U[t][l] = A_end[l,:]·v_t for the chunk's
// tokens, HdH[c][l] = <H_c[l,:], A_end[l,:]>. The states come as bf16 hi + lo planes (x = hi + lo
// to about 2^-16 relative; chunk_states_mma_kernel's split stores) and G, v are exact in bf16, so
// W and U keep float32-level accuracy: gw = W / (N + eps) enters dq as the difference gw - gc.
// Warps 0-3 compute W, 4-7 U. All tiles arrive by cp.async, two stages over E: until c2241bf the
// states were float32, loaded and split here (0.98 ms per batch of 16 pairs at BDH-8k, DRAM 58 %,
// 0.40 issued warps per scheduler).
// kLo (split values, float16): gb_lo and vb_lo hold G's and v's bf16 remainders; the products
// then add S_hi·Y_lo (S_lo·Y_lo is below float32 resolution).
constexpr int kRbS = kMmaLT + 8;
// kSwizzle (version 2 only; the default, RHOSCAN_RB_SWIZZLE=0 at build time keeps the padded
// rows): the tiles' 128-byte rows unpadded, chunk c of row r at c ^ (r % 8) (mma.cuh's swizzled
// tiles), so that the cp.async fills write whole aligned 128-byte groups. The same bytes in other
// places: the same W, U and HdH bit for bit (emulated). H200, round 16 (de6c163's A/B, Nsight
// Compute durations of one backward): 1.326 against 1.555 ms at the long case, 0.274 against
// 0.320 at BDH-base.
#ifndef RHOSCAN_RB_SWIZZLE
#define RHOSCAN_RB_SWIZZLE 1
#endif
constexpr bool kRbSwizzle = RHOSCAN_RB_SWIZZLE != 0;
template <bool kLo>
constexpr int readback_tiles() {
  return kLo ? 8 : 6;
}
template <bool kLo, bool kSwizzle = false>
constexpr int readback_smem() {
  return 2 * readback_tiles<kLo>() * 64 * (kSwizzle ? kMmaLT : kRbS) * static_cast<int>(sizeof(bf16));
}
// RHOSCAN_READBACK_VERSION=1 builds the launcher with version 1 (chunk_readback_mma_v1_kernel) for
// the A/B; the default 2 runs version 2 (chunk_readback_mma_kernel, below) within
// readback_fit_32bit's limits, version 1 beyond them.
#ifndef RHOSCAN_READBACK_VERSION
#define RHOSCAN_READBACK_VERSION 2
#endif
static_assert(RHOSCAN_READBACK_VERSION == 1 || RHOSCAN_READBACK_VERSION == 2, "RHOSCAN_READBACK_VERSION: 1 or 2");
// Version 1 (64-bit item decode and fetch indices per piece, generic-pointer products).
template <bool kLo = false>
__global__ void __launch_bounds__(kMmaThreads, kLo ? 1 : 2) chunk_readback_mma_v1_kernel(
    Dims d, const bf16* Hs, const bf16* Hs_lo, const bf16* dHs, const bf16* dHs_lo, const bf16* gb, const bf16* vb,
    float* W, float* U, float* HdH, const bf16* gb_lo = nullptr, const bf16* vb_lo = nullptr) {
  grid_dependency_wait();
  extern __shared__ __align__(128) unsigned char smem_raw[];
  // per stage, tiles 0, 1: H hi, lo; 2, 3: A_end hi, lo ([64 latents][kRbS]); 4: G, 5: v
  // ([64 tokens][kRbS]); if kLo, 6: G lo, 7: v lo
  bf16* tiles = reinterpret_cast<bf16*>(smem_raw);
  constexpr int NT = readback_tiles<kLo>();
  auto tile = [&](int stage, int k) { return tiles + (stage * NT + k) * 64 * kRbS; };
  const int warp = threadIdx.x / 32;
  const bool is_u = warp >= 4;
  const int wm = (warp & 1) * 32, wn = ((warp >> 1) & 1) * 32;  // the warp's latents and tokens
  const int64_t nlt = d.Lp / 64, net = d.Ep / 64;
  for (int64_t item = blockIdx.x; item < d.nbh * d.nC * nlt; item += gridDim.x) {
    const int64_t bh = item / (d.nC * nlt), c = (item / nlt) % d.nC, l0 = (item % nlt) * 64, t0 = c * d.C;
    const int Cn = static_cast<int>(d.chunk_len(c));
    const int64_t s0 = ((bh * d.nC + c) * d.Lp + l0) * d.Ep;  // the item's rows of the state planes
    const int64_t y0 = (bh * d.T + t0) * d.Ep;                 // the chunk's rows of G
    const int64_t v0 = (d.v_row(bh) * d.T + t0) * d.Ep;        // of v (per batch row where d.v_rows)
    auto fetch = [&](int stage, int64_t e0) {
      for (int idx = threadIdx.x; idx < 64 * 8; idx += blockDim.x) {
        const int r = idx / 8, p = 8 * (idx % 8);
        const int64_t so = s0 + r * d.Ep + e0 + p, yr = min(r, Cn - 1) * d.Ep + e0 + p, yo = y0 + yr, vo = v0 + yr;
        const int o = r * kRbS + p;
        cp_async16(tile(stage, 0) + o, Hs + so);
        cp_async16(tile(stage, 1) + o, Hs_lo + so);
        cp_async16(tile(stage, 2) + o, dHs + so);
        cp_async16(tile(stage, 3) + o, dHs_lo + so);
        cp_async16(tile(stage, 4) + o, gb + yo, r < Cn);
        cp_async16(tile(stage, 5) + o, vb + vo, r < Cn);
        if constexpr (kLo) {
          cp_async16(tile(stage, 6) + o, gb_lo + yo, r < Cn);
          cp_async16(tile(stage, 7) + o, vb_lo + vo, r < Cn);
        }
      }
      cp_async_commit();
    };
    float acc[2][4][4] = {}, hdh[4] = {};  // hdh[k]: latent row threadIdx.x / 16 + 16 k
    __syncthreads();                       // the previous item's tiles are consumed
    fetch(0, 0);
    for (int64_t et = 0; et < net; ++et) {
      const int stage = static_cast<int>(et & 1);
      if (et + 1 < net) {
        fetch(stage ^ 1, (et + 1) * 64);  // into the stage consumed at et - 1
        cp_async_wait<1>();
      } else {
        cp_async_wait<0>();
      }
      __syncthreads();
#pragma unroll
      for (int k = 0; k < 4; ++k) {  // <H, A_end> over this tile's 64 columns, from hi + lo
        const int r = threadIdx.x / 16 + 16 * k, p = 4 * (threadIdx.x % 16);
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          const int o = r * kRbS + p + u;
          hdh[k] += (__bfloat162float(tile(stage, 0)[o]) + __bfloat162float(tile(stage, 1)[o])) *
                    (__bfloat162float(tile(stage, 2)[o]) + __bfloat162float(tile(stage, 3)[o]));
        }
      }
      // [l][t] += sum_e S[l][e] Y[t][e]: A = S (stored [l][e]), B = Y^T (Y stored [t][e])
      const bf16* Y = tile(stage, is_u ? 5 : 4);
      warp_mma_32x32<false, true>(acc, tile(stage, is_u ? 2 : 0), kRbS, Y, kRbS, wm, wn, 64);
      warp_mma_32x32<false, true>(acc, tile(stage, is_u ? 3 : 1), kRbS, Y, kRbS, wm, wn, 64);
      if constexpr (kLo)
        warp_mma_32x32<false, true>(acc, tile(stage, is_u ? 2 : 0), kRbS, tile(stage, is_u ? 7 : 6), kRbS, wm, wn, 64);
      __syncthreads();  // this stage is refilled by the next step's fetch
    }
    float* out = is_u ? U : W;
    for_each_acc(acc, wm, wn, [&](int lr, int i, float& x) {
      const int64_t l = l0 + lr;
      if (l < d.L && i < Cn) out[(bh * d.T + t0 + i) * d.L + l] = x;
    });
#pragma unroll
    for (int k = 0; k < 4; ++k) {  // the 16 threads of a row are one half-warp: a fixed shuffle tree
      float x = hdh[k];
      for (int o = 8; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
      const int64_t l = l0 + threadIdx.x / 16 + 16 * k;
      if (threadIdx.x % 16 == 0 && l < d.L) HdH[(bh * d.nC + c) * d.L + l] = x;
    }
  }
}

// ---- chunk_readback_mma version 2: version 1's products with less integer work ---------------
// The same items, tiles (layout, stages, zero fill), mma sequence per accumulator, HdH sums and
// stores as version 1, so every output bit for bit version 1's (checked in the host emulation),
// with chunk_states_mma version 2's and quad_readback_mma's address diet:
//   - items (bh, c, lt), item = (bh nC + c) nlt + lt, by a running decomposition advanced by
//     gridDim.x (the grid's own decomposition once per thread) instead of 64-bit divisions;
//   - fetch: each thread's two 16-byte pieces per tile are fixed (rows tid / 8 and tid / 8 + 32,
//     columns 8 (tid % 8) ..), their shared destinations 32-bit addresses computed once (a tile, a
//     piece: immediates; a stage: one add); the state planes' sources from one offset per item plus
//     the running column e0, G's and v's from one per piece and item; version 1's min(r, Cn - 1)
//     clamp and zero fill of G and v computed only for a chunk of fewer than 64 tokens;
//   - the products by warp_mma_32x32_u32 (lane addresses computed once; the same ldmatrix
//     fragments and mma order as warp_mma_32x32<false, true>: hi pass, lo pass, then for kLo the
//     S_hi·Y_lo pass);
//   - HdH's running dot: one 8-byte shared load of 4 bf16 per plane (not 4 scalar loads), bf16 ->
//     float by shifts, the same float operations in the same order per element;
//   - W and U stores through a running row pointer with the latents at immediate offsets where the
//     warp's 32 x 32 block lies inside L and the chunk (else version 1's checked element loop).
// readback_fit_32bit: the decomposition's indices in 32 bits (beyond, the launcher runs version 1).
template <bool kLo = false, bool kSwizzle = kRbSwizzle>
__global__ void __launch_bounds__(kMmaThreads, kLo ? 1 : 2) chunk_readback_mma_kernel(
    Dims d, const bf16* Hs, const bf16* Hs_lo, const bf16* dHs, const bf16* dHs_lo, const bf16* gb, const bf16* vb,
    float* W, float* U, float* HdH, const bf16* gb_lo = nullptr, const bf16* vb_lo = nullptr) {
  grid_dependency_wait();
  static_assert(kMmaThreads == 256, "the fetch's fixed pieces: 2 per thread and tile");
  // (128-byte aligned: the swizzled tiles' XOR steps need every tile on a 128-byte boundary)
  extern __shared__ __align__(128) unsigned char smem_raw[];
  // version 1's layout, in bytes: per stage NT tiles of [64][RS] bf16 (0, 1: H hi, lo; 2, 3:
  // A_end hi, lo; 4: G, 5: v; if kLo, 6: G lo, 7: v lo); RS = kRbS (padded) or 64 (swizzled)
  constexpr int NT = readback_tiles<kLo>(), RS = kSwizzle ? kMmaLT : kRbS;
  constexpr uint32_t kTileB = 2 * 64 * RS, kStageB = NT * kTileB, kHalfB = 2 * 32 * RS;  // kHalfB: 32 rows on
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, tq = lane % 4;
  const bool is_u = warp >= 4;
  const int wm = (warp & 1) * 32, wn = ((warp >> 1) & 1) * 32;  // the warp's latents and tokens
  const int nlt = static_cast<int>(d.Lp / 64), nC = static_cast<int>(d.nC), nbh = static_cast<int>(d.nbh);
  const int net = static_cast<int>(d.Ep / 64), C = static_cast<int>(d.C);
  if (nlt == 0 || nC == 0 || net == 0) return;  // no items (and no divisions by zero below)
  const int CnLast = static_cast<int>(d.chunk_len(nC - 1));
  const uint32_t s0 = smem_addr(smem_raw);
  // the lane's ldmatrix addresses in stage 0: A = S (W: H's hi tile 0, U: A_end's hi tile 2; the lo
  // plane one tile on), B = Y^T (W: G's tile 4, U: v's tile 5; the remainders two tiles on)
  const uint32_t a_ln = s0 + (is_u ? 2 * kTileB : 0u) + warp_mma_lane_a_tile<kSwizzle, false>(lane, wm, RS);
  const uint32_t b_ln = s0 + (is_u ? 5 * kTileB : 4 * kTileB) + warp_mma_lane_b_tile<kSwizzle, true>(lane, wn, RS);
  // the thread's fetch pieces: rows fr, fr + 32 of every tile (the same r % 8), columns fp .. fp + 7
  const int fr = tid / 8, fp = 8 * (tid % 8);
  const uint32_t f_dst = s0 + tile_offset<kSwizzle>(fr, tid % 8, RS);
  // HdH: the thread's elements, rows tid / 16 + 16 k (the same r % 8), columns 4 (tid % 16) .. + 3
  // (version 1's): the first or second half of chunk (tid % 16) / 2
  const unsigned char* hd = smem_raw + tile_offset<kSwizzle>(tid / 16, (tid % 16) / 2, RS) + 8 * (tid % 2);
  // items (bh, c, lt) advanced by the grid: the grid's decomposition
  const int64_t grid = gridDim.x, per_bh = int64_t{nC} * nlt;
  const int dlt = static_cast<int>(grid % nlt), dc = static_cast<int>(grid / nlt % nC),
            dbh = static_cast<int>(grid / per_bh);
  int lt = static_cast<int>(blockIdx.x % nlt), c = static_cast<int>(blockIdx.x / nlt % nC),
      bh = static_cast<int>(blockIdx.x / per_bh);
  const int64_t Ep = d.Ep, L = d.L;
  for (; bh < nbh;) {
    const int Cn = c == nC - 1 ? CnLast : C;  // (only the last chunk may be shorter than C)
    const int l0 = lt * 64;
    // the thread's first state piece: row fr of the item's tile of chunk state (bh, c), column fp
    const int64_t so = ((int64_t{bh} * nC + c) * d.Lp + l0 + fr) * Ep + fp;
    // the chunk's rows of G and v: the thread's pieces' rows (clamped to Cn - 1 where the chunk has
    // fewer than 64 tokens) and their copy sizes (0: a zero fill)
    const int64_t yt = int64_t{bh} * d.T + int64_t{c} * C;  // the chunk's first token row
    int yr0 = fr, yr1 = fr + 32;
    uint32_t yb0 = 16, yb1 = 16;
    if (Cn < 64) {
      yb0 = fr < Cn ? 16u : 0u, yb1 = fr + 32 < Cn ? 16u : 0u;
      yr0 = min(fr, Cn - 1), yr1 = min(fr + 32, Cn - 1);
    }
    const int64_t yo0 = (yt + yr0) * Ep + fp, yo1 = (yt + yr1) * Ep + fp;
    // v's pieces vdo further on: 0, or where v is packed per batch row (d.v_rows, Hv = 1) (v_row(bh)
    // - bh) T Ep <= 0, so inside the per-pair layout's range (64-bit: readback_fit_32bit does not
    // bound bh0; a division per item, only where d.v_rows)
    const int64_t vdo = d.v_rows ? (d.v_row(bh) - bh) * d.T * Ep : 0;
    auto fetch = [&](uint32_t st, int e0) {
      const uint32_t dst = f_dst + st;
      const int64_t s = so + e0, y0 = yo0 + e0, y1 = yo1 + e0, s32 = s + 32 * Ep;
      cp_async16_u32(dst + 0 * kTileB, Hs + s);
      cp_async16_u32(dst + 0 * kTileB + kHalfB, Hs + s32);
      cp_async16_u32(dst + 1 * kTileB, Hs_lo + s);
      cp_async16_u32(dst + 1 * kTileB + kHalfB, Hs_lo + s32);
      cp_async16_u32(dst + 2 * kTileB, dHs + s);
      cp_async16_u32(dst + 2 * kTileB + kHalfB, dHs + s32);
      cp_async16_u32(dst + 3 * kTileB, dHs_lo + s);
      cp_async16_u32(dst + 3 * kTileB + kHalfB, dHs_lo + s32);
      cp_async16_u32(dst + 4 * kTileB, gb + y0, yb0);
      cp_async16_u32(dst + 4 * kTileB + kHalfB, gb + y1, yb1);
      cp_async16_u32(dst + 5 * kTileB, vb + (vdo + y0), yb0);
      cp_async16_u32(dst + 5 * kTileB + kHalfB, vb + (vdo + y1), yb1);
      if constexpr (kLo) {
        cp_async16_u32(dst + 6 * kTileB, gb_lo + y0, yb0);
        cp_async16_u32(dst + 6 * kTileB + kHalfB, gb_lo + y1, yb1);
        cp_async16_u32(dst + 7 * kTileB, vb_lo + (vdo + y0), yb0);
        cp_async16_u32(dst + 7 * kTileB + kHalfB, vb_lo + (vdo + y1), yb1);
      }
      cp_async_commit();
    };
    float acc[2][4][4] = {}, hdh[4] = {};  // hdh[k]: latent row tid / 16 + 16 k
    __syncthreads();                       // the previous item's tiles are consumed
    fetch(0, 0);
    for (int et = 0; et < net; ++et) {
      const uint32_t st = (et & 1) ? kStageB : 0u;
      if (et + 1 < net) {
        fetch(st ^ kStageB, (et + 1) * 64);  // into the stage consumed at et - 1
        cp_async_wait<1>();
      } else {
        cp_async_wait<0>();
      }
      __syncthreads();
      const unsigned char* hs = hd + st;
#pragma unroll
      for (int k = 0; k < 4; ++k) {  // <H, A_end> over this tile's 64 columns, from hi + lo
        const uint32_t o = 2 * 16 * RS * k;
        const uint2 h0 = *reinterpret_cast<const uint2*>(hs + o), h1 = *reinterpret_cast<const uint2*>(hs + kTileB + o);
        const uint2 a0 = *reinterpret_cast<const uint2*>(hs + 2 * kTileB + o),
                    a1 = *reinterpret_cast<const uint2*>(hs + 3 * kTileB + o);
        // element u of the 4: word u / 2, the low half for even u (bf16 -> float: the upper 16 bits)
        auto lo_f = [](uint32_t x) { return __uint_as_float(x << 16); };
        auto hi_f = [](uint32_t x) { return __uint_as_float(x & 0xffff0000u); };
        hdh[k] += (lo_f(h0.x) + lo_f(h1.x)) * (lo_f(a0.x) + lo_f(a1.x));
        hdh[k] += (hi_f(h0.x) + hi_f(h1.x)) * (hi_f(a0.x) + hi_f(a1.x));
        hdh[k] += (lo_f(h0.y) + lo_f(h1.y)) * (lo_f(a0.y) + lo_f(a1.y));
        hdh[k] += (hi_f(h0.y) + hi_f(h1.y)) * (hi_f(a0.y) + hi_f(a1.y));
      }
      // [l][t] += sum_e S[l][e] Y[t][e]: A = S (stored [l][e]), B = Y^T (Y stored [t][e])
      const uint32_t a = a_ln + st, b = b_ln + st;
      warp_mma_32x32_tile<kSwizzle, false, true, RS, RS, 64>(acc, a, b);
      warp_mma_32x32_tile<kSwizzle, false, true, RS, RS, 64>(acc, a + kTileB, b);
      if constexpr (kLo) warp_mma_32x32_tile<kSwizzle, false, true, RS, RS, 64>(acc, a, b + 2 * kTileB);
      __syncthreads();  // this stage is refilled by the next step's fetch
    }
    float* out = is_u ? U : W;
    if (l0 + wm + 32 <= L && wn + 32 <= Cn) {
      // the whole block: rows (tokens) wn + 8 nt + 2 tq + cc, a running row pointer; latents
      // wm + 16 mt + 8 hf + g at immediate offsets
      float* p = out + (yt + wn + 2 * tq) * L + l0 + wm + g;
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int cc = 0; cc < 2; ++cc) {
#pragma unroll
          for (int mt = 0; mt < 2; ++mt)
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) p[16 * mt + 8 * hf] = acc[mt][nt][2 * hf + cc];
          p += cc == 0 ? L : 7 * L;
        }
    } else {
      for_each_acc(acc, wm, wn, [&](int lr, int i, float& x) {
        const int64_t l = l0 + lr;
        if (l < L && i < Cn) out[(yt + i) * L + l] = x;
      });
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) {  // the 16 threads of a row are one half-warp: a fixed shuffle tree
      float x = hdh[k];
      for (int o = 8; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
      const int64_t l = l0 + tid / 16 + 16 * k;
      if (tid % 16 == 0 && l < L) HdH[(int64_t{bh} * nC + c) * L + l] = x;
    }
    // the next item: (bh, c, lt) + the grid's (dbh, dc, dlt), with carries
    bh += dbh + carry_add(c, dc, carry_add(lt, dlt, 0, nlt), nC);
  }
}
// Version 2's indices: bh (plus the grid's step) in 32 bits, nC and the latent tiles in 32 bits;
// beyond, the launcher runs version 1.
inline bool readback_fit_32bit(const Dims& d) {
  constexpr int64_t k30 = int64_t{1} << 30;
  return d.nbh < k30 && d.nC < k30 && d.Lp / 64 < k30 && d.Ep / 64 < k30;
}

// gc_t = sum_l gw_t[l] w_t[l] (= G_t·c_t): the partial sums of bwd_local's latent blocks. A warp
// per token (its partials are contiguous), each lane a fixed stride of blocks, then a fixed shuffle
// tree: the same order whatever the launch or the batching, so deterministic. Where the blocks are
// few (nlt <= kGcFewBlocks: L <= 512, e.g. BDH-base's 4) gc_reduce_few_kernel instead: a thread per
// token adding its blocks in increasing order (a warp per token left 28 of 32 lanes idle and ran a
// 5-step shuffle tree over zeros: 9 us a backward at BDH-base, Nsight, round 37, H100). Either is
// fixed by L alone, so the forward's saved buffer or the batching change nothing.
constexpr int64_t kGcFewBlocks = 8;
__global__ void gc_reduce_few_kernel(Dims d, const float* gcp, float* gc) {
  grid_dependency_wait();
  const int nlt = static_cast<int>((d.L + kLocalLT - 1) / kLocalLT);
  for (int64_t x = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; x < d.nbh * d.T; x += int64_t(gridDim.x) * blockDim.x) {
    const float* p = gcp + x * nlt;
    float parts[kGcFewBlocks];
#pragma unroll
    for (int lt = 0; lt < kGcFewBlocks; ++lt) parts[lt] = lt < nlt ? p[lt] : 0.0f;  // (loads together)
    float acc = parts[0];
#pragma unroll
    for (int lt = 1; lt < kGcFewBlocks; ++lt)
      if (lt < nlt) acc += parts[lt];
    gc[x] = acc;
  }
}
__global__ void gc_reduce_kernel(Dims d, const float* gcp, float* gc) {
  grid_dependency_wait();
  const int64_t nlt = (d.L + kLocalLT - 1) / kLocalLT;
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  for (int64_t x = blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32; x < d.nbh * d.T; x += warps) {
    float acc = 0.0f;
    for (int64_t lt = lane; lt < nlt; lt += 32) acc += gcp[x * nlt + lt];
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) gc[x] = acc;
  }
}

// ---- bwd_local: one block per (bh, chunk, 64 latents) -------------------------------------
// Layout, and why. The previous layout (a block per 16 latents, a thread per (latent, token
// group), each thread's j and k loops over its own rows and one latent) was issue-bound: Nsight
// Compute at BDH-8k (bench/results/ncu-h200-6fe913d) measured 2.61 ms per batch of 16 pairs, 0.66
// issued warps per scheduler, SM 66 %, DRAM 10 %, 80 registers, 3 blocks per SM, and ~27 issued
// thread-instructions per (i, j, latent) term of the triangular loops, whose floating-point work
// is 5 (p, dp: FMUL + 2 FFMA; avs: FMUL + FFMA). The rest went to 2 scalar shared loads per term
// (with a 2-way bank conflict on M), loop control of variable, not unrolled trip counts, and
// dependent chains of one latent.
// Now 256 threads = 8 warps; lane λ owns latents 2λ, 2λ+1 of the block (float2 shared loads of a
// q / Qp row: 256 contiguous bytes per warp, conflict-free) and warp w owns the row groups
// i0 = 4w and 4w + 32, four consecutive rows i0 .. i0+3 each, worked together so that one load
// feeds many FMAs and the loops are warp-uniform (no divergence):
//   gw:  for j < i0, four j at a time: q_j (float2) and M[i0+r][j..j+3] (a float4 that every lane
//        reads at one address: a broadcast) feed p = p a + q_j M[i][j], dp = dp a + p for 4 rows ×
//        2 latents (24 FP instructions for 2 shared loads); then the triangle j = i0 .. i0+2.
//   avs: for k from Cn-1 down to i0+4: Qp_k (float2) and M[k][i0..i0+3] (one broadcast float4:
//        the four rows' column entries are contiguous in row k) feed avs = avs a + Qp_k M[k][i]
//        (16 FP instructions for 2 loads); then the triangle k = i0+3 .. i0+1.
// That is 3.6 (gw) and 2.5 (avs) instructions per term in the PTX of the unrolled loops (114 for
// 32 gw terms: 96 FP, 8 shared loads; 79 for 32 avs terms: 64 FP, 8 loads), ~6 per (i, j) pair
// of the two loops against ~27 before, and the shared-memory
// wavefronts per FP instruction (3 per 24, 3 per 16) stay under the 1-per-4 that four schedulers
// sharing one shared-memory port can sustain; one row at a time would not (q_j feeds only 3 FP
// instructions per latent then). Work per warp is balanced: row i has i gw terms and Cn-1-i avs
// terms, Cn-1 in all, and every warp has two groups of 4 rows.
// Whatever depends on a row's powers of a (a^i, a^(Cn-1-i), f(i), f(Cn-1-i)) comes from two ipow
// per group and running products (pow_run): every power a^n has n >= 0, exact at a = 0 and 1.
// The per-latent scans (N inside the chunk, the normaliser gradient ib) run on warp 0, two
// latents per lane (two independent chains each); the block's 16 warps on an SM (2 blocks, by the
// ~98 KB of shared memory) overlap them with the other block's loops.
// gcp[bh][t][lt] (lt: the 64-latent block) is one warp's sum over the block's latents (lane sums,
// then a fixed shuffle tree), so no cross-warp reduction; da's per-thread partials go through
// red[warp][latent] and are summed in warp order: every sum in a fixed order, no atomics.
// The E loop (float32 / float16: no readback) computes W and U into the same shared arrays that
// the readback path fills from Wr, Ur, with its tiles in the space of the row phase's arrays.
// kPad: floats of padding per row (version 5: 8, see there; version 2: 0); kMsPad: of ms's rows
// (version 5: 4, see kLocalMsPadV5).
template <int kPad, int kMsPad = kPad>
struct LocalRowTiles {
  float qs[64][kLocalLT + kPad], qps[64][kLocalLT + kPad], ns[64][kLocalLT + kPad];
  float ms[64][64 + kMsPad];
};
struct LocalETiles {  // rows padded by 4 floats: 16-byte reads stay aligned and spread over the banks
  float hs[kLocalLT][kLocalET + 4], dhs[kLocalLT][kLocalET + 4];
  float gs[64][kLocalET + 4], vs[64][kLocalET + 4];
};
template <int kPad, int kMsPad = kPad>
struct LocalSmemP {
  union {
    LocalRowTiles<kPad, kMsPad> r;
    LocalETiles e;
  };
  __align__(16) float w[64][kLocalLT + kPad];  // W, then dn (row phase), then ib (reverse scan)
  __align__(16) float u[64][kLocalLT + kPad];  // U, then gw / s + av (row phase)
  float red[8][kLocalLT];
  float hdh[kLocalLT];
  // version 5: the chunk's N_0 and the latents' decay a, read as float2 at 2λ by lane λ (in ms's
  // padding columns until 1351015, rows 2 apart per lane: 16-way bank conflicts, a quarter of the
  // kernel's excess shared wavefronts in the H200 profile of round 8)
  __align__(8) float n0[kLocalLT];
  __align__(8) float al[kLocalLT];
};
using LocalSmem = LocalSmemP<0>;
static_assert(kLocalThreads == 256 && kLocalLT == 64, "bwd_local's layout: 8 warps × 8 rows, 32 lanes × 2 latents");

// The versions, chosen by kReadback: version 2 without the readback (float32), version 5 with it
// (the 16-bit types; version 4 until its A/B against version 5 on the H200 in the seventh round,
// 2.01 -> 1.83 ms per call at BDH-8k, after which version 4 and RHOSCAN_BWD_LOCAL_VERSION were
// removed; version 5 (bwd_local_v5, below) is version 4's arithmetic bit for bit with less integer
// work). Version 2 with the readback is built only by the host emulation, which checks its FFMA
// row phase against float64.
//   2: every (i, j) pair of the triangular loops by FFMA (above).
//   4 (removed; its arithmetic is version 5's): the pairs between different 16-row sub-blocks of
//      the chunk on tensor cores, FFMA only for the four 16×16 diagonal sub-blocks' triangles (480
//      of the 2016 pairs of a 64-row chunk), and the changes 1-5 below.
// The products' split. With s(i) = i / 16 and i' = i % 16, for j in an earlier sub-block J < I = s(i):
//   i-1-j = i' + m_j,  m_j = 16 D + (15 - j') >= 0,  D = I - J - 1,
// so p_i's cross part is a^(i') Y0_i and dp_i's is f(i') Y0_i + a^(i') Y1_i (f(x + m) =
// f(x) a^m + a^x f(m)), with Y0_i = sum_j M[i][j] q_j a^(m_j), Y1_i = sum_j M[i][j] q_j f(m_j):
// 16×16 blocks of M times [16 × 8 latents] operands (a^(m_j) = a^(15-j') a^(16 D),
// f(m_j) = f(15-j') a^(16 D) + a^(15-j') f(16 D)). For k in a later
// sub-block K > I: k-i-1 = (15 - i') + 16 D + k', D = K - I - 1, so avs_i's cross part is
// a^(15-i') Z_i, Z_i = sum_k M[k][i] Qp_k a^(16 D + k') (M's block transposed). Every exponent is
// >= 0 (exact at a = 0 and 1). M and the operands are float32: each goes to the tensor cores as
// bf16 hi + lo (x - hi - lo is below 2^-16 |x|) in three passes (hi·hi, hi·lo, lo·hi; lo·lo,
// about 2^-16 of the term, is dropped), so a term keeps ~2^-16 relative accuracy where one bf16
// rounding would not do: dq takes the difference gw - gc of the read's results.
// M's six blocks below the diagonal (of 16×16 blocks) are split to bf16 hi + lo once per block,
// masked to rows and columns < Cn (stale for C < 64), into the upper triangle of ms, which no
// version reads (bwd_local_split_m). Warp w takes latents 8w .. 8w+7 (one 8-latent mma tile) of
// every row sub-block, the same work for every warp (54 mma per item at Cn = 64): it builds the B
// operands of each sub-block once, K0 = q a^(15-j'), K1 = q f(15-j') (J = 0..2) and
// Q0 = Qp a^(k') (K = 1..3), none of which depends on the row block, and takes the distance
// factors by Horner in a^16 over the sub-blocks (J ascending: y1 <- a^16 y1 + f(16) y0 + M K1,
// y0 <- a^16 y0 + M K0, since f(16 (D+1)) = f(16 D) a^16 + a^(16 D) f(16); K descending:
// z <- a^16 z + M^T Q0), A fragments by ldmatrix (.trans for Z) from the split tiles. Its
// epilogue folds the results with the state terms into the row phase's inputs, element by
// element in the accumulators' own threads:
//   w[i][l] <- a^i W + a^(i') Y0,   u[i][l] <- a^(Cn-1-i) U + a^(15-i') Z,
//   da's share: Qp (f(i) W + f(i') Y0 + a^(i') Y1) + q U f(Cn-1-i),
// summed over the chunk's rows (the thread's, then a fixed shuffle tree over g) into red[0][l]
// (red is free until the row phase ends; warp 0 takes it during its N walk). The powers come from
// per-latent tables in the space of ns (written by the N walk only after the products):
// a^n, f(n) for n = 0..16 by running products, a^(16 I), f(16 I) and a^R, f(R) for
// R = Cn - 16 (I + 1) (a^(Cn-1-i) = a^(15-i') a^R) by ipow64. The row phase then runs the FFMA
// loops over the row's own sub-block only (j from 16 s(i), k up to 16 s(i) + 15) and
// gw = (w + p) / (N + eps), av = u + avs, da += Qp dp.
// Since round 23 each diagonal block's quadrant below its diagonal (rows i' = 8..15 × columns
// j' = 0..7) is on the tensor cores too, as one more Horner step at distance 8 after the
// sub-blocks': for rows i' >= 8, i-1-j = (i'-8) + (7-j') with j' < 8, so y1 <- a^8 y1 + f(8) y0 +
// Mq K1d, y0 <- a^8 y0 + Mq K0d (K0d = q a^(7-j'), K1d = q f(7-j')) and the epilogue weighs y by
// a^(i'-8), f(i'-8); for rows i' < 8 and k' >= 8, k-i-1 = (7-i') + (k'-8), so z <- a^8 z + Mq^T Zd
// (Zd = Qp a^(k'-8)) weighed by a^(7-i'). With g = i' % 8 both halves of a block take a^g, f(g)
// for y and a^(7-g) for z. One mma per pass serves both (A's fragments a0 = Mq^T for rows 0-7,
// a3 = Mq for rows 8-15, B's rows 0-7 Zd and 8-15 K0d; a second for K1d); Mq's bf16 hi / lo goes
// into the block's own unused quadrant above its diagonal (bwd_local_split_m). The row phase's
// FFMA loops then cover the 8×8 diagonal blocks only (j from 8 (i / 8), k up to 8 (i / 8) + 7):
// 224 of the 2016 pairs of a 64-row chunk instead of 480.
// History: the products alone were version 3 (until a5227ea). Measured on the H200 (2db6e6c,
// BDH-8k bfloat16, one backward of 32 pairs; Nsight Compute): version 3 2.12 ms against version
// 2's 2.30, forward+backward 7.21 against 7.41 ms (long-T8192: 5.23 against 5.33). It issued 32.8k
// warp instructions per item (1.08 G per launch; the estimate was 26k) at 0.53 per scheduler and
// cycle with 0.98 of 3.87 warps eligible (bench/results/ncu-h200-2db6e6c/): latency-bound.
//   Version 4 adds five changes aimed at a source-level Nsight Compute profile of version 3 on
//      the H200 (BDH-8k bfloat16; fractions of all warp stall samples): 13.4 % barrier stalls of
//      warps 1-7 while warp 0 alone ran the two serial 64-step scans (the N walk and the reverse
//      ib scan; ~4 % more barrier stalls elsewhere), ~10 % long-scoreboard stalls at the item's
//      start (M's tile by plain loads whose shared stores wait for them; q's loads, converted and
//      stored right away), 2-3 % on the per-row global load of s in the row loop, ~10 % in the
//      row results' per-row gc shuffle trees and divisions. Version 4:
//      1. M's tile by cp.async at C = 64, in the same commit group as the W / U / Qp tiles;
//      2. q's global loads (the 4-latent path) issued first, into registers, before the item's
//         barrier: their latency overlaps the cp.async issue and the power tables (now computed
//         before q's conversion and shared stores);
//      3. 1/s of the chunk's rows once per item into ms's padding column 64 (no other code
//         touches ms's columns >= 64), read there in the row loop: the same value 1.0f / s[row].
//         (s's loads stay next to that store: held in a register from the item's start, or from
//         after the power tables, they cost 20 or 4 bytes of spills at the 128-register cap.)
//         Steps 1-3 kept version 3's outputs bitwise in the emulation (checked at 2c1c775);
//      4. both scans split over the 8 warps, segments of 8 tokens (warp w: tokens 8w .. 8w+7, the
//         last non-empty segment possibly short, those past Cn empty), every power a^n with
//         n >= 0: the N walk as each segment's Horner sum z_w = sum a^(e-1-i) q_i, a barrier, each
//         segment's start N by Horner in a^8 over the earlier segments from the chunk's N, then
//         its walk; the reverse scan as a local recurrence per segment (from 0 at its end), a
//         barrier, the carry from the later segments by Horner in a^8 added with a^(e-1-i), ibn's
//         correction carry · sum a^(e-1-i) N_i; zsum from the same per-segment sums by Horner over
//         the segments (a^8, a^len for the last); the exchanges in red (during the N walk) and
//         the rows of qs, qps (dead after the row phase). Sums in a fixed order but not
//         version 3's (deterministic, not bitwise version 3);
//      5. gc's 4 rows of a group reduced together by a reduce-scatter over the warp (xor 16
//         exchanging 2 of the 4 values, xor 8 one, then xor 4, 2, 1: 6 shuffles against 20), lane
//         8r storing row r.
//      ptxas (sm_90a): 128 registers, no spills, as version 3; shared memory unchanged
//      (LocalSmemV5, 110.25 KiB). Measured on the H200 (778d902, BDH-8k bfloat16): 2.03 ms against
//      version 3's 2.13 (Nsight Compute durations), forward+backward 6.19 against 6.34 ms; the CUDA
//      suite passed with version 4 as the default, and version 3 was then removed.
// Version 4's (now version 5's) shared memory: rows padded by 8 floats (row stride 72: the accumulator layout's
// float2 accesses, rows g = lane / 4 and latent pairs 2 (lane % 4), reach 16 distinct 8-byte bank
// pairs per half-warp, where a stride of 64 put the 8 rows on the same banks: 8-way conflicts),
// 110.25 KiB against version 2's 98.25 (two blocks per SM still fit: 2 × (110.25 + 1) <= 228).
constexpr int kLocalPadV5 = 8;
// ms's rows (M's float32 tile, and the bf16 hi / lo blocks that bwd_local_split_m leaves in its
// upper triangle for ldmatrix) are padded by 4 floats instead: 272 bytes apart, so the 8 rows of
// an ldmatrix 8×8 matrix fall on 8 different 16-byte bank groups. At 288 bytes (the pad of 8) rows
// r and r + 4 shared banks: every ldmatrix of bwd_local_cross took 2 wavefronts instead of 1, half
// of the kernel's excess shared wavefronts in the H200 profile of round 15 (25 M of 48 M, with
// 287 M in all, at L1 72 % busy). The row phase reads ms by warp-wide broadcasts, which any stride
// serves; the columns 64, 65 (1/s, s) stay inside the padding.
constexpr int kLocalMsPadV5 = 4;
using LocalSmemV5 = LocalSmemP<kLocalPadV5, kLocalMsPadV5>;
template <int kVersion>
using LocalSmemOf = std::conditional_t<kVersion == 5, LocalSmemV5, LocalSmem>;
struct LocalPowTables {
  static constexpr int W = kLocalLT + kLocalPadV5;
  float pt[16][W], ft[16][W];  // a^n, f(n), n = 0..15 (16 until round 23, unread)
  float a16[4][W], f16[4][W];  // a^(16 I), f(16 I)
  float ar[4][W], fr[4][W];    // a^R, f(R), R = Cn - 16 (I + 1) (1 and 0 where R < 0)
};
static_assert(sizeof(LocalPowTables) <= sizeof(LocalRowTiles<kLocalPadV5>::ns), "version 5's tables live in ns");

// x0, x1 -> bf16 pairs hi (x0 in the low half) and lo = the remainders x - hi, rounded. (A
// template, as the functions below: no unused-function warning where version 5 is not built.)
template <typename F = float>
__device__ __forceinline__ void split_pair(F x0, F x1, uint32_t& hi, uint32_t& lo) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(x0, x1);
  const __nv_bfloat162 r = __floats2bfloat162_rn(x0 - __low2float(h), x1 - __high2float(h));
  hi = *reinterpret_cast<const uint32_t*>(&h);
  lo = *reinterpret_cast<const uint32_t*>(&r);
}

// Version 5 (from version 4): M's six blocks below the diagonal of 16×16 blocks, (I, J) with J < I, as bf16 hi + lo,
// each into the unused upper triangle at block (J, I): row r of the tile at &ms[16 J + r][16 I],
// 16 hi then 16 lo values (32 + 32 bytes, 16-byte aligned: ldmatrix rows). Rows and columns past
// Cn are not the chunk's (stale for C < 64): zeros (only the rows matter below the diagonal: a
// column j < 16 I <= i is < Cn wherever row i is). Blocks past Cn are not used: skipped.
// (A template on the shared memory's type, LocalSmemV5, as bwd_local_cross.)
template <typename Smem>
__device__ __forceinline__ void bwd_local_split_m(Smem& S, int Cn) {
  auto& ms = S.r.ms;
#pragma unroll
  for (int k = 0; k < 3; ++k) {
    const int idx = threadIdx.x + kLocalThreads * k, blk = idx / 128, e = idx % 128;
    const int I = blk < 1 ? 1 : blk < 3 ? 2 : 3, J = blk - (I * (I - 1)) / 2;  // (1,0) (2,0) (2,1) (3,0) (3,1) (3,2)
    const int r = e / 8, c = 2 * (e % 8), i = 16 * I + r, j = 16 * J + c;
    if (16 * I >= Cn) continue;
    const float2 x = *reinterpret_cast<const float2*>(&ms[i][j]);
    const bool ok = i < Cn;
    uint32_t hi, lo;
    split_pair(ok && j < Cn ? x.x : 0.0f, ok && j + 1 < Cn ? x.y : 0.0f, hi, lo);
    uint32_t* t = reinterpret_cast<uint32_t*>(&ms[16 * J + r][16 * I]);
    t[c / 2] = hi;
    t[8 + c / 2] = lo;
  }
  // The diagonal blocks' quadrants Mq[r][c] = M[16 I + 8 + r][16 I + c] (r, c < 8; round 23), as
  // bf16 hi + lo into the same block's quadrant above the diagonal: row r at &ms[16 I + r][16 I + 8],
  // 8 hi then 8 lo values (16 + 16 bytes: ldmatrix rows). Rows past Cn zero (columns are below rows).
  if (threadIdx.x < 128) {
    const int I = threadIdx.x / 32, e = threadIdx.x % 32, r = e / 4, c = 2 * (e % 4), i = 16 * I + 8 + r;
    if (16 * I < Cn) {
      const float2 x = *reinterpret_cast<const float2*>(&ms[i][16 * I + c]);
      const bool ok = i < Cn;
      uint32_t hi, lo;
      split_pair(ok ? x.x : 0.0f, ok ? x.y : 0.0f, hi, lo);
      uint32_t* t = reinterpret_cast<uint32_t*>(&ms[16 * I + r][16 * I + 8]);
      t[c / 2] = hi;
      t[4 + c / 2] = lo;
    }
  }
}

// Version 5's (from version 4) products between sub-blocks and their epilogue (see above); warp-uniform branches.
template <typename Smem>
__device__ __forceinline__ void bwd_local_cross(Smem& S, const LocalPowTables& P, int Cn) {
  auto& qs = S.r.qs;
  auto& qps = S.r.qps;
  auto& ms = S.r.ms;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, qq = lane % 4;
  const int lB = 8 * warp + g, lA = 8 * warp + 2 * qq;  // B fragments' latent; accumulators' lA, lA + 1
  // B operands of every sub-block (rows k' = 2 qq + {0, 1, 8, 9}: m = 0, 1 in b0, m = 2, 3 in b1):
  // Y's K0 = q a^(15-k'), K1 = q f(15-k') of J = 0..2, Z's Q0 = Qp a^(k') of K = 1..3 (index K-1).
  uint32_t k0h[3][2], k0l[3][2], k1h[3][2], k1l[3][2], zh[3][2], zl[3][2];
  float pZ[4];  // a^(k'), also the quadrants' Zd factors (m = 0, 1)
  {
    float pY[4], fY[4];
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      const int kp = 2 * qq + (m & 1) + 8 * (m >> 1);
      pY[m] = P.pt[15 - kp][lB], fY[m] = P.ft[15 - kp][lB], pZ[m] = P.pt[kp][lB];
    }
#pragma unroll
    for (int J = 0; J < 3; ++J) {
      float x0[4], x1[4], xz[4];
#pragma unroll
      for (int m = 0; m < 4; ++m) {  // (rows past Cn are zeros in qs, qps)
        const int kp = 2 * qq + (m & 1) + 8 * (m >> 1);
        const float qv = qs[16 * J + kp][lB];
        x0[m] = qv * pY[m], x1[m] = qv * fY[m], xz[m] = qps[16 * (J + 1) + kp][lB] * pZ[m];
      }
#pragma unroll
      for (int b = 0; b < 2; ++b) {
        split_pair(x0[2 * b], x0[2 * b + 1], k0h[J][b], k0l[J][b]);
        split_pair(x1[2 * b], x1[2 * b + 1], k1h[J][b], k1l[J][b]);
        split_pair(xz[2 * b], xz[2 * b + 1], zh[J][b], zl[J][b]);
      }
    }
  }
  // A fragments of M's block (rb, cb) < diagonal, or of the transpose of block (cb, rb), from the
  // bf16 hi / lo tiles that bwd_local_split_m left in the upper triangle (ldmatrix, .trans).
  auto a_frag = [&](bool tr, int rb, int cb, uint32_t(&hi)[4], uint32_t(&lo)[4]) {
    if (!tr) {  // tile (rb, cb): rows at &ms[16 cb + r][16 rb]
      const bf16* p = reinterpret_cast<const bf16*>(&ms[16 * cb + (lane & 15)][16 * rb]) + (lane >> 4) * 8;
      ldsm_x4(hi, p);
      ldsm_x4(lo, p + 16);
    } else {  // tile (cb, rb), rows k' at &ms[16 rb + k'][16 cb], read transposed
      const bf16* p = reinterpret_cast<const bf16*>(&ms[16 * rb + (lane >> 4) * 8 + (lane & 7)][16 * cb]) +
                      ((lane >> 3) & 1) * 8;
      ldsm_x4_trans(hi, p);
      ldsm_x4_trans(lo, p + 16);
    }
  };
  auto mma3 = [&](float(&acc)[4], const uint32_t(&ah)[4], const uint32_t(&al)[4], const uint32_t(&bh)[2],
                  const uint32_t(&bl)[2]) {  // hi·hi + hi·lo + lo·hi
    mma_bf16_16816(acc, ah, bh[0], bh[1]);
    mma_bf16_16816(acc, ah, bl[0], bl[1]);
    mma_bf16_16816(acc, al, bh[0], bh[1]);
  };
  auto f2 = [](const float* x) { return *reinterpret_cast<const float2*>(x); };
  const float2 u2 = f2(&P.a16[1][lA]), f16 = f2(&P.f16[1][lA]);  // a^16, f(16) of the accumulators' latents
  // the quadrants' Horner step (a^8, f(8)) and the epilogue's row powers, the same in every block
  // and both halves: a^g, f(g) (y's) and a^(7-g) (z's), g the accumulators' row in its half
  const float2 a8 = f2(&P.pt[8][lA]), f8 = f2(&P.ft[8][lA]);
  const float2 pg2 = f2(&P.pt[g][lA]), fg2 = f2(&P.ft[g][lA]), pz2 = f2(&P.pt[7 - g][lA]);
  float dacc[2] = {};
#pragma unroll
  for (int I = 0; I < 4; ++I) {
    if (16 * I >= Cn) break;  // warp-uniform
    // Y over J = 0 .. I-1 by Horner in a^16 (D = I-1-J): y1 <- a^16 y1 + f(16) y0 + M K1, then
    // y0 <- a^16 y0 + M K0, so y0 = sum_J a^(16 D) M K0 and y1 = sum_J (a^(16 D) M K1 + f(16 D) M K0)
    float y0[4] = {}, y1[4] = {}, z[4] = {};
#pragma unroll
    for (int J = 0; J < 3; ++J) {
      if (J >= I) break;
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const float u = r % 2 ? u2.y : u2.x, fu = r % 2 ? f16.y : f16.x;
        y1[r] = u * y1[r] + fu * y0[r];
        y0[r] = u * y0[r];
      }
      uint32_t ah[4], al[4];
      a_frag(false, I, J, ah, al);
      mma3(y0, ah, al, k0h[J], k0l[J]);
      mma3(y1, ah, al, k1h[J], k1l[J]);
    }
    // Z over K = 3 .. I+1 by Horner in a^16 (D = K-I-1): z <- a^16 z + M[K][I]^T Q0
#pragma unroll
    for (int K = 3; K >= 1; --K) {
      if (K <= I) break;
      if (16 * K >= Cn) continue;  // an empty sub-block
#pragma unroll
      for (int r = 0; r < 4; ++r) z[r] *= r % 2 ? u2.y : u2.x;
      uint32_t ah[4], al[4];
      a_frag(true, I, K, ah, al);
      mma3(z, ah, al, zh[K - 1], zl[K - 1]);
    }
    {  // the block's quadrant (see above): z's rows 0-7 and y0's rows 8-15 in one accumulator set,
      // y1's rows 8-15 in another (its rows 0-7 meet B's zero rows)
      const bf16* p = reinterpret_cast<const bf16*>(&ms[16 * I + (lane & 7)][16 * I + 8]) + ((lane >> 3) & 1) * 8;
      uint32_t mq[4], mt[4];  // matrices 0, 1: Mq's hi, lo rows (2, 3: the same again); mt transposed
      ldsm_x4(mq, p);
      ldsm_x4_trans(mt, p);
      const uint32_t ah[4] = {mt[0], 0u, 0u, mq[0]}, al[4] = {mt[1], 0u, 0u, mq[1]};
      float xz[2], x0[2], x1[2];
#pragma unroll
      for (int m = 0; m < 2; ++m) {  // (rows past Cn are zeros in qs, qps)
        const int kp = 2 * qq + m;
        const float qv = qs[16 * I + kp][lB];  // K0d, K1d: a^(7-k'), f(7-k'); Zd: a^(k') (pZ)
        xz[m] = qps[16 * I + 8 + kp][lB] * pZ[m], x0[m] = qv * P.pt[7 - kp][lB], x1[m] = qv * P.ft[7 - kp][lB];
      }
      uint32_t b0h[2], b0l[2], b1h[2] = {0u, 0u}, b1l[2] = {0u, 0u};
      split_pair(xz[0], xz[1], b0h[0], b0l[0]);
      split_pair(x0[0], x0[1], b0h[1], b0l[1]);
      split_pair(x1[0], x1[1], b1h[1], b1l[1]);
      float t0[4] = {a8.x * z[0], a8.y * z[1], a8.x * y0[2], a8.y * y0[3]};
      float t1[4] = {0.0f, 0.0f, a8.x * y1[2] + f8.x * y0[2], a8.y * y1[3] + f8.y * y0[3]};
      mma3(t0, ah, al, b0h, b0l);
      mma3(t1, ah, al, b1h, b1l);
      z[0] = t0[0], z[1] = t0[1], y0[2] = t0[2], y0[3] = t0[3], y1[2] = t1[2], y1[3] = t1[3];
    }
    // accumulators 2 hr + u: row i' = g + 8 hr, latent lA + u (float2 accesses). y is based at the
    // row's 8-row half (a^g, f(g)), z at its end (a^(7-g)).
    const int R = Cn - 16 * (I + 1);
    const float2 A2 = f2(&P.a16[I][lA]), F2 = f2(&P.f16[I][lA]), AR2 = f2(&P.ar[I][lA]), FR2 = f2(&P.fr[I][lA]);
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int ip = g + 8 * hr, i = 16 * I + ip;
      if (i >= Cn) continue;
      const float2 W2 = f2(&S.w[i][lA]), U2 = f2(&S.u[i][lA]), q2 = f2(&qs[i][lA]), qp2 = f2(&qps[i][lA]);
      // the last sub-block (R < 0): Cn-1-i < 16 from the tables (z then holds the quadrant's terms only)
      const int nm = R >= 0 ? 15 - ip : Cn - 1 - i;
      const float2 pm2 = f2(&P.pt[nm][lA]), fm2 = f2(&P.ft[nm][lA]);
      float wo[2], uo[2];
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const float W = u ? W2.y : W2.x, U = u ? U2.y : U2.x, pi = u ? pg2.y : pg2.x, fip = u ? fg2.y : fg2.x;
        const float pn = u ? pz2.y : pz2.x, pm = u ? pm2.y : pm2.x, fm = u ? fm2.y : fm2.x;
        const float A0 = u ? A2.y : A2.x, F0 = u ? F2.y : F2.x, ar = u ? AR2.y : AR2.x;
        // a^b, f(b) of the half's first row b = 16 I + 8 hr (f(16 I + 8) = f(16 I) a^8 + a^(16 I) f(8))
        const float A = hr ? A0 * (u ? a8.y : a8.x) : A0;
        const float F = hr ? F0 * (u ? a8.y : a8.x) + A0 * (u ? f8.y : f8.x) : F0;
        // a^i W + a^g y0 = a^g X and f(i) W + f(g) y0 + a^g y1 = f(g) X + a^g Y (i = b + g, f(b + g) =
        // f(b) a^g + a^b f(g)), X = a^b W + y0, Y = f(b) W + y1: 5 operations where a^i and f(i) first
        // took 8 (round 23)
        const float X = A * W + y0[2 * hr + u], Y = F * W + y1[2 * hr + u];
        // a^(Cn-1-i), f(Cn-1-i); in the last sub-block (R < 0) the tables' a^R = 1 and f(R) = 0 make
        // them pm and fm exactly (fm · 1 + pm · 0 = fm: all are >= 0), without a select per element
        const float an = pm * ar, fn = fm * ar + pm * (u ? FR2.y : FR2.x);
        wo[u] = pi * X;
        uo[u] = an * U + pn * z[2 * hr + u];
        dacc[u] += (u ? qp2.y : qp2.x) * (fip * X + pi * Y) + (u ? q2.y : q2.x) * U * fn;
      }
      *reinterpret_cast<float2*>(&S.w[i][lA]) = make_float2(wo[0], wo[1]);
      *reinterpret_cast<float2*>(&S.u[i][lA]) = make_float2(uo[0], uo[1]);
    }
  }
  // da's share: each latent's sum over the chunk's rows (the thread's, then g: a fixed shuffle tree)
#pragma unroll
  for (int u = 0; u < 2; ++u) {
    float x = dacc[u];
    for (int o = 4; o < 32; o <<= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    if (g == 0) S.red[0][lA + u] = x;
  }
}

// gw = x / (N + eps) on the 16-bit path (version 5's row phase): norm_read_weight<true>'s division
// (div.approx.ftz of the quarters) with s = 1. N + eps >= eps is a normal float, so its quarter is
// exact and so is x's (unless |x| < 2^-124, flushed: a gradient below float32's normal range), and
// the result is the approximate division's (within 2 ulp) without the IEEE division's refinement
// and range check (div.rn.f32: ~9 SASS instructions and a slow-path branch per element). 2 ulp is
// far below the 2^-16 of W's hi + lo products, and gc takes the same gw, so gw - gc sees no second
// rounding.
__device__ __forceinline__ float read_gradient(float x, float N) { return norm_read_weight<true>(x, 1.0f, N); }
// ipow for 0 <= n < 64 (the exponents inside a chunk, kMaxChunk = 64) without the loop's
// branches: the same multiplications in the same order, so the same result.
__device__ __forceinline__ float ipow64(float a, int n) {
  float r = 1.0f, b = a;
#pragma unroll
  for (int bit = 0; bit < 6; ++bit) {
    if ((n >> bit) & 1) r *= b;
    b *= b;
  }
  return r;
}
// pw[k] = a^(n0+k-1) for k = 0..4 where n0+k-1 >= 0, else 0: a^(n0+k) = pw[k+1] and
// f(n0+k) = (n0+k) pw[k] (f(0) = 0 · 0). One ipow, then running products.
__device__ __forceinline__ void pow_run(float a, int n0, float (&pw)[5]) {
  float x = n0 > 0 ? ipow64(a, n0 - 1) : 0.0f;
  pw[0] = x;
#pragma unroll
  for (int k = 1; k < 5; ++k) {
    x = n0 + k - 1 == 0 ? 1.0f : x * a;
    pw[k] = x;
  }
}
// Version 5's power tables, the share of the threads of latent xc and quarter I (threadIdx.x / 64):
// a^n, f(n) for n = 4 I .. 4 I + 3 from a^(4 I - 1) by ipow64, then running products (until round 23
// all of n = 0..16 by the threads of I = 0 alone, while the others waited); a^(16 I), f(16 I); a^R,
// f(R) for R = Cn - 16 (I + 1) (1 and 0 where R < 0).
__device__ __forceinline__ void local_pow_tables(LocalPowTables& P, int xc, float al, int I, int R) {
  const int n0 = 4 * I;
  float xp = n0 > 0 ? ipow64(al, n0 - 1) : 0.0f;  // a^(n-1)
  float x = n0 > 0 ? xp * al : 1.0f;              // a^n
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    P.pt[n0 + k][xc] = x;
    P.ft[n0 + k][xc] = float(n0 + k) * xp;  // f(n) = n a^(n-1), f(0) = 0
    xp = x;
    x *= al;
  }
  P.a16[I][xc] = ipow64(al, 16 * I);
  P.f16[I][xc] = I > 0 ? float(16 * I) * ipow64(al, 16 * I - 1) : 0.0f;
  P.ar[I][xc] = R >= 0 ? ipow64(al, R) : 1.0f;  // (1, f(R) 0: what the products' epilogue needs there)
  P.fr[I][xc] = R > 0 ? float(R) * ipow64(al, R - 1) : 0.0f;
}
__device__ __forceinline__ float f4(const float4& v, int k) { return k == 0 ? v.x : k == 1 ? v.y : k == 2 ? v.z : v.w; }

// Wr, Ur, HdHr (kReadback): W, U and <H, A_end> precomputed by chunk_readback_mma_kernel; Wr may
// alias dqp (the block copies its W[t][l] to shared memory before it writes dqp[t][l]).
// Without kReadback the block computes them from Hs, dHs, g, v (its E loop).
// Version 2 (see above); bwd_local_kernel below picks it without the readback, version 5
// (bwd_local_v5, after this one) with it.
template <typename T, bool kReadback>
__device__ __forceinline__ void bwd_local_v2(
    Dims d, Str4 q, Str4 v, Str4 g, const float* a32, const float* Qp, const float* s, const float* Nc,
    const float* Hs, const float* dHs, const float* M, const float* Wr, const float* Ur, const float* HdHr,
    float* gcp, float* dqp, float* dap, float* Bsum, float* Zs) {
  constexpr int LT = kLocalLT, ET = kLocalET;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  LocalSmem& S = *reinterpret_cast<LocalSmem*>(smem_raw);
  auto& qs = S.r.qs;
  auto& qps = S.r.qps;
  auto& ns = S.r.ns;
  auto& ms = S.r.ms;
  const int C = static_cast<int>(d.C);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, x0 = 2 * lane;
  const int64_t nlt = (d.L + LT - 1) / LT;
  // q: 4 latents a load where the rows are contiguous and aligned (BDH's case), else one.
  const bool four = latent_groups_ok<T, 4>(d, q);
  auto four_at = [&](int k, int64_t l0, int Cn, int& i, int& x) {  // the k-th piece of the thread: row i, latent x
    const int idx = threadIdx.x + kLocalThreads * k;
    i = idx / (LT / 4), x = 4 * (idx % (LT / 4));
    return i < Cn && l0 + x < d.L;
  };
  for (int64_t item = blockIdx.x; item < d.nbh * d.nC * nlt; item += gridDim.x) {
    const int64_t bh = item / (d.nC * nlt), c = (item / nlt) % d.nC, lt = item % nlt;
    const int64_t b = d.b_of(bh), h = d.h_of(bh), t0 = c * d.C, l0 = lt * LT;
    const int Cn = static_cast<int>(d.chunk_len(c));
    float a[2];
#pragma unroll
    for (int u = 0; u < 2; ++u) a[u] = l0 + x0 + u < d.L ? a32[h * d.L + l0 + x0 + u] : 0.0f;
    __syncthreads();  // the previous item's reads of shared memory are done
    // The [64 tokens][64 latents] float32 tiles (Wr, Ur, Qp: rows of L floats) are copied by
    // 16-byte cp.async when L % 4 == 0 (4 per thread and tile, zero-filled outside the chunk and
    // past L), else with a fixed column xc per thread and rows ic + 4k (coalesced, index
    // arithmetic once per tile). The copies were ~12 instructions per element, a tenth of the
    // block's work, when each element was a separate indexed load.
    const int xc = threadIdx.x % LT, ic = threadIdx.x / LT;
    const bool xok = l0 + xc < d.L, vec = d.L % 4 == 0;
    const int64_t tile0 = (bh * d.T + t0 + ic) * d.L + l0 + xc;  // [t][l] offset of (ic, xc)
    auto copy_tile = [&](auto dst, const float* src) {  // dst: float (*)[LT + pad]
      if (vec) {
#pragma unroll
        for (int k = 0; k < 64 * LT / 4 / kLocalThreads; ++k) {
          const int idx = threadIdx.x + kLocalThreads * k, i = idx / (LT / 4), x = 4 * (idx % (LT / 4));
          const bool ok = i < Cn && l0 + x < d.L;
          const int64_t o = (bh * d.T + t0 + min(i, Cn - 1)) * d.L + (l0 + x < d.L - 4 ? l0 + x : d.L - 4);
          cp_async16(&dst[i][x], src + o, ok);
        }
      } else {
#pragma unroll 8
        for (int k = 0; k < 16; ++k) {
          const int i = ic + 4 * k;
          dst[i][xc] = xok && i < Cn ? src[tile0 + 4 * k * d.L] : 0.0f;
        }
      }
    };
    if constexpr (kReadback) {
      copy_tile(S.w, Wr);
      copy_tile(S.u, Ur);
      if (threadIdx.x < LT) S.hdh[threadIdx.x] = l0 + threadIdx.x < d.L ? HdHr[(bh * d.nC + c) * d.L + l0 + threadIdx.x] : 0.0f;
    } else {
      // W_i = H_c[l,:]·G_i, U_i = A_end[l,:]·v_i over E in tiles of ET: each thread the rows of
      // its warp's two groups and latents lane, lane + 32 (rows of hs 36 floats apart: the 8
      // lanes of a quarter-warp's 16-byte reads hit distinct banks); G and v rows are broadcasts.
      float Wa[2][4][2] = {}, Ua[2][4][2] = {}, hd[2] = {};
      for (int64_t e0 = 0; e0 < d.E; e0 += ET) {
        __syncthreads();
        for (int idx = threadIdx.x; idx < LT * ET; idx += blockDim.x) {
          const int x = idx / ET, ee = idx % ET;
          const int64_t lx = l0 + x, e = e0 + ee;
          const bool ok = lx < d.L && e < d.E;
          S.e.hs[x][ee] = ok ? Hs[((bh * d.nC + c) * d.Lp + lx) * d.Ep + e] : 0.0f;
          S.e.dhs[x][ee] = ok ? dHs[((bh * d.nC + c) * d.Lp + lx) * d.Ep + e] : 0.0f;
        }
        for (int idx = threadIdx.x; idx < 64 * ET; idx += blockDim.x) {
          const int i = idx / ET, ee = idx % ET;
          const int64_t e = e0 + ee;
          const bool ok = i < Cn && e < d.E;
          S.e.gs[i][ee] = ok ? load<T>(g.p, g.at(b, h, t0 + i, e)) : 0.0f;
          S.e.vs[i][ee] = ok ? load<T>(v.p, v.at(b, h, t0 + i, e)) : 0.0f;
        }
        __syncthreads();
#pragma unroll 1
        for (int ee = 0; ee < ET; ee += 4) {
          float4 hv[2], dv[2];
#pragma unroll
          for (int u = 0; u < 2; ++u) {
            hv[u] = *reinterpret_cast<const float4*>(&S.e.hs[lane + 32 * u][ee]);
            dv[u] = *reinterpret_cast<const float4*>(&S.e.dhs[lane + 32 * u][ee]);
            if (warp == 0) hd[u] += hv[u].x * dv[u].x + hv[u].y * dv[u].y + hv[u].z * dv[u].z + hv[u].w * dv[u].w;
          }
#pragma unroll
          for (int gi = 0; gi < 2; ++gi)
#pragma unroll
            for (int r = 0; r < 4; ++r) {
              const int i = 4 * (warp + 8 * gi) + r;
              const float4 gv = *reinterpret_cast<const float4*>(&S.e.gs[i][ee]);
              const float4 vv = *reinterpret_cast<const float4*>(&S.e.vs[i][ee]);
#pragma unroll
              for (int u = 0; u < 2; ++u) {
                Wa[gi][r][u] += hv[u].x * gv.x + hv[u].y * gv.y + hv[u].z * gv.z + hv[u].w * gv.w;
                Ua[gi][r][u] += dv[u].x * vv.x + dv[u].y * vv.y + dv[u].z * vv.z + dv[u].w * vv.w;
              }
            }
        }
      }
#pragma unroll
      for (int gi = 0; gi < 2; ++gi)
#pragma unroll
        for (int r = 0; r < 4; ++r)
#pragma unroll
          for (int u = 0; u < 2; ++u) {
            S.w[4 * (warp + 8 * gi) + r][lane + 32 * u] = Wa[gi][r][u];
            S.u[4 * (warp + 8 * gi) + r][lane + 32 * u] = Ua[gi][r][u];
          }
      if (warp == 0) S.hdh[lane] = hd[0], S.hdh[lane + 32] = hd[1];
      __syncthreads();  // the E tiles are consumed before the row phase's arrays overwrite them
    }
    copy_tile(qps, Qp);
    // M of the chunk (split 0 holds the sum). Only its strict lower triangle of rows < Cn is
    // read for the rows < Cn; at C = 64 the whole slot is copied in 16-byte pieces.
    const float* Mc = M + (bh * d.nC + c) * d.nsplit * C * C;
    cp_async_commit();
    if (four) {
#pragma unroll
      for (int k = 0; k < 64 * LT / 4 / kLocalThreads; ++k) {
        int i, x;
        float4 f = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (four_at(k, l0, Cn, i, x)) {
          const Quad<T> v4 = *reinterpret_cast<const Quad<T>*>(static_cast<const T*>(q.p) + q.at(b, h, t0 + i, l0 + x));
          f = make_float4(to_float(v4.x[0]), to_float(v4.x[1]), to_float(v4.x[2]), to_float(v4.x[3]));
        }
        *reinterpret_cast<float4*>(&qs[i][x]) = f;
      }
    } else {
      const int64_t q0 = q.at(b, h, t0 + ic, l0 + xc);
#pragma unroll 8
      for (int k = 0; k < 16; ++k) {
        const int i = ic + 4 * k;
        qs[i][xc] = xok && i < Cn ? load<T>(q.p, q0 + 4 * k * q.s[2]) : 0.0f;
      }
    }
    if (C == 64) {
      for (int idx = threadIdx.x; idx < 64 * 16; idx += blockDim.x)
        *reinterpret_cast<float4*>(&ms[idx / 16][4 * (idx % 16)]) = reinterpret_cast<const float4*>(Mc)[idx];
    } else {
      for (int idx = threadIdx.x; idx < C * C; idx += blockDim.x) ms[idx / C][idx % C] = Mc[idx];
    }
    cp_async_wait<0>();
    __syncthreads();
    float da[2] = {};
    // Warp 0 walks the chunk: N_i, and zsum = sum_i a^(Cn-1-i) N_i (Horner), da's B·N weight.
    float zsum[2] = {}, bsum[2] = {}, ibn[2] = {};
    if (warp == 0) {
      float N[2];
#pragma unroll
      for (int u = 0; u < 2; ++u) N[u] = l0 + x0 + u < d.L ? Nc[(bh * (d.nC + 1) + c) * d.L + l0 + x0 + u] : 0.0f;
#pragma unroll 8  // the shared loads of q are independent of the chains: issued ahead
      for (int i = 0; i < Cn; ++i) {
        *reinterpret_cast<float2*>(&ns[i][x0]) = make_float2(N[0], N[1]);
        const float2 qi = *reinterpret_cast<const float2*>(&qs[i][x0]);
        zsum[0] = a[0] * zsum[0] + N[0];
        zsum[1] = a[1] * zsum[1] + N[1];
        N[0] = a[0] * N[0] + qi.x;
        N[1] = a[1] * N[1] + qi.y;
      }
    }
    __syncthreads();  // ns complete
#pragma unroll 1
    for (int gi = 0; gi < 2; ++gi) {
      const int i0 = 4 * (warp + 8 * gi);
      if (i0 >= Cn) break;
      // j < i: p = sum_j a^(i-1-j) x_j with x_j = q_j M[i][j] (the read of R_i) and its
      // derivative dp = sum_j f(i-1-j) x_j (da's pair term), both by Horner from j = 0, the
      // highest power: every power a^n with n >= 0 (exact at a = 0 and 1).
      float p[4][2] = {}, dp[4][2] = {};
      auto pstep = [&](int r, const float2& qj, float m) {
        dp[r][0] = dp[r][0] * a[0] + p[r][0];
        p[r][0] = p[r][0] * a[0] + qj.x * m;
        dp[r][1] = dp[r][1] * a[1] + p[r][1];
        p[r][1] = p[r][1] * a[1] + qj.y * m;
      };
      for (int j0 = 0; j0 < i0; j0 += 4) {  // i0 is a multiple of 4: no remainder
        float4 m[4];
#pragma unroll
        for (int r = 0; r < 4; ++r) m[r] = *reinterpret_cast<const float4*>(&ms[i0 + r][j0]);
#pragma unroll
        for (int jj = 0; jj < 4; ++jj) {
          const float2 qj = *reinterpret_cast<const float2*>(&qs[j0 + jj][x0]);
#pragma unroll
          for (int r = 0; r < 4; ++r) pstep(r, qj, f4(m[r], jj));
        }
      }
#pragma unroll
      for (int jj = 0; jj < 3; ++jj) {  // the triangle: row i0 + r takes j = i0 + jj when jj < r
        const float2 qj = *reinterpret_cast<const float2*>(&qs[i0 + jj][x0]);
#pragma unroll
        for (int r = jj + 1; r < 4; ++r) pstep(r, qj, ms[i0 + r][i0 + jj]);
      }
      // k > i: avs = sum_k a^(k-i-1) Qp_k M[k][i], by Horner from k = Cn-1, the highest power
      float avs[4][2] = {};
      auto astep = [&](int r, const float2& qk, float m) {
        avs[r][0] = avs[r][0] * a[0] + qk.x * m;
        avs[r][1] = avs[r][1] * a[1] + qk.y * m;
      };
      int k = Cn - 1;
      for (; k >= i0 + 7; k -= 4) {
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          const float4 m = *reinterpret_cast<const float4*>(&ms[k - kk][i0]);
          const float2 qk = *reinterpret_cast<const float2*>(&qps[k - kk][x0]);
#pragma unroll
          for (int r = 0; r < 4; ++r) astep(r, qk, f4(m, r));
        }
      }
      for (; k >= i0 + 4; --k) {
        const float4 m = *reinterpret_cast<const float4*>(&ms[k][i0]);
        const float2 qk = *reinterpret_cast<const float2*>(&qps[k][x0]);
#pragma unroll
        for (int r = 0; r < 4; ++r) astep(r, qk, f4(m, r));
      }
#pragma unroll
      for (int kk = 3; kk >= 1; --kk) {  // the triangle: row i0 + r takes k = i0 + kk when r < kk
        if (i0 + kk < Cn) {
          const float2 qk = *reinterpret_cast<const float2*>(&qps[i0 + kk][x0]);
#pragma unroll
          for (int r = 0; r < kk; ++r) astep(r, qk, ms[i0 + kk][i0 + r]);
        }
      }
      // Row results. pa: powers a^(i0-1+k), pd: a^(Cn-5-i0+k) (row r's Cn-1-i is Cn-4-i0+3-r).
      float pa[2][5], pd[2][5];
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        pow_run(a[u], i0, pa[u]);
        pow_run(a[u], Cn - 4 - i0, pd[u]);
      }
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int i = i0 + r, n = Cn - 1 - i;
        if (i >= Cn) break;  // warp-uniform
        const int64_t row = bh * d.T + t0 + i;
        const float rs = 1.0f / s[row];  // one division per row, not one per latent
        const float2 N2 = *reinterpret_cast<const float2*>(&ns[i][x0]);
        const float2 W2 = *reinterpret_cast<const float2*>(&S.w[i][x0]);
        const float2 U2 = *reinterpret_cast<const float2*>(&S.u[i][x0]);
        const float2 qp2 = *reinterpret_cast<const float2*>(&qps[i][x0]);
        const float2 q2 = *reinterpret_cast<const float2*>(&qs[i][x0]);
        const float Nv[2] = {N2.x, N2.y}, Wv[2] = {W2.x, W2.y}, Uv[2] = {U2.x, U2.y};
        const float qp[2] = {qp2.x, qp2.y}, qv[2] = {q2.x, q2.y};
        float dn[2], part[2], gc = 0.0f;
#pragma unroll
        for (int u = 0; u < 2; ++u) {
          const float gw = (pa[u][r + 1] * Wv[u] + p[r][u]) / (Nv[u] + kEpsF);
          const float av = pd[u][4 - r] * Uv[u] + avs[r][u];
          da[u] += qv[u] * Uv[u] * (float(n) * pd[u][3 - r]) + qp[u] * Wv[u] * (float(i) * pa[u][r]) + qp[u] * dp[r][u];
          dn[u] = -qp[u] * gw;
          part[u] = gw * rs + av;
          gc += gw * qv[u];
        }
        *reinterpret_cast<float2*>(&S.w[i][x0]) = make_float2(dn[0], dn[1]);
        *reinterpret_cast<float2*>(&S.u[i][x0]) = make_float2(part[0], part[1]);
        // gcp[bh][t][lt] = sum over the block's 64 latents of gw_t[l] w_t[l] (w = q / s)
        for (int o = 16; o > 0; o >>= 1) gc += __shfl_xor_sync(0xffffffffu, gc, o);
        if (lane == 0) gcp[row * nlt + lt] = gc * rs;
      }
    }
    S.red[warp][x0] = da[0];
    S.red[warp][x0 + 1] = da[1];
    __syncthreads();
    // The normaliser gradient inside the chunk, ib_i = sum_{k>i} a^(k-i-1) dn_k, by the reverse
    // recurrence ib_{i-1} = dn_i + a ib_i (in place of dn); its continuation past i = 0 is
    // bsum = sum_i a^i dn_i, the chunk's share of B at its start; ibn = sum_i ib_i N_i (da).
    if (warp == 0) {
      float x[2] = {};
#pragma unroll 8
      for (int i = Cn - 1; i >= 0; --i) {
        const float2 dn2 = *reinterpret_cast<const float2*>(&S.w[i][x0]);
        const float2 n2 = *reinterpret_cast<const float2*>(&ns[i][x0]);
        *reinterpret_cast<float2*>(&S.w[i][x0]) = make_float2(x[0], x[1]);
        ibn[0] += x[0] * n2.x;
        ibn[1] += x[1] * n2.y;
        x[0] = dn2.x + a[0] * x[0];
        x[1] = dn2.y + a[1] * x[1];
      }
      bsum[0] = x[0], bsum[1] = x[1];
    }
    __syncthreads();
#pragma unroll 4
    for (int k = 0; k < 16; ++k) {
      const int i = ic + 4 * k;
      if (xok && i < Cn) dqp[tile0 + 4 * k * d.L] = S.u[i][xc] + S.w[i][xc];
    }
    if (warp == 0) {
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const int64_t l = l0 + x0 + u;
        if (l >= d.L) continue;
        float x = dpow(a[u], Cn) * S.hdh[x0 + u];
        for (int w = 0; w < 8; ++w) x += S.red[w][x0 + u];
        const int64_t o = (bh * d.nC + c) * d.L + l;
        dap[o] = x + ibn[u];
        Bsum[o] = bsum[u];
        Zs[o] = zsum[u];
      }
    }
  }
}

// step(i) for the tokens of a segment [s0, e0) of at most 8 (bwd_local_v5's scans): unrolled without
// per-token checks where the segment is full (the common case), else with a warp-uniform stop.
// (Walking a short segment's rows past Cn too would change no output, qs being zero there: a
// mutant of it is not caught, rightly; the stop saves the work.)
template <typename Step>
__device__ __forceinline__ void for_segment(int s0, int e0, Step&& step) {
  if (e0 == s0 + 8) {
#pragma unroll
    for (int k = 0; k < 8; ++k) step(s0 + k);
  } else {
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      if (s0 + k >= e0) break;  // warp-uniform
      step(s0 + k);
    }
  }
}

// ---- bwd_local version 5: version 4's arithmetic, bit for bit, with less integer work ---------
// Version 4's floating-point operations in the same order (every output bitwise version 4's: the
// emulation compared all of them until version 4 was removed), with less of the integer and control work that an Nsight
// Compute profile of version 4 on the H200 showed (BDH-8k bfloat16, 1.118 G warp instructions per
// call, 0.58 issued per scheduler; by the SASS per source line of the same build: ~20 % of the
// executed instructions at the item's start — 64-bit divisions decoding the item and b, h, the
// tiles' clamped 64-bit offsets per 16-byte piece, q's strided offsets — and 6 % in dqp's 16
// scalar stores per thread with a 64-bit offset each):
//   - items (bh, c, lt), item = (bh nC + c) nlt + lt, by a running decomposition advanced by
//     gridDim.x (carries, no division per item), b and h of bh0 + bh carried along with bh (no
//     division either: b, h, bh stay 64-bit, so no launch limit);
//   - one 64-bit offset per item and array family ([bh][t][l], [bh][c][l], q's), the thread's
//     fixed pieces (rows pr + 16 k, latents px .. px + 3, as version 4's) as a 64-bit offset and a
//     32-bit shared address computed once, a k step at an immediate; a piece's zero fill from one
//     per-item limit (16 k < lim), its source not clamped (a zero-filled cp.async reads nothing);
//   - dqp by float4 stores of the same pieces (L % 4 == 0: 4 stores per thread instead of 16; the
//     same sum u + w per element);
//   - the chunk's N_0 (Nc) and a, loaded at the item's start by the power tables' threads (a is
//     their own al) into two [64] arrays (S.n0, S.al; until round 9 ms's padding columns 65 and
//     66, 16-way bank-conflicted), read there after the products: version 4's loads of them sat
//     in front of the N walk (long-scoreboard stalls there);
//   - q's 4-latent pieces as 8-byte words (bf16 to float by shifts: no 16-bit register traffic);
//   - the scans' full segments (8 tokens) without per-token checks (separate loops);
//   - a persistent grid (the launcher, RHOSCAN_BWD_LOCAL_PERSISTENT): what a block computes once
//     (311 SASS instructions per thread before the item loop) is paid per block, not per item.
// ptxas (sm_90a, nvcc 13.0): 118 registers (version 4: 128), no spills; the same shared memory
// as version 4 (LocalSmemV5). Measured on the H200 (seventh round's integration build, Nsight
// Compute durations per call, bfloat16): 2.01 -> 1.83 ms at BDH-8k against version 4, which was
// then removed (with it the emulation's bitwise comparison: version 5 is now checked against
// float64, as version 2).
template <typename T>
__device__ __forceinline__ void bwd_local_v5(Dims d, Str4 q, const float* a32, const float* Qp, const float* s,
                                             const float* Nc, const float* M, const float* Wr, const float* Ur,
                                             const float* HdHr, float* gcp, float* dqp, float* dap, float* Bsum,
                                             float* Zs) {
  constexpr int LT = kLocalLT, RS = kLocalLT + kLocalPadV5;  // RS: floats per row of the [64][RS] tiles
  constexpr int MS = 64 + kLocalMsPadV5;  // floats per row of ms
  static_assert(kLocalMsPadV5 >= 2, "ms's padding columns LT, LT + 1: 1/s, s");
  extern __shared__ __align__(128) unsigned char smem_raw[];
  LocalSmemV5& S = *reinterpret_cast<LocalSmemV5*>(smem_raw);
  auto& qs = S.r.qs;
  auto& qps = S.r.qps;
  auto& ns = S.r.ns;
  auto& ms = S.r.ms;
  const int C = static_cast<int>(d.C), nC = static_cast<int>(d.nC);
  const int nlt = static_cast<int>((d.L + LT - 1) / LT);
  if (nC == 0 || nlt == 0) return;  // no items (and no divisions by zero below)
  const int64_t L = d.L;
  const int CnLast = static_cast<int>(d.chunk_len(nC - 1));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, x0 = 2 * lane;
  // q: 4 latents a load where the rows are contiguous and aligned (BDH's case), else one.
  const bool four = latent_groups_ok<T, 4>(d, q);
  const bool vec = d.L % 4 == 0;  // the float32 tiles by 16-byte pieces (else scalar)
  // The thread's pieces of a [64 tokens][64 latents] tile: rows pr + 16 k (k < 4), latents px .. px
  // + 3 (version 4's idx = tid + 256 k: i = idx / 16, x = 4 (idx % 16)); scalar path: latent xc,
  // rows ic + 4 k (k < 16).
  const int pr = threadIdx.x / 16, px = 4 * (threadIdx.x % 16);
  const int xc = threadIdx.x % LT, ic = threadIdx.x / LT;
  constexpr uint32_t kStepB = 4 * 16 * RS;  // bytes from piece k to k + 1 in shared memory
  const uint32_t pso = 4 * (pr * RS + px);
  const uint32_t w_dst = smem_addr(&S.w[0][0]) + pso, u_dst = smem_addr(&S.u[0][0]) + pso;
  const uint32_t m_dst = smem_addr(&ms[0][0]) + 4 * (pr * MS + px);  // (ms's own row stride)
  constexpr uint32_t kStepMB = 4 * 16 * MS;
  // items (bh, c, lt), item = (bh nC + c) nlt + lt, advanced by the grid; b, h of bh0 + bh with them.
  // The grid's and the block's own decomposition in 32-bit unsigned arithmetic (grid.x < 2^32; nlt,
  // nC are int), b and h of the first pair by a 32-bit division where bh0 + bh and H fit in 32 bits.
  int lt, c, dlt, dc;
  int64_t bh, dbh, h, b, dh, db;
  {
    const uint32_t unlt = static_cast<uint32_t>(nlt), unc = static_cast<uint32_t>(nC);
    const uint32_t gq = gridDim.x / unlt, bq = blockIdx.x / unlt;
    dlt = static_cast<int>(gridDim.x - gq * unlt), dc = static_cast<int>(gq % unc), dbh = gq / unc;
    lt = static_cast<int>(blockIdx.x - bq * unlt), c = static_cast<int>(bq % unc), bh = bq / unc;
    const uint64_t x = static_cast<uint64_t>(d.bh0 + bh), H = static_cast<uint64_t>(d.H);
    if ((x | H) >> 32 == 0) {
      const uint32_t q = static_cast<uint32_t>(x) / static_cast<uint32_t>(H);
      b = q, h = static_cast<int64_t>(x) - int64_t{q} * d.H;
    } else {
      b = static_cast<int64_t>(x / H), h = static_cast<int64_t>(x % H);
    }
    if (H >> 32 == 0) {  // (dbh < 2^32)
      const uint32_t q = static_cast<uint32_t>(dbh) / static_cast<uint32_t>(H);
      db = q, dh = dbh - int64_t{q} * d.H;
    } else {
      db = 0, dh = dbh;
    }
  }
  auto advance = [&] {
    const int c2 = carry_add(c, dc, carry_add(lt, dlt, 0, nlt), nC);
    bh += dbh + c2;
    b += db + carry_add(h, dh, c2, d.H);
  };
  for (; bh < d.nbh; advance()) {
    const int Cn = c == nC - 1 ? CnLast : C, l0 = lt * LT;
    const int64_t row0 = bh * d.T + int64_t{c} * C;  // [bh][t] row of the chunk's token 0
    const int64_t tb = row0 * L + l0;                // [bh][t][l] offset of (token 0, latent l0)
    const int64_t cb = (bh * nC + c) * L + l0;       // [bh][c][l] offset of latent l0
    const int lim = l0 + px < L ? Cn - pr : 0;       // piece k holds the chunk's data where 16 k < lim
    const bool xok = l0 + xc < d.L;
    // q's loads (the `four` path) first, into registers (as version 4), as 8-byte words: 4 bf16 /
    // float16 values each, converted below (bf16 by shifts: the same floats as to_float)
    uint2 qr[4] = {};
    const int64_t qb = b * q.s[0] + h * q.s[1] + int64_t{c} * C * q.s[2] + l0 * q.s[3];  // q at (token 0, l0)
    if (four) {
      const T* qp = static_cast<const T*>(q.p) + qb + pr * q.s[2] + px;
#pragma unroll
      for (int k = 0; k < 4; ++k, qp += 16 * q.s[2])
        if (16 * k < lim) qr[k] = *reinterpret_cast<const uint2*>(qp);
    }
    // the item's scalar loads too, before the barrier (their latency was the power tables' and the
    // padding columns' long-scoreboard stalls in the round-8 profile, ~5 % of the samples): the
    // thread's decay al; I == 0: HdH and s of row xc; I == 1: the chunk's N_0 of latent xc
    const int I = threadIdx.x / LT;
    const float al = xok ? a32[h * d.L + l0 + xc] : 0.0f;
    float item_x = 0.0f, item_s = 1.0f;
    if (I == 0) {
      item_x = xok ? HdHr[cb + xc] : 0.0f;
      if (xc < Cn) item_s = s[row0 + xc];
    } else if (I == 1) {
      item_x = xok ? Nc[cb + bh * L + xc] : 0.0f;  // (bh (nC + 1) + c) L + l0 + xc
    }
    __syncthreads();  // the previous item's reads of shared memory are done
    auto copy_tile = [&](uint32_t dst, float (*dsts)[RS], const float* src) {  // the [64][64] tile at src + tb
      if (vec) {
        const float* p = src + tb + pr * L + px;
#pragma unroll
        for (int k = 0; k < 4; ++k) cp_async16_u32(dst + k * kStepB, p + 16 * k * L, 16 * k < lim ? 16u : 0u);
      } else {
        const float* p = src + tb + ic * L + xc;
#pragma unroll 8
        for (int k = 0; k < 16; ++k) {
          const int i = ic + 4 * k;
          dsts[i][xc] = xok && i < Cn ? p[4 * k * L] : 0.0f;
        }
      }
    };
    // M of the chunk (split 0 holds the sum); at C = 64 the whole slot by the same pieces. Two
    // commit groups, M's first: the scans and M's split wait for M only (cp_async_wait<1> below),
    // W and U (from DRAM) land under them, waited for before the products' barrier (round 23; until
    // then one group, whose wait before the scans was ~3 % of the warps' stall samples at BDH-8k).
    const float* Mc = M + (bh * nC + c) * d.nsplit * C * C;
    if (C == 64) {
#pragma unroll
      for (int k = 0; k < 4; ++k) cp_async16_u32(m_dst + k * kStepMB, Mc + 4 * threadIdx.x + 1024 * k);
    }
    cp_async_commit();
    copy_tile(w_dst, S.w, Wr);
    copy_tile(u_dst, S.u, Ur);
    cp_async_commit();
    if (I == 0) S.hdh[xc] = item_x;
    {  // the power tables (in ns: the previous item's reads of it are done), as version 4; and N_0, a
      LocalPowTables& P = *reinterpret_cast<LocalPowTables*>(&ns[0][0]);
      // (Full chunks: I's exponents as constants, so that each ipow64 folds to its few products, the
      // squares shared between them: the same multiplications in the same order, the same tables. A
      // runtime exponent costs ipow64 its six predicated steps: ~100 instructions a thread per item.)
      if (Cn == 64) {
        switch (I) {
          case 0: local_pow_tables(P, xc, al, 0, 48); break;
          case 1: local_pow_tables(P, xc, al, 1, 32); break;
          case 2: local_pow_tables(P, xc, al, 2, 16); break;
          default: local_pow_tables(P, xc, al, 3, 0); break;
        }
      } else {
        local_pow_tables(P, xc, al, I, Cn - 16 * (I + 1));
      }
      if (I == 1) S.n0[xc] = item_x;
      if (I == 2) S.al[xc] = al;
    }
    if (four) {
#pragma unroll
      for (int k = 0; k < 4; ++k) {  // (a piece outside the chunk or L: qr zero, its float4 zero)
        float4 f;
        if constexpr (std::is_same_v<T, bf16>) {  // a bf16 is the upper half of its float
          f = make_float4(__uint_as_float(qr[k].x << 16), __uint_as_float(qr[k].x & 0xffff0000u),
                          __uint_as_float(qr[k].y << 16), __uint_as_float(qr[k].y & 0xffff0000u));
        } else {
          const Quad<T> v4 = *reinterpret_cast<const Quad<T>*>(&qr[k]);
          f = make_float4(to_float(v4.x[0]), to_float(v4.x[1]), to_float(v4.x[2]), to_float(v4.x[3]));
        }
        *reinterpret_cast<float4*>(&qs[pr + 16 * k][px]) = f;
      }
    } else {
      const int64_t q0 = qb + ic * q.s[2] + xc * q.s[3];
#pragma unroll 8
      for (int k = 0; k < 16; ++k) {
        const int i = ic + 4 * k;
        qs[i][xc] = xok && i < Cn ? load<T>(q.p, q0 + 4 * k * q.s[2]) : 0.0f;
      }
    }
    if (C != 64) {
      for (int idx = threadIdx.x; idx < C * C; idx += blockDim.x) ms[idx / C][idx % C] = Mc[idx];
    }
    // 1/s of the chunk's rows, once per item, in ms's padding column LT (as version 4), and s
    // itself in column LT + 1 (for Qp below)
    if (I == 0) {
      ms[xc][LT] = xc < Cn ? 1.0f / item_s : 0.0f;
      ms[xc][LT + 1] = item_s;
    }
    cp_async_wait<1>();  // M's group (W and U may still be in flight)
    __syncthreads();
    // The read weights Qp_i = q_i / (s_i (N_i + eps)) of the chunk's rows, into qps (until the
    // eleventh round a float32 tile that norm_apply wrote for this kernel alone: 4 bytes per (t, l)
    // written to memory and read back). N by the scans over segments of 8 tokens (version 4's
    // change 4, above bwd_local_split_m): each segment's z = sum_{i in [s0, e0)} a^(e0-1-i) q_i
    // (Horner) through red, then its start N by Horner in a^8 over the earlier segments from the
    // chunk's N_0 (kept in registers for the N walk after the products), then the walk. Rows past
    // Cn are zeros (the products read whole 16-row sub-blocks). The division is the forward's
    // norm_read_weight<true> (div.approx.ftz of the quarters: a reciprocal and a product, within 2
    // ulp), so these read weights are the forward's bit for bit (the same N order, s and q); the
    // IEEE division cost bwd_local ~6 % at BDH-8k, __fdividef (until round 22) 8 SASS instructions
    // with its subnormal test and scalings.
    const float2 a2 = *reinterpret_cast<const float2*>(&S.al[x0]);
    const float a[2] = {a2.x, a2.y};
    auto xch = [&](auto& tile, int v) -> float2& { return *reinterpret_cast<float2*>(&tile[v][x0]); };
    const int s0 = 8 * warp, e0 = min(s0 + 8, Cn);
    if (s0 < Cn) {
      float z[2] = {};
      auto zstep = [&](int i) {
        const float2 qi = *reinterpret_cast<const float2*>(&qs[i][x0]);
        z[0] = a[0] * z[0] + qi.x;
        z[1] = a[1] * z[1] + qi.y;
      };
      for_segment(s0, e0, zstep);
      xch(S.red, warp) = make_float2(z[0], z[1]);
    }
    __syncthreads();  // the segments' z
    float Ns[2] = {};  // N at the segment's start
    if (s0 < Cn) {
      const float2 n02 = *reinterpret_cast<const float2*>(&S.n0[x0]);
      Ns[0] = n02.x, Ns[1] = n02.y;
      // the earlier segments by Horner in a^8, v ascending, unrolled with each step under v < warp:
      // the loads of z issue together, where a loop of the warp's trip count waited for each in turn
      // (warp 7's seven load latencies, before its walk, which the products' barrier waits for)
      const float a8[2] = {ipow64(a[0], 8), ipow64(a[1], 8)};
#pragma unroll
      for (int v = 0; v < 7; ++v) {
        if (v < warp) {  // (warp-uniform)
          const float2 zv = xch(S.red, v);
          Ns[0] = a8[0] * Ns[0] + zv.x;
          Ns[1] = a8[1] * Ns[1] + zv.y;
        }
      }
      float N[2] = {Ns[0], Ns[1]};
      auto qpstep = [&](int i) {
        const float2 qi = *reinterpret_cast<const float2*>(&qs[i][x0]);
        const float si = ms[i][LT + 1];
        xch(qps, i) = make_float2(norm_read_weight<true>(qi.x, si, N[0]), norm_read_weight<true>(qi.y, si, N[1]));
        N[0] = a[0] * N[0] + qi.x;
        N[1] = a[1] * N[1] + qi.y;
      };
      for_segment(s0, e0, qpstep);
    }
    for (int i = max(s0, e0); i < s0 + 8; ++i) xch(qps, i) = make_float2(0.0f, 0.0f);  // rows past Cn
    bwd_local_split_m(S, Cn);
    cp_async_wait<0>();  // W and U (read by the products' epilogue)
    __syncthreads();  // M's hi / lo tiles, W, U and qps complete, red's z read
    bwd_local_cross(S, *reinterpret_cast<const LocalPowTables*>(&ns[0][0]), Cn);
    __syncthreads();  // w, u, red[0] written; the tables (ns) are consumed
    float da[2] = {};
    if (warp == 0) {  // the products' shares of da (red[0])
#pragma unroll
      for (int u = 0; u < 2; ++u) da[u] = S.red[0][x0 + u];
    }
    if (s0 < Cn) {  // the N walk into ns, from the segment's start N (above)
      float N[2] = {Ns[0], Ns[1]};
      auto nstep = [&](int i) {
        *reinterpret_cast<float2*>(&ns[i][x0]) = make_float2(N[0], N[1]);
        const float2 qi = *reinterpret_cast<const float2*>(&qs[i][x0]);
        N[0] = a[0] * N[0] + qi.x;
        N[1] = a[1] * N[1] + qi.y;
      };
      for_segment(s0, e0, nstep);
    }
    __syncthreads();  // ns complete
    float* gp = gcp + row0 * nlt + lt;  // gcp[bh][t][lt] at the chunk's token 0
#pragma unroll 1
    for (int gi = 0; gi < 2; ++gi) {
      // rows i0 .. i0 + 3: warp w's first group at 4 w, its second at 32 + 4 (w ^ 3), so that each
      // warp has one group at the start of an 8-row block (one four-step iteration of the avs loop)
      // and one in its second half (one of the gw loop). Until round 23 both at 4 w + 32 gi, with
      // 16-row blocks: warps 3 and 7 ran 6 gw iterations, 0 and 4 six avs iterations, and the others
      // waited for warps 3 and 7 at the row phase's barrier. (Rows past Cn: the second group's rows
      // are all above the first's, so the first group past Cn ends both.)
      const int i0 = gi == 0 ? 4 * warp : 32 + 4 * (warp ^ 3);
      if (i0 >= Cn) break;
      float p[4][2] = {}, dp[4][2] = {};
      auto pstep = [&](int r, const float2& qj, float m) {
        dp[r][0] = dp[r][0] * a[0] + p[r][0];
        p[r][0] = p[r][0] * a[0] + qj.x * m;
        dp[r][1] = dp[r][1] * a[1] + p[r][1];
        p[r][1] = p[r][1] * a[1] + qj.y * m;
      };
      for (int j0 = i0 & ~7; j0 < i0; j0 += 4) {  // (the row's own 8-row block only: round 23's quadrants)
        float4 m[4];
#pragma unroll
        for (int r = 0; r < 4; ++r) m[r] = *reinterpret_cast<const float4*>(&ms[i0 + r][j0]);
#pragma unroll
        for (int jj = 0; jj < 4; ++jj) {
          const float2 qj = *reinterpret_cast<const float2*>(&qs[j0 + jj][x0]);
#pragma unroll
          for (int r = 0; r < 4; ++r) pstep(r, qj, f4(m[r], jj));
        }
      }
#pragma unroll
      for (int jj = 0; jj < 3; ++jj) {  // the triangle: row i0 + r takes j = i0 + jj when jj < r
        const float2 qj = *reinterpret_cast<const float2*>(&qs[i0 + jj][x0]);
#pragma unroll
        for (int r = jj + 1; r < 4; ++r) pstep(r, qj, ms[i0 + r][i0 + jj]);
      }
      float avs[4][2] = {};
      auto astep = [&](int r, const float2& qk, float m) {
        avs[r][0] = avs[r][0] * a[0] + qk.x * m;
        avs[r][1] = avs[r][1] * a[1] + qk.y * m;
      };
      int k = min(Cn - 1, i0 | 7);  // (up to the 8-row block's end)
      for (; k >= i0 + 7; k -= 4) {
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          const float4 m = *reinterpret_cast<const float4*>(&ms[k - kk][i0]);
          const float2 qk = *reinterpret_cast<const float2*>(&qps[k - kk][x0]);
#pragma unroll
          for (int r = 0; r < 4; ++r) astep(r, qk, f4(m, r));
        }
      }
      for (; k >= i0 + 4; --k) {
        const float4 m = *reinterpret_cast<const float4*>(&ms[k][i0]);
        const float2 qk = *reinterpret_cast<const float2*>(&qps[k][x0]);
#pragma unroll
        for (int r = 0; r < 4; ++r) astep(r, qk, f4(m, r));
      }
#pragma unroll
      for (int kk = 3; kk >= 1; --kk) {  // the triangle: row i0 + r takes k = i0 + kk when r < kk
        if (i0 + kk < Cn) {
          const float2 qk = *reinterpret_cast<const float2*>(&qps[i0 + kk][x0]);
#pragma unroll
          for (int r = 0; r < kk; ++r) astep(r, qk, ms[i0 + kk][i0 + r]);
        }
      }
      float gcr[4] = {};  // the rows' lane sums of gc, reduced together below
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int i = i0 + r;
        if (i >= Cn) break;  // warp-uniform
        const float rs = ms[i][LT];
        const float2 N2 = *reinterpret_cast<const float2*>(&ns[i][x0]);
        const float2 W2 = *reinterpret_cast<const float2*>(&S.w[i][x0]);
        const float2 U2 = *reinterpret_cast<const float2*>(&S.u[i][x0]);
        const float2 qp2 = *reinterpret_cast<const float2*>(&qps[i][x0]);
        const float2 q2 = *reinterpret_cast<const float2*>(&qs[i][x0]);
        const float Nv[2] = {N2.x, N2.y}, Wv[2] = {W2.x, W2.y}, Uv[2] = {U2.x, U2.y};
        const float qp[2] = {qp2.x, qp2.y}, qv[2] = {q2.x, q2.y};
        float dn[2], part[2], gc = 0.0f;
#pragma unroll
        for (int u = 0; u < 2; ++u) {
          const float gw = read_gradient(Wv[u] + p[r][u], Nv[u]);
          const float av = Uv[u] + avs[r][u];
          da[u] += qp[u] * dp[r][u];
          dn[u] = -qp[u] * gw;
          part[u] = gw * rs + av;
          gc += gw * qv[u];
        }
        *reinterpret_cast<float2*>(&S.w[i][x0]) = make_float2(dn[0], dn[1]);
        *reinterpret_cast<float2*>(&S.u[i][x0]) = make_float2(part[0], part[1]);
        gcr[r] = gc;
      }
      {  // the 4 rows' sums over the warp together (version 4's reduce-scatter)
        const bool b4 = lane & 16, b3 = lane & 8;
        float k0 = b4 ? gcr[2] : gcr[0], k1 = b4 ? gcr[3] : gcr[1];
        k0 += __shfl_xor_sync(0xffffffffu, b4 ? gcr[0] : gcr[2], 16);
        k1 += __shfl_xor_sync(0xffffffffu, b4 ? gcr[1] : gcr[3], 16);
        float gc = b3 ? k1 : k0;
        gc += __shfl_xor_sync(0xffffffffu, b3 ? k0 : k1, 8);
        for (int o = 4; o > 0; o >>= 1) gc += __shfl_xor_sync(0xffffffffu, gc, o);
        const int i = i0 + lane / 8;
        if (lane % 8 == 0 && i < Cn) gp[i * nlt] = gc * ms[i][LT];
      }
    }
    S.red[warp][x0] = da[0];
    S.red[warp][x0 + 1] = da[1];
    __syncthreads();
    {  // the reverse scan over the segments (version 4's change 4, above bwd_local_split_m)
      const int s0 = 8 * warp, e0 = min(s0 + 8, Cn), nseg = (Cn + 7) / 8;
      if (s0 < Cn) {
        float x[2] = {}, il[2] = {}, y[2] = {}, pw[2] = {1.0f, 1.0f};  // pw = a^(e0-1-i)
        auto rstep = [&](int i) {
          const float2 dn2 = *reinterpret_cast<const float2*>(&S.w[i][x0]);
          const float2 n2 = *reinterpret_cast<const float2*>(&ns[i][x0]);
          *reinterpret_cast<float2*>(&S.w[i][x0]) = make_float2(x[0], x[1]);
          il[0] += x[0] * n2.x;
          il[1] += x[1] * n2.y;
          y[0] += pw[0] * n2.x;
          y[1] += pw[1] * n2.y;
          pw[0] *= a[0];
          pw[1] *= a[1];
          x[0] = dn2.x + a[0] * x[0];
          x[1] = dn2.y + a[1] * x[1];
        };
        if (e0 == s0 + 8) {  // (the local recurrence, a full segment)
#pragma unroll
          for (int k = 7; k >= 0; --k) rstep(s0 + k);
        } else {
#pragma unroll
          for (int k = 7; k >= 0; --k) {
            if (s0 + k >= e0) continue;  // warp-uniform
            rstep(s0 + k);
          }
        }
        xch(qs, warp) = make_float2(x[0], x[1]);
        xch(qps, warp) = make_float2(y[0], y[1]);
        xch(qps, 8 + warp) = make_float2(il[0], il[1]);
      }
      __syncthreads();  // the segments' x
      if (s0 < Cn) {
        const float a8[2] = {ipow64(a[0], 8), ipow64(a[1], 8)};
        float cy[2] = {};
        // the later segments, v descending, unrolled under v < nseg and v > warp (as the N walk's
        // starts: warp 0 waited for six load latencies here, and everyone for warp 0 at the barrier)
#pragma unroll
        for (int v = 7; v > 0; --v) {
          if (v < nseg && v > warp) {  // (warp-uniform)
            const float2 xv = xch(qs, v);
            cy[0] = xv.x + a8[0] * cy[0];
            cy[1] = xv.y + a8[1] * cy[1];
          }
        }
        float pw[2] = {1.0f, 1.0f};  // a^(e0-1-i)
        auto cstep = [&](int i) {
          float2& ib = *reinterpret_cast<float2*>(&S.w[i][x0]);
          ib = make_float2(ib.x + pw[0] * cy[0], ib.y + pw[1] * cy[1]);
          pw[0] *= a[0];
          pw[1] *= a[1];
        };
        if (e0 == s0 + 8) {  // (the carry, a full segment)
#pragma unroll
          for (int k = 7; k >= 0; --k) cstep(s0 + k);
        } else {
#pragma unroll
          for (int k = 7; k >= 0; --k) {
            if (s0 + k >= e0) continue;  // warp-uniform
            cstep(s0 + k);
          }
        }
        const float2 y = xch(qps, warp), il = xch(qps, 8 + warp);
        xch(qps, 8 + warp) = make_float2(il.x + cy[0] * y.x, il.y + cy[1] * y.y);
        if (warp == 0) {  // B's share: the continuation past 0 (a^8: segment 0 is full wherever cy != 0),
          // into ns's row 0 (free since the segments' barrier) for the tail's warps 2, 3
          const float2 x = xch(qs, 0);
          float bsum[2];
          bsum[0] = x.x + a8[0] * cy[0];
          bsum[1] = x.y + a8[1] * cy[1];
          xch(ns, 0) = make_float2(bsum[0], bsum[1]);
        }
      }
    }
    __syncthreads();
    // dqp = u + w (the partial dq): the tile's pieces as float4 where L % 4 == 0, else scalar
    if (vec) {
      float* p = dqp + tb + pr * L + px;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        if (16 * k < lim) {
          const float4 u4 = *reinterpret_cast<const float4*>(&S.u[pr + 16 * k][px]);
          const float4 w4 = *reinterpret_cast<const float4*>(&S.w[pr + 16 * k][px]);
          store_float4(p + 16 * k * L, make_float4(u4.x + w4.x, u4.y + w4.y, u4.z + w4.z, u4.w + w4.w));
        }
      }
    } else {
      float* p = dqp + tb + ic * L + xc;
#pragma unroll 4
      for (int k = 0; k < 16; ++k) {
        const int i = ic + 4 * k;
        if (xok && i < Cn) p[4 * k * L] = S.u[i][xc] + S.w[i][xc];
      }
    }
    // The per-latent outputs, over four warps (until round 23 warp 0 alone, both latents and all
    // three, while the other seven waited at the next item's first barrier: 8 % of the warps' stall
    // samples at BDH-8k). Warp 2 j + u takes its lanes' latent x0 + u: j = 0 dap, j = 1 Zs and Bsum.
    // Each value by the same operations in the same order as before.
    if (warp < 4) {
      const int u = warp & 1, l = x0 + u, nseg = (Cn + 7) / 8;
      const float au = u ? a[1] : a[0];  // (a select: a[u] at a runtime u would put a[] on the stack)
      const int64_t o = cb + l;
      if (l0 + l < d.L) {
        if (warp < 2) {  // dap: HdH's share, the warps' shares of da, the segments' shares of ibn (in order)
          // (f(Cn) by ipow64, branch-free: dpow's ipow loop has the same products; the segments'
          // loops unrolled under v < nseg, their loads issued together: the other four warps wait for
          // these at the next item's first barrier)
          float x = float(Cn) * ipow64(au, Cn - 1) * S.hdh[l];  // (Cn >= 1)
          for (int w = 0; w < 8; ++w) x += S.red[w][l];
          float in = 0.0f;
#pragma unroll
          for (int v = 0; v < 8; ++v)
            if (v < nseg) in += qps[8 + v][l];
          dap[o] = x + in;
        } else {  // zsum by Horner over the segments (as version 4); B's share from warp 0 (ns's row 0)
          const float a8 = ipow64(au, 8), aT = ipow64(au, Cn - 8 * (nseg - 1));
          float z = 0.0f;
#pragma unroll
          for (int v = 0; v < 8; ++v)
            if (v < nseg) z = (v == nseg - 1 ? aT : a8) * z + qps[v][l];
          Zs[o] = z;
          Bsum[o] = ns[0][l];
        }
      }
    }
  }
}

// The kernel: version 2 without the readback (float32), version 5 with it (bfloat16, float16).
// Version 5's grid: as many blocks as fit at once (1, the default), each running on through its
// items, so that what a block computes once (the decomposition's divisions, the thread's pieces and
// shared addresses, the products' and split's per-thread indices that the compiler hoists out of
// the item loop) is paid once per block instead of once per item (at BDH-8k: 32768 items, 264
// blocks of 124 items on the H200, against one block per item); 0: a block per item as version 4.
// (The items' arithmetic is the same either way: the outputs do not depend on the grid.)
#ifndef RHOSCAN_BWD_LOCAL_PERSISTENT
#define RHOSCAN_BWD_LOCAL_PERSISTENT 1
#endif
// kVersion: 2 (every path; the float32 one's; with kReadback only in the host emulation) or 5 (only
// with kReadback).
template <typename T, bool kReadback, int kVersion = kReadback ? 5 : 2>
__global__ void __launch_bounds__(kLocalThreads, 2) bwd_local_kernel(
    Dims d, Str4 q, Str4 v, Str4 g, const float* a32, const float* Qp, const float* s, const float* Nc,
    const float* Hs, const float* dHs, const float* M, const float* Wr, const float* Ur, const float* HdHr,
    float* gcp, float* dqp, float* dap, float* Bsum, float* Zs) {
  grid_dependency_wait();
  static_assert(kVersion == 2 || (kVersion == 5 && kReadback), "bwd_local: version 2, or 5 with the readback");
  if constexpr (kVersion == 5)
    bwd_local_v5<T>(d, q, a32, Qp, s, Nc, M, Wr, Ur, HdHr, gcp, dqp, dap, Bsum, Zs);
  else
    bwd_local_v2<T, kReadback>(d, q, v, g, a32, Qp, s, Nc, Hs, dHs, M, Wr, Ur, HdHr, gcp, dqp, dap, Bsum, Zs);
}

// The normaliser gradient across chunks, one thread per (bh, l), reverse over chunks:
// Bend_c = B at the end of chunk c; B_start = a^Cn Bend + Bsum. Writes dN_0 and da's B·N share.
// The chunks go in batches of kBscanBatch whose Bsum and Zs are loaded together before the chain
// (the stores to Bend may alias them for the compiler, so a plain loop waited for each chunk's
// loads in turn: 65 us for the long case's 128 chunks on 32 blocks; batches of 8: 21 us), and
// a^C, a^Cn once per thread (ipow of the same exponent: the same values as a per-chunk ipow, so
// the same bits). Where the chunks are few (nC <= 8: BDH-8k, BDH-base) batches of 8: a batch's
// loads and steps are unrolled under their chunk's predicate, so batches of 32 ran 24 dead steps a
// thread there (Nsight, round 37, H100: 19.4 M warp instructions over 2 launches at BDH-8k, 0.031
// ms a backward).
constexpr int kBscanBatch = 32, kBscanBatchFew = 8;
template <int kBatch>
__global__ void bscan_kernel(Dims d, const float* a32, Str3 gn, const float* Bsum, const float* Zs, float* Bend,
                             float* daB, Str3 dn0) {
  grid_dependency_wait();
  for (int64_t x = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; x < d.nbh * d.L; x += int64_t(gridDim.x) * blockDim.x) {
    const int64_t bh = x / d.L, l = x % d.L, b = d.b_of(bh), h = d.h_of(bh);
    const float a = a32[h * d.L + l];
    const float a_full = ipow(a, static_cast<int>(d.C));
    const float a_last = d.nC > 0 ? ipow(a, static_cast<int>(d.chunk_len(d.nC - 1))) : 1.0f;
    float Bc = gn.p ? static_cast<const float*>(gn.p)[gn.at(b, h, l)] : 0.0f, da = 0.0f;
    const int64_t row = bh * d.nC * d.L + l;  // chunk c's element at row + c L
    for (int64_t c1 = d.nC; c1 > 0; c1 -= kBatch) {  // chunks c1 - 1 down to c1 - kBatch
      float bs[kBatch], zs[kBatch];
#pragma unroll
      for (int k = 0; k < kBatch; ++k) {
        const int64_t c = c1 - 1 - k;
        bs[k] = c >= 0 ? Bsum[row + c * d.L] : 0.0f;
        zs[k] = c >= 0 ? Zs[row + c * d.L] : 0.0f;
      }
#pragma unroll
      for (int k = 0; k < kBatch; ++k) {
        const int64_t c = c1 - 1 - k;
        if (c >= 0) {
          Bend[row + c * d.L] = Bc;
          da += Bc * zs[k];
          Bc = (c == d.nC - 1 ? a_last : a_full) * Bc + bs[k];
        }
      }
    }
    daB[x] = da;
    if (dn0.p) const_cast<float*>(static_cast<const float*>(dn0.p))[dn0.at(b, h, l)] = Bc;
  }
}

// dq_t[l] = partial - gc_t / s_t + a^(Cn-1-i) Bend_c[l]. A block per (b, h, chunk, tl V latents),
// tl = dq_latent_threads(L, V) threads along the latents, each V adjacent latents (V = 4 where dq's
// latents go in fours: norm_quads_ok, a float4 load of the partials and one 8-byte store per token
// (16 for float32), since round 22; V = 2 where they pair up: norm_pairs_ok; else 1), and the
// block's kDqThreads / tl rows of threads on segments of the chunk's tokens, each walked from its
// last token: the power a^(Cn-1-i) by a running product (every exponent >= 0, exact at a = 0 and
// 1), started by the same multiplications that the tokens after the segment would have made, so
// every element is the one-segment walk's bit for bit; the output index by a step per token.
// gc_t / s_t of the chunk's tokens once per block, in shared memory. (One latent per thread: 0.29
// ms per backward at BDH-8k, 58 % of the DRAM bandwidth; a block per token row with an ipow per
// element 0.25 ms per batch of 16 pairs, 37 %; before that, 64-bit divisions per element, 0.38 ms.
// Until round 30 always 256 V latents a block, one segment: at BDH-base, L = 256, a quarter of the
// threads had latents, each walking 64 tokens, 0.038 ms a backward on the H200 against a DRAM
// floor near 0.015; on an H100, round 30's Nsight: 0.042 -> 0.033 ms a backward.)
constexpr int kDqThreads = 256;
// Threads along the latents: the smallest power of two from 32 that covers L / V, at most
// kDqThreads (L past kDqThreads V: several latent blocks, one segment each, as before round 30).
inline int dq_latent_threads(int64_t L, int V) {
  int tl = 32;
  while (tl < kDqThreads && int64_t{tl} * V < L) tl *= 2;
  return tl;
}
template <typename T, int V>
__global__ void __launch_bounds__(kDqThreads) dq_final_kernel(Dims d, const float* a32, const float* dqp,
                                                              const float* gc, const float* s, const float* Bend,
                                                              Str4 dq, int tl) {
  grid_dependency_wait();
  __shared__ float gcs[kMaxChunk];
  const int64_t LB = int64_t{tl} * V;  // latents per block
  const int64_t nlb = (d.L + LB - 1) / LB;
  const int nseg = kDqThreads / tl, seg = threadIdx.x / tl;
  for (int64_t item = blockIdx.x; item < d.nbh * d.nC * nlb; item += gridDim.x) {
    const int64_t bh = item / (d.nC * nlb), c = (item / nlb) % d.nC;
    const int64_t l = (item % nlb) * LB + V * (threadIdx.x % tl);
    const int64_t b = d.b_of(bh), h = d.h_of(bh), t0 = c * d.C, r0 = bh * d.T + t0;
    const int Cn = static_cast<int>(d.chunk_len(c));
    __syncthreads();  // the previous item's gcs are read
    if (threadIdx.x < Cn) gcs[threadIdx.x] = gc[r0 + threadIdx.x] / s[r0 + threadIdx.x];
    __syncthreads();
    if (l >= d.L) continue;  // (V = 2, 4: L is a multiple of V, so l + V - 1 < L too)
    // the segment: tokens hi down to lo, after = Cn - 1 - hi tokens past it in the chunk
    const int seg_len = (Cn + nseg - 1) / nseg, after = seg * seg_len, hi = Cn - 1 - after;
    if (hi < 0) continue;
    const int lo = max(0, hi - seg_len + 1);
    float a[V], bend[V], pw[V];  // pw = a^(Cn-1-i)
#pragma unroll
    for (int v = 0; v < V; ++v) {
      a[v] = a32[h * d.L + l + v];
      bend[v] = Bend[(bh * d.nC + c) * d.L + l + v];
      pw[v] = 1.0f;
    }
    for (int k = 0; k < after; ++k)  // (registers only: a^after as the tokens past the segment make it)
#pragma unroll
      for (int v = 0; v < V; ++v) pw[v] *= a[v];
    const float* partial = dqp + (r0 + hi) * d.L + l;
    T* out = static_cast<T*>(const_cast<void*>(dq.p)) + dq.at(b, h, t0 + hi, l);
#pragma unroll 8  // loads of later tokens issued ahead
    for (int i = hi; i >= lo; --i, partial -= d.L, out -= dq.s[2]) {
      float x[V];
      if constexpr (V == 4) {
        const float4 p4 = *reinterpret_cast<const float4*>(partial);
        x[0] = p4.x, x[1] = p4.y, x[2] = p4.z, x[3] = p4.w;
      } else if constexpr (V == 2) {
        const float2 p2 = *reinterpret_cast<const float2*>(partial);
        x[0] = p2.x, x[1] = p2.y;
      } else {
        x[0] = *partial;
      }
#pragma unroll
      for (int v = 0; v < V; ++v) {
        x[v] = (x[v] - gcs[i]) + pw[v] * bend[v];
        pw[v] *= a[v];
      }
      store_latents<V>(out, x);
    }
  }
}

// dv_acc[b, hv, t, e] += the partials of this batch's (b, h) pairs that read v[b, hv] (every h
// when Hv = 1), in increasing h: the same order of additions whatever the batching.
// dv_acc[b][hv][t][e] += this batch's dvp of the heads that read v head hv (all H when Hv = 1), in
// increasing h. V adjacent e per thread (4 where E is a multiple of 4: 16-byte loads and stores,
// a quarter of the index arithmetic that bounded the one-element version, 49 µs per call at
// BDH-base); each element's sum in the same order either way.
// kStore (the whole backward in one batch): each sum starts from 0.0f, as it would from dv_acc's
// zeros, and goes to grad_v through gv's strides as dv_store_kernel writes it: the same bits
// without dv_acc's memset, its write and read, and dv_store's launch.
template <int V, typename T = float, bool kStore = false>
__global__ void dv_accumulate_kernel(Dims d, int64_t Hv, const float* dvp, float* dv_acc, Str4 gv = Str4{}) {
  grid_dependency_wait();
  struct alignas(4 * V) Vec {
    float x[V];
  };
  const int64_t b_first = d.bh0 / d.H, b_last = (d.bh0 + d.nbh - 1) / d.H;
  const int64_t EV = d.E / V;
  const int64_t n = (b_last - b_first + 1) * Hv * d.T * EV;
  for (int64_t x = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; x < n; x += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ev = x % EV, t = (x / EV) % d.T, hv = (x / (EV * d.T)) % Hv, b = b_first + x / (EV * d.T * Hv);
    const int64_t o = ((b * Hv + hv) * d.T + t) * d.E + ev * V;
    Vec acc;
    if constexpr (kStore) {
#pragma unroll
      for (int k = 0; k < V; ++k) acc.x[k] = 0.0f;
    } else {
      acc = *reinterpret_cast<const Vec*>(dv_acc + o);
    }
    for (int64_t h = (Hv == 1 ? 0 : hv); h < (Hv == 1 ? d.H : hv + 1); ++h) {
      const int64_t bh = b * d.H + h - d.bh0;
      if (bh >= 0 && bh < d.nbh) {
        const Vec y = *reinterpret_cast<const Vec*>(dvp + (bh * d.T + t) * d.E + ev * V);
#pragma unroll
        for (int k = 0; k < V; ++k) acc.x[k] += y.x[k];
      }
    }
    if constexpr (kStore) {
      const int64_t go = gv.at(b, hv, t, ev * V);
#pragma unroll
      for (int k = 0; k < V; ++k) store<T>(const_cast<void*>(gv.p), go + k * gv.s[3], acc.x[k]);
    } else {
      *reinterpret_cast<Vec*>(dv_acc + o) = acc;
    }
  }
}

// grad_v from dv_acc: V adjacent e per thread (4 where E is a multiple of 4: a quarter of the
// 64-bit index arithmetic, which made the one-element version take 27 µs per call at BDH-base),
// each stored through gv's strides.
template <typename T, int V>
__global__ void dv_store_kernel(int64_t B, int64_t Hv, int64_t nT, int64_t E, const float* dv_acc, Str4 gv) {
  grid_dependency_wait();
  const int64_t EV = E / V;
  for (int64_t x = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; x < B * Hv * nT * EV;
       x += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ev = x % EV, t = (x / EV) % nT, hv = (x / (EV * nT)) % Hv, b = x / (EV * nT * Hv);
    const int64_t o = gv.at(b, hv, t, ev * V);
    const float* src = dv_acc + x * V;
#pragma unroll
    for (int k = 0; k < V; ++k) store<T>(const_cast<void*>(gv.p), o + k * gv.s[3], src[k]);
  }
}

// da_acc[h][l] += this batch's pairs of head h, in increasing b: sum_c dap + daB.
// A block per 32 latents of one head: its 8 warps form the rows daB + sum_c dap of up to
// kDaGroup of the head's pairs at a time (lane: latent) into shared memory, then warp 0 adds them
// to da_acc in increasing b. The same double operations in the same order as one thread per
// (h, l) walking the pairs (the version until 63e75b3, latency-bound where H L is small: 47 µs per
// call at BDH-base, 1024 threads each walking 24 pairs × 9 loads), so the same sums, bitwise.
constexpr int kDaGroup = 64, kDaThreads = 256;
__global__ void __launch_bounds__(kDaThreads) da_accumulate_kernel(Dims d, const float* dap, const float* daB,
                                                                   double* da_acc) {
  grid_dependency_wait();
  __shared__ double rows[kDaGroup][32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t tiles = (d.L + 31) / 32;
  for (int64_t x = blockIdx.x; x < d.H * tiles; x += gridDim.x) {
    const int64_t h = x / tiles, l = (x % tiles) * 32 + lane;
    // the batch's pairs of head h: h_of(bh) = (bh0 + bh) mod H = h from bh = first on, every H
    const int64_t first = ((h - d.bh0 % d.H) % d.H + d.H) % d.H;
    const int64_t count = first < d.nbh ? (d.nbh - first + d.H - 1) / d.H : 0;
    double acc = warp == 0 && l < d.L ? da_acc[h * d.L + l] : 0.0;
    for (int64_t g0 = 0; g0 < count; g0 += kDaGroup) {
      const int64_t gn = min(int64_t{kDaGroup}, count - g0);
      for (int64_t k = warp; k < gn; k += kDaThreads / 32) {
        const int64_t bh = first + (g0 + k) * d.H;
        double row = 0.0;
        if (l < d.L) {
          row = daB[bh * d.L + l];
          for (int64_t c = 0; c < d.nC; ++c) row += dap[(bh * d.nC + c) * d.L + l];
        }
        rows[k][lane] = row;
      }
      __syncthreads();
      if (warp == 0)
        for (int64_t k = 0; k < gn; ++k) acc += rows[k][lane];
      __syncthreads();  // the rows are refilled by the next group
    }
    if (warp == 0 && l < d.L) da_acc[h * d.L + l] = acc;
  }
}

__global__ void da_store_kernel(int64_t H, int64_t L, const double* da_acc, void* out, int64_t s0, int64_t s1,
                                bool is_f64) {
  grid_dependency_wait();
  for (int64_t x = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; x < H * L; x += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = (x / L) * s0 + (x % L) * s1;
    if (is_f64) static_cast<double*>(out)[o] = da_acc[x];
    else static_cast<float*>(out)[o] = static_cast<float>(da_acc[x]);
  }
}

// Which backward runs: the quadratic one (quadratic_backward.cuh: no chunk-state sets) where it
// applies — bfloat16 or float16 (the latter unless built with RHOSCAN_QUADRATIC_BACKWARD_FLOAT16=0),
// no initial rho, no grad_rho_out (below) — where quadratic_backward_shape allows (quadratic.cuh: T <= kQuadraticMaxT,
// L >= RHOSCAN_QUADRATIC_MIN_L_PER_T · T, or L >= T/2 up to T = 512; chunks of 64) and when one pair's
// workspace fits the cap; else the chunked one. RHOSCAN_CUDA_BACKWARD_PATH=chunked or =quadratic
// (internal: tests and A/B runs) forces either, the quadratic one at any T and chunk but still only
// where it applies.
#ifndef RHOSCAN_QUADRATIC_BACKWARD_FLOAT16
#define RHOSCAN_QUADRATIC_BACKWARD_FLOAT16 1
#endif
// With an initial rho or grad_rho_out (bfloat16, at most kStateReadbackMaxChunks = 16 chunks) the
// quadratic backward adds the state's terms (state_readback_mma, quad_dv_mma's kState, dR_0's a^T GR):
// forced by RHOSCAN_CUDA_BACKWARD_PATH=quadratic, the default only where built with
// RHOSCAN_QUADRATIC_BACKWARD_STATE=1 (rounds 41-42, H100: slower than the chunked path in every version
// measured, BDH-8k forward+backward 8.93-9.19 against 8.32-8.41 ms; docs/CUDA.md).
#ifndef RHOSCAN_QUADRATIC_BACKWARD_STATE
#define RHOSCAN_QUADRATIC_BACKWARD_STATE 0
#endif
enum class BackwardPath { chunked, quadratic };
template <typename T>
BackwardPath backward_path(const detail::BackwardParams& g, int64_t C, bool quadratic_fits) {
  if constexpr (!kTensorCoreBackward<T> || (std::is_same_v<T, __half> && !RHOSCAN_QUADRATIC_BACKWARD_FLOAT16)) {
    return BackwardPath::chunked;
  } else {
    const bool state = g.rho0 != nullptr || g.grad_rho_out != nullptr;
    if (state && (!std::is_same_v<T, __nv_bfloat16> || (g.p.T + C - 1) / C > kStateReadbackMaxChunks))
      return BackwardPath::chunked;
    const char* env = std::getenv("RHOSCAN_CUDA_BACKWARD_PATH");
    if (env != nullptr && std::strcmp(env, "chunked") == 0) return BackwardPath::chunked;
    if (env != nullptr && std::strcmp(env, "quadratic") == 0) return BackwardPath::quadratic;
    if (state && !RHOSCAN_QUADRATIC_BACKWARD_STATE) return BackwardPath::chunked;
    return quadratic_backward_shape(g.p.T, g.p.L, C) && quadratic_fits ? BackwardPath::quadratic : BackwardPath::chunked;
  }
}

// The deferred value checks (value_gate.h, the saved header's comparison among them) are settled
// in the first batch before the first kernel that writes an output: the reverse chunk states where
// grad_rho is wanted (they write it), else bwd_local's successors (bscan writes grad_rho_norm); what
// runs before writes only the workspace. Until then saved_filled is the cached header's, which
// the comparison confirms (else SavedHeaderChanged and a second validation, api.cpp): the buffer's
// size was checked against its layout, so the reads stay inside it either way.
template <typename T>
void backward_typed(const detail::BackwardParams& g, cudaStream_t stream) {
  const detail::Problem& p = g.p;
  ValueGate gate(g.deferred, stream);
  Dims d;
  d.H = p.H, d.T = p.T, d.L = p.L, d.E = p.E;
  d.C = g.options.chunk_size > 0 ? std::min<int64_t>(g.options.chunk_size, kMaxChunk) : kDefaultChunk;
  d.nC = (p.T + d.C - 1) / d.C;
  constexpr bool kTC = kTensorCoreBackward<T>;
  set_padding<kTC>(d);
  d.v_rows = kTC && p.Hv == 1 && p.H > 1;  // v packed once per batch row (see Dims)
  static_assert(kMaxChunk == 64, "bwd_local_kernel: 64-row chunk tiles, exponents < 64 (ipow64)");
  const int64_t nT = p.T, L = p.L, E = p.E, nC = d.nC, C = d.C;
  const int64_t shared = Workspace::floats(p.H * L) + Workspace::doubles(p.H * L) +
                         Workspace::floats(p.B * p.Hv * nT * E);
  // Per (b, h) pair: what the forward recomputes, both chunk-state sets (chunked path), the
  // backward's per-token float32 partials (dq, dv, gc) and per-chunk vectors.
  const int64_t nlt = (L + kLocalLT - 1) / kLocalLT;
  // The quadratic path keeps, instead of the two state sets, M's cross blocks (bf16 hi + lo planes
  // of 64×64) and the cross scores P_IJ (float32 [nC][nC][C][C]).
  // Qp in float32 where the FFMA kernels or chunk_scores_mma read it; the 16-bit path with the
  // forward's saved P has no reader but bwd_local, which forms it itself (version 5)
  const bool saved_diag = g.saved != nullptr && (g.saved_filled & detail::kSavedDiagScores) != 0;
  const bool qp_needed = !kTC || !saved_diag;
  // The forward's keys Xq and Kq (where its buffer has them and it filled them), bitwise what
  // norm_apply would make here from the same q, s and Nc: then no normaliser pass runs at all.
  // (Where Qp is needed norm_apply runs anyway, and it would write them: then they are not used.)
  const bool saved_keys = kTC && !qp_needed && g.saved_keys && (g.saved_filled & detail::kSavedNorm) != 0 &&
                          (g.saved_filled & detail::kSavedKeys) != 0;
  const int64_t per_bh_common = Workspace::floats(nT) * 2 + Workspace::floats(norm_sums_blocks(L) * nT) +
                                Workspace::floats(nT * L) * (qp_needed ? 2 : 1) +
                                Workspace::floats((nC + 1) * L) + Workspace::floats(nC * 16 * C * C) * 2 +
                                operand_bytes<kTC, T>(d, saved_keys ? 0 : 2, 2) + Workspace::floats(nT * nlt) +
                                Workspace::floats(nT * E) +
                                Workspace::floats(nC * L) * 4 + Workspace::floats(L) +
                                (kTC ? Workspace::floats(nT * L) + Workspace::floats(nC * L) : 0);  // U, HdH
  // (and cross_scores' split partials: their count from the call's pairs, so that the sums do not
  // depend on the batching)
  const int64_t BH = p.B * p.H, cross_nsplit = cross_splits(BH, d);
  const int64_t per_bh_quadratic = per_bh_common + Workspace::bytes<bf16>(cross_pairs(nC) * kQB * kQB) * 2 +
                                   Workspace::bytes<bf16>(nC * nC * C * C) +
                                   Workspace::floats(cross_parts_planes(cross_nsplit) * nC * nC * C * C);
  const int64_t cap = workspace_cap(g.options.max_workspace_bytes, kDefaultBackwardWorkspaceCap);
  const bool quadratic = backward_path<T>(g, C, shared + per_bh_quadratic <= cap) == BackwardPath::quadratic;
  const int64_t per_bh = quadratic ? per_bh_quadratic : per_bh_common + chunk_state_bytes<float>(d) * 2;
  if (shared + per_bh > cap)
    throw Error(ErrorKind::out_of_memory,
                "rhoscan.backward (cuda): one (batch, head) pair needs " + std::to_string(shared + per_bh) +
                    " bytes of workspace (B=" + std::to_string(p.B) + ", T=" + std::to_string(nT) +
                    ", L=" + std::to_string(L) + ", E=" + std::to_string(E) + "), over the cap of " +
                    std::to_string(cap) + " bytes: raise options.max_workspace_bytes");
  // The forward's saved buffer (core/saved.h; its header checked by validation): s and Nc replace
  // the token sums and the normaliser's chunk sums and carry; P (where the forward saved it, on
  // either path) replaces chunk_scores, and on the quadratic path Pcross replaces cross_scores (the
  // saved P has one split, so d.nsplit = 1 and M has one split too). The saved P comes from the
  // forward's bf16 Qp, this backward's own from float32 Qp: gradients differ in the last bits
  // (dv rounds the scores to bf16 either way).
  const detail::SavedLayout saved =
      detail::saved_layout(p.B, p.H, nT, L, p.dtype, g.rho0 != nullptr, g.options.chunk_size, g.saved_keys);
  const bool saved_norm = g.saved != nullptr && (g.saved_filled & detail::kSavedNorm) != 0;
  const bool saved_scores = g.saved != nullptr && (g.saved_filled & detail::kSavedCrossScores) != 0 && quadratic;
  if (g.saved != nullptr && saved.C != C)
    throw Error(ErrorKind::internal, "rhoscan.backward (cuda): the saved layout's chunk differs from the kernels'");
  if (saved_keys && (!saved.keys || saved.keys_pair != nT * d.Lp))
    throw Error(ErrorKind::internal, "rhoscan.backward (cuda): the saved keys' rows differ from the operands'");
  const int64_t per_batch = balanced_batch(BH, (cap - shared) / per_bh);
  Workspace ws(shared + per_batch * per_bh, stream);
  float* a32 = ws.take_floats(p.H * L);
  double* da_acc = ws.take_doubles(p.H * L);
  float* dv_acc = ws.take_floats(p.B * p.Hv * nT * E);
  launch_kernel("decay_to_f32_kernel", decay_to_f32_kernel, grid_for(p.H * L, 256), 256, 0, stream, a32, g.decay,
                g.decay_stride[0], g.decay_stride[1], p.H, L, p.decay_dtype == DType::float64);
  RHOSCAN_CUDA_CHECK(cudaMemsetAsync(da_acc, 0, sizeof(double) * p.H * L, stream));
  // one batch of every pair: dv_accumulate stores grad_v itself (kStore), dv_acc stays unused
  const bool one_batch = BH > 0 && per_batch >= BH;
  if (!one_batch) RHOSCAN_CUDA_CHECK(cudaMemsetAsync(dv_acc, 0, sizeof(float) * p.B * p.Hv * nT * E, stream));

  const Str4 q = str4(g.q, g.q_stride), v = str4(g.v, g.v_stride), gctx = str4(g.grad_context, g.grad_context_stride);
  const Str4 rho0 = str4(g.rho0, g.rho0_stride), gr = str4(g.grad_rho_out, g.grad_rho_out_stride);
  const Str3 n0 = str3(g.rho_norm0, g.rho_norm0_stride), gn = str3(g.grad_rho_norm_out, g.grad_rho_norm_out_stride);
  const Str4 dq = str4(g.grad_q, g.grad_q_stride), dv = str4(g.grad_v, g.grad_v_stride);
  const Str4 dr0 = str4(g.grad_rho0, g.grad_rho0_stride);
  const Str3 dn0 = str3(g.grad_rho_norm0, g.grad_rho_norm0_stride);
  for (int64_t bh0 = 0; bh0 < BH; bh0 += per_batch) {
    ws.reset();
    ws.take_floats(p.H * L);
    ws.take_doubles(p.H * L);
    ws.take_floats(p.B * p.Hv * nT * E);
    d.bh0 = bh0;
    d.nbh = std::min(per_batch, BH - bh0);
    d.nsplit = saved_diag ? 1 : score_splits(d.nbh, nC, L);
    const int64_t n = d.nbh;
    // (the saved sections are only read: the kernels that would write them do not run)
    float* saved_at = const_cast<float*>(g.saved);
    float* s = saved_norm ? saved_at + saved.s + bh0 * saved.s_pair : ws.take_floats(n * nT);
    float* s_parts = saved_norm ? nullptr : ws.take_floats(n * norm_sums_blocks(L) * nT);  // norm_sums_kernel's
    float* gc = ws.take_floats(n * nT);
    float* Qp = qp_needed ? ws.take_floats(n * nT * L) : nullptr;
    float* dqp = ws.take_floats(n * nT * L);
    float* Nc = saved_norm ? saved_at + saved.Nc + bh0 * saved.Nc_pair : ws.take_floats(n * (nC + 1) * L);
    float* P = saved_diag ? saved_at + saved.P + bh0 * saved.P_pair : ws.take_floats(n * nC * d.nsplit * C * C);
    float* M = ws.take_floats(n * nC * d.nsplit * C * C);
    // chunk states H and A_end: float32 (FFMA path), or bf16 hi and lo planes (tensor-core path;
    // the same bytes), the lo plane right after the hi plane
    using BState = std::conditional_t<kTC, bf16, float>;
    const int64_t plane = quadratic ? 0 : n * nC * d.Lp * d.Ep;
    BState* Hs = quadratic ? nullptr : ws.take_array<BState>(plane * (kTC ? 2 : 1));
    BState* dHs = quadratic ? nullptr : ws.take_array<BState>(plane * (kTC ? 2 : 1));
    BState* Hs_lo = kTC && !quadratic ? Hs + plane : nullptr;
    BState* dHs_lo = kTC && !quadratic ? dHs + plane : nullptr;
    // quadratic path: M's cross blocks (hi, lo) and the cross scores
    bf16* Mhi = quadratic ? ws.take_array<bf16>(n * cross_pairs(nC) * kQB * kQB) : nullptr;
    bf16* Mlo = quadratic ? ws.take_array<bf16>(n * cross_pairs(nC) * kQB * kQB) : nullptr;
    bf16* Pcross = !quadratic     ? nullptr
                   : saved_scores ? reinterpret_cast<bf16*>(saved_at + saved.Pcross) + bh0 * saved.Pcross_pair
                                  : ws.take_array<bf16>(n * nC * nC * C * C);
    float* cross_parts =
        quadratic ? ws.take_floats(cross_parts_planes(cross_nsplit) * n * nC * nC * C * C) : nullptr;
    Operands16 o = take_operands<kTC, T>(ws, d, true, !saved_keys);
    if (saved_keys) {
      o.Xq = reinterpret_cast<bf16*>(saved_at + saved.Xq) + bh0 * saved.keys_pair;
      o.Kq = reinterpret_cast<bf16*>(saved_at + saved.Kq) + bh0 * saved.keys_pair;
    }
    float* gcp = ws.take_floats(n * nT * nlt);
    float* dvp = ws.take_floats(n * nT * E);
    float* dap = ws.take_floats(n * nC * L);
    float* Bsum = ws.take_floats(n * nC * L);
    float* Zs = ws.take_floats(n * nC * L);
    float* Bend = ws.take_floats(n * nC * L);
    float* daB = ws.take_floats(n * L);
    float* Ur = kTC ? ws.take_floats(n * nT * L) : nullptr;  // W lives in dqp (see bwd_local_kernel)
    float* HdHr = kTC ? ws.take_floats(n * nC * L) : nullptr;

    // a side stream (side_streams.h): quadratic, the keys (below), cross_scores (where not saved) and
    // quad_dv_mma beside cross_values_mma, quad_readback_mma and bwd_local, joined before
    // dv_accumulate reads its dvp (or at the batch's end: the head sum writes grad_v itself);
    // chunked, the forward chunk states beside the reverse ones and dv's products, joined before
    // their readers
    const bool fork = (quadratic ? kTC : true) && side_streams_on();
    cudaStream_t s1 = fork ? side_stream(1) : stream;
    const SideStreamsJoin join{stream, fork ? s1 : nullptr, nullptr};
    // The keys on the side stream where norm_apply is all of the normaliser pass and nothing on the
    // main stream reads them before the readback (the quadratic 16-bit backward with the forward's
    // sums and diagonal scores saved, no grad_rho0: BDH-8k, BDH-base): beside the values' packing and
    // cross_values_mma, which need neither; the readback waits for them (keys_ready).
    const bool keys_aside = fork && quadratic && kTC && saved_norm && saved_diag && !saved_keys && dr0.p == nullptr;
    if (keys_aside) stream_wait(s1, stream);
    cudaStream_t key_stream = keys_aside ? s1 : stream;
    // (the token sums too: computed as the forward computes them, so that s is bitwise the
    // forward's, with or without its saved buffer)
    if (!saved_keys)
      launch_norm_scan<T>(d, q, a32, n0, s, s_parts, Qp, Nc, Str3{}, o.Xq, o.Kq, key_stream, saved_norm);
    make_key_remainders<kTC, T>(d, q, a32, o, key_stream);
    const RecordedEvent keys_ready(keys_aside, s1);
    // (16-bit: M comes from cross_values_mma's diagonal items, on tensor cores; float32: from the
    // FFMA chunk_scores kernel, with P)
    if (!saved_diag) launch_chunk_scores<kTC, T>(d, q, v, gctx, a32, Qp, P, kTC ? nullptr : M, stream);
    pack_values<kTC, T>(d, v, o.vb, o.vlo, stream);
    pack_values<kTC, T>(d.per_pair(), gctx, o.gb, o.glo, stream);  // (G: per pair)
    if constexpr (kTC) {
      if (!quadratic) launch_diagonal_values<kSplitValues<T>>(d, o, M, stream);
    }
    // quad_dv_mma summing the heads into grad_v itself (no dvp, no dv_accumulate): after the checks
    // (bfloat16 only: float16's split values need a second pass, and the kernel spilled 160 bytes)
    const bool dv_head_sum = kTC && !kSplitValues<T> && quadratic && gr.p == nullptr &&
                             quad_dv_head_sum_applies(d, p.B, p.Hv, one_batch);
    if (quadratic) {
      if constexpr (kTC) {
        // the cross scores (where the forward did not save them: BDH-base, whose forward is the scan)
        // on the side stream, before quad_dv_mma, their only reader: beside cross_values_mma and the
        // readback, which do not read them (the same kernels, so the same bits)
        if (fork) stream_wait(s1, stream);
        if (!saved_scores) launch_cross_scores(d, cross_nsplit, o.Xq, o.Kq, a32, Pcross, cross_parts, s1);
        launch_quadratic_backward<kSplitValues<T>>(d, a32, o, P, Pcross, Mhi, Mlo, M, dqp, Ur, HdHr, dvp, stream, s1,
                                                   dv_head_sum, keys_ready.e, gr);
        launch_state_readback(d, o, a32, rho0, gr, dqp, Ur, HdHr, stream);
      }
      gate.settle();
      if constexpr (kTC && !kSplitValues<T>) {
        if (dv_head_sum) launch_quad_dv_head_sum<false, T>(d, Pcross, P, o, dv, s1);
      }
      // dR_0 = A_0: the reverse recurrence's final state from GR (a^T GR where given), no chunk states stored
      if (dr0.p != nullptr)
        launch_chunk_states<kTC, T, true>(d, q, gctx, a32, Qp, o, gr, static_cast<BState*>(nullptr), dr0, stream);
    } else {
      if (fork) stream_wait(s1, stream);
      launch_chunk_states<kTC, T, false>(d, q, v, a32, Qp, o, rho0, Hs, Str4{}, s1, Hs_lo);
      if (dr0.p != nullptr) gate.settle();
      launch_chunk_states<kTC, T, true>(d, q, gctx, a32, Qp, o, gr, dHs, dr0, stream, dHs_lo);
      launch_chunk_output<kTC, T, float, true>(d, q, gctx, a32, Qp, o, dHs, P, Str4{}, dvp, stream);
      if (fork) stream_wait(stream, s1);  // Hs
    }
    constexpr int local_smem = static_cast<int>(sizeof(LocalSmemOf<kTC ? 5 : 2>));
    RHOSCAN_CUDA_CHECK(cudaFuncSetAttribute(bwd_local_kernel<T, kTC>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            local_smem));
    if constexpr (kTC) {
      constexpr bool kLo = kSplitValues<T>;
      if (!quadratic) {
        // version 2 within its 32-bit limits (RHOSCAN_READBACK_VERSION=1: version 1 for the A/B)
        auto readback = chunk_readback_mma_v1_kernel<kLo>;
        bool v2 = false;
#if RHOSCAN_READBACK_VERSION == 2
        if (readback_fit_32bit(d)) readback = chunk_readback_mma_kernel<kLo>, v2 = true;
#endif
        const int rb_smem = v2 ? readback_smem<kLo, kRbSwizzle>() : readback_smem<kLo>();
        RHOSCAN_CUDA_CHECK(cudaFuncSetAttribute(readback, cudaFuncAttributeMaxDynamicSharedMemorySize, rb_smem));
        launch_kernel(v2 ? "chunk_readback_mma_kernel" : "chunk_readback_mma_v1_kernel", readback,
                      grid_for(n * nC * (d.Lp / kMmaLT)), kMmaThreads, rb_smem, stream, d, Hs, Hs_lo, dHs,
                      dHs_lo, o.gb, o.vb, dqp, Ur, HdHr, o.glo, o.vlo);
      }
    }
    unsigned local_grid = grid_for(n * nC * nlt);
    if constexpr (kTC && RHOSCAN_BWD_LOCAL_PERSISTENT) {
      int dev = 0, sms = 0, per_sm = 0;
      RHOSCAN_CUDA_CHECK(cudaGetDevice(&dev));
      RHOSCAN_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
      RHOSCAN_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, bwd_local_kernel<T, kTC>,
                                                                       kLocalThreads, local_smem));
      local_grid = grid_for(n * nC * nlt, 1, std::max<int64_t>(1, int64_t{sms} * per_sm));
    }
    launch_kernel("bwd_local_kernel", bwd_local_kernel<T, kTC>, local_grid, kLocalThreads, local_smem, stream, d, q, v,
                  gctx, a32, Qp, s, Nc, kTC ? nullptr : reinterpret_cast<const float*>(Hs),
                  kTC ? nullptr : reinterpret_cast<const float*>(dHs), M, kTC ? dqp : nullptr, Ur, HdHr, gcp, dqp, dap,
                  Bsum, Zs);
    gate.settle();
    if (nlt <= kGcFewBlocks)
      launch_kernel("gc_reduce_few_kernel", gc_reduce_few_kernel, grid_for(n * nT, 256), 256, 0, stream, d, gcp, gc);
    else
      launch_kernel("gc_reduce_kernel", gc_reduce_kernel, grid_for(n * nT, 8), 256, 0, stream, d, gcp, gc);
    launch_kernel("bscan_kernel", nC <= kBscanBatchFew ? bscan_kernel<kBscanBatchFew> : bscan_kernel<kBscanBatch>,
                  grid_for(n * L, 256), 256, 0, stream, d, a32, gn, Bsum, Zs, Bend, daB, dn0);
    auto dq_final = [&](auto latents) {  // V latents per thread
      constexpr int V = decltype(latents)::value;
      const int tl = dq_latent_threads(L, V);
      launch_kernel("dq_final_kernel", dq_final_kernel<T, V>, grid_for(n * nC * ((L + int64_t{tl} * V - 1) / (tl * V))),
                    kDqThreads, 0, stream, d, a32, dqp, gc, s, Bend, dq, tl);
    };
    if (norm_quads_ok<T>(d, dq))
      dq_final(std::integral_constant<int, 4>{});
    else if (norm_pairs_ok<T>(d, dq))
      dq_final(std::integral_constant<int, 2>{});
    else
      dq_final(std::integral_constant<int, 1>{});
    if (fork && quadratic) stream_wait(stream, s1);  // dvp (or grad_v)
    if (!dv_head_sum) {
      const int64_t rows = ((bh0 + n - 1) / p.H - bh0 / p.H + 1) * p.Hv * nT;
      if (E % 4 == 0 && one_batch)
        launch_kernel("dv_accumulate_kernel", dv_accumulate_kernel<4, T, true>, grid_for(rows * (E / 4), 256), 256, 0,
                      stream, d, p.Hv, dvp, dv_acc, dv);
      else if (E % 4 == 0)
        launch_kernel("dv_accumulate_kernel", dv_accumulate_kernel<4>, grid_for(rows * (E / 4), 256), 256, 0, stream, d,
                      p.Hv, dvp, dv_acc, Str4{});
      else if (one_batch)
        launch_kernel("dv_accumulate_kernel", dv_accumulate_kernel<1, T, true>, grid_for(rows * E, 256), 256, 0, stream,
                      d, p.Hv, dvp, dv_acc, dv);
      else
        launch_kernel("dv_accumulate_kernel", dv_accumulate_kernel<1>, grid_for(rows * E, 256), 256, 0, stream, d, p.Hv,
                      dvp, dv_acc, Str4{});
    }
    launch_kernel("da_accumulate_kernel", da_accumulate_kernel, grid_for(p.H * ((L + 31) / 32)), kDaThreads, 0, stream,
                  d, dap, daB, da_acc);
  }
  if (!one_batch) {
    if (E % 4 == 0)
      launch_kernel("dv_store_kernel", dv_store_kernel<T, 4>, grid_for(p.B * p.Hv * nT * E / 4, 256), 256, 0, stream,
                    p.B, p.Hv, nT, E, dv_acc, dv);
    else
      launch_kernel("dv_store_kernel", dv_store_kernel<T, 1>, grid_for(p.B * p.Hv * nT * E, 256), 256, 0, stream, p.B,
                    p.Hv, nT, E, dv_acc, dv);
  }
  gate.settle();  // (B·H = 0: no batch ran)
  launch_kernel("da_store_kernel", da_store_kernel, grid_for(p.H * L, 256), 256, 0, stream, p.H, L, da_acc,
                g.grad_decay, g.grad_decay_stride[0], g.grad_decay_stride[1], p.decay_dtype == DType::float64);
}

}  // namespace

void run_backward(const detail::BackwardParams& g) {
  DeviceGuard guard(g.p.device_index);
  cudaStream_t stream = static_cast<cudaStream_t>(g.options.stream);
  switch (g.p.dtype) {
    case DType::float32: backward_typed<float>(g, stream); break;
    case DType::bfloat16: backward_typed<__nv_bfloat16>(g, stream); break;
    case DType::float16: backward_typed<__half>(g, stream); break;
    default: throw Error(ErrorKind::unsupported, "rhoscan.backward (cuda): float64 inputs are not supported");
  }
}

}  // namespace rhoscan::cuda_detail
