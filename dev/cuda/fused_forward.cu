// Prototype: the quadratic forward's cross-chunk scores and final state in ONE pass over q, against
// the float64 formulas, with a timing at BDH-8k. Not used by the library. Measured on an H100
// (round 38, bench/results/round38-2026-12-06/): correct, and moves the DRAM bytes designed (0.28 GB
// read, 0.26 GB written), but version 2 takes 0.80 ms against 0.43 ms for the two kernels it would
// replace: its phases (fetch, the keys' making, the products) run one after another in one block of
// 8 warps per SM. docs/CUDA.md ("What is left", thirty-eighth round) has the numbers and what a
// pipelined version would need.
//
// Why: at BDH-8k (B 8, H 4, T 512, L 8192, E 256, bfloat16) the forward moves 2.2 GB in six passes
// (dev/cuda/traffic_floor.py): `norm_scores_mma` reads q and writes the bf16 keys Xq and Kq
// (537 MB), `cross_scores_wgmma` reads both, `final_state_wgmma` reads Kq again. This kernel reads
// q, the token sums s and the chunk-start normalisers Nc (both from `norm_sums` + `norm_carry`,
// which stay) and makes the keys itself, in shared memory, where its products use them:
//   Pcross[I][J] = Xq_I · diag(a^(d C)) · Kq_Jᵀ   (J < I, d = I − J − 1; contraction over L)
//   rho_T        = Σ_J a^((nC−1−J) C) Kq_Jᵀ V_J   (contraction over T)
// with Xq = q / (s (N + eps)) a^i′ and Kq = q a^(C−1−j′), every exponent ≥ 0.
//
// Items (pair, group g of 4), one block of two warpgroups per SM: a group owns the cross blocks of
// row chunks 7 − g and g (7 blocks at nC = 8) and the final state's columns 64 g … 64 g + 63; the
// block walks all of L in 64-latent tiles, so the scores' contraction over L stays in its
// registers (4 accumulators of 64 × 64 per warpgroup; no L-split partials), and the final state's
// 64 × 64 tile is complete after each latent tile (its contraction is over T, all in the tile).
// Per tile: q [512 tokens × 64 latents] by cp.async one tile ahead (2 × 64 KiB), V's column
// quarter resident (64 KiB), Xq of the two row chunks formed by a walk of N from Nc (16 KiB),
// Kq formed in place of q; the keys' factors a^(d C) and the final state's a^((nC−1−J) C) applied
// to A fragments in registers (wgmma's RS form), the keys as B from shared memory.
// Fixed shape for the prototype: T = 512 (nC = 8), C = 64, L a multiple of 64, E = 256, Hv = 1,
// no initial state. (The library's `cross_scores_wgmma` + `final_state_wgmma` + the keys'
// share of `norm_scores_mma` are what it would replace; the intra-chunk blocks stay there.)
//
//   nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a -I src -I include dev/cuda/fused_forward.cu -o /tmp/fused_forward && /tmp/fused_forward
//
// Prints the checks (RMS relative error of Pcross and rho_T against float64 on two
// small problems, PASS under 1e-2), their BDH-8k timings and version 2's phase clocks; exit 1 on a
// failed check. --small: the checks only (for compute-sanitizer).
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "../../dev/cuda/harness.cuh"
#include "cuda/mma.cuh"

using namespace rhoscan::cuda_detail;

constexpr int kC = 64, kNC = 8, kT = kC * kNC, kE = 256, kThreads = 256;
constexpr float kEps = 1e-6f;
constexpr uint32_t kTile = 64 * 128;                  // one 64 × 64 bf16 tile, 128-byte swizzled rows
constexpr uint32_t kQStage = kNC * kTile;             // q (then Kq) of one latent tile: 64 KiB
constexpr uint32_t kOffV = 2 * kQStage;               // V's column quarter, [512 tokens][64]: 64 KiB
constexpr uint32_t kOffX = kOffV + kNC * kTile;       // Xq of the two row chunks (then the combine's floats)
constexpr uint32_t kOffFac = kOffX + 2 * kTile;       // a^(d C), d = 0..7, [8][64] floats
constexpr uint32_t kOffS = kOffFac + 8 * 64 * 4;      // the pair's s, [512] floats
constexpr uint32_t kSmemEnd = kOffS + kT * 4;

