// The whole-sequence ("quadratic") backward of the tensor-core path for short sequences: the
// chunked backward's two chunk-state sets (H_c and A_end, 2 × (T/C)·L·E per pair), their readback
// and the dv product from A_end are replaced by products of C×C blocks between chunks.
//
// With chunk C, chunks I > J (J therefore full), d = I - J - 1, Kq_J = q_j a^(C-1-j),
// Xq_I = Qp_i a^i (norm_apply's bf16 operands, local indices), and no initial state R_0 and no
// upstream state gradient GR (the chunk states are then sums over the other chunks only):
//   H_I       = sum_{J<I} a^(dC) Kq_J^T v_J,            A_end_J = sum_{I>J} a^(dC) Xq_I^T G_I
//   M_IJ      = G_I v_J^T                               (C×C, contraction over E; cross_values)
//   W_I[i,l]  = H_I[l,:]·G_i = sum_{J<I} a_l^(dC) (M_IJ Kq_J)[i,l]
//   U_J[j,l]  = A_end_J[l,:]·v_j = sum_{I>J} a_l^(dC) (M_IJ^T Xq_I)[j,l]
//   <H_c, A_end_c>[l] = sum_{J<c<I} a_l^((I-J-2)C) X_IJ[l],  X_IJ[l] = sum_i Xq_I[i,l] (M_IJ Kq_J)[i,l]
// bwd_local weighs chunk c's <H_c, A_end_c> by f(Cn_c) = Cn_c a^(Cn_c - 1); every c strictly
// between J and I is a full chunk, so the sum over c collapses onto one full slot per I:
//   sum_c f(C) HdH[c] = f(C) sum_I HdH'[I-1],  HdH'[I-1][l] = sum_{J<=I-2} (I-J-1) a_l^((I-J-2)C) X_IJ[l]
// (and slot nC-1, the one chunk that may be short, holds 0).
//   dv_J = sum_{I>J} P_IJ^T G_I + sum_{k>j in J} P[k][j] G_k,  P_IJ = Xq_I diag(a^(dC)) Kq_J^T
// (P_IJ: quadratic.cuh's cross scores; the intra-chunk P: chunk_scores, as on the chunked path).
// dR_0 = A_0 is the reverse chunk-state recurrence's final state (chunk_states with no stores).
//
// Accuracy. W and U enter dq through gw = W / (N + eps) as the cancelling difference gw - gc,
// which is why the chunked path stores its states as bf16 hi + lo planes. Here M's blocks are
// computed exactly from bf16 G and v (float32 accumulation over E) and stored as bf16 hi + lo
// planes (M to about 2^-16 relative), so the W and U products (two mma passes against the bf16
// Kq / Xq that the chunk states are made of) keep float32-level accuracy; the decay a^(dC) is
// applied in float32 to the running sums (Horner: acc <- a^C acc + product, J ascending for W,
// I descending for U; every exponent >= 0, exact at a = 0 and 1). HdH' comes from the same
// running sum: with p_J = sum_i Xq_I ⊙ acc_J (the Horner sum of X_IJ), dp_J = a^C dp_{J-1} +
// p_{J-1} gives dp = sum_J (I-1-J) a^((I-2-J)C) X_IJ after the last step.
//
// float16 (split values and keys, as on the chunked path): M = G v^T + G v_lo^T + G_lo v^T (three
// passes), W's products add M_hi Kq_lo (Xq is not split, as in the chunked path's A states), dv
// adds P G_lo.
// Dispatch (backward.cu, backward_path): bfloat16 and float16, T <= kQuadraticMaxT (quadratic.cuh,
// shared with the forward), no rho0, no grad_rho_out by default; with them (bfloat16, at most 16
// chunks) only where forced: their terms are state_readback_mma's, quad_dv_mma's kState and dR_0's
// (below).
#pragma once

#include <cstdlib>
#include <cstring>

#include "cuda/chunk_products.cuh"
#include "cuda/quadratic.cuh"

namespace rhoscan::cuda_detail {

// ---- cross values: M_IJ = G_I v_J^T for J < I, as bf16 hi + lo planes ------------------------
// Blocks are stored 64×64 (kQB; zeros past Cn_I rows and C columns), in the lower triangle's order:
// block (bh, I, J) at ((bh · nC(nC-1)/2 + I(I-1)/2 + J) · 64 · 64), row i, column j.
constexpr int kQB = 64;
__host__ __device__ inline int64_t cross_pairs(int64_t nC) { return nC * (nC - 1) / 2; }
__host__ __device__ inline int64_t cross_block(int64_t bh, int64_t nC, int64_t I, int64_t J) {
  return (bh * cross_pairs(nC) + I * (I - 1) / 2 + J) * kQB * kQB;
}
// I, J of the k-th pair (k = I(I-1)/2 + J, J < I): row I holds I pairs, so the rows are walked
// (at most nC - 1 steps; the quadratic path has nC <= 16 unless forced) instead of the square root
// in float64 of before, about 60 instructions an item with its two corrections.
__device__ inline void cross_pair_of(int64_t k, int64_t& I, int64_t& J) {
  int64_t i = 1;
  while (k >= i) k -= i, ++i;
  I = i, J = k;
}

// A block (4 warps, 2 × 2 warp tiles of 32×32) per (bh, I, J): the contraction over E in 64-column
// tiles, two cp.async stages. Each thread fetches the same four rows (tid / 8 + 16 k) and 16-byte
// column (tid % 8) of every tile, so their offsets are made once per item. The bf16 blocks leave
// through shared memory (the tiles, free after the last step) as whole 128-byte rows: stored from
// the accumulators' layout directly, a warp's 2-byte stores covered 8 rows' half sectors each, and
// Nsight (round 29, BDH-base, H100) had the kernel bound by the L2 (82 % of its throughput, 48 % of
// its sectors excess) at 0.13 ms a backward.
// kLo (split values, float16): glo, vlo hold G's and v's bf16 remainders; M adds G·v_lo + G_lo·v
// (G_lo·v_lo is below float32 resolution with real float16 remainders).
// Mdiag (when given): also the diagonal blocks M_II = G_I v_I^T, in float32, into bwd_local's M
// slot of chunk I (split 0 of [bh][nC][nsplit][C][C], row i, column j < C; rows and columns past
// Cn_I zero): nC more items per pair after the cross pairs. They replaced the FFMA chunk_scores
// kernel that computed M for the quadratic backward (0.10 ms per backward at BDH-8k on the H200,
// where these items add about an eighth of this kernel's 0.04 ms). diag_only: only those items
// (launch_diagonal_values: the chunked backward's M, any chunk C <= 64; Mhi, Mlo unused).
constexpr int kCvThreads = 128;
constexpr int kCvS = 64 + 8;  // bf16 row stride of the tiles (conflict-free ldmatrix)
// Blocks per SM: as many as the shared memory allows, 5 for bfloat16 (ptxas would give the
// hoisted offsets and the staged stores 114 registers: 4 blocks), 3 with the split values (kLo)
template <bool kLo>
constexpr int kCvMinBlocks = kLo ? 3 : 5;
template <bool kLo>
constexpr int cross_values_smem() {
  return 2 * (kLo ? 4 : 2) * 64 * kCvS * static_cast<int>(sizeof(bf16));
}
template <bool kLo = false>
__global__ void __launch_bounds__(kCvThreads, kCvMinBlocks<kLo>) cross_values_mma_kernel(Dims d, const bf16* gb, const bf16* vb,
                                                                      bf16* Mhi, bf16* Mlo,
                                                                      const bf16* glo = nullptr,
                                                                      const bf16* vlo = nullptr,
                                                                      float* Mdiag = nullptr,
                                                                      bool diag_only = false) {
  grid_dependency_wait();
  extern __shared__ __align__(128) unsigned char smem_raw[];
  // [stage][0: G rows i, 1: v rows j, if kLo 2: G lo, 3: v lo][64][kCvS]
  bf16* tiles = reinterpret_cast<bf16*>(smem_raw);
  constexpr int NT = kLo ? 4 : 2;
  auto tile = [&](int stage, int k) { return tiles + (stage * NT + k) * 64 * kCvS; };
  const int warp = threadIdx.x / 32;
  const int wm = (warp & 1) * 32, wn = (warp >> 1) * 32;  // the warp's rows i and columns j
  const int64_t npairs = diag_only ? 0 : cross_pairs(d.nC), net = d.Ep / 64;
  const int64_t per_pair = npairs + (Mdiag != nullptr ? d.nC : 0);  // the cross pairs, then the diagonal
  for (int64_t item = blockIdx.x; item < d.nbh * per_pair; item += gridDim.x) {
    const int64_t bh = item / per_pair, k = item % per_pair;
    int64_t I, J;
    if (k < npairs)
      cross_pair_of(k, I, J);
    else
      I = J = k - npairs;
    const int CnI = static_cast<int>(d.chunk_len(I)), CnJ = static_cast<int>(d.chunk_len(J));
    const bf16* gI = gb + (bh * d.T + I * d.C) * d.Ep;
    const bf16* vJ = vb + (d.v_row(bh) * d.T + J * d.C) * d.Ep;  // (G per pair; v per batch row where d.v_rows)
    // the thread's rows r0 + 16 k and column p of every tile (kCvThreads = 128: 16 rows a pass)
    constexpr int kPasses = 64 * 8 / kCvThreads;
    const int r0 = threadIdx.x / 8, p = 8 * (threadIdx.x % 8);
    int g_at[kPasses], v_at[kPasses];  // the rows' offsets in G and v (the last row past Cn; < 64 Ep)
#pragma unroll
    for (int pass = 0; pass < kPasses; ++pass) {
      const int r = r0 + 16 * pass;
      g_at[pass] = min(r, CnI - 1) * static_cast<int>(d.Ep) + p, v_at[pass] = min(r, CnJ - 1) * static_cast<int>(d.Ep) + p;
    }
    auto fetch = [&](int stage, int64_t e0) {
#pragma unroll
      for (int pass = 0; pass < kPasses; ++pass) {
        const int r = r0 + 16 * pass;
        cp_async16(tile(stage, 0) + r * kCvS + p, gI + g_at[pass] + e0, r < CnI);
        cp_async16(tile(stage, 1) + r * kCvS + p, vJ + v_at[pass] + e0, r < CnJ);
        if constexpr (kLo) {
          cp_async16(tile(stage, 2) + r * kCvS + p, glo + (gI - gb) + g_at[pass] + e0, r < CnI);
          cp_async16(tile(stage, 3) + r * kCvS + p, vlo + (vJ - vb) + v_at[pass] + e0, r < CnJ);
        }
      }
      cp_async_commit();
    };
    float acc[2][4][4] = {};
    __syncthreads();  // the previous item's tiles are consumed
    fetch(0, 0);
    for (int64_t et = 0; et < net; ++et) {
      const int stage = static_cast<int>(et & 1);
      if (et + 1 < net) {
        fetch(stage ^ 1, (et + 1) * 64);
        cp_async_wait<1>();
      } else {
        cp_async_wait<0>();
      }
      __syncthreads();
      // [i][j] += sum_e G[i][e] v[j][e]: A = G (stored [i][e]), B = v^T (v stored [j][e])
      warp_mma_32x32<false, true>(acc, tile(stage, 0), kCvS, tile(stage, 1), kCvS, wm, wn, 64);
      if constexpr (kLo) {
        warp_mma_32x32<false, true>(acc, tile(stage, 0), kCvS, tile(stage, 3), kCvS, wm, wn, 64);
        warp_mma_32x32<false, true>(acc, tile(stage, 2), kCvS, tile(stage, 1), kCvS, wm, wn, 64);
      }
      __syncthreads();
    }
    const int lane = threadIdx.x & 31;
    if (I == J) {  // a diagonal block: float32 into bwd_local's M slot (pairs of columns where C is even)
      const int C = static_cast<int>(d.C);
      float* Mc = Mdiag + (bh * d.nC + I) * d.nsplit * C * C;
      if (C % 2 == 0) {
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
          for (int nt = 0; nt < 4; ++nt)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int i = wm + 16 * mt + lane / 4 + 8 * h, j = wn + 8 * nt + 2 * (lane % 4);
              if (i < C && j < C) *reinterpret_cast<float2*>(Mc + i * C + j) = make_float2(acc[mt][nt][2 * h], acc[mt][nt][2 * h + 1]);
            }
      } else {
        for_each_acc(acc, wm, wn, [&](int i, int j, float& x) {
          if (i < C && j < C) Mc[i * C + j] = x;
        });
      }
      continue;
    }
    // hi and lo to tiles 0 and 1 of stage 0 (every warp is past the last step's barrier), then out
    // as the fetch's 16-byte pieces (rows r0 + 16 pass, column p: a warp writes 4 whole rows a pass)
    bf16* hi_tile = tile(0, 0);
    bf16* lo_tile = tile(0, 1);
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {  // rows g and g + 8 of the fragment: columns 2q, 2q + 1
          const int i = wm + 16 * mt + lane / 4 + 8 * h, j = wn + 8 * nt + 2 * (lane % 4);
          const float x0 = acc[mt][nt][2 * h], x1 = acc[mt][nt][2 * h + 1];
          const __nv_bfloat162 hi = __floats2bfloat162_rn(x0, x1);
          *reinterpret_cast<__nv_bfloat162*>(hi_tile + i * kCvS + j) = hi;
          *reinterpret_cast<__nv_bfloat162*>(lo_tile + i * kCvS + j) =
              __floats2bfloat162_rn(x0 - __low2float(hi), x1 - __high2float(hi));
        }
    __syncthreads();
    const int64_t o = cross_block(bh, d.nC, I, J);
#pragma unroll
    for (int pass = 0; pass < kPasses; ++pass) {
      const int r = r0 + 16 * pass;
      *reinterpret_cast<uint4*>(Mhi + o + r * kQB + p) = *reinterpret_cast<const uint4*>(hi_tile + r * kCvS + p);
      *reinterpret_cast<uint4*>(Mlo + o + r * kQB + p) = *reinterpret_cast<const uint4*>(lo_tile + r * kCvS + p);
    }
  }
}

