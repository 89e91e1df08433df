// Prototype: the whole forward for short latent rows (BDH-base: L = 256) in ONE kernel that reads q
// once, against the float64 formulas, with a timing at BDH-base. Not used by the library. Measured
// on an H100 (round 38, call 5, bench/results/round38-2026-12-06/): correct, q read once and only
// the outputs written, but 0.237 ms against the library's 0.15 ms forward: ~1.3 K instructions per
// warp and step, most of them the walk and the triangles, made by both halves of E, at one block of
// 8 warps per SM. A version 2 (f2e3d17, call 6) made the next step under this step's products (the
// state's bf16 copy in shared memory as the readout's A, two operand sets, four stages): 0.262 ms
// against this version's 0.243 in the same call (75 M warp instructions against 66 M), removed: the
// warps' instructions, not the tensor cores, set the time. docs/CUDA.md ("What is left",
// thirty-eighth round) has the numbers.
//
// Why: at BDH-base (B 24, H 4, T 512, L 256, E 256, bfloat16) the forward is five passes and ten
// launches on an H100 (round 37, call 1: `chunk_scan_wgmma` 0.075 ms, `norm_scores_mma` 0.045,
// `norm_sums` 0.013, the small ones ~0.02; 0.15 ms in all) against a physical limit of ~0.019 ms: the
// token sums, the normaliser, the keys and the intra-chunk scores go through global memory between
// kernels that each run a fraction of a wave. Here one item (pair, half of E) walks the sequence
// in steps of 16 tokens with all of L in the block:
//   s_t      = Σ_l q_t[l] + eps                      (a warp per two tokens)
//   N, Qp    = the normaliser walked by a thread per latent, Qp = q / (s (N + eps))
//   Xq16     = Qp a^i′, Kq16 = q a^(15 − i′)         (i′ the token's index in its step)
//   P16[i][j] = Σ_l Qp_i a^(i−1−j) q_j (j < i)      the step's scores: its lower-left 8 × 8 quadrant
//              by mma.sync from Qp a^(i−8) and q a^(7−j), its two 8 × 8 triangles by FFMA in each
//              thread (its latent) summed over the block (a warp reduce-scatter, then the warps)
//   cᵀ       = Sᵀ · Xq16ᵀ + Vᵀ · P16ᵀ                (wgmma: the state as A from registers)
//   Sᵀ       ← a^16 ⊙ Sᵀ + Vᵀ · Kq16                 (wgmma m64n256k16; the state never leaves the SM)
// with every exponent ≥ 0. Sᵀ (the item's 128 columns of E × 256 latents, float32) is the two
// warpgroups' accumulators (128 registers a thread); a 16-token step keeps the intra-step block
// small enough for FFMA triangles and one mma.sync quadrant, where 64-token chunks need the
// three-level anchored split of `norm_scores_mma`.
// Fixed shape for the prototype: L = 256, E a multiple of 128, T a multiple of 16, Hv = 1, no
// initial state. Outputs: context, rho_T, rho_norm. (The library's saved buffer would also want s,
// the chunk-start N and the 64-token P; not made here.)
//
//   nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a -I src -I include dev/cuda/fused_scan.cu -o /tmp/fused_scan && /tmp/fused_scan
//
// Prints the checks (RMS relative error of context, rho_T and rho_norm against float64 on small
// problems, PASS under 1e-2) and the BDH-base timing; exit 1 on a failed check. --small: the
// checks only (for compute-sanitizer).
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "../../dev/cuda/harness.cuh"
#include "cuda/chunk_products.cuh"  // halving_step: norm_scores_mma's warp reduce-scatter
#include "cuda/mma.cuh"

using namespace rhoscan::cuda_detail;