__host__ __device__ inline uint32_t swz(int row, int col) {  // byte offset of (row, col) in a tile
  return row * 128 + ((((col / 8) ^ (row % 8))) << 4) + 2 * (col % 8);
}
__device__ __forceinline__ uint32_t scale_pair(uint32_t u, float f0, float f1) {
  __nv_bfloat162 w;
  memcpy(&w, &u, sizeof u);
  const __nv_bfloat162 y = __floats2bfloat162_rn(__low2float(w) * f0, __high2float(w) * f1);
  memcpy(&u, &y, sizeof u);
  return u;
}

struct Params {
  const bf16* q;     // [pairs][T][L]
  const bf16* v;     // [B][T][E] (Hv = 1)
  const float* a;    // [H][L]
  const float* s;    // [pairs][T]
  const float* Nc;   // [pairs][nC][L]
  bf16* Pcross;      // [pairs][nC][nC][C][C], J < I written
  float* rho;        // [pairs][L][E]
  int pairs, H, L;
  long long* clk;    // version 2 with kPhases: per block, the clocks of its phases summed over tiles
};

// The group's cross blocks: 7 − g of row 7 − g, then g of row g; warpgroup 0 takes slots 0-3,
// warpgroup 1 slots 4-6.
__device__ __forceinline__ void block_of(int g, int slot, int& I, int& J) {
  if (slot < kNC - 1 - g) I = kNC - 1 - g, J = slot;
  else I = g, J = slot - (kNC - 1 - g);
}

// Version 2 (version 1, removed after round 38's calls 1-3, made q's powers, Xq's walk in two halves
// and the factors in float32: 493 M warp instructions a BDH-8k launch on an H100, 1.15 ms): fewer
// instructions per element:
// - the keys' powers a^n (n < 64) as a bf16 table per tile, built by warpgroup 1 while warpgroup 0
//   walks N for Xq (one thread per row chunk and latent, 64 tokens, no second walk of a half);
//   Kq = q · table in bf16 pairs (HMUL2: the power rounded to bf16 before the product, one
//   rounding more than version 1's);
// - the A fragments' factors as bf16 pairs (HMUL2 on the fragment registers);
// - fixed per-thread fetch addresses stepped by constants, Xq's swizzled addresses from eight
//   per-thread offsets.
constexpr uint32_t kOffPw = kSmemEnd;                      // a^n as bf16, [64 n][64 latents]: 8 KiB
constexpr uint32_t kOffFac2 = kOffPw + 64 * 128;           // a^(d C) as bf16 pairs, [8][32] words
constexpr uint32_t kSmemEnd2 = kOffFac2 + 8 * 32 * 4;
constexpr int kSmemBytes2 = static_cast<int>(kSmemEnd2 + kWgmmaAtom);
static_assert(kSmemBytes2 <= 227 * 1024, "version 2: one block per SM");

__device__ __forceinline__ uint32_t mul_bf16x2(uint32_t x, uint32_t f) {
  __nv_bfloat162 a, b;
  memcpy(&a, &x, 4), memcpy(&b, &f, 4);
  const __nv_bfloat162 y = __hmul2(a, b);
  uint32_t u;
  memcpy(&u, &y, 4);
  return u;
}
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 y = __floats2bfloat162_rn(lo, hi);
  uint32_t u;
  memcpy(&u, &y, 4);
  return u;
}