// ---- quadratic readback: W, U and HdH' per (bh, chunk K, kQrLT latents) ------------------------
// A version 2 (64-latent warps over 256- or 128-latent items, half the ldmatrix count) measured
// slower on the H200 (e932816, BDH-8k bfloat16, one backward of 32 pairs: 1.38 against 1.23 ms;
// forward+backward 7.67 and 7.73 against 7.52 ms): the occupancy it cost outweighed the halved
// ldmatrix count. It was removed; it is in the history before ff5503c.
// Per (bh, chunk K, 128 latents).
// nC - 1 steps: K steps of W (J = 0 .. K-1: acc[l][i] <- a^C acc + sum_j Kq_J[j][l] M_KJ[i][j]),
// then nC - 1 - K steps of U (I = nC-1 .. K+1: acc[l][j] <- a^C acc + sum_i Xq_I[i][l] M_IK[i][j]),
// each product in two mma passes (M hi, M lo). The tiles of the next step (M hi, lo and the
// 64-token operand rows) arrive by cp.async while the current step is multiplied. 8 warps, each
// 32 latents × 32 tokens. HdH'[K-1] (slot nC-1 for K = 0) from the W steps' running sum and the
// chunk's own Xq rows (see the top of this file).
// W goes to dqp's rows (as chunk_readback_mma_kernel's), U to U, HdH' to HdH: what bwd_local reads.
constexpr int kQrThreads = 256;
constexpr int kQrLT = 128;          // latents per block
constexpr int kQrMS = kQB + 8;      // bf16 row stride of the M tiles
constexpr int kQrOS = kQrLT + 8;    // bf16 row stride of the operand tiles
// kSwizzle (the default; RHOSCAN_QR_SWIZZLE=0 at build time keeps the padded rows above): the M
// and operand tiles with unpadded rows (128 and 256 bytes) and 16-byte chunk c of row r stored at
// chunk c ^ (r % 8) (c's bit 3 kept in the operand's 16-chunk rows), so that the cp.async fills
// write whole aligned 128-byte groups and the ldmatrix rows (8 consecutive rows at one chunk) still
// fall on 8 bank groups. dev/cuda/cp_async_layout.cu measured tiles streamed from the L2 into such
// rows 1.45-1.51x faster than into padded ones (33-35 against 23 bytes per clock per SM, H200,
// round 15). The fragment addresses stay one register per lane and tile: a k step moves the row
// (an immediate, rows 16 apart keep r % 8) or the chunk by 2, 4 or 6 (an XOR of the lane's address
// with 32, 64 or 96: the tiles start on 128-byte boundaries, so bits 4-6 of an address are the
// chunk's). Same bytes in other places, so the same products bit for bit (emulated). ptxas
// (sm_90a, nvcc 13): bfloat16 128 registers with 4 bytes of spill (padded: none), float16 179.
// Measured on the H200 (round 16, d476d94 with and without the flag, BDH-8k bfloat16): the kernel
// 0.884-0.887 against 0.994 ms (Nsight Compute durations, the same shared wavefronts: 104 M),
// forward+backward 4.54-4.55 against 4.70-4.72 ms in three alternating rounds.
#ifndef RHOSCAN_QR_SWIZZLE
#define RHOSCAN_QR_SWIZZLE 1
#endif
template <bool kSwizzle>
constexpr int qr_m_stride() {  // bf16 row stride of the M tiles
  return kSwizzle ? kQB : kQrMS;
}
template <bool kSwizzle>
constexpr int qr_op_stride() {  // of the operand tiles
  return kSwizzle ? kQrLT : kQrOS;
}
// kKeyLo (split keys, float16): Kq_lo holds Kq's bf16 remainders, a third pass M_hi·Kq_lo in the W
// steps (as the chunked path's recomputed states H; Xq is not split there either). One more operand
// tile per stage: 125 KB of shared memory, one block per SM.
// bf16 elements per stage: M hi, M lo, operand (and its remainders)
template <bool kKeyLo, bool kSwizzle = false>
constexpr int quad_readback_stage() {
  return 2 * 64 * qr_m_stride<kSwizzle>() + (kKeyLo ? 2 : 1) * 64 * qr_op_stride<kSwizzle>();
}
template <bool kKeyLo, bool kSwizzle = false>
constexpr int quad_readback_smem() {
  return (2 * quad_readback_stage<kKeyLo, kSwizzle>() + 64 * qr_op_stride<kSwizzle>()) * static_cast<int>(sizeof(bf16)) +
         (kQrLT + 2 * kQrLT) * static_cast<int>(sizeof(float));  // a^C, HdH partials
}
// Designed against the integer work around the mma: a source-level Nsight Compute profile of the
// earlier version 1 on the H200 (BDH-8k bfloat16, 1.23 ms per backward) counted 628 M warp
// instructions, of which HMMA 9.4 % and LDSM 3.5 % while IMAD 21.7, IADD3 8.6, ISETP 8.2, LEA 6.9,
// SHF 5.3, SEL 2.4, LOP3 2.4 %: half of it the integer arithmetic of addresses and indices; 0.55
// instructions issued per scheduler cycle with 1.04 of 3.95 warps eligible, stalls mostly `wait`
// (fixed-latency dependencies, 29 %): issue-bound on overhead. Hence:
//   - the ldmatrix rows as 32-bit shared addresses computed once per thread (warp_mma_32x32_u32):
//     each load is a base register plus an immediate (k0, mt / np, the M lo plane), the stage one
//     add per step, and the k loop unrolled (not per load the lane's row from lane, m0, k0 and a
//     runtime stride, and a generic-to-shared conversion);
//   - fetch: the thread's pieces are fixed for the kernel (M tiles: rows tid/8 and tid/8 + 32; the
//     operand tile: rows tid/16 + 16k, k < 4, the same 8 columns), so their shared destinations and
//     intra-tile offsets are computed once; per step only the block's base moves (the M block
//     (I(I-1)/2 + J)·64², the operand chunk c·C·Lp) and the zero-fill sizes (rows past Cn, columns
//     past Lp) are two packed words per item, full chunk or the last one;
//   - HdH's running dot takes the chunk's Xq rows by ldmatrix.trans (the A fragment of Xq^T: the
//     accumulator's own layout) instead of 32 scalar bf16 loads per step;
//   - a loop of W steps, finish_w, then a loop of U steps (no per-step branch on the kind), and W's
//     and U's stores through a running row pointer with the 4 latents of a row at immediate offsets.
// Static SASS paths (sm_90a, bfloat16, decoded from the cubin without nvdisasm, so approximate):
// a W step about 300 warp instructions, a U step about 220-260, 64 HMMA each; registers 128, no
// spills; the float16 variant 176, one block per SM.
// History: version 1 (until a5227ea; the same items, steps, tiles, fragments and mma sequence,
// with per-load index arithmetic: a W step about 720-770 warp instructions, a U step 640-690;
// registers 126, float16 164) gave the same W, U and HdH' bit for bit (emulated). Measured on the
// H200 (778d902, BDH-8k bfloat16): this kernel (then version 3) 1.00 ms against version 1's 1.23
// (Nsight Compute durations), forward+backward 6.19 against 6.41 ms; version 1 was then removed.
// The products: warp_mma_32x32_tile (mma.cuh), padded or swizzled tiles.
template <bool kKeyLo = false, bool kSwizzle = false>
__global__ void __launch_bounds__(kQrThreads, kKeyLo ? 1 : 2)
    quad_readback_mma_kernel(Dims d, const bf16* Mhi, const bf16* Mlo, const bf16* Kq, const bf16* Xq,
                             const float* a32, float* W, float* U, float* HdH, const bf16* Kq_lo = nullptr) {
  grid_dependency_wait();
  static_assert(kQrThreads == 256 && kQrLT == 128, "the fetch's fixed pieces assume 256 threads, 128 latents");
  // (128-byte aligned: the swizzled tiles' XOR steps need every tile on a 128-byte boundary)
  extern __shared__ __align__(128) unsigned char smem_raw[];
  constexpr int MS = qr_m_stride<kSwizzle>(), OS = qr_op_stride<kSwizzle>();
  constexpr int kQrStage = quad_readback_stage<kKeyLo, kSwizzle>();
  constexpr uint32_t kStageB = 2 * kQrStage;            // bytes per stage
  constexpr uint32_t kLoB = 2 * 64 * MS;                // M lo's tile in a stage (bytes)
  constexpr uint32_t kOpB = 2 * 2 * 64 * MS;            // the operand tile in a stage
  constexpr uint32_t kOpLoB = kOpB + 2 * 64 * OS;       // the split keys' tile
  constexpr uint32_t kXkB = 2 * kStageB;                // xk, after the two stages
  static_assert(!kSwizzle || (kStageB % 128 == 0 && kLoB % 128 == 0 && kOpB % 128 == 0 && kOpLoB % 128 == 0),
                "the swizzled tiles start on 128-byte boundaries");
  bf16* stages = reinterpret_cast<bf16*>(smem_raw);
  bf16* xk = stages + 2 * kQrStage;
  float* aC = reinterpret_cast<float*>(xk + 64 * OS);
  float* red = aC + kQrLT;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4;
  const int wm = (warp & 3) * 32, wn = (warp >> 2) * 32;  // the warp's latents and tokens
  const uint32_t s0 = smem_addr(smem_raw);
  // the lane's ldmatrix addresses in stage 0 (stage 1: + kStageB), warp_mma_lane_a / _b's rows and
  // columns (mma.cuh) as tile offsets: A = the operand^T (row (lane >> 4) 8 + lane % 8, column
  // wm + 8 ((lane >> 3) & 1)), B = M^T (W steps: row wn + (lane >> 4) 8 + lane % 8, column
  // 8 ((lane >> 3) & 1)) or M (U steps: row 8 ((lane >> 3) & 1) + lane % 8, column wn + 8 (lane >> 4))
  const int lr = (lane >> 4) * 8 + (lane & 7), lx = (lane >> 3) & 1;
  const uint32_t a_lane = tile_offset<kSwizzle>(lr, wm / 8 + lx, OS);
  const uint32_t a_op = s0 + kOpB + a_lane;
  const uint32_t b_w = s0 + tile_offset<kSwizzle>(wn + lr, lx, MS);                      // M^T (W steps)
  const uint32_t b_u = s0 + tile_offset<kSwizzle>(8 * lx + (lane & 7), wn / 8 + (lane >> 4), MS);  // M (U steps)
  const uint32_t a_xk = s0 + kXkB + a_lane + 2 * wn * OS;  // Xq_K^T's fragments (HdH'; rows wn + lr)
  // the thread's pieces: M rows mr, mr + 32 at column mp; operand rows orow + 16k at column oc
  const int mr = tid / 8, mp = 8 * (tid % 8), orow = tid / 16, oc = 8 * (tid % 16);
  const uint32_t m_dst = s0 + tile_offset<kSwizzle>(mr, tid % 8, MS);
  const uint32_t o_dst = s0 + kOpB + tile_offset<kSwizzle>(orow, tid % 16, OS);
  const int64_t o_src = orow * d.Lp + oc, o_step = 16 * d.Lp, cstride = d.C * d.Lp;
  const int nC = static_cast<int>(d.nC), nsteps = nC > 0 ? nC - 1 : 0, C = static_cast<int>(d.C);
  const int CnLast = nC > 0 ? static_cast<int>(d.chunk_len(nC - 1)) : 0;
  const int64_t nlt = (d.Lp + kQrLT - 1) / kQrLT;
  // src size of operand piece k: 16 where 16 k < lim (lim: the rows left below Cn past orow, or 0
  // for columns past Lp), else 0 (a zero fill)
  auto src_bytes = [](int lim, int k) { return 16 * k < lim ? 16u : 0u; };
  for (int64_t item = blockIdx.x; item < d.nbh * d.nC * nlt; item += gridDim.x) {
    const int64_t bh = item / (d.nC * nlt), l0 = (item % nlt) * kQrLT;
    const int K = static_cast<int>((item / nlt) % d.nC);
    const int64_t h = d.h_of(bh), tK = int64_t{K} * d.C;
    const int CnK = static_cast<int>(d.chunk_len(K));
    const bool col_ok = l0 + oc < d.Lp;
    // only the last chunk may be short: the row limits of a full chunk and of the last one
    const int lim_full = col_ok ? C - orow : 0, lim_last = col_ok ? CnLast - orow : 0;
    // offsets of the thread's first operand piece in chunk 0 and of its first M piece in the pair's
    // blocks (the tensors' base pointers are kernel parameters: no registers)
    const int64_t tile0 = bh * d.T * d.Lp + l0 + o_src;
    const int64_t mb = bh * cross_pairs(d.nC) * (kQB * kQB) + mr * kQB + mp;
    // step s: W with J = s (s < K), or U with I = nC-1-(s-K); tiles into stage st
    auto fetch = [&](int s, int st) {
      const bool w = s < K;
      const int I = w ? K : nC - 1 - (s - K), J = w ? s : K;
      const int64_t blk = mb + static_cast<int64_t>(I * (I - 1) / 2 + J) * (kQB * kQB);
      const uint32_t so = st ? kStageB : 0u;
      cp_async16_u32(m_dst + so, Mhi + blk);
      cp_async16_u32(m_dst + so + 2 * 32 * MS, Mhi + blk + 32 * kQB);
      cp_async16_u32(m_dst + so + kLoB, Mlo + blk);
      cp_async16_u32(m_dst + so + kLoB + 2 * 32 * MS, Mlo + blk + 32 * kQB);
      const int c = w ? J : I;  // the operand's chunk
      const int lim = c == nC - 1 ? lim_last : lim_full;
      const int64_t oo = tile0 + c * cstride;
      const bf16* o = (w ? Kq : Xq) + oo;
#pragma unroll
      for (int k = 0; k < 4; ++k) cp_async16_u32(o_dst + so + 2 * 16 * OS * k, o + k * o_step, src_bytes(lim, k));
      if constexpr (kKeyLo) {
        if (w) {
          const bf16* ol = Kq_lo + oo;
#pragma unroll
          for (int k = 0; k < 4; ++k)
            cp_async16_u32(o_dst + so + (kOpLoB - kOpB) + 2 * 16 * OS * k, ol + k * o_step, src_bytes(lim, k));
        }
      }
      cp_async_commit();
    };
    __syncthreads();  // the previous item's shared memory is consumed
    if (tid < kQrLT) {
      const int64_t l = l0 + tid;
      aC[tid] = l < d.L ? ipow(a32[h * d.L + l], C) : 0.0f;
    }
    if (K >= 2) {  // the chunk's own Xq rows (HdH'), in the first step's commit group
      const int lim = K == nC - 1 ? lim_last : lim_full;
      const bf16* o = Xq + tile0 + K * cstride;
#pragma unroll
      for (int k = 0; k < 4; ++k) cp_async16_u32(o_dst - kOpB + kXkB + 2 * 16 * OS * k, o + k * o_step, src_bytes(lim, k));
    }
    if (nsteps > 0) fetch(0, 0);
    else cp_async_commit();
    float acc[2][4][4] = {}, dp[2][2] = {};  // dp[mt][hf]: latent row wm + 16 mt + 8 hf + g
    auto row_scale = [&](int mt, int hf) { return aC[wm + 16 * mt + 8 * hf + g]; };
    // W to its rows, HdH' to its slot, acc cleared for the U steps
    // acc to W's or U's rows tK + i (i < CnK), latents l0 + lr (< L): a running row pointer (one row
    // of L on per (nt, c)), the 4 latents of a row at immediate offsets (a 64-bit index per element
    // was ~15 instructions a store)
    // (the offsets precomputed: fewer values live across the steps)
    const int64_t out0 = (bh * d.T + tK + wn + 2 * (lane % 4)) * d.L + l0 + wm + g;
    const int nl = static_cast<int>(d.L - l0 < kQrLT ? d.L - l0 : kQrLT) - (wm + g);  // lr - wm - g < nl
    const int64_t hdh0 = (bh * d.nC + (K >= 1 ? K - 1 : d.nC - 1)) * d.L + l0 + tid;
    const bool hdh_ok = tid < kQrLT && l0 + tid < d.L;
    auto store = [&](float* out) {
      float* p = out + out0;
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          if (wn + 8 * nt + 2 * (lane % 4) + c < CnK) {
#pragma unroll
            for (int mt = 0; mt < 2; ++mt)
#pragma unroll
              for (int hf = 0; hf < 2; ++hf)
                if (16 * mt + 8 * hf < nl) p[16 * mt + 8 * hf] = acc[mt][nt][2 * hf + c];
          }
          p += c == 0 ? d.L : 7 * d.L;
        }
    };
    auto finish_w = [&]() {
      store(W);
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
          for (int r = 0; r < 4; ++r) acc[mt][nt][r] = 0.0f;
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {  // the quad's 4 lanes hold the row's other columns
          float x = dp[mt][hf];
          x += __shfl_xor_sync(0xffffffffu, x, 1);
          x += __shfl_xor_sync(0xffffffffu, x, 2);
          if (lane % 4 == 0) red[(wn / 32) * kQrLT + wm + 16 * mt + 8 * hf + g] = x;
        }
      __syncthreads();
      if (hdh_ok) HdH[hdh0] = K >= 1 ? red[tid] + red[kQrLT + tid] : 0.0f;
    };
    // step s of kind w (W: s < K, else U); the W steps' loop, finish_w, then the U steps' loop
    auto step = [&](int s, auto kind) {
      constexpr bool w = decltype(kind)::value;
      const int st = s & 1;
      if (s + 1 < nsteps) {
        fetch(s + 1, st ^ 1);  // into the stage that step s - 1 consumed
        cp_async_wait<1>();
      } else {
        cp_async_wait<0>();
      }
      __syncthreads();
      if (w && s > 0) {  // dp <- a^C dp + sum_i Xq_K[i] acc[.][i] (this thread's columns)
        // xf[mt][kk]: Xq_K^T's A fragment at latents wm + 16 mt, tokens wn + 16 kk: register
        // hf + 2 (nt % 2) of xf[mt][nt / 2] holds (latent row .. + 8 hf + g, tokens of acc[mt][nt][2 hf ..])
        uint32_t xf[2][2][4];
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
          for (int kk = 0; kk < 2; ++kk)
            ldsm_x4_trans_u32(xf[mt][kk], kSwizzle ? (a_xk ^ (32u * mt)) + 2 * 16 * kk * OS
                                                   : a_xk + 2 * (16 * kk * OS + 16 * mt));
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
          for (int hf = 0; hf < 2; ++hf) {
            float x = 0.0f;
#pragma unroll
            for (int nt = 0; nt < 4; ++nt) {
              const uint32_t r = xf[mt][nt / 2][hf + 2 * (nt % 2)];
              x += __uint_as_float(r << 16) * acc[mt][nt][2 * hf];
              x += __uint_as_float(r & 0xffff0000u) * acc[mt][nt][2 * hf + 1];
            }
            dp[mt][hf] = row_scale(mt, hf) * dp[mt][hf] + x;
          }
      }
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
          const float f = row_scale(mt, hf);
#pragma unroll
          for (int nt = 0; nt < 4; ++nt) acc[mt][nt][2 * hf] *= f, acc[mt][nt][2 * hf + 1] *= f;
        }
      const uint32_t so = st ? kStageB : 0u;
      if constexpr (w) {  // [l][i] += sum_j Kq_J[j][l] M[i][j]: A = Kq^T (stored [j][l]), B = M^T (M stored [i][j])
        warp_mma_32x32_tile<kSwizzle, true, true, OS, MS, 64>(acc, a_op + so, b_w + so);
        warp_mma_32x32_tile<kSwizzle, true, true, OS, MS, 64>(acc, a_op + so, b_w + so + kLoB);
        if constexpr (kKeyLo) warp_mma_32x32_tile<kSwizzle, true, true, OS, MS, 64>(acc, a_op + so + (kOpLoB - kOpB), b_w + so);
      } else {  // [l][j] += sum_i Xq_I[i][l] M[i][j]: A = Xq^T (stored [i][l]), B = M (stored [i][j])
        warp_mma_32x32_tile<kSwizzle, true, false, OS, MS, 64>(acc, a_op + so, b_u + so);
        warp_mma_32x32_tile<kSwizzle, true, false, OS, MS, 64>(acc, a_op + so, b_u + so + kLoB);
      }
      __syncthreads();  // this stage is refilled by the next step's fetch
    };
    for (int s = 0; s < K; ++s) step(s, std::true_type{});
    if (nsteps == 0) cp_async_wait<0>();  // (no step: the empty commit group)
    finish_w();
    for (int s = K; s < nsteps; ++s) step(s, std::false_type{});
    store(U);
  }
}