constexpr int kL = 256, kStep = 16, kEH = 128, kThreads = 256, kStages = 3;
constexpr float kEps = 1e-6f;
// shared memory (bytes from the 1024-aligned base)
constexpr uint32_t kQStage = kStep * kL * 2;                 // q of a step, [16][256] bf16 rows
constexpr uint32_t kVTile = kStep * 128;                      // [16 tokens][64 E], 128-byte swizzled
constexpr uint32_t kVStage = 2 * kVTile;                      // the item's 128 columns: 2 tiles
constexpr uint32_t kKTile = kStep * 128;                      // [16 tokens][64 latents], swizzled
constexpr uint32_t kOffQ = 0;
constexpr uint32_t kOffV = kOffQ + kStages * kQStage;
constexpr uint32_t kOffXq = kOffV + kStages * kVStage;        // Xq16: 4 tiles of 64 latents
constexpr uint32_t kOffKq = kOffXq + 4 * kKTile;              // Kq16: 4 tiles
constexpr uint32_t kOffP = kOffKq + 4 * kKTile;               // P16 in a swizzled [16][64] tile
constexpr uint32_t kQuadS = kL + 8;                           // X8 / K8 row stride (bf16)
constexpr uint32_t kOffX8 = kOffP + kKTile;                   // X8: [8][kQuadS] (tokens 8..15)
constexpr uint32_t kOffK8 = kOffX8 + 8 * kQuadS * 2;          // K8: [8][kQuadS] (tokens 0..7)
constexpr uint32_t kOffRed = kOffK8 + 8 * kQuadS * 2;         // triangles: [8 warps][2][32] floats
constexpr uint32_t kOffS = kOffRed + 8 * 2 * 32 * 4;          // s of the step's tokens
constexpr uint32_t kOffA16 = kOffS + 64;                      // a^16 per latent
constexpr uint32_t kSmemEnd = kOffA16 + kL * 4;
constexpr int kSmemBytes = static_cast<int>(kSmemEnd + kWgmmaAtom);

__host__ __device__ inline uint32_t swz(int row, int col) {  // (row, col) of a 64-wide swizzled tile
  return row * 128 + ((((col / 8) ^ (row % 8))) << 4) + 2 * (col % 8);
}
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  const __nv_bfloat162 y = __floats2bfloat162_rn(lo, hi);
  uint32_t u;
  memcpy(&u, &y, 4);
  return u;
}
// wgmma m64n16k16: A from registers (RS) or shared memory (SS); 8 accumulators: row 16 w + g +
// 8 ((i >> 1) & 1), column 8 (i >> 2) + 2 q + (i & 1).
template <int kTransB>
__device__ __forceinline__ void wgmma_n16_rs(float (&d)[8], const uint32_t (&a)[4], uint64_t desc_b) {
#if RHOSCAN_WGMMA_DEVICE
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9,%10,%11}, %12, p, 1, 1, %13;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "n"(kTransB));
#else
  (void)d, (void)a, (void)desc_b;
  __trap();
#endif
}
template <int kTransA, int kTransB>
__device__ __forceinline__ void wgmma_n16_ss(float (&d)[8], uint64_t desc_a, uint64_t desc_b) {
#if RHOSCAN_WGMMA_DEVICE
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7}, %8, %9, p, 1, 1, %10, %11;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
      : "l"(desc_a), "l"(desc_b), "n"(kTransA), "n"(kTransB));
#else
  (void)d, (void)desc_a, (void)desc_b;
  __trap();
#endif
}

struct Params {
  const bf16* q;    // [pairs][T][256]
  const bf16* v;    // [B][T][E] (Hv = 1)
  const float* a;   // [H][256]
  bf16* ctx;        // [pairs][T][E]
  float* rho;       // [pairs][256][E]
  float* rho_norm;  // [pairs][256]
  int pairs, H, T, E;
};