// kPhases: thread 0 of each block sums clock64() over its tiles per phase (the top barrier and
// fetch, Xq and the tables, Kq, the products, the final state's combine) into p.clk[block][5].
template <bool kPhases = false>
__global__ void __launch_bounds__(kThreads, 1) fused_cross_final_v2_kernel(Params p) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const uint32_t s_raw = smem_addr(smem_raw), s0 = (s_raw + kWgmmaAtom - 1) & ~(kWgmmaAtom - 1);
  unsigned char* base = smem_raw + (s0 - s_raw);
  float* fac = reinterpret_cast<float*>(base + kOffFac);
  uint32_t* fac2 = reinterpret_cast<uint32_t*>(base + kOffFac2);
  bf16* pwt = reinterpret_cast<bf16*>(base + kOffPw);
  float* ss = reinterpret_cast<float*>(base + kOffS);
  float* red = reinterpret_cast<float*>(base + kOffX);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g8 = lane / 4, tq = lane % 4;
  const int wg = warp / 4, w4 = warp % 4;
  const int L = p.L, ntiles = L / 64;
  // the fetch: this thread's pieces are rows tid / 8 + 32 k, 16-byte chunk tid % 8 (k < 16)
  const int fr = tid / 8, fc = tid % 8;
  const uint32_t fdst = fr * 128 + ((fc ^ (fr % 8)) << 4);
  for (int item = blockIdx.x; item < p.pairs * 4; item += gridDim.x) {
    const int bh = item / 4, grp = item % 4, b = bh / p.H, h = bh % p.H;
    const int I0 = kNC - 1 - grp, I1 = grp;
    const float* arow = p.a + int64_t(h) * L;
    __syncthreads();
    for (int t = tid; t < kT; t += kThreads) ss[t] = p.s[int64_t(bh) * kT + t];
    {
      const bf16* src = p.v + (int64_t(b) * kT + fr) * kE + 64 * grp + 8 * fc;
#pragma unroll
      for (int k = 0; k < 16; ++k) cp_async16_u32(s0 + kOffV + fdst + 4096 * k, src + int64_t(32 * k) * kE);
    }
    const bf16* qsrc = p.q + (int64_t(bh) * kT + fr) * L + 8 * fc;
    auto fetch_q = [&](int lt, int stage) {
      const bf16* src = qsrc + 64 * lt;
      const uint32_t dst = s0 + stage * kQStage + fdst;
#pragma unroll
      for (int k = 0; k < 16; ++k) cp_async16_u32(dst + 4096 * k, src + int64_t(32 * k) * L);
    };
    fetch_q(0, 0);
    cp_async_commit();
    float accC[4][32], accF[32];
#pragma unroll
    for (int k = 0; k < 4; ++k)
#pragma unroll
      for (int i = 0; i < 32; ++i) accC[k][i] = 0.0f;
    int cI[4], cJ[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) block_of(grp, 4 * wg + k < kNC - 1 ? 4 * wg + k : 0, cI[k], cJ[k]);
    long long ph[5] = {}, tc = clock64();
    auto mark = [&](int k) {
      if constexpr (kPhases) {
        const long long now = clock64();
        ph[k] += now - tc, tc = now;
      }
    };
    for (int lt = 0; lt < ntiles; ++lt) {
      cp_async_wait<0>();
      __syncthreads();
      if (lt + 1 < ntiles) fetch_q(lt + 1, (lt + 1) & 1);
      cp_async_commit();
      mark(0);
      const uint32_t qc = s0 + (lt & 1) * kQStage;
      unsigned char* Qc = base + (lt & 1) * kQStage;
      const int l0 = 64 * lt;
      if (wg == 0) {
        // -- Xq of the two row chunks: thread (chunk slot, latent), N walked from Nc over 64 tokens
        const int cs = tid / 64, l = tid & 63;
        const int I = cs ? I1 : I0;
        const float al = arow[l0 + l];
        float N = p.Nc[(int64_t(bh) * kNC + I) * L + l0 + l];
        const unsigned char* qt = Qc + I * kTile;
        unsigned char* xt = base + kOffX + cs * kTile;
        uint32_t off[8];
#pragma unroll
        for (int m = 0; m < 8; ++m) off[m] = ((((l >> 3) ^ m)) << 4) + 2 * (l & 7);
        const float* sI = ss + I * kC;
        float pw = 1.0f;
        // (each group of 8 tokens' q and s loaded before its arithmetic: the stores to Xq may alias
        // q's tile for the compiler, which then ordered every load after the previous store: call 3
        // measured this phase at 6.9 K cycles a tile, 108 a token)
#pragma unroll 2
        for (int i8 = 0; i8 < kC; i8 += 8) {
          float qv[8], sv[8];
#pragma unroll
          for (int m = 0; m < 8; ++m)
            qv[m] = __bfloat162float(*reinterpret_cast<const bf16*>(qt + (i8 + m) * 128 + off[m])), sv[m] = sI[i8 + m];
#pragma unroll
          for (int m = 0; m < 8; ++m) {
            const float qp = __fdividef(qv[m], sv[m] * (N + kEps));
            *reinterpret_cast<bf16*>(xt + (i8 + m) * 128 + off[m]) = __float2bfloat16_rn(qp * pw);
            N = al * N + qv[m], pw *= al;
          }
        }
      } else {
        // -- the tables: a^n (bf16) for the keys, a^(d C) (float and bf16 pairs) for the factors
        const int t = tid - 128, l = t & 63, half = t >> 6;  // exponents 32 half .. 32 half + 31
        const float al = arow[l0 + l];
        float x = ipow(al, 32 * half);
#pragma unroll 8
        for (int n = 0; n < 32; ++n, x *= al) pwt[(32 * half + n) * 64 + l] = __float2bfloat16_rn(x);
        if (half == 0) {
          const float aC = ipow(al, kC);
          float f = 1.0f;
#pragma unroll
          for (int d = 0; d < 8; ++d) fac[d * 64 + l] = f, f *= aC;
        }
      }
      __syncthreads();  // q read for Xq, the tables made
      mark(1);
      if (tid < 8 * 32) {  // (fac2: the factors as bf16 pairs, beside the keys)
        const int d = tid / 32, pr = tid % 32;
        fac2[d * 32 + pr] = pack_bf16x2(fac[d * 64 + 2 * pr], fac[d * 64 + 2 * pr + 1]);
      }
      // -- Kq in place: thread (16-byte piece c8, rows 16 rg .. 16 rg + 15), q · a^(63 - j') in bf16
      {
        const int c8 = tid & 7, rg = tid >> 3;
#pragma unroll 4
        for (int m = 0; m < 16; ++m) {
          const int row = 16 * rg + m, n = kC - 1 - (row & (kC - 1));
          uint4* ptr = reinterpret_cast<uint4*>(Qc + row * 128 + ((c8 ^ (m & 7)) << 4));
          const uint4 pw = *reinterpret_cast<const uint4*>(pwt + n * 64 + 8 * c8);
          uint4 x = *ptr;
          x.x = mul_bf16x2(x.x, pw.x), x.y = mul_bf16x2(x.y, pw.y), x.z = mul_bf16x2(x.z, pw.z), x.w = mul_bf16x2(x.w, pw.w);
          *ptr = x;
        }
      }
      fence_proxy_async();
      __syncthreads();
      mark(2);
#pragma unroll
      for (int i = 0; i < 32; ++i) accF[i] = 0.0f;
      uint32_t af[2][2][4];
      const int xrow = 16 * w4 + (lane & 15);
      const uint32_t xa0 = s0 + kOffX + xrow * 128 + (((lane >> 4) ^ (xrow & 7)) << 4);
      const int frow = (lane >> 4) * 8 + (lane & 7), fcol = 16 * w4 + ((lane >> 3) & 1) * 8;
      const uint32_t fa0 = qc + frow * 128 + (((fcol / 8) ^ (frow & 7)) << 4);
      const uint64_t desc_kq = wgmma_desc_sw128(qc, 0, kWgmmaAtom);
      const uint64_t desc_v = wgmma_desc_sw128(s0 + kOffV, kWgmmaAtom, kWgmmaAtom);
#pragma unroll
      for (int hs = 0; hs < 16; ++hs) {
        uint32_t(&a)[2][4] = af[hs & 1];
        const int step = hs / 2, half = hs % 2;
        if (step < 4) {
          const int ks = step;
#pragma unroll
          for (int kk = 0; kk < 2; ++kk) {
            const int k = 2 * half + kk;
            const int xs = cI[k] == I0 ? 0 : 1, dd = cI[k] - 1 - cJ[k];
            uint32_t x[4];
            ldsm_x4_u32(x, (xa0 + xs * kTile) ^ (32u * ks));
            const uint32_t f0 = fac2[dd * 32 + 8 * ks + tq], f1 = fac2[dd * 32 + 8 * ks + 4 + tq];
            a[kk][0] = mul_bf16x2(x[0], f0), a[kk][1] = mul_bf16x2(x[1], f0);
            a[kk][2] = mul_bf16x2(x[2], f1), a[kk][3] = mul_bf16x2(x[3], f1);
          }
          wgmma_fence();
#pragma unroll
          for (int kk = 0; kk < 2; ++kk) {
            const int k = 2 * half + kk;
            wgmma_m64n64k16_bf16_rs<0>(accC[k], a[kk], desc_kq + (cJ[k] * kTile >> 4) + 2 * ks);
          }
        } else {
          const int J = 4 * wg + (step - 4);
          const float fr0 = fac[(kNC - 1 - J) * 64 + 16 * w4 + g8], fr1 = fac[(kNC - 1 - J) * 64 + 16 * w4 + g8 + 8];
          const uint32_t f0 = pack_bf16x2(fr0, fr0), f1 = pack_bf16x2(fr1, fr1);
#pragma unroll
          for (int kk = 0; kk < 2; ++kk) {
            const int ks = 2 * half + kk;
            uint32_t x[4];
            ldsm_x4_trans_u32(x, fa0 + J * kTile + 2048 * ks);
            a[kk][0] = mul_bf16x2(x[0], f0), a[kk][1] = mul_bf16x2(x[1], f1);
            a[kk][2] = mul_bf16x2(x[2], f0), a[kk][3] = mul_bf16x2(x[3], f1);
          }
          wgmma_fence();
#pragma unroll
          for (int kk = 0; kk < 2; ++kk) {
            const int ks = 2 * half + kk;
            wgmma_m64n64k16_bf16_rs<1>(accF, a[kk], desc_v + ((J * kTile + 2048 * ks) >> 4));
          }
        }
        wgmma_commit();
        wgmma_wait<1>();
#pragma unroll
        for (int kk = 0; kk < 2; ++kk) wgmma_fence_operand(af[(hs + 1) & 1][kk]);
      }
      wgmma_wait<0>();
#pragma unroll
      for (int k = 0; k < 4; ++k) wgmma_fence_operand(accC[k]);
      wgmma_fence_operand(accF);
      mark(3);
      __syncthreads();
      if (wg == 0) {
#pragma unroll
        for (int i = 0; i < 32; i += 2) {
          const int m = 16 * w4 + g8 + 8 * ((i >> 1) & 1), n = 8 * (i >> 2) + 2 * tq;
          *reinterpret_cast<float2*>(red + m * 64 + (n ^ ((m & 7) << 3))) = make_float2(accF[i], accF[i + 1]);
        }
      }
      __syncthreads();
      if (wg == 1) {
        float* dst = p.rho + (int64_t(bh) * L + l0) * kE + 64 * grp;
#pragma unroll
        for (int i = 0; i < 32; i += 2) {
          const int m = 16 * w4 + g8 + 8 * ((i >> 1) & 1), n = 8 * (i >> 2) + 2 * tq;
          const float2 r = *reinterpret_cast<const float2*>(red + m * 64 + (n ^ ((m & 7) << 3)));
          *reinterpret_cast<float2*>(dst + m * kE + n) = make_float2(r.x + accF[i], r.y + accF[i + 1]);
        }
      }
      mark(4);
    }
    if (kPhases && tid == 0)
      for (int k = 0; k < 5; ++k) p.clk[blockIdx.x * 5 + k] += ph[k];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      if (4 * wg + k >= kNC - 1) continue;
      bf16* dst = p.Pcross + ((int64_t(bh) * kNC + cI[k]) * kNC + cJ[k]) * kC * kC;
#pragma unroll
      for (int i = 0; i < 32; i += 2) {
        const int r = 16 * w4 + g8 + 8 * ((i >> 1) & 1), c = 8 * (i >> 2) + 2 * tq;
        *reinterpret_cast<__nv_bfloat162*>(dst + r * kC + c) = __floats2bfloat162_rn(accC[k][i], accC[k][i + 1]);
      }
    }
  }
}