// ---- quad_readback on warpgroup MMA (sm_90a) ----------------------------------------------------
// quad_readback_mma_kernel's items, steps, fetches and Horner sums with wgmma in place of the 8
// warps' mma.sync: the two warpgroups of the block each own 64 of the item's 128 latents (M = 64)
// and all 64 tokens of chunk K (N = 64), so a step is 8 instructions m64n64k16 per warpgroup (M hi
// and M lo, 4 k steps each; float16 W steps 4 more with Kq's remainders) instead of 64 mma.sync,
// 16 ldmatrix and their address arithmetic per warp, which made version 3 issue-bound (its tensor
// pipe 42-43 % busy in round 17's Nsight Compute profile). The tensor cores read the tiles from
// shared memory through descriptors (mma.cuh, wgmma_desc_sw128), so every tile is a 64-wide,
// 128-byte-swizzled one:
//   M hi, M lo    [64 rows i][64 j]: W steps B = M^T (K-major: n = i rows, k = j along them),
//                 U steps B = M (N-major: k = i rows, n = j along them), the same bytes;
//   the operand   Kq_J (W) or Xq_I (U), [64 tokens][128 latents] as two tiles of 64 latents, one per
//                 warpgroup: A = operand^T, M-major (k = token rows, m = latents along them);
//   xk            chunk K's own Xq rows (HdH'), the same two tiles, read by ldmatrix.trans.
// The fills are version 3's 16-byte pieces (cp.async, zero fill past Cn and Lp) at other addresses.
// The accumulator layout is mma.m16n8's C per warp (16 latent rows, 8 tiles of 8 tokens), so the
// row scaling a^C, the stores and HdH's running dot are version 3's per element, and the same
// per-element sequence of k steps (M hi k 0..3, M lo k 0..3) makes W, U and HdH' bit for bit version
// 3's in the host emulation (HdH's two 32-token halves are kept apart and added last, as version 3's
// two warps did). On the GPU the tensor cores' accumulation order may differ in the last bits.
// kStages stages of 32 KiB (float16: 48), fetched kStages - 1 steps ahead, one barrier per step
// (after it, every warpgroup has waited for its previous step's products, so the stage that step
// read is free for the next fetch); xk 16 KiB; 1008 bytes of alignment slack (the tiles on
// 1024-byte boundaries whatever the 16-byte aligned base of the dynamic shared memory). The rows'
// a^C are in registers (two per thread), not in shared memory, so that three stages still fit two
// blocks per SM: 112.98 KiB (float16 160.98, one block). Measured on the H200 (round 19, BDH-8k,
// two backwards, Nsight Compute durations): version 3 (mma.sync) 1.774 ms; this kernel with two
// stages and two barriers per step 1.493, with two stages and one barrier 1.532, with three stages
// (a^C still in shared memory, no slack) 1.461.
constexpr uint32_t kQwTile = 64 * 128;  // bytes of one 64 × 64 bf16 tile
template <bool kKeyLo>
constexpr uint32_t quad_readback_wgmma_stage() {  // bytes: M hi, M lo, the operand's two tiles (and remainders')
  return (2 + (kKeyLo ? 4 : 2)) * kQwTile;
}
template <bool kKeyLo, int kStages = 3>
constexpr int quad_readback_wgmma_smem() {
  return static_cast<int>(kWgmmaAtom - 16 + kStages * quad_readback_wgmma_stage<kKeyLo>() + 2 * kQwTile);
}
static_assert(2 * (quad_readback_wgmma_smem<false>() + 1024) <= 228 * 1024,
              "quad_readback_wgmma: two blocks per SM (each with the 1 KiB the system reserves)");