__global__ void __launch_bounds__(kThreads, 1) fused_scan_kernel(Params p) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const uint32_t s_raw = smem_addr(smem_raw), s0 = (s_raw + kWgmmaAtom - 1) & ~(kWgmmaAtom - 1);
  unsigned char* base = smem_raw + (s0 - s_raw);
  float* ss = reinterpret_cast<float*>(base + kOffS);
  float* a16 = reinterpret_cast<float*>(base + kOffA16);
  float* red = reinterpret_cast<float*>(base + kOffRed);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g8 = lane / 4, tq = lane % 4;
  const int wg = warp / 4, w4 = warp % 4;
  const int T = p.T, E = p.E, nsteps = T / kStep, nhalves = E / kEH;
  const int l = tid;  // the walk's latent
  for (int item = blockIdx.x; item < p.pairs * nhalves; item += gridDim.x) {
    const int bh = item / nhalves, eh = item % nhalves, b = bh / p.H, h = bh % p.H;
    const float al = p.a[h * kL + l];
    __syncthreads();  // the previous item's shared memory is consumed
    {
      float x = al;
#pragma unroll
      for (int k = 0; k < 4; ++k) x *= x;
      a16[l] = x;
    }
    for (int i = tid; i < kStep * 64 / 2; i += kThreads)  // P16's tile: zeros above the diagonal for good
      reinterpret_cast<uint32_t*>(base + kOffP)[i] = 0u;
    for (int i = tid; i < 8 * kQuadS / 2; i += kThreads) reinterpret_cast<uint32_t*>(base + kOffX8)[i] = 0u;
    // the fetch of step st into stage st % 3: q's 16 rows (16-byte pieces, 2 a thread), V's two tiles
    const bf16* qsrc = p.q + int64_t(bh) * T * kL;
    const bf16* vsrc = p.v + int64_t(b) * T * E + eh * kEH;
    auto fetch = [&](int st) {
      const int stage = st % kStages;
      for (int idx = tid; idx < kStep * kL / 8; idx += kThreads) {  // 512 pieces
        const int r = idx / (kL / 8), c = idx % (kL / 8);
        cp_async16_u32(s0 + kOffQ + stage * kQStage + r * kL * 2 + 16 * c, qsrc + int64_t(st * kStep + r) * kL + 8 * c);
      }
      {  // 256 pieces: tile tid / 128, row (tid / 8) % 16, chunk tid % 8
        const int tile = tid / 128, r = (tid / 8) % 16, c = tid % 8;
        cp_async16_u32(s0 + kOffV + stage * kVStage + tile * kVTile + swz(r, 8 * c),
                       vsrc + int64_t(st * kStep + r) * E + 64 * tile + 8 * c);
      }
      cp_async_commit();
    };
    fetch(0);
    if (nsteps > 1) fetch(1);
    else cp_async_commit();
    float S[128];  // Sᵀ: row (E) 64 wg + 16 w4 + g + 8 ((i >> 1) & 1), column (latent) 8 (i >> 2) + 2 tq + (i & 1)
#pragma unroll
    for (int i = 0; i < 128; ++i) S[i] = 0.0f;
    float N = 0.0f;
    // powers of the walk's latent: a^0 .. a^7 (the triangles use a^0..a^6, X8 / K8 a^0..a^7)
    float pw[8];
    pw[0] = 1.0f;
#pragma unroll
    for (int k = 1; k < 8; ++k) pw[k] = pw[k - 1] * al;
    const float a8 = pw[7] * al;
    for (int st = 0; st < nsteps; ++st) {
      cp_async_wait<1>();  // step st's copies (this thread's)
      fence_proxy_async();
      __syncthreads();     // everyone's; stage (st + 2) % 3 (step st - 1's) is free
      if (st + 2 < nsteps) fetch(st + 2);
      else cp_async_commit();
      const int stage = st % kStages;
      const bf16* qs = reinterpret_cast<const bf16*>(base + kOffQ + stage * kQStage);
      // -- s of the step's tokens: warp w sums tokens 2 w, 2 w + 1
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        const int i = 2 * warp + k;
        const uint4 x = *reinterpret_cast<const uint4*>(qs + i * kL + 8 * lane);
        __nv_bfloat162 w[4];
        memcpy(w, &x, 16);
        float sum = 0.0f;
#pragma unroll
        for (int j = 0; j < 4; ++j) sum += __low2float(w[j]) + __high2float(w[j]);
#pragma unroll
        for (int o = 16; o >= 1; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        if (lane == 0) ss[i] = sum + kEps;
      }
      __syncthreads();
      // -- the walk (thread = latent l): Qp, Xq16, Kq16, X8, K8, and the two 8 x 8 triangles
      float qp[kStep], qv[kStep];
#pragma unroll
      for (int i = 0; i < kStep; ++i) qv[i] = __bfloat162float(qs[i * kL + l]);
      {
        unsigned char* xt = base + kOffXq + (l / 64) * kKTile;
        unsigned char* kt = base + kOffKq + (l / 64) * kKTile;
        bf16* x8 = reinterpret_cast<bf16*>(base + kOffX8);
        bf16* k8 = reinterpret_cast<bf16*>(base + kOffK8);
        const int lc = l % 64;
#pragma unroll
        for (int i = 0; i < kStep; ++i) {
          qp[i] = __fdividef(qv[i], ss[i] * (N + kEps));
          N = al * N + qv[i];
          const float pi = i < 8 ? pw[i] : pw[i - 8] * a8;           // a^i
          const float pk = 15 - i < 8 ? pw[15 - i] : pw[7 - i] * a8;  // a^(15 - i)
          *reinterpret_cast<bf16*>(xt + swz(i, lc)) = __float2bfloat16_rn(qp[i] * pi);
          *reinterpret_cast<bf16*>(kt + swz(i, lc)) = __float2bfloat16_rn(qv[i] * pk);
          if (i >= 8) x8[(i - 8) * kQuadS + l] = __float2bfloat16_rn(qp[i] * pw[i - 8]);
          else k8[i * kQuadS + l] = __float2bfloat16_rn(qv[i] * pw[7 - i]);
        }
      }
#pragma unroll
      for (int blk = 0; blk < 2; ++blk) {
        float v[32];
#pragma unroll
        for (int k = 0; k < 32; ++k) v[k] = 0.0f;
#pragma unroll
        for (int i = 1; i < 8; ++i)
#pragma unroll
          for (int j = 0; j < i; ++j) v[i * (i - 1) / 2 + j] = qp[8 * blk + i] * qv[8 * blk + j] * pw[i - 1 - j];
        halving_step<16>(v, lane), halving_step<8>(v, lane), halving_step<4>(v, lane);
        halving_step<2>(v, lane), halving_step<1>(v, lane);  // (lane λ's v[0]: the warp's sum of value λ)
        red[(warp * 2 + blk) * 32 + lane] = v[0];
      }
      fence_proxy_async();  // Xq16, Kq16 (read by the tensor cores)
      __syncthreads();
      // -- P16: the triangles' block sums (threads 0..55), the quadrant by warp 7's mma
      if (tid < 56) {
        const int blk = tid / 28, pr = tid % 28;
        float sum = 0.0f;
#pragma unroll
        for (int w = 0; w < 8; ++w) sum += red[(w * 2 + blk) * 32 + pr];
        int m = 1, n = pr;  // pr = m (m - 1) / 2 + n
        while (n >= m) n -= m, ++m;
        *reinterpret_cast<bf16*>(base + kOffP + swz(8 * blk + m, 8 * blk + n)) = __float2bfloat16_rn(sum);
      }
      if (warp == 7) {
        const bf16* x8 = reinterpret_cast<const bf16*>(base + kOffX8);
        const bf16* k8 = reinterpret_cast<const bf16*>(base + kOffK8);
        float c[4] = {};
#pragma unroll 4
        for (int k0 = 0; k0 < kL; k0 += 16) {
          uint32_t af[4], b0, b1;
          af[0] = *reinterpret_cast<const uint32_t*>(x8 + g8 * kQuadS + k0 + 2 * tq);
          af[2] = *reinterpret_cast<const uint32_t*>(x8 + g8 * kQuadS + k0 + 8 + 2 * tq);
          af[1] = af[3] = 0u;  // rows 8..15 of the m16 tile: none
          b0 = *reinterpret_cast<const uint32_t*>(k8 + g8 * kQuadS + k0 + 2 * tq);
          b1 = *reinterpret_cast<const uint32_t*>(k8 + g8 * kQuadS + k0 + 8 + 2 * tq);
          mma_bf16_16816(c, af, b0, b1);
        }
        // c[0], c[1]: token 8 + g, tokens 2 tq, 2 tq + 1
        *reinterpret_cast<__nv_bfloat162*>(base + kOffP + swz(8 + g8, 2 * tq)) = __floats2bfloat162_rn(c[0], c[1]);
      }
      fence_proxy_async();
      __syncthreads();  // P16 complete
      // -- the products: cᵀ = Sᵀ Xq16ᵀ + Vᵀ P16ᵀ, then Sᵀ <- a^16 Sᵀ + Vᵀ Kq16
      float c[8] = {};
      uint32_t A[16][4];
#pragma unroll
      for (int m = 0; m < 16; ++m) {
        A[m][0] = pack2(S[8 * m + 0], S[8 * m + 1]), A[m][1] = pack2(S[8 * m + 2], S[8 * m + 3]);
        A[m][2] = pack2(S[8 * m + 4], S[8 * m + 5]), A[m][3] = pack2(S[8 * m + 6], S[8 * m + 7]);
      }
      const uint64_t desc_xq = wgmma_desc_sw128(s0 + kOffXq, 0, kWgmmaAtom);   // B K-major: rows tokens
      const uint64_t desc_v = wgmma_desc_sw128(s0 + kOffV + stage * kVStage + wg * kVTile, kWgmmaAtom, kWgmmaAtom);
      const uint64_t desc_p = wgmma_desc_sw128(s0 + kOffP, 0, kWgmmaAtom);
      const uint64_t desc_kq = wgmma_desc_sw128(s0 + kOffKq, kKTile, kWgmmaAtom);  // B N-major, 64-latent tiles LBO apart
      wgmma_fence();
#pragma unroll
      for (int m = 0; m < 16; ++m) wgmma_n16_rs<0>(c, A[m], desc_xq + ((m / 4) * kKTile >> 4) + 2 * (m % 4));
      wgmma_n16_ss<1, 0>(c, desc_v, desc_p);
      wgmma_commit();
      // the decay, then the update (the readout read A, the bf16 copy, not S)
#pragma unroll
      for (int nt = 0; nt < 32; ++nt) {
        const float2 f = *reinterpret_cast<const float2*>(a16 + 8 * nt + 2 * tq);
        S[4 * nt + 0] *= f.x, S[4 * nt + 1] *= f.y, S[4 * nt + 2] *= f.x, S[4 * nt + 3] *= f.y;
      }
      wgmma_fence();
      wgmma_m64n256k16_bf16<1, 1>(S, desc_v, desc_kq);
      wgmma_commit();
      wgmma_wait<0>();
      wgmma_fence_operand(S);
      wgmma_fence_operand(c);
#pragma unroll
      for (int m = 0; m < 16; ++m) wgmma_fence_operand(A[m]);
      // the context: cᵀ rows E, columns tokens
      bf16* out = p.ctx + (int64_t(bh) * T + st * kStep) * E + eh * kEH + 64 * wg + 16 * w4 + g8;
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const int er = 8 * ((i >> 1) & 1), tk = 8 * (i >> 2) + 2 * tq + (i & 1);
        out[int64_t(tk) * E + er] = __float2bfloat16_rn(c[i]);
      }
    }
    cp_async_wait<0>();
    // rho_T (Sᵀ transposed) and rho_norm
    float* rho = p.rho + int64_t(bh) * kL * E + eh * kEH + 64 * wg + 16 * w4 + g8;