// ---- host -------------------------------------------------------------------------------------
struct Problem {
  int B, H, L;
  std::vector<bf16> q, v;
  std::vector<float> a, s, Nc;
  std::vector<float> qf, vf;  // the bf16 values as floats
};

static Problem make_problem(int B, int H, int L, uint32_t seed) {
  Problem pr{B, H, L, {}, {}, {}, {}, {}, {}, {}};
  const int P = B * H;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u01(0.0f, 1.0f), un(-1.0f, 1.0f);
  pr.q.resize(size_t(P) * kT * L), pr.qf.resize(pr.q.size());
  for (size_t i = 0; i < pr.q.size(); ++i) {  // ReLU-like: half zero
    const float x = u01(rng) < 0.5f ? 0.0f : u01(rng);
    pr.q[i] = __float2bfloat16(x), pr.qf[i] = __bfloat162float(pr.q[i]);
  }
  pr.v.resize(size_t(B) * kT * kE), pr.vf.resize(pr.v.size());
  for (size_t i = 0; i < pr.v.size(); ++i) pr.v[i] = __float2bfloat16(un(rng)), pr.vf[i] = __bfloat162float(pr.v[i]);
  pr.a.resize(size_t(H) * L);
  for (size_t i = 0; i < pr.a.size(); ++i) {
    const float x = u01(rng);
    pr.a[i] = i % 61 == 0 ? 0.0f : i % 67 == 0 ? 1.0f : 0.8f + 0.2f * x;  // a few exact 0 and 1
  }
  // s and the chunk-start N (float64, stored as float32: the library's norm_sums / norm_carry)
  pr.s.resize(size_t(P) * kT), pr.Nc.resize(size_t(P) * kNC * L);
  for (int bh = 0; bh < P; ++bh) {
    const float* qb = pr.qf.data() + size_t(bh) * kT * L;
    for (int t = 0; t < kT; ++t) {
      double sum = 0;
      for (int l = 0; l < L; ++l) sum += qb[size_t(t) * L + l];
      pr.s[size_t(bh) * kT + t] = static_cast<float>(sum + kEps);
    }
    const float* ab = pr.a.data() + size_t(bh % H) * L;
    for (int l = 0; l < L; ++l) {
      double N = 0;
      for (int t = 0; t < kT; ++t) {
        if (t % kC == 0) pr.Nc[(size_t(bh) * kNC + t / kC) * L + l] = static_cast<float>(N);
        N = ab[l] * N + qb[size_t(t) * L + l];
      }
    }
  }
  return pr;
}