template <bool kKeyLo = false, int kStages = 3, bool kRegA = true>
__global__ void __launch_bounds__(kQrThreads, kKeyLo ? 1 : 2)
    quad_readback_wgmma_kernel(Dims d, const bf16* Mhi, const bf16* Mlo, const bf16* Kq, const bf16* Xq,
                               const float* a32, float* W, float* U, float* HdH, const bf16* Kq_lo = nullptr,
                               bool chunks_inner = false) {
  grid_dependency_wait();
  static_assert(kQrThreads == 256 && kQrLT == 128 && kQB == 64, "two warpgroups of 64 latents; 64-token tiles");
  static_assert(kStages == 2 || kStages == 3, "two or three stages");
  extern __shared__ __align__(128) unsigned char smem_raw[];
  constexpr uint32_t kStage = quad_readback_wgmma_stage<kKeyLo>();
  constexpr uint32_t kLoB = kQwTile, kOpB = 2 * kQwTile, kOpLoB = 4 * kQwTile;  // offsets inside a stage
  // the tiles on 1024-byte boundaries (the swizzle's atoms): the base rounded up
  const uint32_t s_raw = smem_addr(smem_raw), s0 = (s_raw + kWgmmaAtom - 1) & ~(kWgmmaAtom - 1);
  const uint32_t xk = s0 + kStages * kStage;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, q = lane % 4;
  const int wg = warp / 4, lw = 64 * wg + 16 * (warp % 4);  // the warpgroup; the warp's first latent row
  // the thread's fetch pieces (version 3's): M rows mr, mr + 32 at chunk mc; operand rows orow + 16 k
  // at 16-byte chunk oc of the 128 latents (tile oc / 8, chunk oc % 8 there)
  const int mr = tid / 8, mc = tid % 8, orow = tid / 16, oc = tid % 16;
  const uint32_t m_dst = s0 + mr * 128 + ((mc ^ (mr & 7)) << 4);
  const uint32_t o_off = kOpB + (oc / 8) * kQwTile + orow * 128 + (((oc % 8) ^ (orow & 7)) << 4);
  const int64_t o_src = orow * d.Lp + 8 * oc, o_step = 16 * d.Lp, cstride = d.C * d.Lp;
  // descriptors in stage 0 (a stage, a tile or a k step is an add to the start address field, in
  // 16-byte units): A the warpgroup's operand tile (M-major); B M hi (K-major for W, N-major for U)
  const uint64_t desc_a = wgmma_desc_sw128(s0 + kOpB + wg * kQwTile, kWgmmaAtom, kWgmmaAtom);
  const uint64_t desc_bw = wgmma_desc_sw128(s0, 0, kWgmmaAtom), desc_bu = wgmma_desc_sw128(s0, kWgmmaAtom, kWgmmaAtom);
  constexpr uint64_t kAtoms2 = 2 * kWgmmaAtom / 16, kRow32 = 32 / 16;  // a k step: MN-major, K-major
  // the lane's ldmatrix.trans row of xk (HdH'): token 8 ((lane >> 4) & 1) + lane % 8 of a 16-token
  // block, latent chunk 2 (warp % 4) + ((lane >> 3) & 1) of the warpgroup's tile
  const uint32_t a_lane = wg * kQwTile + (8 * ((lane >> 4) & 1) + (lane & 7)) * 128 +
                         (((2 * (warp % 4) + ((lane >> 3) & 1)) ^ (lane & 7)) << 4);
  const uint32_t a_xk = xk + a_lane;
  // kRegA: the same lane's rows of the operand's tile in stage 0 (its A fragments, as xk's)
  const uint32_t a_op = s0 + kOpB + a_lane;
  const int nC = static_cast<int>(d.nC), nsteps = nC > 0 ? nC - 1 : 0, C = static_cast<int>(d.C);
  const int CnLast = nC > 0 ? static_cast<int>(d.chunk_len(nC - 1)) : 0;
  const int64_t nlt = (d.Lp + kQrLT - 1) / kQrLT, nitems = d.nbh * d.nC * nlt;
  auto src_bytes = [](int lim, int k) { return 16 * k < lim ? 16u : 0u; };
  if (nitems == 0) return;
  // An item's place (bh, K, 128-latent tile lt), item = (bh nC + K) nlt + lt, or with chunks_inner
  // item = (bh nlt + lt) nC + K, and h of bh. A block's items are blockIdx.x + n gridDim.x (a
  // persistent grid: launch_quadratic_backward), walked by carries (carry_add) instead of 64-bit
  // divisions per item. The order decides what the resident blocks read together: with the latent
  // tiles inner they hold a few chunks K of a pair across all its latents, and the operand tiles
  // Kq_J, Xq_I of a latent tile are read again by the pair's later K items, a whole pair's Kq and
  // Xq later; with the chunks inner they hold all chunks of fewer latent tiles, whose items read the
  // same operand tiles at about the same time (readback_chunks_inner, the launcher).
  struct Place {
    int64_t bh;
    int h, K, lt;
  };
  const int nlt32 = static_cast<int>(nlt), H = static_cast<int>(d.H);
  auto place_of = [&](int64_t item) {
    Place p;
    p.bh = item / (d.nC * nlt);
    if (chunks_inner)
      p.K = static_cast<int>(item % d.nC), p.lt = static_cast<int>(item / d.nC % nlt);
    else
      p.K = static_cast<int>(item / nlt % d.nC), p.lt = static_cast<int>(item % nlt);
    p.h = static_cast<int>(d.h_of(p.bh));
    return p;
  };
  const Place stride = place_of(gridDim.x);
  const int dh = static_cast<int>(stride.bh % H);
  auto advance = [&](Place& p) {
    const int c = chunks_inner ? carry_add(p.lt, stride.lt, carry_add(p.K, stride.K, 0, nC), nlt32)
                               : carry_add(p.K, stride.K, carry_add(p.lt, stride.lt, 0, nlt32), nC);
    p.bh += stride.bh + c;
    carry_add(p.h, dh, c, H);
  };
  // the thread's operand pieces of an item at tile0 + c cstride; lim: the rows inside chunk c (piece
  // k holds a token where 16 k < lim)
  auto tile0_of = [&](const Place& p) { return p.bh * d.T * d.Lp + p.lt * kQrLT + o_src; };
  auto lim_of = [&](const Place& p, int c) {
    return p.lt * kQrLT + 8 * oc < d.Lp ? (c == nC - 1 ? CnLast : C) - orow : 0;
  };
  // The fetch cursor (place fp, step fs; fi counts the items) runs kStages - 1 steps ahead of the
  // products across the block's items, so that an item's first steps find their tiles fetched
  // under the previous item's last ones instead of waiting for them at its start. Every item has
  // nsteps steps (whatever its K); one commit group per step, empty past the block's last item.
  // fso: the stage it fills next.
  int64_t fi = blockIdx.x;
  Place fp = place_of(fi);
  int fs = 0;
  uint32_t fso = 0;
  auto fetch_next = [&]() {
    if (fi < nitems && nsteps > 0) {
      const bool w = fs < fp.K;
      const int I = w ? fp.K : nC - 1 - (fs - fp.K), J = w ? fs : fp.K;
      const int64_t blk = (fp.bh * cross_pairs(d.nC) + I * (I - 1) / 2 + J) * (kQB * kQB) + mr * kQB + 8 * mc;
      cp_async16_u32(m_dst + fso, Mhi + blk);
      cp_async16_u32(m_dst + fso + 32 * 128, Mhi + blk + 32 * kQB);
      cp_async16_u32(m_dst + fso + kLoB, Mlo + blk);
      cp_async16_u32(m_dst + fso + kLoB + 32 * 128, Mlo + blk + 32 * kQB);
      const int c = w ? J : I, lim = lim_of(fp, c);
      const int64_t oo = tile0_of(fp) + c * cstride;
      const bf16* o = (w ? Kq : Xq) + oo;
#pragma unroll
      for (int k = 0; k < 4; ++k) cp_async16_u32(s0 + fso + o_off + 16 * 128 * k, o + k * o_step, src_bytes(lim, k));
      if constexpr (kKeyLo) {
        if (w) {
          const bf16* ol = Kq_lo + oo;
#pragma unroll
          for (int k = 0; k < 4; ++k)
            cp_async16_u32(s0 + fso + o_off + (kOpLoB - kOpB) + 16 * 128 * k, ol + k * o_step, src_bytes(lim, k));
        }
      }
      if (++fs == nsteps) {
        fs = 0;
        fi += gridDim.x;
        advance(fp);
      }
    }
    cp_async_commit();
    fso = fso + kStage == kStages * kStage ? 0u : fso + kStage;
  };
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) fetch_next();
  uint32_t so = 0;  // the current step's stage (byte offset)
  // a of the thread's accumulator rows for the block's next item, loaded an item ahead (at the
  // item's start its a^C waited for these loads: 4.5 % of the stall samples at c347514)
  auto load_a = [&](const Place& p, float (&a)[2]) {
    const int64_t la = p.lt * kQrLT + lw + g;
    a[0] = la < d.L ? __ldg(a32 + p.h * d.L + la) : 0.0f;
    a[1] = la + 8 < d.L ? __ldg(a32 + p.h * d.L + la + 8) : 0.0f;
  };
  Place pl = place_of(blockIdx.x);  // the item's
  float a_next[2] = {};
  load_a(pl, a_next);
  for (int64_t item = blockIdx.x; item < nitems; item += gridDim.x, advance(pl)) {
    const int K = pl.K;
    const int64_t bh = pl.bh, l0 = pl.lt * kQrLT, tK = int64_t{K} * d.C;
    const int CnK = static_cast<int>(d.chunk_len(K));
    // a^C of the thread's accumulator rows lw + g, lw + g + 8 (version 3's aC values; 0 past L)
    const int64_t la = l0 + lw + g;
    const float f0 = la < d.L ? ipow(a_next[0], C) : 0.0f;
    const float f1 = la + 8 < d.L ? ipow(a_next[1], C) : 0.0f;
    if (item + gridDim.x < nitems) {
      Place next = pl;
      advance(next);
      load_a(next, a_next);
    }
    // acc[4 j + 2 hf + c]: latent row lw + g + 8 hf, token 8 j + 2 q + c of chunk K
    float acc[32] = {}, dp[2][2] = {};  // dp[hf][half]: HdH's running dot over tokens 32 half ..
    auto store = [&](float* out) {
      const int nl = static_cast<int>(d.L - l0 < kQrLT ? d.L - l0 : kQrLT) - (lw + g);
      float* p = out + (bh * d.T + tK + 2 * q) * d.L + l0 + lw + g;
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int c = 0; c < 2; ++c)
          if (8 * j + 2 * q + c < CnK) {
#pragma unroll
            for (int hf = 0; hf < 2; ++hf)
              if (8 * hf < nl) p[(8 * j + c) * d.L + 8 * hf] = acc[4 * j + 2 * hf + c];
          }
    };
    auto finish_w = [&]() {
      store(W);
#pragma unroll
      for (int i = 0; i < 32; ++i) acc[i] = 0.0f;
      float x[2];
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        float y[2];
#pragma unroll
        for (int half = 0; half < 2; ++half) {  // version 3's quad sum per 32-token half, then the halves
          y[half] = dp[hf][half];
          y[half] += __shfl_xor_sync(0xffffffffu, y[half], 1);
          y[half] += __shfl_xor_sync(0xffffffffu, y[half], 2);
        }
        x[hf] = y[0] + y[1];
      }
      const int64_t l = l0 + lw + g;
      if (q == 0) {
        float* o = HdH + (bh * d.nC + (K >= 1 ? K - 1 : d.nC - 1)) * d.L + l;
#pragma unroll
        for (int hf = 0; hf < 2; ++hf)
          if (l + 8 * hf < d.L) o[8 * hf] = K >= 1 ? x[hf] : 0.0f;
      }
    };
    auto step = [&](int s, auto kind) {
      constexpr bool w = decltype(kind)::value;
      cp_async_wait<kStages - 2>();  // step s's pieces (this thread's) have landed (at s = 1, xk's too)
      fence_proxy_async();           // ... and are visible to the tensor cores' reads
      __syncthreads();  // everyone's; and every warpgroup has waited for the previous step's products
      if (s == 0) {  // the chunk's own Xq rows (HdH', read from step 1 on: every warp is past the
                     // previous item's last read of them), in a commit group of their own
        if (K >= 2) {
          const int lim = lim_of(pl, K);
          const bf16* o = Xq + tile0_of(pl) + K * cstride;
#pragma unroll
          for (int k = 0; k < 4; ++k)
            cp_async16_u32(xk + (o_off - kOpB) + 16 * 128 * k, o + k * o_step, src_bytes(lim, k));
        }
        cp_async_commit();
      }
      fetch_next();  // into the stage the previous step read
      if (w && s > 0) {  // dp <- a^C dp + sum_i Xq_K[i] acc[.][i] (version 3's terms and order)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          uint32_t xf[2][4];  // 16-token blocks 2 half + kk: regs {row g, g + 8} × {tokens 2q.., 8 + 2q..}
#pragma unroll
          for (int kk = 0; kk < 2; ++kk) ldsm_x4_trans_u32(xf[kk], a_xk + (2 * half + kk) * 16 * 128);
#pragma unroll
          for (int hf = 0; hf < 2; ++hf) {
            float x = 0.0f;
#pragma unroll
            for (int nt = 0; nt < 4; ++nt) {
              const uint32_t r = xf[nt / 2][hf + 2 * (nt % 2)];
              const int j = 4 * half + nt;
              x += __uint_as_float(r << 16) * acc[4 * j + 2 * hf];
              x += __uint_as_float(r & 0xffff0000u) * acc[4 * j + 2 * hf + 1];
            }
            dp[hf][half] = (hf ? f1 : f0) * dp[hf][half] + x;
          }
        }
      }
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[4 * j] *= f0, acc[4 * j + 1] *= f0, acc[4 * j + 2] *= f1, acc[4 * j + 3] *= f1;
      const uint64_t sd = so / 16;
      // kRegA: the warp's 16 latent rows of the operand for the 4 k steps (and, float16's W steps,
      // of its remainders), read once by ldmatrix.trans and used by both passes (M hi, M lo), where
      // the tensor cores would read the tile from shared memory once per pass
      [[maybe_unused]] uint32_t af[4][4], af_lo[4][4];
      if constexpr (kRegA) {
#pragma unroll
        for (int k = 0; k < 4; ++k) ldsm_x4_trans_u32(af[k], a_op + so + k * 16 * 128);
        if constexpr (w && kKeyLo) {
#pragma unroll
          for (int k = 0; k < 4; ++k) ldsm_x4_trans_u32(af_lo[k], a_op + (kOpLoB - kOpB) + so + k * 16 * 128);
        }
      }
      wgmma_fence_operand(acc);
      wgmma_fence();
      // one k step: A (k step k of the operand, or of its remainders) times B at desc_b
      auto product = [&](int k, bool lo_a, uint64_t desc_b) {
        constexpr int kTransB = w ? 0 : 1;
        if constexpr (kRegA)
          wgmma_m64n64k16_bf16_rs<kTransB>(acc, lo_a ? af_lo[k] : af[k], desc_b);
        else
          wgmma_m64n64k16_bf16<1, kTransB>(acc, desc_a + sd + (lo_a ? (kOpLoB - kOpB) / 16 : 0) + k * kAtoms2, desc_b);
      };
      if constexpr (w) {  // [l][i] += sum_j Kq_J[j][l] M[i][j]: A = Kq^T (M-major), B = M^T (K-major)
#pragma unroll
        for (int k = 0; k < 4; ++k) product(k, false, desc_bw + sd + k * kRow32);
#pragma unroll
        for (int k = 0; k < 4; ++k) product(k, false, desc_bw + sd + kLoB / 16 + k * kRow32);
        if constexpr (kKeyLo) {
#pragma unroll
          for (int k = 0; k < 4; ++k) product(k, true, desc_bw + sd + k * kRow32);
        }
      } else {  // [l][j] += sum_i Xq_I[i][l] M[i][j]: A = Xq^T (M-major), B = M (N-major)
#pragma unroll
        for (int k = 0; k < 4; ++k) product(k, false, desc_bu + sd + k * kAtoms2);
#pragma unroll
        for (int k = 0; k < 4; ++k) product(k, false, desc_bu + sd + kLoB / 16 + k * kAtoms2);
      }
      wgmma_commit();
      wgmma_wait<0>();
      wgmma_fence_operand(acc);
      so = so + kStage == kStages * kStage ? 0u : so + kStage;
    };
    for (int s = 0; s < K; ++s) step(s, std::true_type{});
    finish_w();  // (no step at all, nsteps = 0: K < 2, no xk, every commit group empty)
    for (int s = K; s < nsteps; ++s) step(s, std::false_type{});
    store(U);
  }
  cp_async_wait<0>();  // (only empty groups are left)
}