#pragma unroll
    for (int i = 0; i < 128; ++i) {
      const int er = 8 * ((i >> 1) & 1), lat = 8 * (i >> 2) + 2 * tq + (i & 1);
      rho[int64_t(lat) * E + er] = S[i];
    }
    if (eh == 0) p.rho_norm[int64_t(bh) * kL + l] = N;
  }
}

// ---- host -------------------------------------------------------------------------------------
struct Problem {
  int B, H, T, E;
  std::vector<bf16> q, v;
  std::vector<float> a, qf, vf;
};

static Problem make_problem(int B, int H, int T, int E, uint32_t seed) {
  Problem pr{B, H, T, E, {}, {}, {}, {}, {}};
  const int P = B * H;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u01(0.0f, 1.0f), un(-1.0f, 1.0f);
  pr.q.resize(size_t(P) * T * kL), pr.qf.resize(pr.q.size());
  for (size_t i = 0; i < pr.q.size(); ++i) {
    const float x = u01(rng) < 0.5f ? 0.0f : u01(rng);
    pr.q[i] = __float2bfloat16(x), pr.qf[i] = __bfloat162float(pr.q[i]);
  }
  for (int bh = 0; bh < P; ++bh)  // an all-zero q row (context 0)
    for (int l = 0; l < kL; ++l) pr.q[(size_t(bh) * T + T / 3) * kL + l] = __float2bfloat16(0.0f), pr.qf[(size_t(bh) * T + T / 3) * kL + l] = 0.0f;
  pr.v.resize(size_t(B) * T * E), pr.vf.resize(pr.v.size());
  for (size_t i = 0; i < pr.v.size(); ++i) pr.v[i] = __float2bfloat16(un(rng)), pr.vf[i] = __bfloat162float(pr.v[i]);
  pr.a.resize(size_t(H) * kL);
  for (size_t i = 0; i < pr.a.size(); ++i) {
    const float x = u01(rng);
    pr.a[i] = i % 61 == 0 ? 0.0f : i % 67 == 0 ? 1.0f : 0.8f + 0.2f * x;
  }
  return pr;
}