struct Device {
  bf16 *q, *v, *Pcross;
  float *a, *s, *Nc, *rho;
};

static Device upload(const Problem& pr) {
  const int P = pr.B * pr.H;
  Device d{};
  CHECK(cudaMalloc(&d.q, pr.q.size() * sizeof(bf16)));
  CHECK(cudaMalloc(&d.v, pr.v.size() * sizeof(bf16)));
  CHECK(cudaMalloc(&d.a, pr.a.size() * sizeof(float)));
  CHECK(cudaMalloc(&d.s, pr.s.size() * sizeof(float)));
  CHECK(cudaMalloc(&d.Nc, pr.Nc.size() * sizeof(float)));
  CHECK(cudaMalloc(&d.Pcross, size_t(P) * kNC * kNC * kC * kC * sizeof(bf16)));
  CHECK(cudaMalloc(&d.rho, size_t(P) * pr.L * kE * sizeof(float)));
  CHECK(cudaMemcpy(d.q, pr.q.data(), pr.q.size() * sizeof(bf16), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d.v, pr.v.data(), pr.v.size() * sizeof(bf16), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d.a, pr.a.data(), pr.a.size() * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d.s, pr.s.data(), pr.s.size() * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d.Nc, pr.Nc.data(), pr.Nc.size() * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemset(d.Pcross, 0, size_t(P) * kNC * kNC * kC * kC * sizeof(bf16)));
  return d;
}

// clk: the phase-clock instantiation, its sums into clk
static void launch(const Problem& pr, const Device& d, int sms, long long* clk = nullptr) {
  Params p{d.q, d.v, d.a, d.s, d.Nc, d.Pcross, d.rho, pr.B * pr.H, pr.H, pr.L, clk};
  const int grid = std::min(pr.B * pr.H * 4, sms);
  if (clk) fused_cross_final_v2_kernel<true><<<grid, kThreads, kSmemBytes2>>>(p);
  else fused_cross_final_v2_kernel<false><<<grid, kThreads, kSmemBytes2>>>(p);
}

// float64 Pcross and rho_T of pair bh, compared with the device's: RMS relative errors.
static void check(const Problem& pr, const Device& d, double& err_p, double& err_r) {
  const int P = pr.B * pr.H, L = pr.L;
  std::vector<bf16> Pc(size_t(P) * kNC * kNC * kC * kC);
  std::vector<float> rho(size_t(P) * L * kE);
  CHECK(cudaMemcpy(Pc.data(), d.Pcross, Pc.size() * sizeof(bf16), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(rho.data(), d.rho, rho.size() * sizeof(float), cudaMemcpyDeviceToHost));
  double ep = 0, np = 0, er = 0, nr = 0;
  std::vector<double> Qp(size_t(kT) * L), pw(size_t(kT + 1) * L);
  for (int bh = 0; bh < P; ++bh) {
    const float* qb = pr.qf.data() + size_t(bh) * kT * L;
    const float* ab = pr.a.data() + size_t(bh % pr.H) * L;
    for (int l = 0; l < L; ++l) {
      double N = 0, x = 1;
      for (int t = 0; t < kT; ++t) {
        Qp[size_t(t) * L + l] = qb[size_t(t) * L + l] / (double(pr.s[size_t(bh) * kT + t]) * (N + kEps));
        N = ab[l] * N + qb[size_t(t) * L + l];
      }
      for (int n = 0; n <= kT; ++n, x *= ab[l]) pw[size_t(n) * L + l] = x;
    }
    for (int I = 1; I < kNC; ++I)
      for (int J = 0; J < I; ++J)
        for (int i = 0; i < kC; ++i)
          for (int j = 0; j < kC; ++j) {
            const int ti = I * kC + i, tj = J * kC + j, n = ti - 1 - tj;
            double sum = 0;
            for (int l = 0; l < L; ++l) sum += Qp[size_t(ti) * L + l] * pw[size_t(n) * L + l] * qb[size_t(tj) * L + l];
            const double got = __bfloat162float(Pc[((size_t(bh) * kNC + I) * kNC + J) * kC * kC + i * kC + j]);
            ep += (got - sum) * (got - sum), np += sum * sum;
          }
    const float* vb = pr.vf.data() + size_t(bh / pr.H) * kT * kE;
    for (int l = 0; l < L; ++l)
      for (int e = 0; e < kE; ++e) {
        double sum = 0;
        for (int t = 0; t < kT; ++t) sum += pw[size_t(kT - 1 - t) * L + l] * qb[size_t(t) * L + l] * vb[size_t(t) * kE + e];
        const double got = rho[(size_t(bh) * L + l) * kE + e];
        er += (got - sum) * (got - sum), nr += sum * sum;
      }
  }
  err_p = std::sqrt(ep / np), err_r = std::sqrt(er / nr);
}

int main(int argc, char** argv) {
  cudaDeviceProp prop;
  if (!first_device(prop)) return 0;
  const bool small_only = argc > 1 && std::strcmp(argv[1], "--small") == 0;
  CHECK(cudaFuncSetAttribute(fused_cross_final_v2_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes2));
  CHECK(cudaFuncSetAttribute(fused_cross_final_v2_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes2));
  {
    cudaFuncAttributes fa;
    CHECK(cudaFuncGetAttributes(&fa, fused_cross_final_v2_kernel<false>));
    std::printf("version 2: %d registers, %d bytes local, %d bytes dynamic shared\n", fa.numRegs,
                int(fa.localSizeBytes), kSmemBytes2);
  }
  bool ok = true;
  // the check: 2 pairs (B 1, H 2), L 256; then 3 pairs over a grid of 2 blocks (the item loop)
  for (int version : {2})
    for (int grid_limit : {0, 2}) {
      Problem pr = make_problem(grid_limit ? 3 : 1, grid_limit ? 1 : 2, 256, 7u + grid_limit);
      Device d = upload(pr);
      launch(pr, d, grid_limit ? grid_limit : prop.multiProcessorCount);
      CHECK(cudaDeviceSynchronize());
      CHECK(cudaGetLastError());
      double ep, er;
      check(pr, d, ep, er);
      const bool pass = ep < 1e-2 && er < 1e-2;
      ok = ok && pass;
      std::printf("check version %d B%d H%d L%d grid %s: Pcross RMS rel %.3e, rho RMS rel %.3e: %s\n", version, pr.B,
                  pr.H, pr.L, grid_limit ? "2" : "all", ep, er, pass ? "PASS" : "FAIL");
    }
  if (!small_only) {
    Problem pr = make_problem(8, 4, 8192, 11u);
    Device d = upload(pr);
    for (int version : {2}) {  // (Nsight: launches 5 and on are BDH-8k timed runs)
      auto ms = timed_launches(20, 3, [&] { launch(pr, d, prop.multiProcessorCount); });
      const double t = ms[ms.size() / 2];
      const double P = 32, L = 8192;
      const double flops = 2.0 * P * (28.0 * kC * kC * L + L * kE * kT);  // cross blocks + final state
      const double bytes = P * (kT * L * 2.0 + L * kE * 4.0) + 8.0 * kT * kE * 2;
      std::printf("version %d, BDH-8k (B8 H4 T512 L8192 E256): median %.4f ms (min %.4f, max %.4f) over %zu; %.0f "
                  "TFLOP/s, %.2f TB/s of q read once and rho written\n",
                  version, t, ms.front(), ms.back(), ms.size(), flops / t * 1e-9, bytes / t * 1e-9);
    }
    {  // version 2's phases (clock64 of thread 0 per block, summed over its tiles, averaged over blocks)
      const int grid = std::min(pr.B * pr.H * 4, prop.multiProcessorCount);
      long long* clk;
      CHECK(cudaMalloc(&clk, grid * 5 * sizeof(long long)));
      CHECK(cudaMemset(clk, 0, grid * 5 * sizeof(long long)));
      launch(pr, d, prop.multiProcessorCount, clk);
      CHECK(cudaDeviceSynchronize());
      std::vector<long long> h(grid * 5);
      CHECK(cudaMemcpy(h.data(), clk, h.size() * sizeof(long long), cudaMemcpyDeviceToHost));
      const char* names[5] = {"top barrier + fetch issue", "Xq walk + tables", "Kq in place", "products",
                              "final-state combine"};
      double total = 0, per[5] = {};
      for (int k = 0; k < 5; ++k) {
        for (int b = 0; b < grid; ++b) per[k] += double(h[b * 5 + k]) / grid;
        total += per[k];
      }
      const double tiles = pr.L / 64.0;
      std::printf("version 2 phases (cycles per tile, thread 0, mean over %d blocks):", grid);
      for (int k = 0; k < 5; ++k) std::printf(" %s %.0f (%.0f%%);", names[k], per[k] / tiles, 100 * per[k] / total);
      std::printf(" total %.0f\n", total / tiles);
    }
  }
  return ok ? 0 : 1;
}