// ---- dv: dv_J = sum_{I>J} P_IJ^T G_I + sum_{k>j in J} P[k][j] G_k, per (bh, J, 128 columns) ----
// Pcross: [bh][nC][nC][C][C] bf16 (block (I, J), J < I, at ((bh nC + I) nC + J) C C, row i,
// column j); P: chunk_scores' intra-chunk scores [bh][nC][nsplit][C][C] (split 0 holds the sum).
// Step 0 the chunk's own scores (k > j, k < Cn), step s >= 1 the block of I = J + s. Each step's
// scores are rounded to bf16 into [i][j] tiles (A = P^T by a transposing ldmatrix) and G_I's rows
// arrive by cp.async, the next step's while the current one is multiplied. 8 warps, 64 tokens ×
// 128 columns (chunk_output_mma_kernel's shape). Out: dvp [bh][t][E] float32.
// kLo (split values, float16): glo holds G's bf16 remainders, a second pass P·G_lo.
// kSwizzle (the default; RHOSCAN_QD_SWIZZLE=0 at build time keeps the padded rows): the P and G
// tiles' rows unpadded, chunk c of row r at c ^ (r % 8) (mma.cuh's swizzled tiles), so that G's
// cp.async fills write whole aligned 128-byte groups; P's 2-byte stores stay conflict-free (a warp
// writes 64 bytes of one row). The same products bit for bit (emulated). H200, round 17 (359c57f's
// A/B, Nsight Compute durations, BDH-8k's 2 launches): 0.231 against 0.233 ms, a small gain (the
// kernel is not fill-bound), kept for one layout across the mma kernels.
#ifndef RHOSCAN_QD_SWIZZLE
#define RHOSCAN_QD_SWIZZLE 1
#endif
constexpr bool kQdSwizzle = RHOSCAN_QD_SWIZZLE != 0;
constexpr int kQdThreads = 256;
static_assert(kQB == 64, "quad_dv_mma: 64-token tiles");
template <bool kSwizzle>
constexpr int kQdPS = kSwizzle ? kQB : kQB + 8;  // row strides (bf16): P's, G's
template <bool kSwizzle>
constexpr int kQdGS = kSwizzle ? kMmaET : kMmaET + 8;
template <bool kLo, bool kSwizzle = false>
constexpr int quad_dv_stage() {  // bf16 elements
  return 64 * kQdPS<kSwizzle> + (kLo ? 2 : 1) * 64 * kQdGS<kSwizzle>;
}
// (the padded layout's size: an upper bound for the swizzled one)
template <bool kLo>
constexpr int quad_dv_smem() {
  return 2 * quad_dv_stage<kLo>() * static_cast<int>(sizeof(bf16));
}
// kHeadSum (Hv = 1, the whole backward in one batch from pair 0: launch_quad_dv_head_sum): an item
// is (batch row b, J, 128 columns) and runs the H pairs of b in turn, each into fresh accumulators
// added in increasing h to a sum that starts from 0.0f, which goes to grad_v (gv, OutT) as
// dv_accumulate_kernel's kStore adds and stores the pairs' dvp: the same bits without dvp's write
// and read and dv_accumulate's launch (round 36: 22 µs of Nsight time a backward at BDH-base, an
// H100, on the main stream after the join).
// kState (a backward with an upstream final-state gradient GR, bfloat16): after the steps, dv_j
// gains (Kq_j ⊙ a^(T - e_J)) GR (A_end_J's share a^(T - e_J) GR read by the write keys, as the
// forward's context reads rho0: state_readout_mma, A = Kq_J, B = a^(T - e_J) ⊙ GR); items then run
// the chunks of a (pair, columns) together (J fastest), so that their reads of GR's tiles meet in the L2.
template <bool kLo = false, bool kSwizzle = kQdSwizzle, typename OutT = float, bool kHeadSum = false, bool kState = false>
__global__ void __launch_bounds__(kQdThreads, 2) quad_dv_mma_kernel(Dims d, const bf16* Pcross, const float* P,
                                                                    const bf16* gb, float* dvp,
                                                                    const bf16* glo = nullptr, Str4 gv = Str4{},
                                                                    const bf16* Kq = nullptr, const float* a32 = nullptr,
                                                                    Str4 gr = Str4{}) {
  grid_dependency_wait();
  static_assert(!kState || (!kLo && !kHeadSum), "quad_dv_mma: the state's readout for bfloat16 per pair only");
  extern __shared__ __align__(128) unsigned char smem_raw[];
  constexpr int PS = kQdPS<kSwizzle>, GS = kQdGS<kSwizzle>;
  // byte offsets: [2 stages][P tile [64][PS], G tile [64][GS], if kLo G_lo [64][GS]]
  constexpr uint32_t kStageB = 2 * quad_dv_stage<kLo, kSwizzle>(), kG = 2 * 64 * PS, kGlo = kG + 2 * 64 * GS;
  static_assert(kStageB % 128 == 0 && kG % 128 == 0 && kGlo % 128 == 0, "");
  const uint32_t s0 = smem_addr(smem_raw);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = (warp & 1) * 32, wn = (warp >> 1) * 32;  // the warp's tokens j and columns
  const uint32_t a_p = s0 + warp_mma_lane_a_tile<kSwizzle, true>(lane, wm, PS);
  const uint32_t b_g = s0 + kG + warp_mma_lane_b_tile<kSwizzle, false>(lane, wn, GS);
  const int C = static_cast<int>(d.C);
  const int64_t groups = kHeadSum ? d.nbh / d.H : d.nbh;  // (kHeadSum: batch rows, else pairs)
  const int64_t net = d.Ep / kMmaET, per_col = groups * net;
  // Items in increasing column block J (nC - J steps each): the blocks dispatched first take the
  // longest, as quadratic_output_mma's (until round 25 in (bh, J, columns) order).
  for (int64_t item = blockIdx.x; item < d.nC * per_col; item += gridDim.x) {
    const int64_t rest = kState ? item / d.nC : item % per_col, grp = rest / net;
    const int64_t J = kState ? item % d.nC : item / per_col, e0 = (rest % net) * kMmaET;
    const int CnJ = static_cast<int>(d.chunk_len(J));
    float total[2][4][4] = {};  // (kHeadSum: the pairs' sum)
    for (int64_t hh = 0; hh < (kHeadSum ? d.H : 1); ++hh) {
      const int64_t bh = kHeadSum ? grp * d.H + hh : grp;
      const int64_t nsteps = d.nC - J;
      // G_I's rows of step s by cp.async into stage st
      auto fetch_g = [&](int64_t s, int st) {
        const int64_t I = J + s;
        const int CnI = static_cast<int>(d.chunk_len(I));
        const uint32_t gt = s0 + kG + st * kStageB;
        const bf16* gI = gb + (bh * d.T + I * d.C) * d.Ep + e0;
        for (int idx = threadIdx.x; idx < 64 * (kMmaET / 8); idx += blockDim.x) {
          const int r = idx / (kMmaET / 8), p = 8 * (idx % (kMmaET / 8));
          const uint32_t dst = gt + tile_offset<kSwizzle>(r, p / 8, GS), bytes = r < CnI ? 16u : 0u;
          cp_async16_u32(dst, gI + min(r, CnI - 1) * d.Ep + p, bytes);
          if constexpr (kLo) cp_async16_u32(dst + (kGlo - kG), glo + (gI - gb) + min(r, CnI - 1) * d.Ep + p, bytes);
        }
        cp_async_commit();
      };
      // P's tiles, rounded to bf16 in stage st's [i][j] tile (A = P^T by a transposing ldmatrix):
      // - step 0, the chunk's own scores (chunk_scores' float32 P, split 0), at the item's start:
      //   four pieces of 4 columns a thread (row idx / 16, columns 4 (idx % 16)), loaded and stored in
      //   one go; only j < i kept (a select, not a multiply: the upper triangle's values never enter);
      // - steps s >= 1, Pcross's block (J + s, J), already bf16 (cross_scores rounds it as this
      //   rounding did until round 31): two pieces of 8 columns a thread (row idx / 8, columns
      //   8 (idx % 8)) loaded two steps before they are stored, into pc[s % 2], so that the loads
      //   are in flight during two steps' products. (Round 29 loaded float32 pieces one step ahead:
      //   their latency had been half of the stall samples at BDH-base; in round 31's profile the
      //   conversions that waited on them were still a sixth.) The same bf16 values either way.
      // load_block_row4 / load_block_row8 leave zeros past Cn_I and C.
      static_assert(kQdThreads == 256, "P's 64 × 64 tile: four float32 pieces of 4, or two bf16 pieces of 8, a thread");
      auto store_diag = [&](int st) {
        const float* Pd = P + (bh * d.nC + J) * d.nsplit * C * C;
        float x[4][4];
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const int idx = threadIdx.x + kQdThreads * r, i = idx / 16, j = 4 * (idx % 16);
          load_block_row4(Pd, i, j, C, CnJ, x[r]);
        }
        unsigned char* pt = smem_raw + st * kStageB;
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const int idx = threadIdx.x + kQdThreads * r, i = idx / 16, j = 4 * (idx % 16);
          float y[4];
#pragma unroll
          for (int k = 0; k < 4; ++k) y[k] = j + k < i ? x[r][k] : 0.0f;
          const __nv_bfloat162 h01 = __floats2bfloat162_rn(y[0], y[1]), h23 = __floats2bfloat162_rn(y[2], y[3]);
          uint2 w;
          memcpy(&w.x, &h01, sizeof h01);
          memcpy(&w.y, &h23, sizeof h23);
          *reinterpret_cast<uint2*>(pt + tile_offset<kSwizzle>(i, j / 8, PS) + 2 * (j % 8)) = w;  // (8-byte aligned)
        }
      };
      uint4 pc[2][2];  // Pcross's pieces of steps s (pc[s % 2]): compile-time indices (the loop's two parities)
      auto load_pc = [&](int64_t s, uint4 (&w)[2]) {
        const int64_t I = J + s;
        const int CnI = static_cast<int>(d.chunk_len(I));
        const bf16* Pc = Pcross + ((bh * d.nC + I) * d.nC + J) * C * C;
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int idx = threadIdx.x + kQdThreads * r, i = idx / 8, j = 8 * (idx % 8);
          w[r] = load_block_row8(Pc, i, j, C, CnI);
        }
      };
      auto store_pc = [&](const uint4 (&w)[2], int st) {  // (16-byte chunks of the tile's rows)
        unsigned char* pt = smem_raw + st * kStageB;
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int idx = threadIdx.x + kQdThreads * r, i = idx / 8, j = 8 * (idx % 8);
          *reinterpret_cast<uint4*>(pt + tile_offset<kSwizzle>(i, j / 8, PS)) = w[r];
        }
      };
      float acc[2][4][4] = {};
      __syncthreads();  // the previous item's tiles are consumed
      fetch_g(0, 0);
      if (nsteps > 1) load_pc(1, pc[1]);
      if (nsteps > 2) load_pc(2, pc[0]);
      store_diag(0);
      // step s (parity kPar = s % 2, so that pc's indices are compile-time): stage st = s % 2 is
      // multiplied while stage st ^ 1 takes step s + 1's G (cp.async) and P (pc[(s + 1) % 2], which
      // then takes step s + 3's loads)
      auto step = [&](int64_t s, auto par) {
        constexpr int kPar = decltype(par)::value, kNext = kPar ^ 1;
        if (s + 1 < nsteps) {
          fetch_g(s + 1, kNext);
          store_pc(pc[kNext], kNext);  // (stage kNext was last read by step s - 1, before its closing barrier)
          if (s + 3 < nsteps) load_pc(s + 3, pc[kNext]);
          cp_async_wait<1>();
        } else {
          cp_async_wait<0>();
        }
        __syncthreads();
        // [j][e] += sum_i P[i][j] G[i][e]: A = P^T (stored [i][j]), B = G (stored [i][e])
        const uint32_t so = kPar * kStageB;
        warp_mma_32x32_tile<kSwizzle, true, false, PS, GS, 64>(acc, a_p + so, b_g + so);
        if constexpr (kLo)
          warp_mma_32x32_tile<kSwizzle, true, false, PS, GS, 64>(acc, a_p + so, b_g + (kGlo - kG) + so);
        __syncthreads();
      };
      for (int64_t s = 0; s < nsteps; s += 2) {
        step(s, std::integral_constant<int, 0>{});
        if (s + 1 < nsteps) step(s + 1, std::integral_constant<int, 1>{});
      }
      if constexpr (kState) {  // (both stages free: the last step ended with a barrier)
        const StateStages stages{0, kStageB, kG, kStageB, kGlo - kG, 2 * kStageB};
        const int64_t b = d.b_of(bh), h = d.h_of(bh), eJ = J * d.C + CnJ;
        state_readout_mma<false, kSwizzle, PS, GS>(acc, smem_raw, stages, d, Kq + (bh * d.T + J * d.C) * d.Lp, CnJ,
                                                   static_cast<int>(d.T - eJ), a32 + h * d.L,
                                                   static_cast<const float*>(gr.p) + gr.at(b, h, 0, 0), gr.s[2], gr.s[3],
                                                   e0);
      }
      // (pairs of columns as 8-byte stores where E is even: in round 31's profile at BDH-base the
      // scalar stores and their address arithmetic were a fifth of the kernel's samples)
      if constexpr (kHeadSum) {
#pragma unroll
        for (int a = 0; a < 2; ++a)
#pragma unroll
          for (int b = 0; b < 4; ++b)
#pragma unroll
            for (int r = 0; r < 4; ++r) total[a][b][r] += acc[a][b][r];
        continue;
      }
      for_each_acc_pair(acc, wm, wn, [&](int j, int ec, float x0, float x1) {
        const int64_t e = e0 + ec;
        if (j >= CnJ || e >= d.E) return;
        float* o = dvp + (bh * d.T + J * d.C + j) * d.E + e;
        if (d.E % 2 == 0) {  // (e even, so e + 1 < E too)
          *reinterpret_cast<float2*>(o) = make_float2(x0, x1);
        } else {
          o[0] = x0;
          if (e + 1 < d.E) o[1] = x1;
        }
      });
    }  // (the pairs of the item)
    if constexpr (kHeadSum) {  // grad_v[b][0][t][e] (b = grp: the batch starts at pair 0)
      for_each_acc_pair(total, wm, wn, [&](int j, int ec, float x0, float x1) {
        const int64_t e = e0 + ec;
        if (j >= CnJ || e >= d.E) return;
        const int64_t go = gv.at(grp, 0, J * d.C + j, e);
        store<OutT>(const_cast<void*>(gv.p), go, x0);
        if (e + 1 < d.E) store<OutT>(const_cast<void*>(gv.p), go + gv.s[3], x1);
      });
    }
  }
}
// ---- a backward from a carried state: its share of W, U and <H, A_end> ------------------------
// With an initial state rho0 and an upstream final-state gradient GR, chunk c (tokens s_c .. e_c -
// 1, e_c = min((c + 1) C, T)) has H_c = (its value from 0) + a^(c C) rho0 and A_end_c = (its value
// from 0) + a^(T - e_c) GR, so that what bwd_local reads gains, per latent l (checked in float64
// against the recurrence by dev/cuda/state_terms.py):
//   W_t[l] += a_l^(c C) Y_t[l],        Y_t = rho0 G_t      (rho0 [L × E] by G_t: over E)
//   U_t[l] += a_l^(T - e_c) Z_t[l],    Z_t = GR v_t
//   <H_c, A_end_c>[l] += x1_c + x2_c + x3_c   (HdH's slot c: bwd_local weighs slot c by f(Cn_c),
//                                              the quadratic readback's collapsed slots alike)
//     x1_c = a^(c C) sum_{J>c} a^((J-1-c) C) SY_J,   SY_J = sum_{k in J} Xq_k ⊙ Y_k
//     x2_c = a^(T - e_c) sum_{J<c} a^((c-1-J) C) SZ_J,   SZ_J = sum_{j in J} Kq_j ⊙ Z_j
//     x3_c = a^(c C + T - e_c) <rho0[l, :], GR[l, :]>
// (Xq_k = Qp_k a^(k - s_J) and Kq_j = q_j a^(e_J - 1 - j): the operands norm_apply made.) Every
// exponent is >= 0, so a = 0 and a = 1 are exact.
// state_readback_mma (version 3): an item per (bh, 64 latents), contracted over E in slabs of up to
// 256 columns. Each state's rows go to the tensor cores as A from registers: a thread loads its own
// fragment elements of the slab (float32, straight from global memory: each state row is read once
// an item) and keeps them for all chunks as bf16 hi + lo (W and U keep float32-level accuracy, as the
// chunked path's split states do; 128 registers at 16 k steps). Warps 0-3 make Y = rho0 G_c^T, warps
// 4-7 Z = GR v_c^T, warp w & 3 the item's latents 16 (w & 3) .. + 15 by all 64 tokens of the chunk
// (m16n8k16, 8 token tiles). B (G's and v's [64 tokens][64 columns] bf16 tiles, swizzled) comes by
// cp.async in three stages fetched two steps ahead, a step = (chunk, 64 columns of the slab). A
// chunk's W and U rows and its keys (Xq for W, Kq for U) come by cp.async with the chunk's first
// step, into one of three epilogue buffers, so that their DRAM latency hides under two steps'
// products. After a chunk's last step each thread adds f ⊙ its accumulators into the W or U tile in
// shared memory (f = a^(c C) or a^(T - e_c) per latent), and sums key ⊙ accumulator per latent (its
// 16 tokens, then the 4 lanes of a latent by shuffles) into SY or SZ ([chunk][64]); after a barrier
// all threads write the tiles' rows back in 16-byte pieces. The dots <rho0, GR> per latent: warps
// 4-7 read rho0's elements beside their GR fragments' (float32 products, a latent's 4 lanes summed by
// shuffles). The next item's rows of both states are prefetched into the L2 at the item's start.
// After the last slab threads 0-63 walk the chunks once per latent (x2 ascending, x1 descending) and
// add x1 + x2 + x3 to HdH. Every sum is in a fixed order (the same bits every run). A state that is
// absent (null) leaves its warps idle. nC <= kStateReadbackMaxChunks (the dispatch's condition).
// Version 2 (round 41) kept the slab's rows as hi + lo planes in shared memory (128 KiB) and read W
// and U back in each chunk's epilogue with nothing in flight under them: 3.25 ms a launch at BDH-8k
// on an H100 (1.0 TB/s). Version 3 took 3.26 ms (round 42, call 2): one block of 8 warps per SM
// still waits on each item's own loads of its state rows (39 % of the stall cycles).
constexpr int kSrThreads = 256, kSrSlab = 256;          // a slab's columns: 16 k steps of A fragments
constexpr int kSrTile = 64 * 64 * 2;                    // G's or v's [64][64] bf16 tile: 8 KiB
constexpr int kSrStageCount = 3;                        // B stages, fetched two steps ahead
constexpr int kSrWS = 68, kSrKS = 72;                   // W / U tiles' row stride (floats), the keys' (bf16)
constexpr int kSrWTile = 64 * kSrWS * 4, kSrKTile = 64 * kSrKS * 2;
constexpr int kSrEpi = 2 * kSrWTile + 2 * kSrKTile;     // a chunk's [W, U, Xq, Kq] tiles: 52 KiB
constexpr int64_t kStateReadbackMaxChunks = 16;
// byte offsets: the stages [3][G, v], the epilogue buffers [3][W, U, Xq, Kq], the dots [64], SY and
// SZ [nC][64]
constexpr uint32_t kSrEpiAt = kSrStageCount * 2 * kSrTile, kSrDots = kSrEpiAt + 3 * kSrEpi;
constexpr uint32_t kSrSums = kSrDots + 64 * 4;
__host__ __device__ constexpr int state_readback_smem(int64_t nC) {
  return static_cast<int>(kSrSums + 2 * nC * 64 * 4);
}
static_assert(state_readback_smem(kStateReadbackMaxChunks) <= 227 * 1024, "state_readback_mma: shared memory");
// (a state's rows in pieces of k floats where its columns are contiguous, E % k == 0 and the pieces
// are 4 k-byte aligned: the fragments' 8-byte pairs, k = 2)
__device__ __forceinline__ bool state_rows_aligned(const Str4& x, int64_t E, int k) {
  return x.p == nullptr || (E % k == 0 && x.s[3] == 1 && x.s[2] % k == 0 && x.s[1] % k == 0 && x.s[0] % k == 0 &&
                            reinterpret_cast<uintptr_t>(x.p) % (4 * k) == 0);
}
__global__ void __launch_bounds__(kSrThreads, 1) state_readback_mma_kernel(
    Dims d, const bf16* gb, const bf16* vb, const bf16* Xq, const bf16* Kq, Str4 rho0, Str4 gr, const float* a32,
    float* W, float* U, float* HdH) {
  grid_dependency_wait();
  extern __shared__ __align__(128) unsigned char smem_raw[];
  float* dots = reinterpret_cast<float*>(smem_raw + kSrDots);  // [64]
  float* sy = reinterpret_cast<float*>(smem_raw + kSrSums);    // [nC][64]
  float* sz = sy + d.nC * 64;
  const uint32_t s0 = smem_addr(smem_raw);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, q = lane % 4;
  const bool has_y = rho0.p != nullptr, has_z = gr.p != nullptr;
  const bool zrole = warp >= 4;  // warps 4-7: Z (U), warps 0-3: Y (W)
  const int role = zrole ? 1 : 0, lw = 16 * (warp & 3);  // the warp's latents lw .. lw + 15 of the item
  const bool active = zrole ? has_z : has_y;
  // the warp's state, selected by value (a reference to either parameter put both on the stack)
  const float* zp = static_cast<const float*>(zrole ? gr.p : rho0.p);
  const int64_t zs0 = zrole ? gr.s[0] : rho0.s[0], zs1 = zrole ? gr.s[1] : rho0.s[1];
  const int64_t zs2 = zrole ? gr.s[2] : rho0.s[2], zs3 = zrole ? gr.s[3] : rho0.s[3];
  // B's lane address (G or v stored [token][column]: ldmatrix without .trans), stage 0, k 0
  const uint32_t b_lane = s0 + role * kSrTile + warp_mma_lane_b_tile<true, true>(lane, 0, 64);
  const int C = static_cast<int>(d.C);
  const int64_t nlt = d.Lp / 64, items = d.nC == 0 ? 0 : d.nbh * nlt;
  const bool pairs = state_rows_aligned(zrole ? gr : rho0, d.E, 2);
  const bool ypairs = state_rows_aligned(rho0, d.E, 2);
  const bool wu16 = d.L % 4 == 0 && reinterpret_cast<uintptr_t>(W) % 16 == 0 &&
                    reinterpret_cast<uintptr_t>(U) % 16 == 0;  // W's and U's rows in 16-byte pieces
  for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    const int64_t bh = item / nlt, l0 = item % nlt * 64, b = d.b_of(bh), h = d.h_of(bh), vr = d.v_row(bh);
    for (int64_t e_s = 0; e_s < d.Ep; e_s += kSrSlab) {
      const int ne = static_cast<int>(std::min<int64_t>(kSrSlab, d.Ep - e_s) / 64);
      const int nsteps = static_cast<int>(d.nC) * ne;  // (nC <= 16)
      __syncthreads();  // the previous slab's (or item's) stages, buffers, dots and sums are consumed
      // step s = (chunk s / ne, columns 64 (s % ne) of the slab): G's and v's tiles into stage s % 3,
      // two 16-byte pieces a thread and tile (rows tid / 8 and + 32, piece tid % 8; rows past the
      // chunk's tokens zero-filled); with a chunk's first step its W, U and key tiles into buffer c %
      // 3 (rows past Cn and latents past L zero-filled). An absent state's tiles are not fetched. One
      // commit group a step, empty past the last.
      auto fetch = [&](int s) {
        if (s < nsteps) {
          int tid = threadIdx.x;  // (opaque: the pieces' addresses are made here, not hoisted and
          asm volatile("" : "+r"(tid));  // kept in registers across the steps)
          const int c = s / ne, j = s - c * ne, st = s % kSrStageCount;
          const int Cn = static_cast<int>(d.chunk_len(c));
          const int64_t e0 = e_s + 64 * j;
#pragma unroll
          for (int k = 0; k < 4; ++k) {
            const int tile = k / 2, r = tid / 8 + 32 * (k % 2), pc = tid % 8;
            if (tile == 0 ? !has_y : !has_z) continue;
            const int64_t row = (tile == 0 ? bh : vr) * d.T + c * C + min(r, Cn - 1);
            cp_async16_u32(s0 + (2 * st + tile) * kSrTile + tile_offset<true>(r, pc, 64),
                           (tile == 0 ? gb : vb) + row * d.Ep + e0 + 8 * pc, r < Cn ? 16u : 0u);
          }
          if (j == 0) {
            unsigned char* buf = smem_raw + kSrEpiAt + (c % 3) * kSrEpi;
#pragma unroll
            for (int rl = 0; rl < 2; ++rl) {
              if (rl == 0 ? !has_y : !has_z) continue;
              const float* wu = rl == 0 ? W : U;
              unsigned char* wt = buf + rl * kSrWTile;
              if (wu16) {
#pragma unroll
                for (int k = 0; k < 4; ++k) {  // 16 pieces a row
                  const int p = tid + kSrThreads * k, i = p / 16, pc = p % 16;
                  const bool ok = i < Cn && l0 + 4 * pc < d.L;
                  cp_async16_u32(smem_addr(wt + (i * kSrWS + 4 * pc) * 4),
                                 ok ? wu + (bh * d.T + c * C + i) * d.L + l0 + 4 * pc : wu, ok ? 16u : 0u);
                }
              } else {
                for (int p = tid; p < 64 * 64; p += kSrThreads) {  // (4-byte pieces)
                  const int i = p / 64, lt = p % 64;
                  const bool ok = i < Cn && l0 + lt < d.L;
                  cp_async_small<4>(wt + (i * kSrWS + lt) * 4, ok ? wu + (bh * d.T + c * C + i) * d.L + l0 + lt : wu,
                                    ok);
                }
              }
              const bf16* keys = rl == 0 ? Xq : Kq;
#pragma unroll
              for (int k = 0; k < 2; ++k) {  // 8 pieces a row (the keys' rows are Lp long)
                const int p = tid + kSrThreads * k, i = p / 8, pc = p % 8;
                cp_async16_u32(smem_addr(buf + 2 * kSrWTile + rl * kSrKTile + (i * kSrKS + 8 * pc) * 2),
                               keys + (bh * d.T + c * C + min(i, Cn - 1)) * d.Lp + l0 + 8 * pc, i < Cn ? 16u : 0u);
              }
            }
          }
        }
        cp_async_commit();
      };
      fetch(0);
      fetch(1);
      // the thread's A fragments of the slab (mma.m16n8k16's A: rows g, g + 8 of the warp's 16
      // latents; columns 2 q, 2 q + 1 and + 8 of each k step), bf16 hi + lo; zeros past L and E
      uint32_t ahi[kSrSlab / 16][4], alo[kSrSlab / 16][4];
      const float* zrow[2];  // the thread's two rows (null past L)
      const float* yrow[2];  // warps 4-7 with both states: rho0's same rows, for the dots
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int64_t l = l0 + lw + g + 8 * r;
        zrow[r] = active && l < d.L ? zp + b * zs0 + h * zs1 + l * zs2 : nullptr;
        yrow[r] = zrole && has_y && has_z && l < d.L ? static_cast<const float*>(rho0.p) + rho0.at(b, h, l, 0) : nullptr;
      }
      float dot[2] = {0.0f, 0.0f};  // <rho0, GR> over the thread's columns of its two rows
#pragma unroll
      for (int kk = 0; kk < kSrSlab / 16; ++kk) {
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const float* row = zrow[r & 1];
          const float* yr = yrow[r & 1];
          const int64_t e = e_s + 16 * kk + 2 * q + 8 * (r >> 1);
          float x0 = 0.0f, x1 = 0.0f, y0 = 0.0f, y1 = 0.0f;
          if (row != nullptr && kk < 4 * ne) {
            if (pairs) {
              if (e < d.E) {
                const float2 u = *reinterpret_cast<const float2*>(row + e);
                x0 = u.x, x1 = u.y;
              }
            } else {
              if (e < d.E) x0 = row[e * zs3];
              if (e + 1 < d.E) x1 = row[(e + 1) * zs3];
            }
            if (yr != nullptr) {
              if (ypairs) {
                if (e < d.E) {
                  const float2 u = *reinterpret_cast<const float2*>(yr + e);
                  y0 = u.x, y1 = u.y;
                }
              } else {
                if (e < d.E) y0 = yr[e * rho0.s[3]];
                if (e + 1 < d.E) y1 = yr[(e + 1) * rho0.s[3]];
              }
              dot[r & 1] = fmaf(x1, y1, fmaf(x0, y0, dot[r & 1]));
            }
          }
          const __nv_bfloat162 hi = __floats2bfloat162_rn(x0, x1);
          const __nv_bfloat162 lo = __floats2bfloat162_rn(x0 - __low2float(hi), x1 - __high2float(hi));
          memcpy(&ahi[kk][r], &hi, 4);
          memcpy(&alo[kk][r], &lo, 4);
        }
      }
      if (zrole && has_y && has_z) {  // a latent's 4 lanes, then into dots (slab after slab)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
          dot[hf] += __shfl_xor_sync(0xffffffffu, dot[hf], 1);
          dot[hf] += __shfl_xor_sync(0xffffffffu, dot[hf], 2);
          if (q == 0) dots[lw + g + 8 * hf] = (e_s == 0 ? 0.0f : dots[lw + g + 8 * hf]) + dot[hf];
        }
      }
      // the next item's rows of both states (its first slab) into the L2 while this item runs
      if (e_s == 0 && item + gridDim.x < items) {
        const int64_t nx = item + gridDim.x, nbh = nx / nlt, nl0 = nx % nlt * 64, nb = d.b_of(nbh), nh = d.h_of(nbh);
#pragma unroll
        for (int k = 0; k < 2; ++k) {  // 128-byte lines: 8 a row of 256 columns
          const int line = tid + kSrThreads * k, r = line / 8;
          const int64_t l = nl0 + r, e = 32 * (line % 8);
          if (l < d.L && e < d.E) {
            if (has_y) prefetch_l2(static_cast<const float*>(rho0.p) + rho0.at(nb, nh, l, e));
            if (has_z) prefetch_l2(static_cast<const float*>(gr.p) + gr.at(nb, nh, l, e));
          }
        }
      }
      float acc[8][4] = {};
      // a step's products: k steps 4 j .. 4 j + 3 of the slab (j a constant: the fragments stay in
      // registers), B from stage st
      auto products = [&](auto jc, int st) {
        constexpr int j = decltype(jc)::value;
        const uint32_t bs = b_lane + static_cast<uint32_t>(st) * 2 * kSrTile;
#pragma unroll
        for (int k4 = 0; k4 < 4; ++k4) {
#pragma unroll
          for (int np = 0; np < 4; ++np) {  // tokens 16 np .. + 15: two 8-token tiles
            uint32_t bf[4];
            ldsm_x4_u32(bf, swizzled_k_step(bs, 16 * k4) + 2 * 16 * np * 64);
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
              mma_bf16_16816(acc[2 * np + hf], ahi[4 * j + k4], bf[2 * hf], bf[2 * hf + 1]);
              mma_bf16_16816(acc[2 * np + hf], alo[4 * j + k4], bf[2 * hf], bf[2 * hf + 1]);
            }
          }
        }
      };
      for (int s = 0; s < nsteps; ++s) {
        const int c = s / ne, j = s - c * ne;
        cp_async_wait<1>();  // this step's group (and, at j = 0, the chunk's W, U and keys)
        __syncthreads();     // everyone's; stage (s + 2) % 3 was last read at step s - 1
        fetch(s + 2);
        if (active) {
          const int st = s % kSrStageCount;
          switch (j) {
            case 0: products(std::integral_constant<int, 0>{}, st); break;
            case 1: products(std::integral_constant<int, 1>{}, st); break;
            case 2: products(std::integral_constant<int, 2>{}, st); break;
            default: products(std::integral_constant<int, 3>{}, st); break;
          }
        }
        if (j != ne - 1) continue;
        // the chunk's epilogue: f ⊙ the products into its W or U tile, the key-weighted column sums
        const int64_t t0 = int64_t{c} * C;
        const int Cn = static_cast<int>(d.chunk_len(c));
        unsigned char* buf = smem_raw + kSrEpiAt + (c % 3) * kSrEpi;
        if (active) {
          float* wt = reinterpret_cast<float*>(buf + role * kSrWTile);
          const bf16* kt = reinterpret_cast<const bf16*>(buf + 2 * kSrWTile + role * kSrKTile);
          float f[2], cs[2] = {0.0f, 0.0f};
#pragma unroll
          for (int hf = 0; hf < 2; ++hf) {
            const int64_t l = l0 + lw + g + 8 * hf;
            const int n = zrole ? static_cast<int>(d.T - (t0 + Cn)) : static_cast<int>(t0);
            f[hf] = l < d.L ? ipow(a32[h * d.L + l], n) : 0.0f;
          }
#pragma unroll
          for (int nt = 0; nt < 8; ++nt)
#pragma unroll
            for (int r = 0; r < 4; ++r) {
              const int i = 8 * nt + 2 * q + (r & 1), hf = r >> 1, lt = lw + g + 8 * hf;
              const float y = acc[nt][r];
              cs[hf] = fmaf(__bfloat162float(kt[i * kSrKS + lt]), y, cs[hf]);
              wt[i * kSrWS + lt] = fmaf(f[hf], y, wt[i * kSrWS + lt]);
              acc[nt][r] = 0.0f;  // (the next chunk's sums)
              if (r == 3) asm volatile("" ::: "memory");  // (a token tile's loads at a time: registers)
            }
#pragma unroll
          for (int hf = 0; hf < 2; ++hf) {
            cs[hf] += __shfl_xor_sync(0xffffffffu, cs[hf], 1);
            cs[hf] += __shfl_xor_sync(0xffffffffu, cs[hf], 2);
          }
          if (q == 0) {
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
              float* sum = (zrole ? sz : sy) + c * 64 + lw + g + 8 * hf;
              *sum = (e_s == 0 ? 0.0f : *sum) + cs[hf];
            }
          }
        }
        __syncthreads();  // the tiles complete
        // W's and U's rows back (rows < Cn; the buffer is refilled only after the next step's barrier)
        int tid = threadIdx.x;  // (opaque, as in fetch)
        asm volatile("" : "+r"(tid));
