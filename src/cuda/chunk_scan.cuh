// The fused chunked forward for small L on tensor cores (chunk_scan_mma): the chunk states and the
// chunk outputs of the bfloat16 forward in one kernel, the chunk-start states never leaving the
// block. Where it does not apply, the forward runs chunk_states_mma + chunk_output_mma
// (chunk_products.cuh).
#pragma once

#include "cuda/chunk_products.cuh"
#include "cuda/quadratic.cuh"  // wgmma_chosen

namespace rhoscan::cuda_detail {

// ---- chunk_scan_mma: one block per (bh, 128 columns), the chunks in order ----------------------
// chunk_states_mma stores every chunk-start state H_c (bf16, [bh][nC][Lp][Ep]) only for
// chunk_output_mma to read it back once: at BDH-base (L = E = 256, T = 512) 100 MB each way per
// forward. Here a block keeps the state of its item in mma accumulators across the chunks and, per
// chunk c, computes what those two kernels compute from it, with the same operands in the same k
// order (so ctx and the final state are theirs bit for bit; the host emulation compares the bits):
//   1. ctx_c = Xq_c · bf16(S_c) + Pm_c · v_c: the L contraction in k steps of 16 latents in
//      increasing order, then the intra-chunk product over all 64 token rows (Pm = bf16(P[i][j]) for
//      j < i < Cn, else 0, selected, not multiplied), the output rounded as chunk_output_mma's;
//   2. S <- a^Cn ⊙ S + Kq_c^T v_c as chunk_states_mma: the rows scaled by ipow(a, C) or, at the last
//      chunk, ipow(a, Cn), then (Cn + 15) / 16 k steps of 16 tokens (the rows past Cn zero-filled).
// The state is kept transposed, S^T (columns × latents): warp w holds columns 16 w .. 16 w + 15 of
// the item's 128 against all Lp latents (accT[n], the 16 × 8 tile of latents 8 n ..: Lp / 2 floats
// a thread), so that
//   - the context's state term ctx^T = S^T · Xq_c^T takes its A fragments straight from the
//     accumulators (mma.m16n8's C layout of two adjacent 8-latent tiles is the A layout of one
//     16-latent k step, rounded to bf16 pairs as chunk_states_mma's stores round them); B is Xq_c
//     [token][latent] by ldmatrix;
//   - the state's decay is a^Cn per latent, the accumulators' columns: float2 pairs from the decay
//     table, applied to a k step's two tiles right after the context has taken them;
//   - the update S^T += v_c^T · Kq_c takes A = v_c^T (ldmatrix.trans of v [token][column]: the
//     warp's 16 columns) and B = Kq_c [token][latent] (ldmatrix.trans);
//   - the intra-chunk term ctx^T += v_c^T · Pm^T reuses those A fragments; Pm (bf16, masked) is made
//     once per step by the whole block from P's float32 tile (each warp needs all 64 rows), behind a
//     second barrier placed after the latent loop;
// and with A and B exchanged against the two kernels, an m16n8k16 product's 16 terms are the same
// products (the emulation, which sums each k step's terms exactly and rounds once, finds the bits
// equal; on the GPU, Cuda.ChunkScanMatchesTheTwoKernels holds the tensor cores to it).
// The context leaves the warps as columns × tokens: partner lanes (g, g ^ 1) exchange one value
// each (a shuffle) so that each stores 16-bit pairs of adjacent columns. The context is stored
// before the update, so that its accumulators are dead while the state's are updated.
// Pipeline: the tiles of the next chunk (or, at an item's last chunk, of the block's next item's
// first) are fetched by cp.async right after the step's first barrier, into the stage that the
// previous step read, and land during this step's products.
// Items (bh, column tile) by a running decomposition advanced by the grid (carry_add), column tiles
// only up to E. 32-bit token rows and pair indices (scan_fit_32bit, else the launcher runs the two
// kernels); 64-bit element offsets. Shared memory at Lp = 256: two stages of {Xq, Kq [64][256],
// v [64][128] bf16 (swizzled rows), P [64][72] float32}, the decay a^C, a^Cn per latent for two
// items (the next item's written while a slower warp may still scale with the current one's) and Pm:
// 209 KiB, 1 block of 8 warps per SM.
// History. Version 1 (round 9 to round 34; its code at 9ebbd14) kept S as latents × 64 columns in
// 32×32 blocks and wrote its bf16 copy Sb to shared memory for every warp to read back: two barriers
// a step, 384 items of 8 steps at BDH-base on 132 SMs, latency-bound (~5 µs a chunk step against
// ~1.3 µs of products on the H200). This version (round 32, then "version 2") measured on an H100 in
// round 34 (BDH-base, three alternating rounds): forward 0.18 ms against 0.21, forward+backward 0.71
// against 0.73-0.74; Nsight Compute over 4 launches 0.419 against 0.518 ms, 86.0 M warp instructions
// against 149.4 M (bench/results/round34-2026-12-06/). Version 1 was then removed.
constexpr int kScanThreads = 256;
constexpr int kScanMaxLp = 256;  // the largest padded L the kernel takes (its state: Lp / 2 floats a thread)
// The kernel's 32-bit indices: token rows bh T + c C (nbh T < 2^31; hence bh nC too), pairs
// (bh0 + nbh < 2^30, b and h by a 32-bit division), column tiles and offsets inside a row (Lp, Ep <
// 2^24: the bounds of the other kernels' checks, far past what the kernel takes).
inline bool scan_fit_32bit(const Dims& d) {
  constexpr int64_t k24 = int64_t{1} << 24, k30 = int64_t{1} << 30, k31 = int64_t{1} << 31;
  return d.Lp < k24 && d.Ep < k24 && d.bh0 + d.nbh < k30 && d.nbh * d.T < k31;
}
// The copies of chunk c of item (fbh, column tile fet) into the stage at st (every thread of the
// block; one commit group per call of the caller's): Xq's and Kq's 64 rows of Lp latents and v's ET
// columns (token rows clamped to Cn - 1 and zero-filled past it, as chunk_states_mma and
// chunk_output_mma fetch them; v's columns past Ep zero-filled too: a 128-column item may pass the
// packed rows), P's rows i < Cn (C floats each; the rest is never selected). Lay: the stage layout
// (tiles at kK, kV, kP, P's row stride PS; Lay::x_off (Xq, Kq) and Lay::v_off (v): the byte offset of
// token row r's 16-byte chunk c inside its tile, swizzled).
// kStepped (version 3's fetch since round 36's A/B on an H100: the kernel 0.152 against 0.160 ms over
// two launches at BDH-base, B8 T2048 L256's forward 0.23 against 0.24-0.25 ms): the same copies with
// the addresses stepped instead of recomputed. A thread's pieces of a tile are rows i0, i0 + R,
// i0 + 2 R .. of one 16-byte chunk (R = threads / pieces a row, a multiple of 8, so the swizzle's XOR is
// the same on each: Lay::kXRowB / kVRowB bytes a row), so each round adds constants to two pointers and
// a shared address, where the indexed loop divides, clamps and multiplies in 64 bits per piece (round
// 35's source profile: the fetch ~600 of a warp's ~1,600 instructions a chunk step, between the step's
// barrier and its products; stepped, 33.6 M warp instructions a forward instead of 39.1 M). Rows past
// Cn read the chunk's last row with 0 bytes, as the indexed loop's clamp. Lp = 192 (24 pieces a row:
// rows do not repeat per thread) keeps the indexed Xq / Kq loop. Version 2 keeps the indexed loops:
// stepped, it spilled 8 bytes at Lp = 256.
template <typename Lay, int kLp, int ET, bool kStepped = false>
__device__ __forceinline__ void scan_fetch_chunk(uint32_t st, const Dims& d, const bf16* Xq, const bf16* Kq,
                                                 const bf16* vb, const float* P, int fbh, int fet, int c, int CnLast) {
  constexpr int NT = kScanThreads, PPR = kLp / 8, PS = Lay::PS;  // PPR: pieces a row
  int tid = static_cast<int>(threadIdx.x);
  if constexpr (kStepped) {
    // the thread's index read afresh (a volatile read): what derives from it is computed here, not
    // hoisted out of the chunk loop and held through the products (32 bytes of spills at Lp = 256)
#if defined(__CUDA_ARCH__)
    asm volatile("mov.u32 %0, %%tid.x;\n" : "=r"(tid));
#endif
  }
  const int C = static_cast<int>(d.C), nC = static_cast<int>(d.nC), Lp = static_cast<int>(d.Lp);
  const int Cn = c == nC - 1 ? CnLast : C, tr = fbh * static_cast<int>(d.T) + c * C;  // first token row
  if constexpr (kStepped && NT % PPR == 0) {  // Xq, Kq: rows i0 + R r of the thread's chunk pc
    constexpr int R = NT / PPR;
    static_assert(R % 8 == 0, "the swizzle's XOR the same on a thread's rows");
    const int i0 = tid / PPR, pc = tid % PPR;
    const int64_t o0 = static_cast<int64_t>(tr + i0) * Lp + 8 * pc, ol = static_cast<int64_t>(tr + Cn - 1) * Lp + 8 * pc;
    const bf16 *xr = Xq + o0, *kr = Kq + o0;
    uint32_t dst = st + Lay::x_off(i0, pc);
#pragma unroll 1
    for (int i = i0; i < 64; i += R, xr += R * Lp, kr += R * Lp, dst += R * Lay::kXRowB) {
      const bool in = i < Cn;
      cp_async16_u32(dst, in ? xr : Xq + ol, in ? 16u : 0u);
      cp_async16_u32(dst + Lay::kK, in ? kr : Kq + ol, in ? 16u : 0u);
    }
  } else {
#pragma unroll 1  // (unrolled, the pieces' addresses were hoisted and held across the step: registers)
    for (int r = 0; r < 64 * PPR / NT; ++r) {
      const int idx = tid + NT * r, i = idx / PPR, p = 8 * (idx - i * PPR);
      const int64_t o = static_cast<int64_t>(tr + min(i, Cn - 1)) * Lp + p;
      const uint32_t bytes = i < Cn ? 16u : 0u, dst = st + Lay::x_off(i, p / 8);
      cp_async16_u32(dst, Xq + o, bytes);
      cp_async16_u32(dst + Lay::kK, Kq + o, bytes);
    }
  }
  const int e0 = fet * ET;
  // v's first token row: pair fbh's packed row (its batch row's with Hv = 1, d.v_rows; never past
  // tr, so within scan_fit_32bit's bounds)
  const int vtr = tr + d.v_row_delta32(fbh) * static_cast<int>(d.T);
  if constexpr (kStepped) {  // v: 16 rows a round (ET / 8 = 16 pieces a row), the thread's chunk pc
    constexpr int PV = ET / 8, R = NT / PV;
    static_assert(NT % PV == 0 && R % 8 == 0, "v's rows step by constants");
    const int i0 = tid / PV, pc = tid % PV;
    const bool col = e0 + 8 * pc < d.Ep;
    const bf16* vr = vb + (static_cast<int64_t>(vtr + i0) * d.Ep + (col ? e0 + 8 * pc : 0));
    const bf16* vl = vb + static_cast<int64_t>(vtr + Cn - 1) * d.Ep;
    uint32_t dst = st + Lay::kV + Lay::v_off(i0, pc);
#pragma unroll 1
    for (int i = i0; i < 64; i += R, vr += R * d.Ep, dst += R * Lay::kVRowB)
      cp_async16_u32(dst, i < Cn ? vr : vl, i < Cn && col ? 16u : 0u);
  } else {
#pragma unroll 1
    for (int r = 0; r < 64 * (ET / 8) / NT; ++r) {
      const int idx = tid + NT * r, i = idx / (ET / 8), p = 8 * (idx % (ET / 8));
      const bool ok = i < Cn && e0 + p < d.Ep;
      cp_async16_u32(st + Lay::kV + Lay::v_off(i, p / 8),
                     vb + (static_cast<int64_t>(vtr + min(i, Cn - 1)) * d.Ep + (ok ? e0 + p : 0)), ok ? 16u : 0u);
    }
  }
  const float* Pc = P + static_cast<int64_t>(fbh * nC + c) * d.nsplit * C * C;
  if constexpr (kStepped) {  // P: 16 rows a round, the thread's 4 floats p
    const int i0 = tid / 16, p = 4 * (tid % 16);
    const float* pr = Pc + i0 * C + p;
    uint32_t dst = st + Lay::kP + 4 * (i0 * PS + p);
#pragma unroll 1
    for (int i = i0; i < 64; i += 16, pr += 16 * C, dst += 4 * 16 * PS)
      if (i < Cn && p < C) cp_async16_u32(dst, pr);
  } else {
#pragma unroll 1
    for (int r = 0; r < 64 * 16 / NT; ++r) {
      const int idx = tid + NT * r, i = idx / 16, p = 4 * (idx % 16);
      if (i < Cn && p < C) cp_async16_u32(st + Lay::kP + 4 * (i * PS + p), Pc + i * C + p);
    }
  }
}
constexpr int kScan2ET = 128;  // state / output columns per block (8 warps of 16)
template <int kLp>
struct Scan2Layout {
  static constexpr int XS = kLp, VS = kScan2ET, PS = 64 + 8;  // rows: Xq, Kq, v (bf16, swizzled), P (floats)
  static __host__ __device__ constexpr uint32_t x_off(int r, int c) { return tile_offset<true>(r, c, XS); }
  static __host__ __device__ constexpr uint32_t v_off(int r, int c) { return tile_offset<true>(r, c, VS); }
  static constexpr uint32_t kXRowB = 2 * XS, kVRowB = 2 * VS;  // x_off / v_off from row r to r + 8 k: 8 k rows of these
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
// ---- the pieces versions 2 and 3 share (the same item, state and context layouts) -------------
// b, h of pair bh0 + bh by a 32-bit division (scan_fit_32bit); recomputed where used, not held
// across the chunk loop (registers)
__device__ __forceinline__ void scan_b_h(const Dims& d, int bh, int64_t& b, int64_t& h) {
  const uint32_t x = static_cast<uint32_t>(d.bh0 + bh), H = static_cast<uint32_t>(d.H), qh = x / H;
  b = qh, h = x - qh * H;
}
// The decay of the item's latents into decay: a^C at [l], the last chunk's a^Cn at [kLp + l]
template <int kLp>
__device__ __forceinline__ void scan_decays(const Dims& d, const float* a32, int bh, int C, int CnLast, float* decay) {
  int64_t b, h;
  scan_b_h(d, bh, b, h);
  for (int l = threadIdx.x; l < kLp; l += kScanThreads) {
    const float al = l < d.L ? a32[h * d.L + l] : 0.0f;
    decay[l] = ipow(al, C);
    decay[kLp + l] = ipow(al, CnLast);
  }
}
// The thread's state elements st(n, r) (column ec + 8 (r / 2), latent 8 n + 2 tq + r % 2, n < kLp / 8)
// from init (zeros where init.p is null, past L or past E), or (kStore) into rho where rho.p is set.
// (A running pointer down each of the thread's two columns: the unrolled element loop's 64-bit
// offsets took ptxas past 255 registers at Lp = 256.)
template <int kLp, bool kStore, typename St>
__device__ __forceinline__ void scan_state_io(const Dims& d, const Str4& t, int bh, int ec, int tq, St&& st) {
  float* tp = const_cast<float*>(static_cast<const float*>(t.p));
  if (kStore && tp == nullptr) return;
  int64_t b, h;
  scan_b_h(d, bh, b, h);
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const int e = ec + 8 * hf;
    const bool col = tp && e < d.E;
    if (kStore && !col) continue;
    float* p = col ? tp + t.at(b, h, 2 * tq, e) : nullptr;
#pragma unroll
    for (int n = 0; n < kLp / 8; ++n, p += col ? 8 * t.s[2] : 0) {
      const int l = 8 * n + 2 * tq;
      if constexpr (kStore) {
        if (l < d.L) p[0] = st(n, 2 * hf);
        if (l + 1 < d.L) p[t.s[2]] = st(n, 2 * hf + 1);
      } else {
        st(n, 2 * hf) = col && l < d.L ? p[0] : 0.0f;
        st(n, 2 * hf + 1) = col && l + 1 < d.L ? p[t.s[2]] : 0.0f;
      }
    }
  }
}
// The context of a chunk (tokens t0 .., Cn of them) from x(nt, r), the warp's 16 columns cw ..
// of the item at e0 against the chunk's 64 tokens (column e0 + cw + g + 8 (r / 2), token 8 nt + 2 tq
// + r % 2), rows i < Cn and columns e < E, rounded as chunk_output_mma's: partner lanes (g even, g + 1)
// exchange one value, so that the even lane holds token 8 nt + 2 tq at columns g, g + 1 and the odd
// one token 8 nt + 2 tq + 1 at columns g - 1, g (a 16-bit pair each).
template <typename OutT, typename X>
__device__ __forceinline__ void scan_store_context(const Dims& d, const Str4& ctx, int bh, int64_t t0, int Cn, int e0,
                                                   int cw, X&& x) {
  const int lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
  int64_t b, h;
  scan_b_h(d, bh, b, h);
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
        const float x0 = x(nt, 2 * hf), x1 = x(nt, 2 * hf + 1);
        const float other = __shfl_xor_sync(0xffffffffu, odd ? x0 : x1, 4);
        *reinterpret_cast<Pair*>(row + 8 * hf) = Pair{from_float<OutT>(odd ? other : x0), from_float<OutT>(odd ? x1 : other)};
      }
  } else {
    const int ec = e0 + cw + g;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int i = 8 * nt + 2 * tq + r % 2;
        const int64_t e = ec + 8 * (r / 2);
        if (i < Cn && e < d.E) store<OutT>(const_cast<void*>(ctx.p), ctx.at(b, h, t0 + i, e), x(nt, r));
      }
  }
}
// Pm = bf16(P[i][j]) for j < i < Cn, else 0 (chunk_output_mma's selects and rounding), from P's
// float32 tile pt (rows PS floats apart), once per step for the whole block: thread pairs (i, j)
// with j even, a warp one row's 64 values, stored at pm_at(i, j) (the kernel's Pm layout).
template <int PS, typename At>
__device__ __forceinline__ void scan_make_pm(const float* pt, int Cn, At&& pm_at) {
#pragma unroll
  for (int r = 0; r < 64 * 32 / kScanThreads; ++r) {
    const int idx = static_cast<int>(threadIdx.x) + kScanThreads * r, i = idx / 32, j = 2 * (idx % 32);
    const float2 w = *reinterpret_cast<const float2*>(pt + i * PS + j);
    const bool in = i < Cn;
    *pm_at(i, j) = __floats2bfloat162_rn(in && j < i ? w.x : 0.0f, in && j + 1 < i ? w.y : 0.0f);
  }
}
// Xq, Kq: [bh][T][Lp] (norm_apply); vb: [v_row(bh)][T][Ep] (pack_bf16); P: [bh][c][nsplit][C][C], split 0
// the sum, 16-byte aligned, C % 4 == 0 (its rows by 16-byte cp.async); init, rho: float32
// [B,H,L,E] strided (init.p null: zeros; rho.p null: no final state); ctx: OutT [B,H,T,E] strided.
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
  // the copies of chunk c of item (fbh, fet) into stage fst
  auto fetch = [&](int fst, int fbh, int fet, int c) {
    scan_fetch_chunk<Lay, kLp, ET>(s0 + fst * Lay::kStageB, d, Xq, Kq, vb, P, fbh, fet, c, CnLast);
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
    // the decay of this item's latents, in its own slot: the previous item's readers (a slower warp
    // in its last step) use the other one; this slot's last readers (two items ago) are past the
    // barriers of the previous item's steps. Read after the next barrier.
    float* decay = decay_s + parity * 2 * kLp;
    scan_decays<kLp>(d, a32, bh, C, CnLast, decay);
    // accT[n][r]: the state at column e0 + cw + g + 8 (r / 2), latent 8 n + 2 tq + r % 2
    float accT[NL][4];
    const int ec = e0 + cw + g;
    auto state = [&](int n, int r) -> float& { return accT[n][r]; };
    scan_state_io<kLp, false>(d, init, bh, ec, tq, state);
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
      // Pm, once for the block: every warp's intra-chunk term reads all of it (its last readers, the
      // previous step's, are past the barrier above)
      scan_make_pm<PS>(reinterpret_cast<const float*>(smem_raw + so + Lay::kP), Cn,
                       [&](int i, int j) { return reinterpret_cast<__nv_bfloat162*>(pm + i * PmS + j); });
      // 1. ctx^T = S^T · Xq_c^T: k steps of 16 latents, increasing (chunk_output_mma's order), A from the
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
      // 2. ctx^T += v_c^T · Pm^T over all 64 tokens j (chunk_output_mma's intra-chunk product, A and B
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
      scan_store_context<OutT>(d, ctx, bh, int64_t{c} * C, Cn, e0, cw, [&](int nt, int r) { return ctxT[nt][r]; });
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
    scan_state_io<kLp, true>(d, rho, bh, ec, tq, state);
  }
}
// ---- chunk_scan_mma version 3: version 2 on warpgroup MMA (thirty-fifth round; the default where
// wgmma runs) ----
// Version 2's items, fetch pipeline, state layout and arithmetic, with the products issued as wgmma
// (sm_90a) instead of mma.sync. In version 2 every warp reads the whole Xq and Kq tiles by ldmatrix
// for its 16 columns: 8 × (Xq + Kq) a step, 512 KiB of shared-memory reads at Lp = 256 (~4k clocks
// at 128 bytes a clock) beside ~2.3 µs of products. Here the block's two warpgroups (64 columns
// each; warp w still holds columns 16 w .. 16 w + 15 of the item, so the accumulators are version
// 2's registers) have the tensor cores read B from shared memory once per warpgroup:
//   1. ctx^T = S^T · Xq_c^T: A from registers (the state's tiles rounded to bf16 pairs, version 2's
//      fragments), B = Xq_c K-major (rows = tokens, 64 latents a 128-byte row): m64n64k16 per 16
//      latents, in groups of four (one 64-latent block), the fragments of two groups alive;
//   2. ctx^T += v_c^T · Pm^T: A = v_c^T from shared memory (M-major: v's rows are tokens, columns
//      contiguous), B = Pm K-major;
//   3. S^T += v_c^T · Kq_c: A as in 2, B = Kq_c N-major (rows = tokens, latents contiguous), one
//      m64n64k16 per 64-latent block and 16-token k step.
// Each element gets version 2's k steps in version 2's order (context: latents ascending, then the
// intra-chunk tokens ascending; state: tokens ascending), so the host emulation, which sums a k
// step's 16 terms exactly and rounds once for mma.sync and wgmma alike, finds version 2's bits.
// Tiles: Xq and Kq as Lp / 64 tiles of [64 tokens][64 latents], v as two [64 tokens][64 columns]
// (one per warpgroup), Pm [64][64]: 128-byte rows in the 128-byte swizzle on 1024-byte boundaries
// (wgmma_desc_sw128), the shared base rounded up (1008 bytes of slack). Shared memory at Lp = 256:
// 209 KiB, 1 block of 8 warps per SM, as version 2.
// Synchronisation (beside version 2's barriers): each thread's cp.async pieces and Pm's stores are
// handed to the tensor cores by fence_proxy_async before the barrier that publishes them; every
// product of a step is waited for before the step ends (the next step's fetch refills the stage
// it read, and its context reads the state).
// Measured on an H100 (round 35, bench/results/round35-2026-12-06/, three alternating rounds against
// version 2): BDH-base forward 0.17 against 0.19 ms, B8 T2048 L256 0.24-0.25 against 0.29, B32 T512
// L128 0.13-0.14 against 0.14-0.15; Nsight Compute at BDH-base 0.158 against 0.210 ms over two
// launches (39.1 M against 43.0 M warp instructions). Bitwise version 2's outputs on the GPU too
// (Cuda.ChunkScanWgmmaMatchesVersion2 on its five shapes).
template <int kLp>
struct Scan3Layout {
  static constexpr int PS = 64 + 8;  // P's rows (floats)
  static constexpr uint32_t kTileB = 64 * 128;  // a [64][64] bf16 tile
  // token row r's 16-byte chunk c (element 8 c) of a row of Lp latents (ET columns): tile c / 8
  static __host__ __device__ constexpr uint32_t x_off(int r, int c) {
    return (c / 8) * kTileB + tile_offset<true>(r, c % 8, 64);
  }
  static __host__ __device__ constexpr uint32_t v_off(int r, int c) { return x_off(r, c); }
  static constexpr uint32_t kXRowB = 128, kVRowB = 128;  // x_off / v_off from row r to r + 8 k: 8 k rows of these
  static constexpr uint32_t kXB = 128 * kLp, kVB = 2 * kTileB, kPB = 4 * 64 * PS;  // tile bytes
  static constexpr uint32_t kK = kXB, kV = 2 * kXB, kP = 2 * kXB + kVB;            // in a stage
  static constexpr uint32_t kStageB = kP + kPB;
  static constexpr uint32_t kPm = 2 * kStageB;        // Pm [64][64] bf16, swizzled
  static constexpr uint32_t kDecay = kPm + kTileB;    // [item parity][a^C, a^Cn][kLp] floats
  static constexpr int bytes = static_cast<int>(kDecay + 4 * kLp * sizeof(float)) + kWgmmaAtom - 16;
  static_assert(kK % kWgmmaAtom == 0 && kV % kWgmmaAtom == 0 && kP % kWgmmaAtom == 0 && kStageB % kWgmmaAtom == 0,
                "the tiles on 1024-byte boundaries");
};
static_assert(Scan3Layout<kScanMaxLp>::bytes <= 227 * 1024, "chunk_scan_mma v3: shared memory past the H200's");
// Arguments as chunk_scan_mma_v2_kernel's.
template <int kLp, typename OutT>
__global__ void __launch_bounds__(kScanThreads, 1)
    chunk_scan_wgmma_kernel(Dims d, const bf16* Xq, const bf16* Kq, const bf16* vb, const float* P, const float* a32,
                            Str4 init, Str4 ctx, Str4 rho) {
  grid_dependency_wait();
  using Lay = Scan3Layout<kLp>;
  constexpr int PS = Lay::PS, NT = kScanThreads, ET = kScan2ET;
  constexpr int NB = kLp / 64;  // 64-latent blocks: the state's accumulators acc[NB][32]
  static_assert(kLp % 64 == 0 && kLp <= kScanMaxLp && NT == 256 && ET == 128, "the fixed pieces below");
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const uint32_t s_raw = smem_addr(smem_raw), s0 = (s_raw + kWgmmaAtom - 1) & ~(kWgmmaAtom - 1);
  unsigned char* sm = smem_raw + (s0 - s_raw);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, tq = lane % 4, wg = warp / 4;
  const int C = static_cast<int>(d.C), nC = static_cast<int>(d.nC);
  const int net = static_cast<int>((d.E + ET - 1) / ET);  // column tiles inside E
  if (net == 0) return;
  const int CnLast = nC > 0 ? static_cast<int>(d.chunk_len(nC - 1)) : 0;
  float* decay_s = reinterpret_cast<float*>(sm + Lay::kDecay);
  unsigned char* pm = sm + Lay::kPm;  // Pm [64][64] bf16, swizzled
  const int cw = 16 * warp;  // the warp's columns in the item
  // stage 0's descriptors (a stage: + so / 16). Xq K-major (a 16-latent k step: 32 bytes; a 64-latent
  // block: a tile); Kq N-major (a 16-token k step: two atoms; a block: a tile); the warpgroup's v
  // columns M-major (a k step: two atoms); Pm K-major (a k step: 32 bytes).
  const uint64_t desc_xq = wgmma_desc_sw128(s0, 0, kWgmmaAtom);
  const uint64_t desc_kq = wgmma_desc_sw128(s0 + Lay::kK, kWgmmaAtom, kWgmmaAtom);
  const uint64_t desc_v = wgmma_desc_sw128(s0 + Lay::kV + wg * Lay::kTileB, kWgmmaAtom, kWgmmaAtom);
  const uint64_t desc_pm = wgmma_desc_sw128(s0 + Lay::kPm, 0, kWgmmaAtom);
  constexpr uint32_t kTileD = Lay::kTileB / 16, kAtoms2D = 2 * kWgmmaAtom / 16;  // in descriptor units
  auto fetch = [&](int fst, int fbh, int fet, int c) {
    scan_fetch_chunk<Lay, kLp, ET, true>(s0 + fst * Lay::kStageB, d, Xq, Kq, vb, P, fbh, fet, c, CnLast);
  };
  const int grid = static_cast<int>(gridDim.x), det = grid % net, dbh = grid / net;
  auto advance = [&](int& bh, int& et) { bh += dbh + carry_add(et, det, 0, net); };
  int bh = static_cast<int>(blockIdx.x) / net, et = static_cast<int>(blockIdx.x) % net;
  if (bh < d.nbh && nC > 0) fetch(0, bh, et, 0);
  cp_async_commit();
  int stage = 0, parity = 0;
  for (; bh < d.nbh; advance(bh, et), parity ^= 1) {
    const int e0 = et * ET;
    float* decay = decay_s + parity * 2 * kLp;  // (version 2's slots)
    scan_decays<kLp>(d, a32, bh, C, CnLast, decay);
    // acc[n / 8][4 (n % 8) + r] is version 2's accT[n][r]: column e0 + cw + g + 8 (r / 2), latent
    // 8 n + 2 tq + r % 2 (the wgmma accumulators of block n / 8)
    float acc[NB][32];
    auto st = [&](int n, int r) -> float& { return acc[n / 8][4 * (n % 8) + r]; };
    const int ec = e0 + cw + g;
    scan_state_io<kLp, false>(d, init, bh, ec, tq, st);
    for (int c = 0; c < nC; ++c) {
      const bool last = c == nC - 1;
      const int Cn = last ? CnLast : C;
      cp_async_wait<0>();  // this thread's copies of chunk c
      fence_proxy_async();  // ... visible to the tensor cores
      __syncthreads();      // everyone's (and the decay); the other stage's products (step c - 1) waited for
      if (!last) {
        fetch(stage ^ 1, bh, et, c + 1);
      } else {
        int nbh = bh, nt_ = et;
        advance(nbh, nt_);
        if (nbh < d.nbh) fetch(stage ^ 1, nbh, nt_, 0);
      }
      cp_async_commit();
      const uint32_t so = stage * Lay::kStageB;
      const uint64_t sd = so / 16;
      // Pm as version 2's, into the swizzled tile
      scan_make_pm<PS>(reinterpret_cast<const float*>(sm + so + Lay::kP), Cn, [&](int i, int j) {
        return reinterpret_cast<__nv_bfloat162*>(pm + tile_offset<true>(i, j / 8, 64) + 2 * (j % 8));
      });
      fence_proxy_async();
      // 1. ctx^T = S^T · Xq_c^T, a 64-latent block a group: its four k steps' A fragments (version 2's
      // af), then the block's tiles scaled by a^Cn; a group's fragments stay the tensor cores' until
      // the wait after the next group's commit
      const float* f = decay + (last ? kLp : 0) + 2 * tq;
      float ctxT[32];  // version 2's ctxT[nt][r] at 4 nt + r (column e0 + cw + g + 8 (r / 2), token 8 nt + 2 tq + r % 2)
#pragma unroll
      for (int i = 0; i < 32; ++i) ctxT[i] = 0.0f;
      uint32_t af[2][4][4];
#pragma unroll
      for (int kb = 0; kb < NB; ++kb) {
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const int kt = 4 * kb + k;
#pragma unroll
          for (int t = 0; t < 2; ++t)
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
              const __nv_bfloat162 x = __floats2bfloat162_rn(st(2 * kt + t, 2 * hf), st(2 * kt + t, 2 * hf + 1));
              af[kb & 1][k][2 * t + hf] = *reinterpret_cast<const uint32_t*>(&x);
            }
#pragma unroll
          for (int t = 0; t < 2; ++t) {
            const float2 fx = *reinterpret_cast<const float2*>(f + 8 * (2 * kt + t));
            st(2 * kt + t, 0) *= fx.x, st(2 * kt + t, 1) *= fx.y;
            st(2 * kt + t, 2) *= fx.x, st(2 * kt + t, 3) *= fx.y;
          }
        }
        wgmma_fence();
#pragma unroll
        for (int k = 0; k < 4; ++k) wgmma_m64n64k16_bf16_rs<0>(ctxT, af[kb & 1][k], desc_xq + sd + kb * kTileD + 2 * k);
        wgmma_commit();
        wgmma_wait<1>();  // the previous group's products: its fragments are free
#pragma unroll
        for (int k = 0; k < 4; ++k) wgmma_fence_operand(af[(kb + 1) & 1][k]);
      }
      // 2. ctx^T += v_c^T · Pm^T over all 64 tokens j (16 kk ..), after Pm is complete
      __syncthreads();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) wgmma_m64n64k16_bf16<1, 0>(ctxT, desc_v + sd + kk * kAtoms2D, desc_pm + 2 * kk);
      wgmma_commit();
      // 3. S^T += v_c^T · Kq_c: token k steps j < (Cn + 15) / 16, increasing (version 2's order per
      // element), each over the Lp / 64 tiles; issued before the context is stored, so that its
      // products run under the stores (the state's tiles were last scaled before the context's last
      // wgmma_fence: no other fence is due)
      const int nk = (Cn + 15) / 16;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        if (j >= nk) break;  // (block-uniform)
