// The fused chunked forward for small L on tensor cores (chunk_scan_mma): the chunk states and the
// chunk outputs of the bfloat16 forward in one kernel, the chunk-start states never leaving the
// block. Where it does not apply, the forward runs chunk_states_mma + chunk_output_mma
// (chunk_products.cuh).
#pragma once

#include "cuda/chunk_products.cuh"

namespace rhoscan::cuda_detail {

// ---- chunk_scan_mma: one block per (bh, 64 columns), the chunks in order -----------------------
// chunk_states_mma stores every chunk-start state H_c (bf16, [bh][nC][Lp][Ep]) only for
// chunk_output_mma to read it back once: at BDH-base (L = E = 256, T = 512) 100 MB each way per
// forward. Here a block keeps the state tile S (all Lp latents × 64 columns, float32) in its mma
// accumulators across the chunks and, per chunk c:
//   1. S rounded to bf16 (chunk_states' stores: __floats2bfloat162_rn of the accumulator pairs)
//      into a shared tile Sb;
//   2. ctx_c = Xq_c · Sb + Pm_c · v_c as chunk_output_mma computes it: float32 accumulators from
//      zero, the L contraction in k steps of 16 latents in increasing order, then the intra-chunk
//      product over all 64 token rows (Pm = bf16(P[i][j]) for j < i < Cn, else 0, selected, not
//      multiplied), the same rounding of the output;
//   3. S <- a^Cn ⊙ S + Kq_c^T v_c as chunk_states_mma: the rows scaled by ipow(a, C) or, at the last
//      chunk, ipow(a, Cn), then (Cn + 15) / 16 k steps of 16 tokens (the rows past Cn zero-filled).
// Each accumulator sees the same operands in the same mma sequence as in the two kernels, so ctx
// and the final state are theirs bit for bit (an m16n8k16 result depends on its 16 products, in k
// order, and its accumulator, not on where the warp tile lies; the host emulation compares the
// bits). Only which warp computes which 16×8 tile differs.
// The block's 8 warps: the state in 32×32 blocks (chunk_states' fragment layout), block sb = warp +
// 8 k at latents 32 (sb / 2), columns 32 (sb % 2): Lp / 16 blocks, one or two per warp (every warp
// busy at Lp = 128 and 256; warps 4-7 hold none at Lp = 64, one at 192); ctx in 16×32 blocks (tokens
// 16 (warp % 4), columns 32 (warp / 4)): every warp one. 64 columns, not 128 or 32: a 128-column
// state at Lp = 256 is 128 accumulators per thread of 256 (or a second Sb half: past the shared
// memory), and 32 columns would have each Xq and Kq tile (the bulk of a chunk's loads, common to
// the E tiles of a pair) fetched by twice the blocks, with half the warps idle in the context.
// Shared memory (kLp = Lp, the kernel's template parameter: compile-time strides): two stages of
// {Xq [64][kLp + 8], Kq [64][kLp + 8], v [64][72] bf16; P [64][72] float32}, Sb [kLp][72] bf16 and
// the rows' decay a^C, a^Cn: 224 KiB at Lp = 256, 100 KiB at Lp = 64; 1 block of 8 warps per SM
// (kScanMinBlocks). The rows padded by 8 bf16 (16 bytes): ldmatrix and the Sb stores without bank
// conflicts; P's rows by 8 floats: the fragment loads (float2, rows g) 2 wavefronts per warp.
// The intra-chunk weights go from P's float32 tile straight into A fragments (float2 loads,
// select, cvt): no bf16 copy, no barrier for it.
// Pipeline: the tiles of the next chunk (or, at an item's last chunk, of the block's next item's
// first) are fetched by cp.async right after the step's first barrier, into the stage that the
// previous step read, and land during this step's products. Two barriers per step: A (this
// chunk's tiles and Sb complete; the other stage free) and B (Sb read: the next step may rewrite
// it).
// Items (bh, column tile) by a running decomposition advanced by the grid (carry_add), column
// tiles only up to E (a tile past E would write nothing). 32-bit token rows and pair indices
// (scan_fit_32bit, else the launcher runs the two kernels); 64-bit element offsets.
constexpr int kScanThreads = 256;
constexpr int kScanET = 64;      // state / output columns per block
constexpr int kScanMaxLp = 256;  // the largest padded L the kernel takes (its state: 64 accumulators per thread)
// kSwizzle (the default; RHOSCAN_SCAN_SWIZZLE=0 at build time keeps the padded rows): the Xq,
// Kq, v and Sb tiles' rows unpadded, chunk c of row r at c ^ (r % 8) (mma.cuh's swizzled tiles),
// so that the cp.async fills write whole aligned 128-byte groups (Xq's and Kq's rows at Lp = 192
// are 3 groups: the XOR keeps bits 3 and up of the chunk, so any multiple of 64 works); the Sb
// stores from the accumulators stay conflict-free (the 8 rows g of a store at 8 chunks c ^ g, the
// 4 lanes tq in one chunk). P's float32 tile stays padded (its fragment loads are float2 by row g).
// The same products bit for bit (emulated). 20 KiB less shared memory at Lp = 256. H200, round 17
// (706f542's A/B, Nsight Compute durations, BDH-base's 4 launches): 0.492 against 0.506 ms.
#ifndef RHOSCAN_SCAN_SWIZZLE
#define RHOSCAN_SCAN_SWIZZLE 1
#endif
constexpr bool kScanSwizzle = RHOSCAN_SCAN_SWIZZLE != 0;
template <int kLp, bool kSwizzle = kScanSwizzle>
struct ScanLayout {
  static constexpr int XS = kSwizzle ? kLp : kLp + 8;             // Xq, Kq rows (bf16 elements)
  static constexpr int VS = kSwizzle ? kScanET : kScanET + 8;     // v, Sb rows (bf16 elements)
  static constexpr int PS = 64 + 8;          // P rows (floats)
  static constexpr uint32_t kXB = 2 * 64 * XS, kVB = 2 * 64 * VS, kPB = 4 * 64 * PS;  // tile bytes
  static constexpr uint32_t kK = kXB, kV = 2 * kXB, kP = 2 * kXB + kVB;               // in a stage
  static constexpr uint32_t kStageB = kP + kPB;
  static constexpr uint32_t kSb = 2 * kStageB, kDecay = kSb + 2 * kLp * VS;
  static constexpr int bytes = static_cast<int>(kDecay + 2 * kLp * sizeof(float));
  // every tile on a 128-byte boundary (the swizzle's groups)
  static_assert(kK % 128 == 0 && kV % 128 == 0 && kP % 128 == 0 && kStageB % 128 == 0 && kSb % 128 == 0, "");
};
static_assert(ScanLayout<kScanMaxLp, false>::bytes <= 227 * 1024, "chunk_scan_mma: shared memory past the H200's");
// Blocks per multiprocessor the registers are budgeted for: 1. At Lp = 64 two blocks would fit in
// shared memory, but within their 128 registers per thread ptxas (nvcc 13) spilled 4-60 bytes
// (with the fetch loops unrolled or not, b and h recomputed or held); not yet compared on the H200.
constexpr int kScanMinBlocks = 1;
// The kernel's 32-bit indices: token rows bh T + c C (nbh T < 2^31; hence bh nC too), pairs
// (bh0 + nbh < 2^30, b and h by a 32-bit division), column tiles and offsets inside a row (Lp, Ep <
// 2^24: the bounds of the other kernels' checks, far past what the kernel takes).
inline bool scan_fit_32bit(const Dims& d) {
  constexpr int64_t k24 = int64_t{1} << 24, k30 = int64_t{1} << 30, k31 = int64_t{1} << 31;
  return d.Lp < k24 && d.Ep < k24 && d.bh0 + d.nbh < k30 && d.nbh * d.T < k31;
}
// The copies of chunk c of item (fbh, column tile fet) into the stage at st, the same in both
// versions (every thread of the block; one commit group per call of the caller's): Xq's and Kq's 64
// rows of Lp latents and v's ET columns (token rows clamped to Cn - 1 and zero-filled past it, as
// chunk_states_mma and chunk_output_mma fetch them; v's columns past Ep zero-filled too: version 2's
// 128-column items may pass the packed rows), P's rows i < Cn (C floats each; the rest is never
// selected). Lay: the version's stage layout (tiles at kK, kV, kP, row strides XS, VS, PS).
template <typename Lay, bool kSwizzle, int kLp, int ET>
__device__ __forceinline__ void scan_fetch_chunk(uint32_t st, const Dims& d, const bf16* Xq, const bf16* Kq,
                                                 const bf16* vb, const float* P, int fbh, int fet, int c, int CnLast) {
  constexpr int NT = kScanThreads, PPR = kLp / 8, XS = Lay::XS, VS = Lay::VS, PS = Lay::PS;  // PPR: pieces a row
  const int tid = threadIdx.x, C = static_cast<int>(d.C), nC = static_cast<int>(d.nC), Lp = static_cast<int>(d.Lp);
  const int Cn = c == nC - 1 ? CnLast : C, tr = fbh * static_cast<int>(d.T) + c * C;  // first token row
#pragma unroll 1  // (unrolled, the pieces' addresses were hoisted and held across the step: registers)
  for (int r = 0; r < 64 * PPR / NT; ++r) {
    const int idx = tid + NT * r, i = idx / PPR, p = 8 * (idx - i * PPR);
    const int64_t o = static_cast<int64_t>(tr + min(i, Cn - 1)) * Lp + p;
    const uint32_t bytes = i < Cn ? 16u : 0u, dst = st + tile_offset<kSwizzle>(i, p / 8, XS);
    cp_async16_u32(dst, Xq + o, bytes);
    cp_async16_u32(dst + Lay::kK, Kq + o, bytes);
  }
  const int e0 = fet * ET;
  // v's first token row: pair fbh's packed row (its batch row's with Hv = 1, d.v_rows; never past
  // tr, so within scan_fit_32bit's bounds)
  const int vtr = tr + d.v_row_delta32(fbh) * static_cast<int>(d.T);
#pragma unroll 1
  for (int r = 0; r < 64 * (ET / 8) / NT; ++r) {
    const int idx = tid + NT * r, i = idx / (ET / 8), p = 8 * (idx % (ET / 8));
    const bool ok = i < Cn && e0 + p < d.Ep;
    cp_async16_u32(st + Lay::kV + tile_offset<kSwizzle>(i, p / 8, VS),
                   vb + (static_cast<int64_t>(vtr + min(i, Cn - 1)) * d.Ep + (ok ? e0 + p : 0)), ok ? 16u : 0u);
  }
  const float* Pc = P + static_cast<int64_t>(fbh * nC + c) * d.nsplit * C * C;
#pragma unroll 1
  for (int r = 0; r < 64 * 16 / NT; ++r) {
    const int idx = tid + NT * r, i = idx / 16, p = 4 * (idx % 16);
    if (i < Cn && p < C) cp_async16_u32(st + Lay::kP + 4 * (i * PS + p), Pc + i * C + p);
  }
}
// Xq, Kq: [bh][T][Lp] (norm_apply); vb: [v_row(bh)][T][Ep] (pack_bf16); P: [bh][c][nsplit][C][C], split 0
// the sum, 16-byte aligned, C % 4 == 0 (its rows by 16-byte cp.async); init, rho: float32
// [B,H,L,E] strided (init.p null: zeros; rho.p null: no final state); ctx: OutT [B,H,T,E] strided.
template <int kLp, typename OutT, bool kSwizzle = kScanSwizzle>
__global__ void __launch_bounds__(kScanThreads, kScanMinBlocks)
    chunk_scan_mma_kernel(Dims d, const bf16* Xq, const bf16* Kq, const bf16* vb, const float* P, const float* a32,
                          Str4 init, Str4 ctx, Str4 rho) {
  grid_dependency_wait();
  using Lay = ScanLayout<kLp, kSwizzle>;
  constexpr int XS = Lay::XS, VS = Lay::VS, PS = Lay::PS, NT = kScanThreads, ET = kScanET;
  constexpr int kBlocks = kLp / 16, kPer = (kBlocks + 7) / 8;  // the state's 32×32 blocks; per warp
  static_assert(kLp % 64 == 0 && kLp <= kScanMaxLp && NT == 256 && ET == 64, "the fixed pieces below");
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, tq = lane % 4;
  const int C = static_cast<int>(d.C), nC = static_cast<int>(d.nC);
  const int net = static_cast<int>((d.E + ET - 1) / ET);  // column tiles inside E
  if (net == 0) return;
  const int CnLast = nC > 0 ? static_cast<int>(d.chunk_len(nC - 1)) : 0;
  const uint32_t s0 = smem_addr(smem_raw);
  bf16* sb = reinterpret_cast<bf16*>(smem_raw + Lay::kSb);
  float* decay_s = reinterpret_cast<float*>(smem_raw + Lay::kDecay);  // [2][kLp]: a^C, a^Cn of the last chunk
  // the warp's state blocks (k < kPer): latents sm(k), columns sn(k) of the tile; held where sb < kBlocks
  auto sm = [&](int k) { return 32 * ((warp + 8 * k) >> 1); };
  auto sn = [&](int k) { return 32 * ((warp + 8 * k) & 1); };
  auto holds = [&](int k) { return warp + 8 * k < kBlocks; };
  const int cm = 16 * (warp & 3), cn = 32 * (warp >> 2);  // the warp's context block: tokens, columns
  // the lane's ldmatrix addresses in stage 0 (k step 0): the context's A (Xq [i][l]) and B (Sb [l][e],
  // v [j][e]); the state's A (Kq [i][l], transposed) and B (v [i][e]) per block
  const uint32_t a_ctx = s0 + warp_mma_lane_a_tile<kSwizzle, false>(lane, cm, XS);
  const uint32_t b_sb = s0 + Lay::kSb + warp_mma_lane_b_tile<kSwizzle, false>(lane, cn, VS);
  const uint32_t b_pv = s0 + Lay::kV + warp_mma_lane_b_tile<kSwizzle, false>(lane, cn, VS);
  uint32_t a_st[kPer], b_st[kPer];
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    a_st[k] = s0 + Lay::kK + warp_mma_lane_a_tile<kSwizzle, true>(lane, sm(k), XS);
    b_st[k] = s0 + Lay::kV + warp_mma_lane_b_tile<kSwizzle, false>(lane, sn(k), VS);
  }
  const float* init_p = static_cast<const float*>(init.p);
  float* rho_p = const_cast<float*>(static_cast<const float*>(rho.p));
  // the copies of chunk c of item (fbh, fet) into stage fst (scan_fetch_chunk)
  auto fetch = [&](int fst, int fbh, int fet, int c) {
    scan_fetch_chunk<Lay, kSwizzle, kLp, ET>(s0 + fst * Lay::kStageB, d, Xq, Kq, vb, P, fbh, fet, c, CnLast);
  };
  // items (bh, et), item = bh net + et, advanced by the grid
  const int grid = static_cast<int>(gridDim.x), det = grid % net, dbh = grid / net;
  auto advance = [&](int& bh, int& et) { bh += dbh + carry_add(et, det, 0, net); };
  int bh = static_cast<int>(blockIdx.x) / net, et = static_cast<int>(blockIdx.x) % net;
  if (bh < d.nbh && nC > 0) fetch(0, bh, et, 0);
  cp_async_commit();
  int stage = 0;  // the stage of the current chunk's tiles
  for (; bh < d.nbh; advance(bh, et)) {
    const int e0 = et * ET;
    // b, h of bh by one 32-bit division (bh0 + nbh < 2^30), again where needed (not held across the
    // steps: registers, a spill at Lp = 64)
    auto b_h = [&](int64_t& b, int64_t& h) {
      const uint32_t x = static_cast<uint32_t>(d.bh0 + bh), H = static_cast<uint32_t>(d.H), qh = x / H;
      b = qh, h = x - qh * H;
    };
    int64_t b, h;
    b_h(b, h);
    // the rows' decay: written after the previous item's last barrier B (its last reads are before it)
    for (int l = tid; l < kLp; l += NT) {
      const float al = l < d.L ? a32[h * d.L + l] : 0.0f;
      decay_s[l] = ipow(al, C);
      decay_s[kLp + l] = ipow(al, CnLast);
    }
    // accS[k][mt][nt][r]: the state at latent sm(k) + 16 mt + g + 8 (r / 2), column e0 + sn(k) + 8 nt + 2 tq + r % 2
    float accS[kPer][2][4][4];
#pragma unroll
    for (int k = 0; k < kPer; ++k)
      for_each_acc(accS[k], sm(k), sn(k), [&](int l, int ec, float& v) {
        const int64_t e = e0 + ec;
        v = (init_p && l < d.L && e < d.E) ? init_p[init.at(b, h, l, e)] : 0.0f;
      });
    for (int c = 0; c < nC; ++c) {
      const bool last = c == nC - 1;
      const int Cn = last ? CnLast : C;
      // 1. Sb = bf16(S) (its readers of the previous step passed barrier B)
#pragma unroll
      for (int k = 0; k < kPer; ++k) {
        if (!holds(k)) continue;
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
          for (int nt = 0; nt < 4; ++nt)
#pragma unroll
            for (int hf = 0; hf < 2; ++hf)
              *reinterpret_cast<__nv_bfloat162*>(reinterpret_cast<unsigned char*>(sb) +
                                                 tile_offset<kSwizzle>(sm(k) + 16 * mt + 8 * hf + g, (sn(k) + 8 * nt) / 8, VS) +
                                                 4 * tq) = __floats2bfloat162_rn(accS[k][mt][nt][2 * hf], accS[k][mt][nt][2 * hf + 1]);
      }
      cp_async_wait<0>();  // this thread's copies of chunk c (the only group in flight)
      __syncthreads();     // A: everyone's copies and Sb; the other stage's readers (step c - 1) done
      if (!last) {
        fetch(stage ^ 1, bh, et, c + 1);
      } else {  // the first chunk of the block's next item
        int nbh = bh, nt_ = et;
        advance(nbh, nt_);
        if (nbh < d.nbh) fetch(stage ^ 1, nbh, nt_, 0);
      }
      cp_async_commit();
      const uint32_t so = stage * Lay::kStageB;
      // 2a. ctx = Xq_c · Sb: k steps of 16 latents, increasing (chunk_output's 64-latent tiles in order);
      // swizzled, swizzled_k_step (mma.cuh) by 16 latents, as warp_mma_32x32_tile's A k steps
      float accC[4][4] = {};
#pragma unroll 4
      for (int kt = 0; kt < kLp / 16; ++kt) {
        uint32_t af[4];
        ldsm_x4_u32(af, (kSwizzle ? swizzled_k_step(a_ctx, 16 * kt) : a_ctx + 2 * 16 * kt) + so);
        warp_mma_16x32_k16_tile<kSwizzle>(accC, af, b_sb + 2 * 16 * VS * kt);
      }
      // 3. S <- a^Cn ⊙ S + Kq_c^T v_c (chunk_states' scaling and k steps)
#pragma unroll
      for (int k = 0; k < kPer; ++k) {
        if (!holds(k)) continue;
        const float* f = decay_s + (last ? kLp : 0) + sm(k) + g;
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
          for (int hf = 0; hf < 2; ++hf) {
            const float fx = f[16 * mt + 8 * hf];
#pragma unroll
            for (int nt = 0; nt < 4; ++nt) {
              accS[k][mt][nt][2 * hf] *= fx;
              accS[k][mt][nt][2 * hf + 1] *= fx;
            }
          }
        const int nk = (Cn + 15) / 16;
        constexpr uint32_t kKA = 2 * 16 * XS, kKV = 2 * 16 * VS;  // 16 tokens on in Kq's, v's tile
#pragma unroll 1
        for (int j = 0; j < nk; ++j)
          warp_mma_32x32_tile<kSwizzle, true, false, XS, VS, 16>(accS[k], a_st[k] + so + j * kKA, b_st[k] + so + j * kKV);
      }
      __syncthreads();  // B: Sb read
      // 2b. ctx += Pm_c · v_c over all 64 token rows (chunk_output's intra-chunk product); Pm's A
      // fragments from P's float32 rows: rows i, i + 8, columns j, j + 1 (a0, a1) and j + 8, j + 9 (a2, a3)
      const float* pt = reinterpret_cast<const float*>(smem_raw + so + Lay::kP);
      const int i0 = cm + g, i1 = i0 + 8;
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        const int j = 16 * kk + 2 * tq;
        auto pair = [&](int i, int jj) {
          const float2 w = *reinterpret_cast<const float2*>(pt + i * PS + jj);
          const bool in = i < Cn;
          const __nv_bfloat162 p = __floats2bfloat162_rn(in && jj < i ? w.x : 0.0f, in && jj + 1 < i ? w.y : 0.0f);
          return *reinterpret_cast<const uint32_t*>(&p);
        };
        const uint32_t af[4] = {pair(i0, j), pair(i1, j), pair(i0, j + 8), pair(i1, j + 8)};
        warp_mma_16x32_k16_tile<kSwizzle>(accC, af, b_pv + so + 2 * 16 * VS * kk);
      }
      // the context rows i < Cn, columns e < E (accC[nt][r]: token cm + g + 8 (r / 2), column
      // e0 + cn + 8 nt + 2 tq + r % 2), rounded as chunk_output's
      const int64_t t0 = static_cast<int64_t>(c) * C;
      b_h(b, h);
      OutT* row = nullptr;
      if constexpr (sizeof(OutT) == 2) {
        if (cm + 16 <= Cn && e0 + cn + 32 <= d.E && ctx.s[3] == 1 && ctx.s[2] % 2 == 0) {
          row = static_cast<OutT*>(const_cast<void*>(ctx.p)) + ctx.at(b, h, t0 + cm + g, e0 + cn + 2 * tq);
          if (reinterpret_cast<uintptr_t>(row) % 4 != 0) row = nullptr;
        }
      }
      if (row != nullptr) {  // packed pairs of 16-bit outputs, rows 8 s[2] apart
        struct alignas(4) Pair {
          OutT x, y;
        };
#pragma unroll
        for (int hf = 0; hf < 2; ++hf, row += 8 * ctx.s[2])
#pragma unroll
          for (int nt = 0; nt < 4; ++nt)
            *reinterpret_cast<Pair*>(row + 8 * nt) =
                Pair{from_float<OutT>(accC[nt][2 * hf]), from_float<OutT>(accC[nt][2 * hf + 1])};
      } else {
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            const int i = cm + g + 8 * (r / 2);
            const int64_t e = e0 + cn + 8 * nt + 2 * tq + r % 2;
            if (i < Cn && e < d.E) store<OutT>(const_cast<void*>(ctx.p), ctx.at(b, h, t0 + i, e), accC[nt][r]);
          }
      }
      stage ^= 1;
    }
    if (rho_p) {
      b_h(b, h);
#pragma unroll
      for (int k = 0; k < kPer; ++k) {
        if (!holds(k)) continue;
        for_each_acc(accS[k], sm(k), sn(k), [&](int l, int ec, float& v) {
          const int64_t e = e0 + ec;
          if (l < d.L && e < d.E) rho_p[rho.at(b, h, l, e)] = v;
        });
      }
    }
  }
}
// ---- chunk_scan_mma version 2: the state transposed, 128 columns a block ------------------------
// Version 1 is latency-bound: about 5 µs a chunk step against ~1.3 µs of its products at BDH-base
// (H200, ninth round), with two barriers a step (the state's bf16 copy Sb written, then read by
// every warp before the next copy) and 384 items of 8 steps on 132 multiprocessors at one block
// each: 24 steps in sequence per block. Version 2 keeps the state as S^T, columns × latents: warp w
// holds columns 16 w .. 16 w + 15 of the item's 128 against all Lp latents in mma accumulators
// (accT[n] the 16 × 8 tile of latents 8 n ..: Lp / 2 floats a thread), so that
//   - the context's state term ctx^T = S^T · Xq_c^T takes its A fragments straight from the
//     accumulators (mma.m16n8's C layout of two adjacent 8-latent tiles is the A layout of one
//     16-latent k step, rounded to bf16 pairs as Sb's stores round them): no Sb tile, no barrier
//     for it; B is Xq_c [token][latent] by ldmatrix;
//   - the state's decay is a^Cn per latent, the accumulators' columns: float2 pairs from the
//     decay table, applied to a k step's two tiles right after the context has taken them;
//   - the update S^T += v_c^T · Kq_c takes A = v_c^T (ldmatrix.trans of v [token][column]: the
//     warp's 16 columns) and B = Kq_c [token][latent] (ldmatrix.trans);
//   - the intra-chunk term ctx^T += v_c^T · Pm^T reuses those A fragments, B = Pm rows from P's
//     float32 tile (float2, select, cvt: version 1's A fragments of Pm, as B);
// one barrier a step (the chunk's tiles landed; the other stage's readers done). Each element
// gets version 1's operands in version 1's k order (the latents' k steps, then Pm's; the state's
// scaling, then its token k steps), with A and B exchanged: an m16n8k16 product's 16 terms are the
// same products, so the emulation (which sums each k step's terms exactly and rounds once) finds
// ctx and rho bit for bit version 1's; on the GPU the tensor cores' order inside a k step is
// assumed symmetric in A and B, which Cuda.ChunkScanVersionsAgree checks.
// 128 columns a block: 192 items at BDH-base (version 1: 384), every Xq and Kq tile fetched by half
// the blocks, 2.3 M multiply-adds a step per block. Costs: every warp reads the whole Xq and Kq
// tiles (ldmatrix: 8 × 64 KiB of shared-memory reads a step at Lp = 256) and all 64 rows of P (64
// float2 loads, selects and cvt a thread and step, where version 1's warps took 16 rows each).
// The context leaves the warps as columns × tokens: partner lanes (g, g ^ 1) exchange one value
// each (a shuffle) so that each stores 16-bit pairs of adjacent columns, as version 1 does.
// Shared memory at Lp = 256: two stages of {Xq, Kq [64][256], v [64][128] bf16, P [64][72]
// float32} and the decay a^C, a^Cn per latent for two items (the next item's written while a
// slower warp may still scale with the current one's): 200 KiB, 1 block of 8 warps per SM.
// The default since round 34 (written in round 32 without a GPU). Its A/B on an H100 (round 34,
// BDH-base, three alternating rounds): forward 0.18 ms against version 1's 0.21 every round,
// forward+backward 0.71 against 0.73-0.74; Nsight Compute, 4 launches: 0.419 against 0.518 ms,
// 86.0 M warp instructions against 149.4 M (bench/results/round34-2026-12-06/).
// RHOSCAN_CUDA_SCAN_VERSION=1 (environment, per call) or -DRHOSCAN_SCAN_VERSION=1 runs version 1.
constexpr int kScan2ET = 128;  // state / output columns per block (8 warps of 16)
template <int kLp>
struct Scan2Layout {
  static constexpr int XS = kLp, VS = kScan2ET, PS = 64 + 8;  // rows: Xq, Kq, v (bf16, swizzled), P (floats)
  static constexpr uint32_t kXB = 2 * 64 * XS, kVB = 2 * 64 * VS, kPB = 4 * 64 * PS;  // tile bytes
  static constexpr uint32_t kK = kXB, kV = 2 * kXB, kP = 2 * kXB + kVB;               // in a stage
  static constexpr uint32_t kStageB = kP + kPB;
  static constexpr uint32_t kDecay = 2 * kStageB;  // [item parity][a^C, a^Cn][kLp] floats
  static constexpr int PmS = 64 + 8;                // Pm's rows (bf16; padded: conflict-free ldmatrix)
  static constexpr uint32_t kPm = kDecay + 4 * kLp * sizeof(float);
  static constexpr int bytes = static_cast<int>(kPm + 2 * 64 * PmS);
  static_assert(kK % 128 == 0 && kV % 128 == 0 && kP % 128 == 0 && kStageB % 128 == 0 && kPm % 16 == 0,
                "swizzled tiles; Pm's rows 16-byte aligned");
};
static_assert(Scan2Layout<kScanMaxLp>::bytes <= 227 * 1024, "chunk_scan_mma v2: shared memory past the H200's");
template <int kLp, typename OutT>
__global__ void __launch_bounds__(kScanThreads, 1)
    chunk_scan_mma_v2_kernel(Dims d, const bf16* Xq, const bf16* Kq, const bf16* vb, const float* P, const float* a32,
                             Str4 init, Str4 ctx, Str4 rho) {
  grid_dependency_wait();
  using Lay = Scan2Layout<kLp>;
  constexpr int XS = Lay::XS, VS = Lay::VS, PS = Lay::PS, NT = kScanThreads, ET = kScan2ET;
  constexpr int NL = kLp / 8;   // the state's 8-latent tiles per warp
  static_assert(kLp % 64 == 0 && kLp <= kScanMaxLp && NT == 256 && ET == 128, "the fixed pieces below");
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, tq = lane % 4;
  const int C = static_cast<int>(d.C), nC = static_cast<int>(d.nC);
  const int net = static_cast<int>((d.E + ET - 1) / ET);  // column tiles inside E
  if (net == 0) return;
  const int CnLast = nC > 0 ? static_cast<int>(d.chunk_len(nC - 1)) : 0;
  const uint32_t s0 = smem_addr(smem_raw);
  float* decay_s = reinterpret_cast<float*>(smem_raw + Lay::kDecay);
  const int cw = 16 * warp;  // the warp's columns in the item
  // the lane's ldmatrix addresses in stage 0, as warp_mma_32x32_tile's (swizzled tiles):
  //   Xq [token n][latent k] as the context's B (not transposed): tokens 16 np .., latent k step by
  //   swizzled_k_step; Kq [token k][latent n] as the update's B (transposed): latents 16 p .. by
  //   swizzled_k_step, tokens 16 j .. by rows; v [token k][column m] as A = v^T (transposed): the
  //   warp's 16 columns, tokens 16 j .. by rows
  const uint32_t b_xq = s0 + tile_offset<true>((lane >> 4) * 8 + (lane & 7), (lane >> 3) & 1, XS);
  const uint32_t b_kq = s0 + Lay::kK + tile_offset<true>(((lane >> 3) & 1) * 8 + (lane & 7), lane >> 4, XS);
  const uint32_t a_v = s0 + Lay::kV + tile_offset<true>((lane >> 4) * 8 + (lane & 7), cw / 8 + ((lane >> 3) & 1), VS);
  //   Pm [token i][token j] (bf16, padded rows) as the intra-chunk term's B (not transposed)
  constexpr int PmS = Lay::PmS;
  const uint32_t b_pm = s0 + Lay::kPm + tile_offset<false>((lane >> 4) * 8 + (lane & 7), (lane >> 3) & 1, PmS);
  bf16* pm = reinterpret_cast<bf16*>(smem_raw + Lay::kPm);
  const float* init_p = static_cast<const float*>(init.p);
  float* rho_p = const_cast<float*>(static_cast<const float*>(rho.p));
  // the copies of chunk c of item (fbh, fet) into stage fst (scan_fetch_chunk, version 1's)
  auto fetch = [&](int fst, int fbh, int fet, int c) {
    scan_fetch_chunk<Lay, true, kLp, ET>(s0 + fst * Lay::kStageB, d, Xq, Kq, vb, P, fbh, fet, c, CnLast);
  };
  // items (bh, et), item = bh net + et, advanced by the grid
  const int grid = static_cast<int>(gridDim.x), det = grid % net, dbh = grid / net;
  auto advance = [&](int& bh, int& et) { bh += dbh + carry_add(et, det, 0, net); };
  int bh = static_cast<int>(blockIdx.x) / net, et = static_cast<int>(blockIdx.x) % net;
  if (bh < d.nbh && nC > 0) fetch(0, bh, et, 0);
  cp_async_commit();
  int stage = 0, parity = 0;  // the current chunk's stage; the item's decay slot
  for (; bh < d.nbh; advance(bh, et), parity ^= 1) {
    const int e0 = et * ET;
    auto b_h = [&](int64_t& b, int64_t& h) {
      const uint32_t x = static_cast<uint32_t>(d.bh0 + bh), H = static_cast<uint32_t>(d.H), qh = x / H;
      b = qh, h = x - qh * H;
    };
    int64_t b, h;
    b_h(b, h);
    // the decay of this item's latents, in its own slot: the previous item's readers (a slower warp
    // in its last step) use the other one; this slot's last readers (two items ago) are past the
    // barriers of the previous item's steps. Read after the next barrier.
    float* decay = decay_s + parity * 2 * kLp;
    for (int l = tid; l < kLp; l += NT) {
      const float al = l < d.L ? a32[h * d.L + l] : 0.0f;
      decay[l] = ipow(al, C);
      decay[kLp + l] = ipow(al, CnLast);
    }
    // accT[n][r]: the state at column e0 + cw + g + 8 (r / 2), latent 8 n + 2 tq + r % 2
    float accT[NL][4];
    const int ec = e0 + cw + g;
    // (a running pointer down each of the thread's two columns: the unrolled element loop's 64-bit
    // offsets took ptxas past 255 registers at Lp = 256)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int e = ec + 8 * hf;
      const bool col = init_p && e < d.E;
      const float* p = col ? init_p + init.at(b, h, 2 * tq, e) : nullptr;
#pragma unroll
      for (int n = 0; n < NL; ++n, p += col ? 8 * init.s[2] : 0) {
        const int l = 8 * n + 2 * tq;
        accT[n][2 * hf] = col && l < d.L ? p[0] : 0.0f;
        accT[n][2 * hf + 1] = col && l + 1 < d.L ? p[init.s[2]] : 0.0f;
      }
    }
    for (int c = 0; c < nC; ++c) {
      const bool last = c == nC - 1;
      const int Cn = last ? CnLast : C;
      cp_async_wait<0>();  // this thread's copies of chunk c (the only group in flight)
      __syncthreads();     // everyone's (and the decay); the other stage's readers (step c - 1) done
      if (!last) {
        fetch(stage ^ 1, bh, et, c + 1);
      } else {  // the first chunk of the block's next item
        int nbh = bh, nt_ = et;
        advance(nbh, nt_);
        if (nbh < d.nbh) fetch(stage ^ 1, nbh, nt_, 0);
      }
      cp_async_commit();
      const uint32_t so = stage * Lay::kStageB;
      // Pm = bf16(P[i][j]) for j < i < Cn, else 0 (version 1's selects and rounding), once for the
      // block: every warp's intra-chunk term reads all of it (its last readers, the previous step's,
      // are past the barrier above). Thread: pairs (i, j) with j even, a warp one row's 64 values.
      {
        const float* pt = reinterpret_cast<const float*>(smem_raw + so + Lay::kP);
#pragma unroll
        for (int r = 0; r < 64 * 32 / NT; ++r) {
          const int idx = tid + NT * r, i = idx / 32, j = 2 * (idx % 32);
          const float2 w = *reinterpret_cast<const float2*>(pt + i * PS + j);
          const bool in = i < Cn;
          *reinterpret_cast<__nv_bfloat162*>(pm + i * PmS + j) =
              __floats2bfloat162_rn(in && j < i ? w.x : 0.0f, in && j + 1 < i ? w.y : 0.0f);
        }
      }
      // 1. ctx^T = S^T · Xq_c^T: k steps of 16 latents, increasing (version 1's order), A from the
      // state's tiles 2 kt, 2 kt + 1 rounded to bf16, which are then scaled by a^Cn of their latents
      const float* f = decay + (last ? kLp : 0) + 2 * tq;
      float ctxT[8][4] = {};  // ctxT[nt][r]: column e0 + cw + g + 8 (r / 2), token 8 nt + 2 tq + r % 2
#pragma unroll
      for (int kt = 0; kt < kLp / 16; ++kt) {
        uint32_t af[4];
#pragma unroll
        for (int t = 0; t < 2; ++t)
#pragma unroll
          for (int hf = 0; hf < 2; ++hf) {
            const __nv_bfloat162 x = __floats2bfloat162_rn(accT[2 * kt + t][2 * hf], accT[2 * kt + t][2 * hf + 1]);
            af[2 * t + hf] = *reinterpret_cast<const uint32_t*>(&x);
          }
#pragma unroll
        for (int np = 0; np < 4; ++np) {  // tokens 16 np ..: B tiles 2 np, 2 np + 1
          uint32_t bf[4];
          ldsm_x4_u32(bf, swizzled_k_step(b_xq, 16 * kt) + so + 2 * 16 * np * XS);
          mma_bf16_16816(ctxT[2 * np], af, bf[0], bf[1]);
          mma_bf16_16816(ctxT[2 * np + 1], af, bf[2], bf[3]);
        }
#pragma unroll
        for (int t = 0; t < 2; ++t) {
          const float2 fx = *reinterpret_cast<const float2*>(f + 8 * (2 * kt + t));
          accT[2 * kt + t][0] *= fx.x, accT[2 * kt + t][1] *= fx.y;
          accT[2 * kt + t][2] *= fx.x, accT[2 * kt + t][3] *= fx.y;
        }
      }
      uint32_t av[4][4];  // v_c^T's A fragments, token steps 0..3 (also the update's)
#pragma unroll
      for (int j = 0; j < 4; ++j) ldsm_x4_trans_u32(av[j], a_v + so + 2 * 16 * j * VS);
      // 2. ctx^T += v_c^T · Pm^T over all 64 tokens j (version 1's intra-chunk product, A and B
      // exchanged): B = Pm [i][j] by ldmatrix, tokens i 16 np .., j 16 kk ..
      __syncthreads();  // Pm complete
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
#pragma unroll
        for (int np = 0; np < 4; ++np) {
          uint32_t bf[4];
          ldsm_x4_u32(bf, b_pm + 2 * (16 * np * PmS + 16 * kk));
          mma_bf16_16816(ctxT[2 * np], av[kk], bf[0], bf[1]);
          mma_bf16_16816(ctxT[2 * np + 1], av[kk], bf[2], bf[3]);
        }
      // the context rows i < Cn, columns e < E, rounded as version 1's: partner lanes (g even,
      // g + 1) exchange one value, so that the even lane holds token 8 nt + 2 tq at columns g, g + 1
      // and the odd one token 8 nt + 2 tq + 1 at columns g - 1, g (a 16-bit pair each)
      const int64_t t0 = static_cast<int64_t>(c) * C;
      b_h(b, h);
      const bool odd = g & 1;
      const int pc = cw + (g & ~1);  // the pair's first column in the item
      OutT* base = nullptr;
      if constexpr (sizeof(OutT) == 2) {
        if (Cn == 64 && e0 + cw + 16 <= d.E && ctx.s[3] == 1 && ctx.s[2] % 2 == 0) {
          base = static_cast<OutT*>(const_cast<void*>(ctx.p)) + ctx.at(b, h, t0, e0 + pc);
          if (reinterpret_cast<uintptr_t>(base) % 4 != 0) base = nullptr;
        }
      }
      // (base is warp-uniform, as the shuffles below need: the warp's columns, Cn, the strides, and
      // the pairs' alignment, the same for every lane's even column)
      if (base != nullptr) {
        struct alignas(4) Pair {
          OutT x, y;
        };
        OutT* row = base + (2 * tq + (odd ? 1 : 0)) * ctx.s[2];  // token 8 nt + 2 tq (+ 1 where odd)
#pragma unroll
        for (int nt = 0; nt < 8; ++nt, row += 8 * ctx.s[2])
#pragma unroll
          for (int hf = 0; hf < 2; ++hf) {
            const float x0 = ctxT[nt][2 * hf], x1 = ctxT[nt][2 * hf + 1];
            const float other = __shfl_xor_sync(0xffffffffu, odd ? x0 : x1, 4);
            *reinterpret_cast<Pair*>(row + 8 * hf) = Pair{from_float<OutT>(odd ? other : x0), from_float<OutT>(odd ? x1 : other)};
          }
      } else {
#pragma unroll
        for (int nt = 0; nt < 8; ++nt)
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            const int i = 8 * nt + 2 * tq + r % 2;
            const int64_t e = ec + 8 * (r / 2);
            if (i < Cn && e < d.E) store<OutT>(const_cast<void*>(ctx.p), ctx.at(b, h, t0 + i, e), ctxT[nt][r]);
          }
      }
      // 3. S^T += v_c^T · Kq_c, after the context is stored (its accumulators dead here): token k
      // steps j < (Cn + 15) / 16 (rows past Cn zero), increasing
      const int nk = (Cn + 15) / 16;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        if (j >= nk) break;
#pragma unroll
        for (int p = 0; p < kLp / 16; ++p) {  // latents 16 p ..: the state's tiles 2 p, 2 p + 1
          uint32_t bf[4];
          ldsm_x4_trans_u32(bf, swizzled_k_step(b_kq, 16 * p) + so + 2 * 16 * j * XS);
          mma_bf16_16816(accT[2 * p], av[j], bf[0], bf[1]);
          mma_bf16_16816(accT[2 * p + 1], av[j], bf[2], bf[3]);
        }
      }
      stage ^= 1;
    }
    if (rho_p) {
      b_h(b, h);
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int e = ec + 8 * hf;
        if (e >= d.E) continue;
        float* p = rho_p + rho.at(b, h, 2 * tq, e);
#pragma unroll
        for (int n = 0; n < NL; ++n, p += 8 * rho.s[2]) {
          const int l = 8 * n + 2 * tq;
          if (l < d.L) p[0] = accT[n][2 * hf];
          if (l + 1 < d.L) p[rho.s[2]] = accT[n][2 * hf + 1];
        }
      }
    }
  }
}
// ---- launchers (chunk_scan) -------------------------------------------------------------------