#pragma unroll
        for (int rl = 0; rl < 2; ++rl) {
          if (rl == 0 ? !has_y : !has_z) continue;
          float* wu = rl == 0 ? W : U;
          const float* wt = reinterpret_cast<const float*>(buf + rl * kSrWTile);
          if (wu16) {
#pragma unroll
            for (int k = 0; k < 4; ++k) {
              const int p = tid + kSrThreads * k, i = p / 16, pc = p % 16;
              if (i < Cn && l0 + 4 * pc < d.L)
                *reinterpret_cast<float4*>(wu + (bh * d.T + t0 + i) * d.L + l0 + 4 * pc) =
                    *reinterpret_cast<const float4*>(wt + i * kSrWS + 4 * pc);
            }
          } else {
            for (int p = tid; p < 64 * 64; p += kSrThreads) {
              const int i = p / 64, lt = p % 64;
              if (i < Cn && l0 + lt < d.L) wu[(bh * d.T + t0 + i) * d.L + l0 + lt] = wt[i * kSrWS + lt];
            }
          }
        }
      }
    }
    __syncthreads();  // SY, SZ and the dots complete
    if (tid < 64 && l0 + tid < d.L) {
      const int64_t l = l0 + tid, nC = d.nC;
      const float a = a32[h * d.L + l], aC = ipow(a, C), dot = dots[tid];
      float* hdh = HdH + bh * nC * d.L + l;
      // x2 (ascending: P_c = sum_{J<c} a^((c-1-J) C) SZ_J) and x3 first, then x1 (descending)
      float p = 0.0f;
      for (int64_t c = 0; c < nC; ++c) {
        const int64_t e_c = std::min((c + 1) * C, d.T);
        const float up = ipow(a, static_cast<int>(d.T - e_c));
        float x = 0.0f;
        if (has_z) x = up * p;
        if (has_y && has_z) x = fmaf(ipow(a, static_cast<int>(c * C)) * up, dot, x);
        hdh[c * d.L] += x;
        if (has_z) p = fmaf(aC, p, sz[c * 64 + tid]);
      }
      if (has_y) {
        float r = 0.0f;  // R_c = sum_{J>c} a^((J-1-c) C) SY_J
        for (int64_t c = nC - 1; c >= 0; --c) {
          hdh[c * d.L] += ipow(a, static_cast<int>(c * C)) * r;
          r = fmaf(aC, r, sy[c * 64 + tid]);
        }
      }
    }
  }
}
// ---- end of the quadratic backward's kernels