#pragma unroll
        for (int p = 0; p < NB; ++p)
          wgmma_m64n64k16_bf16<1, 1>(acc[p], desc_v + sd + j * kAtoms2D, desc_kq + sd + p * kTileD + j * kAtoms2D);
      }
      wgmma_commit();
      wgmma_wait<1>();  // the context's products (the update's may still run)
      wgmma_fence_operand(ctxT);
#pragma unroll
      for (int k = 0; k < 4; ++k) wgmma_fence_operand(af[0][k]), wgmma_fence_operand(af[1][k]);
      scan_store_context<OutT>(d, ctx, bh, int64_t{c} * C, Cn, e0, cw, [&](int nt, int r) { return ctxT[4 * nt + r]; });
      wgmma_wait<0>();  // the update's products: the next step refills this stage and reads the state
#pragma unroll
      for (int p = 0; p < NB; ++p) wgmma_fence_operand(acc[p]);
      stage ^= 1;
    }
    scan_state_io<kLp, true>(d, rho, bh, ec, tq, st);
  }
}
// ---- launchers (chunk_scan) -------------------------------------------------------------------

// RHOSCAN_FORWARD_SCAN: 1 (default) runs chunk_scan_mma where it applies, 0 always the two
// kernels (chunk_states_mma + chunk_output_mma); RHOSCAN_CUDA_FORWARD_SCAN=0|1 (environment, per
// call) for tests and A/B runs: Cuda.ChunkScanMatchesTheTwoKernels compares the two bitwise.
#ifndef RHOSCAN_FORWARD_SCAN
#define RHOSCAN_FORWARD_SCAN 1
#endif
// Whether the forward runs chunk_scan_mma: bfloat16 (float16's split values would need second
// passes), Lp <= 256 (the state in registers), chunks of a multiple of 4 tokens (P's rows by
// 16-byte cp.async; the workspace's P is 256-byte aligned), and scan_fit_32bit for every batch of
// at most `pairs` pairs. (Read once per forward: it decides the workspace too.)
template <typename T>
bool scan_applies(const Dims& d, int64_t pairs) {
  if constexpr (!std::is_same_v<T, bf16> || !RHOSCAN_FORWARD_SCAN) {
    return false;
  } else {
    Dims all = d;
    all.bh0 = 0, all.nbh = pairs;
    return d.Lp <= kScanMaxLp && d.Lp % kMmaLT == 0 && d.C % 4 == 0 && scan_fit_32bit(all) &&
           env_switch("RHOSCAN_CUDA_FORWARD_SCAN", true);
  }
}
// RHOSCAN_SCAN_WGMMA: 1 (default since round 35's A/B on an H100: BDH-base forward 0.17 against
// 0.19 ms every round, the kernel 0.158 against 0.210 ms over two launches) runs version 3
// (chunk_scan_wgmma_kernel) where wgmma runs (quadratic.cuh's wgmma_chosen: an sm_90a build on a
// compute capability 9.0 device), else version 2; 0 version 2 always; RHOSCAN_CUDA_SCAN=mma|wgmma
// (environment, per call) forces either.
#ifndef RHOSCAN_SCAN_WGMMA
#define RHOSCAN_SCAN_WGMMA 1
#endif
inline bool scan_wgmma() { return wgmma_chosen("RHOSCAN_CUDA_SCAN", RHOSCAN_SCAN_WGMMA != 0); }
template <typename T>
void launch_chunk_scan(const Dims& d, const Operands16& o, const float* P, const float* a32, Str4 init, Str4 ctx,
                       Str4 rho, cudaStream_t stream) {
  if constexpr (std::is_same_v<T, bf16> && RHOSCAN_FORWARD_SCAN) {  // (else not compiled: scan_applies is false)
    if (reinterpret_cast<uintptr_t>(P) % 16 != 0)
      throw Error(ErrorKind::internal, "rhoscan.forward (cuda): chunk_scan_mma needs P 16-byte aligned");
    auto run = [&](auto lp) {
      constexpr int kLp = decltype(lp)::value;
      // as many blocks as fit at once (at most one per item): each block's cp.async pipeline runs on
      // across its items
      const bool v3 = scan_wgmma();
      auto kernel = v3 ? chunk_scan_wgmma_kernel<kLp, T> : chunk_scan_mma_v2_kernel<kLp, T>;
      const int smem = v3 ? Scan3Layout<kLp>::bytes : Scan2Layout<kLp>::bytes;
      RHOSCAN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
      int dev = 0, sms = 0, per_sm = 0;
      RHOSCAN_CUDA_CHECK(cudaGetDevice(&dev));
      RHOSCAN_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
      RHOSCAN_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kScanThreads, smem));
      const int64_t items = d.nbh * ((d.E + kScan2ET - 1) / kScan2ET);
      launch_kernel(v3 ? "chunk_scan_wgmma_kernel" : "chunk_scan_mma_v2_kernel", kernel, grid_for(items, 1, std::max<int64_t>(1, int64_t{sms} * per_sm)),
                    kScanThreads, smem, stream, d, o.Xq, o.Kq, o.vb, P, a32, init, ctx, rho);
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