struct Device {
  bf16 *q, *v, *ctx;
  float *a, *rho, *rho_norm;
};

static Device upload(const Problem& pr) {
  const int P = pr.B * pr.H;
  Device d{};
  CHECK(cudaMalloc(&d.q, pr.q.size() * sizeof(bf16)));
  CHECK(cudaMalloc(&d.v, pr.v.size() * sizeof(bf16)));
  CHECK(cudaMalloc(&d.a, pr.a.size() * sizeof(float)));
  CHECK(cudaMalloc(&d.ctx, size_t(P) * pr.T * pr.E * sizeof(bf16)));
  CHECK(cudaMalloc(&d.rho, size_t(P) * kL * pr.E * sizeof(float)));
  CHECK(cudaMalloc(&d.rho_norm, size_t(P) * kL * sizeof(float)));
  CHECK(cudaMemcpy(d.q, pr.q.data(), pr.q.size() * sizeof(bf16), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d.v, pr.v.data(), pr.v.size() * sizeof(bf16), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d.a, pr.a.data(), pr.a.size() * sizeof(float), cudaMemcpyHostToDevice));
  return d;
}

static void launch(const Problem& pr, const Device& d, int grid) {
  Params p{d.q, d.v, d.a, d.ctx, d.rho, d.rho_norm, pr.B * pr.H, pr.H, pr.T, pr.E};
  fused_scan_kernel<<<std::min(grid, pr.B * pr.H * (pr.E / kEH)), kThreads, kSmemBytes>>>(p);
}