// The readback's kernel: quad_readback_wgmma_kernel where wgmma_runs (quadratic.cuh), unless
// built with -DRHOSCAN_QR_WGMMA=0; else quad_readback_mma_kernel. RHOSCAN_CUDA_READBACK=mma|wgmma
// (environment, read per call) forces either, wgmma only where it can run (for tests and A/B
// runs; another value counts as unset).
#ifndef RHOSCAN_QR_WGMMA
#define RHOSCAN_QR_WGMMA 1
#endif
inline bool readback_wgmma() { return wgmma_chosen("RHOSCAN_CUDA_READBACK", RHOSCAN_QR_WGMMA != 0); }
// quad_readback_wgmma's operand as A from registers (kRegA, the default) or from shared memory
// through its descriptor: -DRHOSCAN_QR_REGA=0 at build time, RHOSCAN_CUDA_READBACK_REGA=0|1
// (environment, per call) for the A/B.
#ifndef RHOSCAN_QR_REGA
#define RHOSCAN_QR_REGA 1
#endif
inline bool readback_rega() { return env_switch("RHOSCAN_CUDA_READBACK_REGA", RHOSCAN_QR_REGA != 0); }
// quad_readback_wgmma's item order (the kernel's Place): the chunks K inner, or the latent tiles
// inner (the default until an A/B decides): -DRHOSCAN_QR_CHUNKS_INNER=1 at build time,
// RHOSCAN_CUDA_READBACK_CHUNKS_INNER=0|1 (environment, per call). Either order computes every item
// alike: W, U and HdH' bit for bit the same (emulated). Round 28's Nsight DRAM bytes at BDH-8k:
// the readback moved 1.94 GB against the 1.63 GB of its arrays counted once (traffic_floor.py),
// the rest re-reads of Kq and Xq tiles that missed the L2.
#ifndef RHOSCAN_QR_CHUNKS_INNER
#define RHOSCAN_QR_CHUNKS_INNER 0
#endif
inline bool readback_chunks_inner() {
  return env_switch("RHOSCAN_CUDA_READBACK_CHUNKS_INNER", RHOSCAN_QR_CHUNKS_INNER != 0);
}