// RHOSCAN_FORWARD_SCAN: 1 (default) runs chunk_scan_mma where it applies, 0 always the two
// kernels (chunk_states_mma + chunk_output_mma), for the A/B.
#ifndef RHOSCAN_FORWARD_SCAN
#define RHOSCAN_FORWARD_SCAN 1
#endif
// Whether the forward runs chunk_scan_mma: bfloat16 (float16's split values would need second
// passes), Lp <= 256 (the state in registers), chunks of a multiple of 4 tokens (P's rows by
// 16-byte cp.async; the workspace's P is 256-byte aligned), and scan_fit_32bit for every batch of
// at most `pairs` pairs.
template <typename T>
bool scan_applies(const Dims& d, int64_t pairs) {
  if constexpr (!std::is_same_v<T, bf16> || !RHOSCAN_FORWARD_SCAN) {
    return false;
  } else {
    Dims all = d;
    all.bh0 = 0, all.nbh = pairs;
    return d.Lp <= kScanMaxLp && d.Lp % kMmaLT == 0 && d.C % 4 == 0 && scan_fit_32bit(all);
  }
}
// chunk_scan_mma's version: 2 (chunk_scan_mma_v2_kernel, the state transposed; the default since
// round 34's A/B) or 1 (chunk_scan_mma_kernel); -DRHOSCAN_SCAN_VERSION=n at build time,
// RHOSCAN_CUDA_SCAN_VERSION=1|2 (environment, per call; another value counts as unset).
#ifndef RHOSCAN_SCAN_VERSION
#define RHOSCAN_SCAN_VERSION 2
#endif
inline int scan_version() {
  if (const char* v = std::getenv("RHOSCAN_CUDA_SCAN_VERSION")) {
    if (std::strcmp(v, "1") == 0) return 1;
    if (std::strcmp(v, "2") == 0) return 2;
  }
  return RHOSCAN_SCAN_VERSION == 1 ? 1 : 2;
}
template <typename T>
void launch_chunk_scan(const Dims& d, const Operands16& o, const float* P, const float* a32, Str4 init, Str4 ctx,
                       Str4 rho, cudaStream_t stream) {
  if constexpr (std::is_same_v<T, bf16> && RHOSCAN_FORWARD_SCAN) {  // (else not compiled: scan_applies is false)
    if (reinterpret_cast<uintptr_t>(P) % 16 != 0)
      throw Error(ErrorKind::internal, "rhoscan.forward (cuda): chunk_scan_mma needs P 16-byte aligned");
    const bool v2 = scan_version() == 2;
    auto run = [&](auto lp) {
      constexpr int kLp = decltype(lp)::value;
      // as many blocks as fit at once (at most one per item): each block's cp.async pipeline runs on
      // across its items
      auto launch = [&](const char* name, auto kernel, int smem, int64_t columns) {
        RHOSCAN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        int dev = 0, sms = 0, per_sm = 0;
        RHOSCAN_CUDA_CHECK(cudaGetDevice(&dev));
        RHOSCAN_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
        RHOSCAN_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kScanThreads, smem));
        const int64_t items = d.nbh * ((d.E + columns - 1) / columns);
        launch_kernel(name, kernel, grid_for(items, 1, std::max<int64_t>(1, int64_t{sms} * per_sm)), kScanThreads,
                      smem, stream, d, o.Xq, o.Kq, o.vb, P, a32, init, ctx, rho);
      };
      if (v2)
        launch("chunk_scan_mma_v2_kernel", chunk_scan_mma_v2_kernel<kLp, T>, Scan2Layout<kLp>::bytes, kScan2ET);
      else
        launch("chunk_scan_mma_kernel", chunk_scan_mma_kernel<kLp, T>, ScanLayout<kLp>::bytes, kScanET);
    };
    switch (d.Lp) {
      case 64: run(std::integral_constant<int, 64>{}); break;
      case 128: run(std::integral_constant<int, 128>{}); break;
      case 192: run(std::integral_constant<int, 192>{}); break;
      case 256: run(std::integral_constant<int, 256>{}); break;
      default: throw Error(ErrorKind::internal, "rhoscan.forward (cuda): chunk_scan_mma with Lp past 256");
    }
  }
}

}  // namespace rhoscan::cuda_detail