// float64 forward of SPEC.md, RMS relative errors of context, rho_T and rho_norm
static void check(const Problem& pr, const Device& d, double& ec, double& er, double& en) {
  const int P = pr.B * pr.H, T = pr.T, E = pr.E;
  std::vector<bf16> ctx(size_t(P) * T * E);
  std::vector<float> rho(size_t(P) * kL * E), rn(size_t(P) * kL);
  CHECK(cudaMemcpy(ctx.data(), d.ctx, ctx.size() * sizeof(bf16), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(rho.data(), d.rho, rho.size() * sizeof(float), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(rn.data(), d.rho_norm, rn.size() * sizeof(float), cudaMemcpyDeviceToHost));
  double sc = 0, nc = 0, sr = 0, nr = 0, sn = 0, nn = 0;
  std::vector<double> R(size_t(kL) * E), Nn(kL);
  for (int bh = 0; bh < P; ++bh) {
    std::fill(R.begin(), R.end(), 0.0), std::fill(Nn.begin(), Nn.end(), 0.0);
    const float* qb = pr.qf.data() + size_t(bh) * T * kL;
    const float* vb = pr.vf.data() + size_t(bh / pr.H) * T * E;
    const float* ab = pr.a.data() + size_t(bh % pr.H) * kL;
    for (int t = 0; t < T; ++t) {
      double s = 1e-6;
      for (int l = 0; l < kL; ++l) s += qb[size_t(t) * kL + l];
      for (int e = 0; e < E; ++e) {
        double c = 0;
        for (int l = 0; l < kL; ++l) c += qb[size_t(t) * kL + l] / s * R[size_t(l) * E + e] / (Nn[l] + 1e-6);
        const double got = __bfloat162float(ctx[(size_t(bh) * T + t) * E + e]);
        sc += (got - c) * (got - c), nc += c * c;
      }
      for (int l = 0; l < kL; ++l) {
        const double qv = qb[size_t(t) * kL + l];
        for (int e = 0; e < E; ++e) R[size_t(l) * E + e] = ab[l] * R[size_t(l) * E + e] + qv * vb[size_t(t) * E + e];
        Nn[l] = ab[l] * Nn[l] + qv;
      }
    }
    for (int l = 0; l < kL; ++l) {
      for (int e = 0; e < E; ++e) {
        const double got = rho[(size_t(bh) * kL + l) * E + e], ref = R[size_t(l) * E + e];
        sr += (got - ref) * (got - ref), nr += ref * ref;
      }
      const double got = rn[size_t(bh) * kL + l];
      sn += (got - Nn[l]) * (got - Nn[l]), nn += Nn[l] * Nn[l];
    }
  }
  ec = std::sqrt(sc / nc), er = std::sqrt(sr / nr), en = std::sqrt(sn / nn);
}

int main(int argc, char** argv) {
  cudaDeviceProp prop;
  if (!first_device(prop)) return 0;
  const bool small_only = argc > 1 && std::strcmp(argv[1], "--small") == 0;
  CHECK(cudaFuncSetAttribute(fused_scan_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  cudaFuncAttributes fa;
  CHECK(cudaFuncGetAttributes(&fa, fused_scan_kernel));
  std::printf("fused_scan_kernel: %d registers, %d bytes local, %d bytes dynamic shared\n", fa.numRegs,
              int(fa.localSizeBytes), kSmemBytes);
  bool ok = true;
  struct Case {
    int B, H, T, E, grid;
  };
  for (Case cs : {Case{1, 2, 64, 256, 1 << 20}, Case{3, 1, 48, 128, 2}, Case{1, 1, 16, 128, 1}}) {
    Problem pr = make_problem(cs.B, cs.H, cs.T, cs.E, 5u + cs.T);
    Device d = upload(pr);
    launch(pr, d, std::min(cs.grid, prop.multiProcessorCount));
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaGetLastError());
    double ec, er, en;
    check(pr, d, ec, er, en);
    const bool pass = ec < 1e-2 && er < 1e-2 && en < 1e-5;
    ok = ok && pass;
    std::printf("check B%d H%d T%d E%d grid %d: context %.3e, rho %.3e, rho_norm %.3e RMS rel: %s\n", cs.B, cs.H, cs.T,
                cs.E, std::min(cs.grid, prop.multiProcessorCount), ec, er, en, pass ? "PASS" : "FAIL");
  }
  if (!small_only) {
    Problem pr = make_problem(24, 4, 512, 256, 11u);
    Device d = upload(pr);
    auto ms = timed_launches(20, 3, [&] { launch(pr, d, prop.multiProcessorCount); });
    const double t = ms[ms.size() / 2];
    std::printf("BDH-base (B24 H4 T512 L256 E256): median %.4f ms (min %.4f, max %.4f) over %zu\n", t, ms.front(),
                ms.back(), ms.size());
  }
  return ok ? 0 : 1;
}