// The chunked backward's per-chunk M = G v^T (16-bit inputs) on tensor cores: cross_values_mma's
// diagonal items alone, into M's split 0, after pack_bf16 (o.gb, o.vb; o.glo, o.vlo for float16).
// The FFMA chunk_scores kernel it replaced there was bound by its two shared loads per FMA: 0.30 ms
// per backward at BDH-base on the H200 (6119d10), a fifth of that backward.
template <bool kLo>
void launch_diagonal_values(const Dims& d, const Operands16& o, float* M, cudaStream_t stream) {
  if (d.nbh == 0 || d.nC == 0) return;
  auto cv = cross_values_mma_kernel<kLo>;
  constexpr int cv_smem = cross_values_smem<kLo>();
  RHOSCAN_CUDA_CHECK(cudaFuncSetAttribute(cv, cudaFuncAttributeMaxDynamicSharedMemorySize, cv_smem));
  launch_kernel("cross_values_mma_kernel (diagonal)", cv, grid_for(d.nbh * d.nC), kCvThreads, cv_smem, stream, d, o.gb,
                o.vb, nullptr, nullptr, o.glo, o.vlo, M, true);
}

// The quadratic backward's products for one batch, after norm_scan (o.Xq, o.Kq), chunk_scores (P)
// and pack_bf16 (o.vb, o.gb), with the cross scores in Pcross: W (to dqp), U, HdH' and dvp, what
// bwd_local and dv_accumulate read. Grids: an item per block, grid-stride beyond 2^16 blocks
// (quad_readback_wgmma: as many blocks as fit at once, a persistent grid).
// kLo (float16): the split values' and keys' passes (o.vlo, o.glo, o.Kq_lo).
// M: bwd_local's per-chunk M = G v^T ([bh][nC][nsplit][C][C], split 0), written here by
// cross_values_mma's diagonal items. quad_dv_mma runs on dv_stream (the caller's stream, or a
// side stream that waited for it: side_streams.h), the others on stream.
// dv_head_sum: quad_dv_mma is not launched here (launch_quad_dv_head_sum writes grad_v instead).
// keys_ready (null: none): an event that the readback's stream waits for after cross_values_mma (the
// keys made on a side stream meanwhile: backward.cu).
// gr (grad_rho_out, bfloat16 only; not with dv_head_sum): quad_dv_mma's kState adds dv's share of it.
template <bool kLo>
void launch_quadratic_backward(const Dims& d, const float* a32, const Operands16& o, const float* P,
                               const bf16* Pcross, bf16* Mhi, bf16* Mlo, float* M, float* W, float* U, float* HdH,
                               float* dvp, cudaStream_t stream, cudaStream_t dv_stream, bool dv_head_sum = false,
                               cudaEvent_t keys_ready = nullptr, Str4 gr = Str4{}) {
  if (d.nbh == 0 || d.nC == 0) return;
  {
    auto cv = cross_values_mma_kernel<kLo>;
    constexpr int cv_smem = cross_values_smem<kLo>();
    RHOSCAN_CUDA_CHECK(cudaFuncSetAttribute(cv, cudaFuncAttributeMaxDynamicSharedMemorySize, cv_smem));
    launch_kernel("cross_values_mma_kernel", cv, grid_for(d.nbh * (cross_pairs(d.nC) + d.nC)), kCvThreads, cv_smem,
                  stream, d, o.gb, o.vb, Mhi, Mlo, o.glo, o.vlo, M, false);
  }
  if (keys_ready != nullptr) RHOSCAN_CUDA_CHECK(cudaStreamWaitEvent(stream, keys_ready, 0));
  // (persistent: quad_readback_wgmma's grid is as many blocks as fit at once, at most one per item,
  // so that each block's fetch cursor runs on across its items)
  auto readback = [&](const char* name, auto kernel, int smem, bool persistent, auto... order) {  // the same arguments
    RHOSCAN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    int64_t max_blocks = 1 << 16;
    if (persistent) {
      int dev = 0, sms = 0, per_sm = 0;
      RHOSCAN_CUDA_CHECK(cudaGetDevice(&dev));
      RHOSCAN_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
      RHOSCAN_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kQrThreads, smem));
      max_blocks = std::max<int64_t>(1, int64_t{sms} * per_sm);
    }
    launch_kernel(name, kernel, grid_for(d.nbh * d.nC * ((d.Lp + kQrLT - 1) / kQrLT), 1, max_blocks), kQrThreads,
                  smem, stream, d, Mhi, Mlo, o.Kq, o.Xq, a32, W, U, HdH, o.Kq_lo, order...);
  };
  if (readback_wgmma() && readback_rega())
    readback("quad_readback_wgmma_kernel", quad_readback_wgmma_kernel<kLo, 3, true>, quad_readback_wgmma_smem<kLo>(),
             true, readback_chunks_inner());
  else if (readback_wgmma())
    readback("quad_readback_wgmma_kernel", quad_readback_wgmma_kernel<kLo, 3, false>, quad_readback_wgmma_smem<kLo>(),
             true, readback_chunks_inner());
  else
    readback("quad_readback_mma_kernel", quad_readback_mma_kernel<kLo, RHOSCAN_QR_SWIZZLE != 0>,
             quad_readback_smem<kLo, RHOSCAN_QR_SWIZZLE != 0>(), false);
  if (dv_head_sum) return;
  const unsigned dv_grid = grid_for(d.nbh * d.nC * (d.Ep / kMmaET));
  if constexpr (!kLo) {
    if (gr.p != nullptr) {  // (dv's share of GR: kState)
      auto qd = quad_dv_mma_kernel<false, kQdSwizzle, float, false, true>;
      constexpr int qd_smem = quad_dv_smem<false>() + state_readout_extra_smem();
      RHOSCAN_CUDA_CHECK(cudaFuncSetAttribute(qd, cudaFuncAttributeMaxDynamicSharedMemorySize, qd_smem));
      launch_kernel("quad_dv_mma_kernel (from GR)", qd, dv_grid, kQdThreads, qd_smem, dv_stream, d, Pcross, P, o.gb,
                    dvp, o.glo, Str4{}, o.Kq, a32, gr);
      return;
    }
  }
  if (gr.p != nullptr) throw Error(ErrorKind::internal, "rhoscan.backward (cuda): the quadratic dv from GR is bfloat16 only");
  auto qd = quad_dv_mma_kernel<kLo>;
  constexpr int qd_smem = quad_dv_smem<kLo>();
  RHOSCAN_CUDA_CHECK(cudaFuncSetAttribute(qd, cudaFuncAttributeMaxDynamicSharedMemorySize, qd_smem));
  launch_kernel("quad_dv_mma_kernel", qd, dv_grid, kQdThreads, qd_smem, dv_stream, d, Pcross, P, o.gb, dvp, o.glo,
                Str4{}, static_cast<const bf16*>(nullptr), static_cast<const float*>(nullptr), Str4{});
}

// The carried state's share of W, U and HdH (state_readback_mma; bfloat16 only), after the readback
// wrote them and before bwd_local reads them. rho0 and gr: either may be absent.
inline void launch_state_readback(const Dims& d, const Operands16& o, const float* a32, Str4 rho0, Str4 gr, float* W,
                                  float* U, float* HdH, cudaStream_t stream) {
  if (d.nbh == 0 || d.nC == 0 || (rho0.p == nullptr && gr.p == nullptr)) return;
  if (d.nC > kStateReadbackMaxChunks)
    throw Error(ErrorKind::internal, "rhoscan.backward (cuda): state_readback_mma takes at most 16 chunks");
  const int smem = state_readback_smem(d.nC);
  RHOSCAN_CUDA_CHECK(cudaFuncSetAttribute(state_readback_mma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          state_readback_smem(kStateReadbackMaxChunks)));
  launch_kernel("state_readback_mma_kernel", state_readback_mma_kernel, grid_for(d.nbh * (d.Lp / 64)), kSrThreads, smem,
                stream, d, o.gb, o.vb, o.Xq, o.Kq, rho0, gr, a32, W, U, HdH);
}

// RHOSCAN_DV_HEAD_SUM: 1 (the default since round 36's A/B on an H100: at BDH-base quad_dv_mma
// 0.144 -> 0.109 ms over two backwards and dv_accumulate's 0.045 ms gone; forward+backward 0.64-0.69
// against 0.69-0.71 ms in three alternating rounds; forced at BDH-8k, 128 items, 3.95-4.02 against
// 3.93-3.94 ms, hence the item count below) lets quad_dv_mma sum the heads into grad_v itself
// (kHeadSum) where quad_dv_head_sum_applies; RHOSCAN_CUDA_DV_HEAD_SUM=0|1 (environment, per call)
// forces either (1: wherever it can run, whatever the item count: for the tests).
#ifndef RHOSCAN_DV_HEAD_SUM
#define RHOSCAN_DV_HEAD_SUM 1
#endif
// Where kHeadSum runs: Hv = 1 with the whole backward in one batch (pairs 0 .. B H - 1), and by
// default at least two items (batch row, chunk, 128 columns) per SM, since it has H times fewer items
// than the per-pair kernel (BDH-base: 384; BDH-8k: 128, which would leave half an H100 idle).
inline bool quad_dv_head_sum_applies(const Dims& d, int64_t B, int64_t Hv, bool one_batch) {
  if (Hv != 1 || !one_batch || d.bh0 != 0 || d.nbh != B * d.H || d.nC == 0 || d.Ep % kMmaET != 0) return false;
  if (const char* v = std::getenv("RHOSCAN_CUDA_DV_HEAD_SUM"); v != nullptr && std::strcmp(v, "1") == 0) return true;
  if (!env_switch("RHOSCAN_CUDA_DV_HEAD_SUM", RHOSCAN_DV_HEAD_SUM != 0)) return false;
  int dev = 0, sms = 0;
  RHOSCAN_CUDA_CHECK(cudaGetDevice(&dev));
  RHOSCAN_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  return B * d.nC * (d.Ep / kMmaET) >= 2 * int64_t{sms};
}
// quad_dv_mma with kHeadSum: grad_v (gv, OutT) of every batch row, after the value checks are
// settled (it writes an output).
template <bool kLo, typename OutT>
void launch_quad_dv_head_sum(const Dims& d, const bf16* Pcross, const float* P, const Operands16& o, Str4 gv,
                             cudaStream_t stream) {
  if (d.nbh == 0 || d.nC == 0) return;
  auto qd = quad_dv_mma_kernel<kLo, kQdSwizzle, OutT, true>;
  constexpr int qd_smem = quad_dv_smem<kLo>();
  RHOSCAN_CUDA_CHECK(cudaFuncSetAttribute(qd, cudaFuncAttributeMaxDynamicSharedMemorySize, qd_smem));
  launch_kernel("quad_dv_mma_kernel (head sum)", qd, grid_for(d.nbh / d.H * d.nC * (d.Ep / kMmaET)), kQdThreads,
                qd_smem, stream, d, Pcross, P, o.gb, static_cast<float*>(nullptr), o.glo, gv,
                static_cast<const bf16*>(nullptr), static_cast<const float*>(nullptr), Str4{});
}

}  // namespace rhoscan::cuda_detail
