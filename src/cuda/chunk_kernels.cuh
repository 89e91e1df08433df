// The chunked kernels shared by the forward and the backward (plain FFMA version 1).
//
// Per (b, h) the sequence is cut into chunks of C <= 64 tokens; chunk c covers tokens
// [c·C, c·C + Cn). With Qp_t[l] = q_t[l] / (s_t (N_t[l] + eps)) (the normalised read weights):
//   chunk-start state   H_c = R_{c·C}           (chunk_states, forward order, in workspace)
//   intra-chunk scores  P[i][j] = sum_l Qp_i[l] a_l^(i-1-j) q_j[l]     (j < i; chunk_scores)
//   context             c_i = sum_l Qp_i[l] a_l^i H_c[l,:] + sum_{j<i} P[i][j] v_j  (chunk_output)
// Every decay factor is a^n with n >= 0 (ipow), so nothing overflows for any a in [0, 1].
// Work items are looped over with grid strides: no grid dimension depends on B·T or B·T·L.
#pragma once

#include "cuda/common.cuh"

namespace rhoscan::cuda_detail {

// A strided tensor of up to four logical dims (b, h, t or l, x).
struct Str4 {
  const void* p = nullptr;
  int64_t s[4] = {};
  __device__ __forceinline__ int64_t at(int64_t a, int64_t b, int64_t c, int64_t d) const {
    return a * s[0] + b * s[1] + c * s[2] + d * s[3];
  }
};
struct Str3 {
  const void* p = nullptr;
  int64_t s[3] = {};
  __device__ __forceinline__ int64_t at(int64_t a, int64_t b, int64_t c) const {
    return a * s[0] + b * s[1] + c * s[2];
  }
};

// From a params struct's pointer and stride array (src/core/params.h).
inline Str4 str4(const void* p, const int64_t* s) {
  Str4 r;
  r.p = p;
  for (int i = 0; i < 4; ++i) r.s[i] = s[i];
  return r;
}
inline Str3 str3(const void* p, const int64_t* s) {
  Str3 r;
  r.p = p;
  for (int i = 0; i < 3; ++i) r.s[i] = s[i];
  return r;
}

// Sizes of one batch of (b, h) pairs: local pair index bh in [0, nbh) is b = b0 + bh / H,
// h = bh % H (a batch is a run of whole batch rows, or of (b, h) pairs with H_step = 1).
struct Dims {
  int64_t H = 0, T = 0, L = 0, E = 0, C = 0, nC = 0;
  int64_t bh0 = 0;  // global (b·H + h) index of local pair 0
  int64_t nbh = 0;
  int64_t nsplit = 1;  // chunk_scores: partial sums over this many slices of L (and of E)
  // Rows (latents) and row stride (columns) of each chunk state in the state workspace, and the
  // row stride of the tensor-core operands Xq, Kq: L and E on the float32 path, padded to the
  // tensor-core tiles (zeros in the padding) on the 16-bit path.
  int64_t Lp = 0, Ep = 0;
  // Hv = 1 on the tensor-core path: the packed values (vb, vlo) hold one row [T][Ep] per batch row
  // that the batch touches (local row b - bh0 / H), not one per pair, since every head reads the
  // same v. Their readers take pair bh's row from v_row. The launchers clear it (per_pair) for
  // kernels whose packed operand is the upstream gradient G, always per pair (the reverse states
  // and the dv outputs also ignore it at compile time). The packed rows are never more
  // than nbh, so every offset stays within what the per-pair layout (and the kernels' 32-bit
  // checks) allowed.
  bool v_rows = false;
  __device__ __forceinline__ int64_t b_of(int64_t bh) const { return (bh0 + bh) / H; }
  __device__ __forceinline__ int64_t h_of(int64_t bh) const { return (bh0 + bh) % H; }
  // the packed value row of local pair bh: bh, or its batch row less the batch's first
  __host__ __device__ __forceinline__ int64_t v_row(int64_t bh) const {
    return v_rows ? (bh0 + bh) / H - bh0 / H : bh;
  }
  // v_row(bh) - bh by 32-bit divisions (for the kernels' 32-bit paths: bh0 + nbh < 2^30 there)
  __device__ __forceinline__ int v_row_delta32(int bh) const {
    if (!v_rows) return 0;
    const uint32_t Hu = static_cast<uint32_t>(H), b0 = static_cast<uint32_t>(bh0);
    return static_cast<int>((b0 + static_cast<uint32_t>(bh)) / Hu - b0 / Hu) - bh;
  }
  // the packed value rows of the batch: nbh, or the batch rows of pairs bh0 .. bh0 + nbh - 1
  __host__ __device__ __forceinline__ int64_t v_packed_rows() const {
    return v_rows && nbh > 0 ? (bh0 + nbh - 1) / H - bh0 / H + 1 : nbh;
  }
  // the same sizes with per-pair packed values (for the kernels that read G through their value operand)
  __host__ __device__ __forceinline__ Dims per_pair() const {
    Dims s = *this;
    s.v_rows = false;
    return s;
  }
  __device__ __forceinline__ int64_t chunk_len(int64_t c) const {
    int64_t n = T - c * C;
    return n < C ? n : C;
  }
};

// How many slices of L chunk_scores splits each (b, h, chunk) into: enough blocks to fill the
// GPU (about 4 per multiprocessor on 132), at most 16, and no slice narrower than 32 latents.
inline int64_t score_splits(int64_t nbh, int64_t nC, int64_t L) {
  const int64_t items = nbh * nC > 0 ? nbh * nC : 1;
  int64_t n = (528 + items - 1) / items;
  n = n < 16 ? n : 16;
  const int64_t by_l = (L + 31) / 32;
  n = n < by_l ? n : by_l;
  return n > 0 ? n : 1;
}

// f(n) = d/da a^n = n a^(n-1), with f(0) = 0 (no a^(-1)).
__device__ __forceinline__ float dpow(float a, int n) { return n == 0 ? 0.0f : n * ipow(a, n - 1); }

// ---- decay to float32 [H][L] ---------------------------------------------------------------
static __global__ void decay_to_f32_kernel(float* a32, const void* decay, int64_t s0, int64_t s1, int64_t H,
                                    int64_t L, bool is_f64) {
  grid_dependency_wait();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < H * L; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t h = i / L, l = i % L;
    a32[i] = is_f64 ? load<double>(decay, h * s0 + l * s1) : load<float>(decay, h * s0 + l * s1);
  }
}

// ---- s_t = eps + sum_l q_t[l]: one warp per (bh, t) -----------------------------------------
// Lane j adds l = j, j + 32, ... in that order, then the lanes' sums by the xor tree: every add
// in the order of the plain loop (s bitwise as before). kSumBatch loads per lane are issued before
// their adds: the plain loop, unrolled 4 by the compiler, had 256 bytes per warp in flight and ran
// at ~2 TB/s (0.13 ms at BDH-8k for 0.27 GB of q).
constexpr int kSumBatch = 8;
template <typename T>
__global__ void token_sum_kernel(Dims d, Str4 q, float* s) {
  grid_dependency_wait();
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  const int64_t step = 32 * q.s[3];
  for (int64_t w = blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32; w < d.nbh * d.T; w += warps) {
    const int64_t bh = w / d.T, t = w - bh * d.T, b = d.b_of(bh), h = d.h_of(bh);
    const T* p = static_cast<const T*>(q.p) + q.at(b, h, t, lane);  // latent l0 of this lane
    float acc = 0.0f;
    int64_t l0 = lane;
#pragma unroll 1
    for (; l0 + (kSumBatch - 1) * 32 < d.L; l0 += kSumBatch * 32) {
      float x[kSumBatch];
#pragma unroll
      for (int k = 0; k < kSumBatch; ++k, p += step) x[k] = to_float(__ldg(p));
#pragma unroll
      for (int k = 0; k < kSumBatch; ++k) acc += x[k];
    }
#pragma unroll 1
    for (; l0 < d.L; l0 += 32, p += step) acc += to_float(__ldg(p));
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) s[w] = acc + kEpsF;
  }
}

// ---- normaliser scan, chunk-parallel ----------------------------------------------------------
// N_{t+1} = a N_t + q_t per (bh, l), and from it the read weights Qp_t = q_t / (s_t (N_t + eps)).
// A thread per (bh, l) walking all T tokens was latency-bound (1.19 ms of the 4.57 ms BDH-8k
// forward, 18 % of the memory bandwidth), so no thread here walks more than one chunk of tokens
// plus one step per chunk:
//   norm_chunk_sums (bh, c, l): Z_c = sum_i a^(Cn-1-i) q_{t0+i}, by Horner (Z <- a Z + q_i: every
//                   power is a^n with n >= 0, exact for a = 0 and 1), into Nc[bh][c+1][l];
//   norm_carry      (bh, l): N_0 = n0, N_{c+1} = a^Cn N_c + Z_c over the nC chunks, in place in
//                   Nc, so Nc[bh][c][l] = N at chunk start c (c = 0..nC, the last is N_T); N_T to
//                   rho_norm when n_out is given (n0 may alias n_out: read before written);
//   norm_apply      (bh, c, l): from N at its chunk start, walks the chunk's tokens and writes Qp
//                   ([bh][t][l], float32 or bf16) and, on the tensor-core path, the bf16 operands
//                   of the chunk products, rows of d.Lp with zeros past L, for token i of its chunk:
//                     Xq[bh][t][l] = Qp_t[l] a^i          (the read of the chunk-start state)
//                     Kq[bh][t][l] = q_t[l] a^(Cn-1-i)     (when given: the state keys, and the
//                                                          backward's dv operand)
// (The tensor-core forward runs the first two passes only: norm_scores_mma, chunk_products.cuh, does
// norm_apply's work inside the intra-chunk scores' kernel. The backward and the float32 forward run
// norm_apply.)
// N is summed chunk by chunk instead of token by token: the same float32 accuracy, not bitwise the
// token-by-token order, and a fixed order (independent of the batching): deterministic.
// Every thread's index is l-fastest, so a warp's loads and stores of one token are contiguous.
//
// norm_chunk_sums and norm_apply are elementwise passes over [T, L] and must run at memory speed.
// norm_apply at 905c4ad..b9ba242 ran at 0.61 ms at BDH-8k (bf16, 134 M (t, l) elements, ~8 bytes
// each: ~0.25 ms of DRAM traffic) with ncu's DRAM throughput at 36 % but SM throughput at 81 % and
// 0.83 issued warps per scheduler (bench/results/ncu-h200-6fe913d): ~120 instructions per element,
// most of them 64-bit index products per token (Str4::at, (bh T + t0 + i) Lp + l), 2-byte stores
// and per-token branches. Here every thread
//   - handles kNormVec = 2 adjacent latents where the layout allows it (paired 4- or 8-byte loads
//     and stores, one set of pointer and loop work for both; launch_norm_scan checks the strides,
//     the alignment and L even, else the same code runs with one latent, any strides and L),
//   - forms its pointers once and steps them by a row per token (no 64-bit products in the loop),
//   - runs an unpredicated body for the full batches of kNormBatch tokens (all but a tail),
//   - writes a batch's Kq from its last token down (no array of the batch's a^(Cn-1-i) held) and
//     takes ipow's squares a^(2^j) from a per-chunk table, so that the pair path fits 80
//     registers (3 blocks of 256 per multiprocessor, __launch_bounds__) without spilling.
// From the PTX, a full batch of 8 tokens costs ~300 PTX (~480 SASS, estimated) instructions for
// 16 elements against ~600 (~960) for 8 before: ~30 instead of ~120 per element, under the ~0.25
// ms of DRAM traffic at the issue rate ncu measured.
// The arithmetic was the old kernel's, operation for operation, until norm_scores_mma
// (chunk_products.cuh) took norm_apply's place in the tensor-core forward: since then N runs over
// the batches by a^8 N + z (z the batch's q by Horner) instead of token by token, each batch's
// first a^i comes from the squares, and the tensor-core paths divide by norm_read_weight<true>, so
// that norm_scores_mma, whose warps each hold one batch of 8 tokens, makes the same Qp, Xq and Kq
// bit for bit (a backward making its own keys makes the forward's).

// Tokens per batch of loads, and latents per thread where the layout allows pairs.
constexpr int kNormBatch = 8;
constexpr int kNormVec = 2;

// The read weight Qp = q / (s (N + eps)). kFast (the tensor-core paths, whose operands are rounded to
// bf16 anyway; norm_apply with Xq and norm_scores_mma, which must agree bitwise): a reciprocal and
// a product (div_approx_ftz, within 2 ulp; subnormal operands and results flushed to 0, which
// for q >= 0 can only be a weight below 2^-126) of q / 4 and s (N + eps) / 4: the approximate
// division returns 0 for denominators of magnitude in (2^126, 2^128), and a quarter of any finite
// float is below 2^126. The quarters are exact where s (N + eps) is a normal float (always for
// q >= 0: s >= eps, N >= 0) and for q / 4 of any bf16 or float16 q, and the reciprocal scales
// exactly, so there the result is the unscaled approximate division's bit for bit. Not kFast
// (the float32 FFMA path): the IEEE division (div_sparse: a reciprocal, refinement steps and a
// range check with a slow path).
template <bool kFast>
__device__ __forceinline__ float norm_read_weight(float q, float s, float N) {
  if constexpr (kFast) {
    return div_approx_ftz(0.25f * q, 0.25f * s * (N + kEpsF));
  } else {
    return div_sparse(q, s * (N + kEpsF));
  }
}

// Two adjacent elements: the unit of the paired loads and stores (aligned to their size).
template <typename X>
struct alignas(2 * sizeof(X)) Pair {
  X x, y;
};
// Four adjacent elements, aligned to their size (one 8- or 16-byte access).
template <typename X>
struct alignas(4 * sizeof(X)) Quad {
  X x[4];
};

// V adjacent latents of one token from p (V = 2: p aligned to 2 elements).
template <int V, typename T>
__device__ __forceinline__ void load_latents(const T* p, float (&out)[V]) {
  static_assert(V == 1 || V == 2, "one or two latents per thread");
  if constexpr (V == 2) {
    using Word = std::conditional_t<sizeof(T) == 2, unsigned, float2>;  // a bf16/f16 pair, or a float pair
    static_assert(sizeof(Word) == sizeof(Pair<T>), "pair word");
    const Word w = __ldg(reinterpret_cast<const Word*>(p));
    Pair<T> v;
    memcpy(&v, &w, sizeof v);
    out[0] = to_float(v.x);
    out[1] = to_float(v.y);
  } else {
    out[0] = to_float(__ldg(p));
  }
}
// V adjacent latents rounded to X at p (V = 2: p aligned to 2 elements; bf16 pairs by one cvt).
template <int V, typename X>
__device__ __forceinline__ void store_latents(X* p, const float (&x)[V]) {
  if constexpr (V == 4) {  // (p aligned to 4 elements: one 8- or 16-byte store)
    *reinterpret_cast<Quad<X>*>(p) = Quad<X>{{from_float<X>(x[0]), from_float<X>(x[1]), from_float<X>(x[2]), from_float<X>(x[3])}};
  } else if constexpr (V == 2 && std::is_same_v<X, __nv_bfloat16>) {
    *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(x[0], x[1]);
  } else if constexpr (V == 2) {
    *reinterpret_cast<Pair<X>*>(p) = Pair<X>{from_float<X>(x[0]), from_float<X>(x[1])};
  } else {
    p[0] = from_float<X>(x[0]);
  }
}

// The kNormBatch tokens' latents from p (advanced past them), token k at p + k·stride, those at
// k >= n zero: the loads are issued together, before the dependent chain uses them.
template <int V, typename T>
__device__ __forceinline__ void load_tokens(const T*& p, int64_t stride, int n, float (&out)[kNormBatch][V]) {
#pragma unroll
  for (int k = 0; k < kNormBatch; ++k, p += stride) {
    if (k < n) {
      load_latents<V>(p, out[k]);
    } else {
#pragma unroll
      for (int v = 0; v < V; ++v) out[k][v] = 0.0f;
    }
  }
}

// Whether q's latents can be read (or written) in aligned groups of V: unit latent stride, the
// other strides, L and the pointer in multiples of V.
template <typename T, int V>
__host__ __device__ inline bool latent_groups_ok(const Dims& d, const Str4& q) {
  return q.s[3] == 1 && q.s[0] % V == 0 && q.s[1] % V == 0 && q.s[2] % V == 0 && d.L % V == 0 &&
         reinterpret_cast<uintptr_t>(q.p) % (V * sizeof(T)) == 0;
}
// Pairs: q's latents read in aligned pairs, and Qp's rows hold whole pairs.
template <typename T>
inline bool norm_pairs_ok(const Dims& d, const Str4& q) {
  return latent_groups_ok<T, 2>(d, q);
}
// The same for groups of four latents (dq_final's float4 partials).
template <typename T>
inline bool norm_quads_ok(const Dims& d, const Str4& q) {
  return latent_groups_ok<T, 4>(d, q);
}

// One thread per (bh, c, V latents).
template <typename T, int V>
__global__ void norm_chunk_sums_kernel(Dims d, Str4 q, const float* a32, float* Nc) {
  grid_dependency_wait();
  const int64_t groups = d.L / V;  // V divides L (launch_norm_scan)
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < d.nbh * d.nC * groups;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t bc = i / groups, l = (i - bc * groups) * V, bh = bc / d.nC, c = bc - bh * d.nC;
    const int64_t b = d.b_of(bh), h = d.h_of(bh);
    const int Cn = static_cast<int>(d.chunk_len(c));
    float a[V], z[V];
#pragma unroll
    for (int v = 0; v < V; ++v) a[v] = a32[h * d.L + l + v], z[v] = 0.0f;
    const T* p = static_cast<const T*>(q.p) + q.at(b, h, c * d.C, l);
    // One batch of kNormBatch tokens from k0 (kFull: all in the chunk, no predicates).
    auto batch = [&](int k0, auto full_type) {
      constexpr bool kFull = decltype(full_type)::value;
      const int n = kFull ? kNormBatch : Cn - k0;
      float qv[kNormBatch][V];
      load_tokens<V>(p, q.s[2], n, qv);
#pragma unroll
      for (int k = 0; k < kNormBatch; ++k)
        if (kFull || k < n) {
#pragma unroll
          for (int v = 0; v < V; ++v) z[v] = a[v] * z[v] + qv[k][v];
        }
    };
    int k0 = 0;
    for (; k0 + kNormBatch <= Cn; k0 += kNormBatch) batch(k0, std::true_type{});
    if (k0 < Cn) batch(k0, std::false_type{});
    float* out = Nc + (bh * (d.nC + 1) + c + 1) * d.L + l;
#pragma unroll
    for (int v = 0; v < V; ++v) out[v] = z[v];
  }
}

// ---- token sums and chunk sums from one read of q (the paired path) --------------------------
// token_sum and norm_chunk_sums each read all of q (0.08 + 0.07 ms of the 1.38 ms BDH-8k
// forward). norm_sums_kernel reads it once: a block per (bh, c, 2·blockDim latents), each thread
// a latent pair, computing
//   - the pair's chunk sums Z_c exactly as norm_chunk_sums_kernel<T, 2> does (the same loads, the
//     same Horner steps in the same order: Nc bitwise the same), and
//   - per token of the chunk, the block's partial sum of q over its latents, into
//     parts[bh][lb][t] (lb: the latent block), in a fixed order: x0 + x1 per thread; a warp
//     reduce-scatter over 32 tokens at a time (5 butterfly stages, each halving the tokens a lane
//     holds: 31 shuffles per 32 tokens instead of 32 × 5; lane λ ends with token λ's warp sum);
//     then the warps' sums through shared memory, added in warp order.
// token_sum_reduce_kernel (a thread per (bh, t)) adds the blocks' partials in increasing block
// order, then eps: s_t = eps + sum_l q_t[l], not bitwise token_sum's (another order of the adds,
// float32 sums either way), but independent of the batching and the grid.
// Block width: norm_sums_threads(L) = 32 · min(8, ceil(L / 64)) threads, i.e. 256 from L = 449 on
// and only the warps that hold latents below that (L = 256, BDH-base: one block of 128 threads,
// L = 6: one warp): no block of idle warps that would only join the barriers and the warp-order
// sum. L not a multiple of the width: threads past L load nothing and add zeros.
constexpr int kSumsThreads = 256;
constexpr int kSumsTokens = 64;  // the longest chunk (ops.h: kMaxChunk)
inline int norm_sums_threads(int64_t L) {
  const int64_t warps = (L + 2 * 32 - 1) / (2 * 32);
  return 32 * static_cast<int>(warps < 1 ? 1 : warps > kSumsThreads / 32 ? kSumsThreads / 32 : warps);
}
// The latent blocks of norm_sums_kernel: the rows of parts per (bh) pair.
inline int64_t norm_sums_blocks(int64_t L) {
  const int64_t width = 2 * norm_sums_threads(L);
  return (L + width - 1) / width;
}
// Dynamic shared memory of norm_sums_kernel: the warps' token sums [warps][64].
inline int norm_sums_smem(int64_t L) { return norm_sums_threads(L) / 32 * kSumsTokens * static_cast<int>(sizeof(float)); }

// One butterfly stage of the warp reduce-scatter: x[0, 2M) holds this lane's values of 2M tokens;
// lanes with bit M of their index keep the upper M, the others the lower M, each adding the
// partner's (lane ^ M) value of the half it keeps. After M = 16, 8, 4, 2, 1, lane λ's x[0] is the
// warp's sum of token λ.
template <int M>
__device__ __forceinline__ void sums_halve(float (&x)[32], int lane) {
  const bool up = lane & M;
#pragma unroll
  for (int j = 0; j < M; ++j) {
    const float keep = up ? x[j + M] : x[j], give = up ? x[j] : x[j + M];
    x[j] = keep + __shfl_xor_sync(0xffffffffu, give, M);
  }
}

// __launch_bounds__(256, 3): 72 registers, no spills (sm_90a, every dtype); with the bound on the
// block size alone ptxas took 64 registers and spilled 20 bytes for bf16 and float16 q.
// s (round 38): where one latent block covers L (nlb = 1: L <= 512, BDH-base) the block's sums are
// the token sums, written here as s = sum + eps (token_sum_reduce_kernel's 0 + sum + eps: the same
// bits, 0 + x being x), so that its launch is left out; else null, and the partials go to parts.
template <typename T>
__global__ void __launch_bounds__(kSumsThreads, 3) norm_sums_kernel(Dims d, Str4 q, const float* a32, float* Nc,
                                                                 float* parts, int64_t nlb, float* s) {
  grid_dependency_wait();
  extern __shared__ __align__(128) unsigned char smem_raw[];
  float(*red)[kSumsTokens] = reinterpret_cast<float(*)[kSumsTokens]>(smem_raw);  // [warp][token]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  const int64_t width = 2 * int64_t(blockDim.x);  // latents per block
  for (int64_t item = blockIdx.x; item < d.nbh * d.nC * nlb; item += gridDim.x) {
    const int64_t bc = item / nlb, lb = item - bc * nlb, bh = bc / d.nC, c = bc - bh * d.nC;
    const int64_t l = lb * width + 2 * threadIdx.x;
    const bool active = l < d.L;  // L even: the whole pair is below L
    const int Cn = static_cast<int>(d.chunk_len(c));
    float a[2] = {}, z[2] = {0.0f, 0.0f};
    const T* p = nullptr;
    if (active) {
      const int64_t b = d.b_of(bh), h = d.h_of(bh);
      a[0] = a32[h * d.L + l], a[1] = a32[h * d.L + l + 1];
      p = static_cast<const T*>(q.p) + q.at(b, h, c * d.C, l);
    }
    // 32 tokens at a time (block-uniform: every lane of every warp runs the shuffles)
    for (int k32 = 0; k32 < Cn; k32 += 32) {
      float x[32];  // token k32 + k: this pair's x0 + x1 (0 past Cn, or past L)
#pragma unroll
      for (int k = 0; k < 32; ++k) x[k] = 0.0f;
      if (active && k32 + 32 <= Cn) {
        // a full group: 16 tokens' loads in flight at a time (round 22; before, the batches of 8
        // below), the same Horner steps and pair sums in the same order (the same bits)
#pragma unroll
        for (int h16 = 0; h16 < 2; ++h16) {
          float qv[16][2];
#pragma unroll
          for (int k = 0; k < 16; ++k, p += q.s[2]) load_latents<2>(p, qv[k]);
#pragma unroll
          for (int k = 0; k < 16; ++k) {
#pragma unroll
            for (int v = 0; v < 2; ++v) z[v] = a[v] * z[v] + qv[k][v];
            x[16 * h16 + k] = qv[k][0] + qv[k][1];
          }
        }
      } else if (active) {
#pragma unroll
        for (int g = 0; g < 32 / kNormBatch; ++g) {
          const int k0 = k32 + g * kNormBatch;
          if (k0 >= Cn) break;
          // norm_chunk_sums_kernel<T, 2>'s batch: full (no predicates), or the chunk's last
          // partial one (its loads and steps for k < n, zeros loaded past n)
          float qv[kNormBatch][2];
          if (k0 + kNormBatch <= Cn) {
            load_tokens<2>(p, q.s[2], kNormBatch, qv);
#pragma unroll
            for (int k = 0; k < kNormBatch; ++k)
#pragma unroll
              for (int v = 0; v < 2; ++v) z[v] = a[v] * z[v] + qv[k][v];
          } else {
            const int n = Cn - k0;
            load_tokens<2>(p, q.s[2], n, qv);
#pragma unroll
            for (int k = 0; k < kNormBatch; ++k)
              if (k < n) {
#pragma unroll
                for (int v = 0; v < 2; ++v) z[v] = a[v] * z[v] + qv[k][v];
              }
          }
#pragma unroll
          for (int k = 0; k < kNormBatch; ++k) x[g * kNormBatch + k] = qv[k][0] + qv[k][1];  // 0 past n
        }
      }
      sums_halve<16>(x, lane);
      sums_halve<8>(x, lane);
      sums_halve<4>(x, lane);
      sums_halve<2>(x, lane);
      sums_halve<1>(x, lane);
      red[warp][k32 + lane] = x[0];
    }
    if (active) {
      float* out = Nc + (bh * (d.nC + 1) + c + 1) * d.L + l;
      out[0] = z[0];
      out[1] = z[1];
    }
    __syncthreads();
    for (int k = threadIdx.x; k < Cn; k += blockDim.x) {
      float acc = red[0][k];
      for (int w = 1; w < nw; ++w) acc += red[w][k];
      if (s != nullptr)
        s[bh * d.T + c * d.C + k] = acc + kEpsF;
      else
        parts[(bh * nlb + lb) * d.T + c * d.C + k] = acc;
    }
    __syncthreads();  // red is rewritten by the next item
  }
}

// s[bh][t] = eps + the nlb partials parts[bh][0..nlb)[t], added in increasing block order.
static __global__ void token_sum_reduce_kernel(Dims d, const float* parts, int64_t nlb, float* s) {
  grid_dependency_wait();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < d.nbh * d.T; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t bh = i / d.T, t = i - bh * d.T;
    const float* row = parts + bh * nlb * d.T + t;
    float acc = 0.0f;
    for (int64_t lb = 0; lb < nlb; ++lb) acc += row[lb * d.T];
    s[i] = acc + kEpsF;
  }
}

// Chunks per batch of loads in norm_carry: the chain waits for each batch's loads, so at the
// long case's 128 chunks (32 blocks: one thread per (bh, l)) batches of 8 took 20 us per call;
// 32 leave 4 waits (the same adds in the same order: the same bits). Where the chunks are few
// (nC <= 8: BDH-8k, BDH-base) the launcher takes batches of 8: the batch's loads and steps are
// unrolled under their chunk's predicate, so batches of 32 ran 24 dead steps a thread (Nsight,
// round 37, H100: 31 M warp instructions over 4 launches at BDH-8k, 0.017 ms a forward).
constexpr int kCarryBatch = 32, kCarryBatchFew = 8;
template <int kBatch>
static __global__ void norm_carry_kernel(Dims d, const float* a32, Str3 n0, float* Nc, Str3 n_out) {
  grid_dependency_wait();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < d.nbh * d.L; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t bh = i / d.L, l = i % d.L, b = d.b_of(bh), h = d.h_of(bh);
    const float a = a32[h * d.L + l];
    const float a_full = ipow(a, static_cast<int>(d.C));  // a^Cn of every chunk but a tail
    float* row = Nc + bh * (d.nC + 1) * d.L + l;           // row[c * L] = N at chunk start c
    float N = n0.p ? static_cast<const float*>(n0.p)[n0.at(b, h, l)] : 0.0f;
    row[0] = N;
    for (int64_t c0 = 0; c0 < d.nC; c0 += kBatch) {
      float z[kBatch];  // the chunk sums, loaded together before the chain
#pragma unroll
      for (int k = 0; k < kBatch; ++k) z[k] = c0 + k < d.nC ? row[(c0 + k + 1) * d.L] : 0.0f;
#pragma unroll
      for (int k = 0; k < kBatch; ++k) {
        const int64_t c = c0 + k;
        if (c < d.nC) {
          const int64_t Cn = d.chunk_len(c);
          N = (Cn == d.C ? a_full : ipow(a, static_cast<int>(Cn))) * N + z[k];
          row[(c + 1) * d.L] = N;
        }
      }
    }
    if (n_out.p) const_cast<float*>(static_cast<const float*>(n_out.p))[n_out.at(b, h, l)] = N;
  }
}

// N_T (Nc's last row: norm_carry's final N, the same bits) into rho_norm: for the forward's first
// batch, whose norm_carry ran before the value checks were settled and wrote no output (forward.cu).
static __global__ void final_norm_kernel(Dims d, const float* Nc, Str3 n_out) {
  grid_dependency_wait();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < d.nbh * d.L; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t bh = i / d.L, l = i % d.L;
    const_cast<float*>(static_cast<const float*>(n_out.p))[n_out.at(d.b_of(bh), d.h_of(bh), l)] =
        Nc[(bh * (d.nC + 1) + d.nC) * d.L + l];
  }
}

// Qp is float32 where FFMA kernels or the backward's local gradients read it, bf16 where only the
// tensor-core forward's diagonal score sub-blocks do (half the traffic of the largest array here).
// kXq: Xq given (the tensor-core path); kKq: Kq too; kQp false: no Qp written (Qp null; the
// 16-bit backward where the forward saved P: its bwd_local forms Qp itself). One thread per
// (bh, c, V latents).
template <typename T, typename QpT, int V, bool kXq, bool kKq, bool kQp = true>
__global__ void __launch_bounds__(256, 3) norm_apply_kernel(Dims d, Str4 q, const float* a32, const float* s,
                                                         const float* Nc, QpT* Qp, __nv_bfloat16* Xq,
                                                         __nv_bfloat16* Kq) {
  grid_dependency_wait();
  static_assert(kXq || !kKq, "Kq comes with Xq");
  const int64_t groups = (kXq ? d.Lp : d.L) / V;  // V divides L and Lp (launch_norm_scan)
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < d.nbh * d.nC * groups;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t bc = i / groups, l = (i - bc * groups) * V, bh = bc / d.nC, c = bc - bh * d.nC;
    const int64_t t0 = c * d.C;
    const int Cn = static_cast<int>(d.chunk_len(c));
    // Token i of the chunk at xq + i·Lp, kq + i·Lp (rows of Lp), out + i·L, qp + i·q.s[2].
    __nv_bfloat16* xq = kXq ? Xq + (bh * d.T + t0) * d.Lp + l : nullptr;
    __nv_bfloat16* kq = kKq ? Kq + (bh * d.T + t0) * d.Lp + l : nullptr;
    if (kXq && l >= d.L) {  // padding latents of the tensor-core operands (all V: V divides L)
      const float zero[V] = {};
      for (int k = 0; k < Cn; ++k, xq += d.Lp) {
        store_latents<V>(xq, zero);
        if (kKq) {
          store_latents<V>(kq, zero);
          kq += d.Lp;
        }
      }
      continue;
    }
    const int64_t b = d.b_of(bh), h = d.h_of(bh);
    // sq[j] = a^(2^j), the squares that ipow(a, e) multiplies for the bits of e (e < 64: Cn <= 64);
    // a^8 = sq[3] carries N over a batch, the rest make the batches' first powers.
    constexpr int kSq = kXq ? 6 : 4;
    float a[V], N[V], sq[kSq][V];
#pragma unroll
    for (int v = 0; v < V; ++v) {
      a[v] = a32[h * d.L + l + v];
      N[v] = Nc[(bh * (d.nC + 1) + c) * d.L + l + v];
      sq[0][v] = a[v];
#pragma unroll
      for (int j = 1; j < kSq; ++j) sq[j][v] = sq[j - 1][v] * sq[j - 1][v];
    }
    const T* qp = static_cast<const T*>(q.p) + q.at(b, h, t0, l);
    QpT* out = kQp ? Qp + (bh * d.T + t0) * d.L + l : nullptr;
    const float* s_tok = s + bh * d.T + t0;
    // One batch of kNormBatch tokens from k0; full (every token < Cn) for all but a chunk's last
    // partial batch, so that the common case runs without a predicate per token.
    // (the loads, q's and s's, then the arithmetic; on the tensor-core paths two full batches' loads
    // are issued together, before the first one's arithmetic: 16 tokens in flight, since round 22)
    auto load = [&](int n, float (&qv)[kNormBatch][V], float (&sv)[kNormBatch]) {
      load_tokens<V>(qp, q.s[2], n, qv);
#pragma unroll
      for (int k = 0; k < kNormBatch; ++k) sv[k] = k < n ? s_tok[k] : 1.0f;
      s_tok += kNormBatch;
    };
    auto batch = [&](int k0, auto full_type, float (&qv)[kNormBatch][V], const float (&sv)[kNormBatch]) {
      constexpr bool kFull = decltype(full_type)::value;
      const int n = kFull ? kNormBatch : Cn - k0;  // the batch's tokens in the chunk
      if (kKq) {  // Kq = q a^(Cn-1-i), i = k0 + k: one ipow per batch, then a product per token,
                  // from the batch's last token down (no array of the batch's powers held)
        int e = Cn - 1 - (k0 + kNormBatch - 1);
        const int e0 = e > 0 ? e : 0;
        float pw[V];  // ipow(a, e0), bitwise: its squares, multiplied in its order from r = 1
#pragma unroll
        for (int v = 0; v < V; ++v) pw[v] = 1.0f;
#pragma unroll
        for (int j = 0; j < 6; ++j)
          if (e0 >> j & 1) {
#pragma unroll
            for (int v = 0; v < V; ++v) pw[v] *= sq[j][v];
          }
        __nv_bfloat16* row = kq + (n - 1) * d.Lp;  // token n-1 of the batch (kFull: n = kNormBatch)
#pragma unroll
        for (int k = kNormBatch - 1; k >= 0; --k, ++e) {
          if (kFull || k < n) {
            float x[V];
#pragma unroll
            for (int v = 0; v < V; ++v) x[v] = qv[k][v] * pw[v];
            store_latents<V>(row, x);
            row -= d.Lp;
          }
#pragma unroll
          for (int v = 0; v < V; ++v)
            if (kFull || e >= 0) pw[v] *= a[v];
        }
        kq += kNormBatch * d.Lp;
      }
      // N at the next batch's first token: a^8 N + z, z = sum_k a^(7-k) q_k by Horner (not N walked
      // token by token: norm_scores_mma, where a warp holds one batch, gets N at its first token
      // this way, and so both make the same Qp, Xq and Kq bitwise). apow_i = a^i, i = k0 + k: a^k0
      // as ipow(a, k0) multiplies it (the same squares, in its order), then a running product.
      float N_next[V], apow_i[V];
      if (kFull) {
        float z[V] = {};
#pragma unroll
        for (int k = 0; k < kNormBatch; ++k)
#pragma unroll
          for (int v = 0; v < V; ++v) z[v] = a[v] * z[v] + qv[k][v];
#pragma unroll
        for (int v = 0; v < V; ++v) N_next[v] = sq[3][v] * N[v] + z[v];
      }
      if (kXq) {
#pragma unroll
        for (int v = 0; v < V; ++v) {
          apow_i[v] = 1.0f;
#pragma unroll
          for (int j = 0; j < kSq; ++j)
            if (k0 >> j & 1) apow_i[v] *= sq[j][v];
        }
      }
#pragma unroll
      for (int k = 0; k < kNormBatch; ++k) {
        if (kFull || k < n) {
          float qpv[V];
#pragma unroll
          for (int v = 0; v < V; ++v) qpv[v] = norm_read_weight<kXq>(qv[k][v], sv[k], N[v]);
          if (kQp) {  // (kQp false: only Xq and Kq, the 16-bit backward's: bwd_local forms Qp itself)
            store_latents<V>(out, qpv);
            out += d.L;
          }
          if (kXq) {
            float x[V];
#pragma unroll
            for (int v = 0; v < V; ++v) x[v] = qpv[v] * apow_i[v], apow_i[v] *= a[v];
            store_latents<V>(xq, x);
            xq += d.Lp;
          }
#pragma unroll
          for (int v = 0; v < V; ++v) N[v] = a[v] * N[v] + qv[k][v];
        }
      }
      if (kFull) {
#pragma unroll
        for (int v = 0; v < V; ++v) N[v] = N_next[v];
      }
    };
    int k0 = 0;
    if constexpr (kXq && sizeof(T) == 2) {  // (the tensor-core paths; elsewhere it would spill)
      for (; k0 + 2 * kNormBatch <= Cn; k0 += 2 * kNormBatch) {  // two full batches, their loads first
        float qa[kNormBatch][V], sa[kNormBatch], qb[kNormBatch][V], sb[kNormBatch];
        load(kNormBatch, qa, sa);
        load(kNormBatch, qb, sb);
        batch(k0, std::true_type{}, qa, sa);
        batch(k0 + kNormBatch, std::true_type{}, qb, sb);
      }
    }
    for (; k0 + kNormBatch <= Cn; k0 += kNormBatch) {
      float qv[kNormBatch][V], sv[kNormBatch];
      load(kNormBatch, qv, sv);
      batch(k0, std::true_type{}, qv, sv);
    }
    if (k0 < Cn) {
      float qv[kNormBatch][V], sv[kNormBatch];
      load(Cn - k0, qv, sv);
      batch(k0, std::false_type{}, qv, sv);
    }
  }
}

// The three passes of the normaliser scan (see above) on `stream`: launch_norm_scan, through
// launch_norm_apply for norm_apply's instantiations (pairs or single latents; Xq, Kq given or not).
template <typename T, typename QpT, int V, bool kXq, bool kKq, bool kQp = true>
void launch_norm_apply(const Dims& d, Str4 q, const float* a32, const float* s, QpT* Qp, const float* Nc,
                       __nv_bfloat16* Xq, __nv_bfloat16* Kq, cudaStream_t stream) {
  launch_kernel("norm_apply_kernel", norm_apply_kernel<T, QpT, V, kXq, kKq, kQp>,
                grid_for(d.nbh * d.nC * (kXq ? d.Lp : d.L) / V, 256), 256, 0, stream, d, q, a32, s, Nc, Qp, Xq, Kq);
}
template <typename T, typename QpT, int V>
void launch_norm_apply(const Dims& d, Str4 q, const float* a32, const float* s, QpT* Qp, const float* Nc,
                       __nv_bfloat16* Xq, __nv_bfloat16* Kq, cudaStream_t stream) {
  if (Xq && Kq && Qp == nullptr)  // (no Qp: the 16-bit backward with the saved scores)
    launch_norm_apply<T, QpT, V, true, true, false>(d, q, a32, s, Qp, Nc, Xq, Kq, stream);
  else if (Xq && Kq)
    launch_norm_apply<T, QpT, V, true, true>(d, q, a32, s, Qp, Nc, Xq, Kq, stream);
  else if (Xq)
    launch_norm_apply<T, QpT, V, true, false>(d, q, a32, s, Qp, Nc, Xq, Kq, stream);
  else
    launch_norm_apply<T, QpT, V, false, false>(d, q, a32, s, Qp, Nc, Xq, Kq, stream);
}
// final_norm_kernel's launch (forward.cu: the first batch's rho_norm after the value checks).
inline void launch_final_norm(const Dims& d, const float* Nc, Str3 n_out, cudaStream_t stream) {
  if (n_out.p == nullptr || d.nbh * d.L == 0) return;
  launch_kernel("final_norm_kernel", final_norm_kernel, grid_for(d.nbh * d.L, 256), 256, 0, stream, d, Nc, n_out);
}

// Writes the token sums s ([bh][t]) and the normaliser scan's outputs. Where q's latents pair up
// (norm_pairs_ok) one read of q gives both s and the chunk sums: norm_sums_kernel into s_parts
// (workspace of nbh · norm_sums_blocks(L) · T floats), then token_sum_reduce_kernel (where one
// latent block covers L, norm_sums_kernel writes s itself, the same bits, and the reduce is not
// launched: BDH-base's L = 256); elsewhere
// token_sum_kernel and norm_chunk_sums_kernel<T, 1> (s_parts unused). The choice depends on q
// alone, so the forward and the backward's recomputation take the same one (s bitwise equal).
// sums_ready: s and Nc already hold the token sums and the carried chunk-start normalisers (the
// forward's saved buffer, core/saved.h), so only norm_apply runs; s and Nc are then only read.
// apply false: no norm_apply (the tensor-core forward, whose norm_scores_mma makes Qp, Xq and Kq).
template <typename T, typename QpT>
void launch_norm_scan(const Dims& d, Str4 q, const float* a32, Str3 n0, float* s, float* s_parts, QpT* Qp, float* Nc,
                      Str3 n_out, __nv_bfloat16* Xq, __nv_bfloat16* Kq, cudaStream_t stream, bool sums_ready = false,
                      bool apply = true) {
  // Pairs need q's pairs aligned (norm_pairs_ok) and Lp even (a multiple of 64, or L).
  const bool pairs = norm_pairs_ok<T>(d, q) && (!Xq || d.Lp % 2 == 0);
  if (!sums_ready) {
    if (norm_pairs_ok<T>(d, q)) {
      if (s_parts == nullptr)
        throw Error(ErrorKind::internal, "rhoscan cuda: launch_norm_scan without the token sums' workspace (a bug)");
      const int64_t nlb = norm_sums_blocks(d.L);
      launch_kernel("norm_sums_kernel", norm_sums_kernel<T>, grid_for(d.nbh * d.nC * nlb), norm_sums_threads(d.L),
                    norm_sums_smem(d.L), stream, d, q, a32, Nc, s_parts, nlb, nlb == 1 ? s : static_cast<float*>(nullptr));
      if (nlb > 1)  // (one block: norm_sums wrote s itself)
        launch_kernel("token_sum_reduce_kernel", token_sum_reduce_kernel, grid_for(d.nbh * d.T, 256), 256, 0, stream, d,
                      s_parts, nlb, s);
    } else {
      launch_kernel("token_sum_kernel", token_sum_kernel<T>, grid_for(d.nbh * d.T, 8), 256, 0, stream, d, q, s);
      launch_kernel("norm_chunk_sums_kernel", norm_chunk_sums_kernel<T, 1>, grid_for(d.nbh * d.nC * d.L, 256), 256, 0,
                    stream, d, q, a32, Nc);
    }
    launch_kernel("norm_carry_kernel",
                  d.nC <= kCarryBatchFew ? norm_carry_kernel<kCarryBatchFew> : norm_carry_kernel<kCarryBatch>,
                  grid_for(d.nbh * d.L, 256), 256, 0, stream, d, a32, n0, Nc, n_out);
  }
  if (!apply) return;
  if (pairs)
    launch_norm_apply<T, QpT, kNormVec>(d, q, a32, s, Qp, Nc, Xq, Kq, stream);
  else
    launch_norm_apply<T, QpT, 1>(d, q, a32, s, Qp, Nc, Xq, Kq, stream);
}

// ---- intra-chunk scores: one block (256 threads) per (bh, c) ---------------------------------
// P[bh][c][split][i][j] = sum_l Qp_i[l] a^(i-1-j) q_j[l] over the split's slice of L for j < i,
// else 0. With G given (backward), also M[bh][c][split][i][j] = sum_e G_i[e] v_j[e] over the
// split's slice of E; with P null, only M. Consumers add the d.nsplit partials in increasing
// split order.
constexpr int kScoreThreads = 256;
template <typename T>
__global__ void __launch_bounds__(kScoreThreads) chunk_scores_kernel(Dims d, Str4 q, Str4 v, Str4 g,
                                                                     const float* a32, const float* Qp,
                                                                     float* P, float* M) {
  grid_dependency_wait();
  constexpr int LT = 32;
  __shared__ float qs[64][LT + 1], qps[64][LT + 1], apow[64][LT + 1];
  const int C = static_cast<int>(d.C);
  const int64_t lslice = (d.L + d.nsplit * LT - 1) / (d.nsplit * LT) * LT;
  const int64_t eslice = (d.E + d.nsplit * LT - 1) / (d.nsplit * LT) * LT;
  for (int64_t item = blockIdx.x; item < d.nbh * d.nC * d.nsplit; item += gridDim.x) {
    const int64_t bh = item / (d.nC * d.nsplit), c = (item / d.nsplit) % d.nC, sp = item % d.nsplit;
    const int64_t b = d.b_of(bh), h = d.h_of(bh);
    const int64_t t0 = c * d.C;
    const int64_t l_end = min(d.L, (sp + 1) * lslice), e_end = min(d.E, (sp + 1) * eslice);
    const int Cn = static_cast<int>(d.chunk_len(c));
    float acc[16], acc2[16];
#pragma unroll
    for (int r = 0; r < 16; ++r) acc[r] = acc2[r] = 0.0f;
    for (int64_t l0 = sp * lslice; P != nullptr && l0 < l_end; l0 += LT) {
      __syncthreads();
      for (int idx = threadIdx.x; idx < 64 * LT; idx += blockDim.x) {
        const int i = idx / LT, ll = idx % LT;
        const int64_t l = l0 + ll;
        const bool ok = i < Cn && l < l_end;
        qs[i][ll] = ok ? load<T>(q.p, q.at(b, h, t0 + i, l)) : 0.0f;
        qps[i][ll] = ok ? Qp[(bh * d.T + t0 + i) * d.L + l] : 0.0f;
      }
      if (threadIdx.x < LT) {  // a^k, k < C, by repeated multiplication along k
        const int64_t l = l0 + threadIdx.x;
        const float al = l < l_end ? a32[h * d.L + l] : 0.0f;
        float pw = 1.0f;
        for (int k = 0; k < C; ++k) {
          apow[k][threadIdx.x] = pw;
          pw *= al;
        }
      }
      __syncthreads();
#pragma unroll
      for (int r = 0; r < 16; ++r) {
        const int p = threadIdx.x + r * kScoreThreads;
        const int i = p / C, j = p % C;
        if (p < C * C && j < i && i < Cn) {
          float x = 0.0f;
#pragma unroll 8
          for (int ll = 0; ll < LT; ++ll) x += qps[i][ll] * apow[i - 1 - j][ll] * qs[j][ll];
          acc[r] += x;
        }
      }
    }
    if (M != nullptr) {
      for (int64_t e0 = sp * eslice; e0 < e_end; e0 += LT) {
        __syncthreads();
        for (int idx = threadIdx.x; idx < 64 * LT; idx += blockDim.x) {
          const int i = idx / LT, ee = idx % LT;
          const int64_t e = e0 + ee;
          const bool ok = i < Cn && e < e_end;
          qs[i][ee] = ok ? load<T>(g.p, g.at(b, h, t0 + i, e)) : 0.0f;
          qps[i][ee] = ok ? load<T>(v.p, v.at(b, h, t0 + i, e)) : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int r = 0; r < 16; ++r) {
          const int p = threadIdx.x + r * kScoreThreads;
          const int i = p / C, j = p % C;
          if (p < C * C && j < i && i < Cn) {
            float x = 0.0f;
#pragma unroll 8
            for (int ee = 0; ee < LT; ++ee) x += qs[i][ee] * qps[j][ee];
            acc2[r] += x;
          }
        }
      }
    }
#pragma unroll
    for (int r = 0; r < 16; ++r) {
      const int p = threadIdx.x + r * kScoreThreads;
      if (p < C * C) {
        if (P != nullptr) P[((bh * d.nC + c) * d.nsplit + sp) * C * C + p] = acc[r];
        if (M != nullptr) M[((bh * d.nC + c) * d.nsplit + sp) * C * C + p] = acc2[r];
      }
    }
  }
}

// Adds the d.nsplit partials of each (bh, chunk) score matrix into split 0, in split order.
static __global__ void reduce_splits_kernel(Dims d, float* X) {
  grid_dependency_wait();
  const int64_t CC = d.C * d.C, n = d.nbh * d.nC * CC;
  for (int64_t x = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; x < n; x += int64_t(gridDim.x) * blockDim.x) {
    float* base = X + (x / CC) * d.nsplit * CC + x % CC;
    float acc = base[0];
    for (int64_t sp = 1; sp < d.nsplit; ++sp) acc += base[sp * CC];
    base[0] = acc;
  }
}

// ---- chunk-boundary states: one block per (bh, 64 rows of l, 128 columns of e) ---------------
// Forward (kReverse = false): S_{c+1} = a^Cn ⊙ S_c + sum_i (q_i a^(Cn-1-i)) ⊗ v_i, from the
//   initial state; stores S_c (before chunk c) as Hs[bh][c][l][e]; writes the final state.
// Backward (kReverse = true): A_start = a^Cn ⊙ A_end + sum_i (Qp_i a^i) ⊗ G_i, from the upstream
//   gradient of the final state; stores A_end of chunk c as Hs[bh][c]; writes dR_0.
// The state tile lives in registers (8 rows × 4 columns per thread: 32 accumulators, so each
// shared-memory read feeds several FMAs), so the whole sequence costs one pass over q, v and one
// write of each chunk state.
constexpr int kStateThreads = 256;
constexpr int kStateLT = 64, kStateET = 128;
template <typename T, bool kReverse>
__global__ void __launch_bounds__(kStateThreads) chunk_states_kernel(Dims d, Str4 key, Str4 val,
                                                                     const float* a32, const float* Qp,
                                                                     Str4 init, float* Hs, Str4 out) {
  grid_dependency_wait();
  constexpr int LT = kStateLT, ET = kStateET, RPT = 8, CPT = 4;
  __shared__ __align__(16) float keys[64][LT];
  __shared__ __align__(16) float vals[64][ET];
  const int64_t nlt = (d.L + LT - 1) / LT, net = (d.E + ET - 1) / ET;
  const int tc = threadIdx.x % 32, tr = threadIdx.x / 32;  // columns tc*4.., rows tr*8..
  float* init_p = const_cast<float*>(static_cast<const float*>(init.p));
  float* out_p = const_cast<float*>(static_cast<const float*>(out.p));
  for (int64_t item = blockIdx.x; item < d.nbh * nlt * net; item += gridDim.x) {
    const int64_t bh = item / (nlt * net), lt = (item / net) % nlt, et = item % net;
    const int64_t b = d.b_of(bh), h = d.h_of(bh), l0 = lt * LT, e0 = et * ET + tc * CPT;
    float st[RPT][CPT], a[RPT];
#pragma unroll
    for (int r = 0; r < RPT; ++r) {
      const int64_t l = l0 + tr * RPT + r;
      a[r] = l < d.L ? a32[h * d.L + l] : 0.0f;
#pragma unroll
      for (int k = 0; k < CPT; ++k) {
        const int64_t e = e0 + k;
        st[r][k] = (init_p && l < d.L && e < d.E) ? init_p[init.at(b, h, l, e)] : 0.0f;
      }
    }
    for (int64_t step = 0; step < d.nC; ++step) {
      const int64_t c = kReverse ? d.nC - 1 - step : step;
      const int64_t t0 = c * d.C;
      const int Cn = static_cast<int>(d.chunk_len(c));
      float* Hc = Hs + (bh * d.nC + c) * d.Lp * d.Ep;
      // 16-byte stores when every row starts 16-byte aligned (E % 4 == 0): one transaction per lane
      const bool vec = (d.E % 4 == 0) && e0 + CPT <= d.E;
#pragma unroll
      for (int r = 0; r < RPT; ++r) {
        const int64_t l = l0 + tr * RPT + r;
        if (l >= d.L) continue;
        if (vec) {
          *reinterpret_cast<float4*>(&Hc[l * d.Ep + e0]) = make_float4(st[r][0], st[r][1], st[r][2], st[r][3]);
        } else {
#pragma unroll
          for (int k = 0; k < CPT; ++k)
            if (e0 + k < d.E) Hc[l * d.Ep + e0 + k] = st[r][k];
        }
      }
      __syncthreads();
      {  // keys: thread (ll, 16 consecutive tokens); the powers of a by one multiplication each
        const int ll = threadIdx.x % LT, i0 = (threadIdx.x / LT) * 16;
        const int64_t l = l0 + ll;
        const float al = l < d.L ? a32[h * d.L + l] : 0.0f;
        if (kReverse) {  // Qp_i a^i, i increasing
          float pw = ipow(al, i0);
#pragma unroll 4
          for (int k = 0; k < 16; ++k) {
            const int i = i0 + k;
            keys[i][ll] = (i < Cn && l < d.L) ? Qp[(bh * d.T + t0 + i) * d.L + l] * pw : 0.0f;
            pw *= al;
          }
        } else {  // q_i a^(Cn-1-i): from the last token of the group backwards
          const int last = min(i0 + 15, Cn - 1);
          float pw = last >= i0 ? ipow(al, Cn - 1 - last) : 0.0f;
          for (int i = i0 + 15; i > last; --i) keys[i][ll] = 0.0f;
#pragma unroll 4
          for (int i = last; i >= i0; --i) {
            keys[i][ll] = l < d.L ? load<T>(key.p, key.at(b, h, t0 + i, l)) * pw : 0.0f;
            pw *= al;
          }
        }
      }
      for (int idx = threadIdx.x; idx < 64 * ET; idx += blockDim.x) {
        const int i = idx / ET, ee = idx % ET;
        const int64_t ex = et * ET + ee;
        vals[i][ee] = (i < Cn && ex < d.E) ? load<T>(val.p, val.at(b, h, t0 + i, ex)) : 0.0f;
      }
      __syncthreads();
#pragma unroll
      for (int r = 0; r < RPT; ++r) {
        const float f = ipow(a[r], Cn);
#pragma unroll
        for (int k = 0; k < CPT; ++k) st[r][k] *= f;
      }
      for (int i = 0; i < Cn; ++i) {
        const float4 vv = *reinterpret_cast<const float4*>(&vals[i][tc * CPT]);
        const float4 k0 = *reinterpret_cast<const float4*>(&keys[i][tr * RPT]);
        const float4 k1 = *reinterpret_cast<const float4*>(&keys[i][tr * RPT + 4]);
        const float kk[RPT] = {k0.x, k0.y, k0.z, k0.w, k1.x, k1.y, k1.z, k1.w};
        const float vk[CPT] = {vv.x, vv.y, vv.z, vv.w};
#pragma unroll
        for (int r = 0; r < RPT; ++r)
#pragma unroll
          for (int k = 0; k < CPT; ++k) st[r][k] += kk[r] * vk[k];
      }
    }
    if (out_p) {
#pragma unroll
      for (int r = 0; r < RPT; ++r) {
        const int64_t l = l0 + tr * RPT + r;
#pragma unroll
        for (int k = 0; k < CPT; ++k)
          if (l < d.L && e0 + k < d.E) out_p[out.at(b, h, l, e0 + k)] = st[r][k];
      }
    }
    __syncthreads();
  }
}

// ---- chunk outputs: one block per (bh, c, 64 columns of e) -----------------------------------
// out[i][e] = sum_l X[i][l] S[l][e] + sum_j Pm[i][j] Y[j][e]
// Forward (kDv = false): X = Qp_i a^i, S = H_c, Pm = P (j < i), Y = v.
// dv (kDv = true):       X = q_i a^(Cn-1-i), S = A_end of chunk c, Pm = P^T (j > i), Y = G.
// The result goes to `out` in OutT with strides (b, h, t, e), or to a float workspace
// [bh][t][e] when out_ws is given.
constexpr int kOutThreads = 256;
template <typename T, typename OutT, bool kDv>
__global__ void __launch_bounds__(kOutThreads, 3) chunk_output_kernel(Dims d, Str4 q, Str4 y,
                                                                   const float* a32, const float* Qp,
                                                                   const float* Hs, const float* P,
                                                                   Str4 out, float* out_ws) {
  grid_dependency_wait();
  constexpr int LT = 32, ET = 64;
  // The L loop's tiles and the intra-chunk operands are never live together: one union.
  union Smem {
    struct {
      __align__(16) float xt[LT][64 + 4];  // padded: the transposed stores spread over banks
      __align__(16) float ss[LT][ET];
    } l;
    struct {
      __align__(16) float pt[64][64];  // pt[j][i] = Pm[i][j]
      __align__(16) float ys[64][ET];
    } c;
  };
  __shared__ Smem sm;
  auto& xt = sm.l.xt;
  auto& ss = sm.l.ss;
  auto& pt = sm.c.pt;
  auto& ys = sm.c.ys;
  const int C = static_cast<int>(d.C);
  const int64_t net = (d.E + ET - 1) / ET;
  const int gi = threadIdx.x / 16, ge = threadIdx.x % 16;
  const int xl = threadIdx.x % LT, xi0 = (threadIdx.x / LT) * 8;  // X: one latent, 8 tokens
  for (int64_t item = blockIdx.x; item < d.nbh * d.nC * net; item += gridDim.x) {
    const int64_t bh = item / (d.nC * net), c = (item / net) % d.nC, et = item % net;
    const int64_t b = d.b_of(bh), h = d.h_of(bh), t0 = c * d.C, e0 = et * ET;
    const int Cn = static_cast<int>(d.chunk_len(c));
    const float* Hc = Hs + (bh * d.nC + c) * d.Lp * d.Ep;
    float acc[4][4] = {};
    float xr[8], sr[8];  // the next tile, fetched while the current one is multiplied
    auto fetch = [&](int64_t l0) {
      const int64_t l = l0 + xl;
      const float al = l < d.L ? a32[h * d.L + l] : 0.0f;
      // exponents increase with k: i for the forward, Cn-1-i (tokens taken backwards) for dv
      float pw = ipow(al, kDv ? max(Cn - 1 - (xi0 + 7), 0) : xi0);
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const int i = kDv ? xi0 + 7 - k : xi0 + k;
        float x = 0.0f;
        if (i < Cn && l < d.L) {
          x = kDv ? load<T>(q.p, q.at(b, h, t0 + i, l)) : Qp[(bh * d.T + t0 + i) * d.L + l];
          x *= pw;
          pw *= al;
        }
        xr[kDv ? 7 - k : k] = x;
      }
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const int idx = threadIdx.x + k * kOutThreads;
        const int64_t lx = l0 + idx / ET, e = e0 + idx % ET;
        sr[k] = (lx < d.L && e < d.E) ? Hc[lx * d.Ep + e] : 0.0f;
      }
    };
    fetch(0);
    for (int64_t l0 = 0; l0 < d.L; l0 += LT) {
      __syncthreads();
      *reinterpret_cast<float4*>(&xt[xl][xi0]) = make_float4(xr[0], xr[1], xr[2], xr[3]);
      *reinterpret_cast<float4*>(&xt[xl][xi0 + 4]) = make_float4(xr[4], xr[5], xr[6], xr[7]);
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const int idx = threadIdx.x + k * kOutThreads;
        ss[idx / ET][idx % ET] = sr[k];
      }
      __syncthreads();
      if (l0 + LT < d.L) fetch(l0 + LT);
#pragma unroll 8
      for (int ll = 0; ll < LT; ++ll) {
        const float4 xv = *reinterpret_cast<const float4*>(&xt[ll][gi * 4]);
        const float4 sv = *reinterpret_cast<const float4*>(&ss[ll][ge * 4]);
        const float xa[4] = {xv.x, xv.y, xv.z, xv.w}, sa[4] = {sv.x, sv.y, sv.z, sv.w};
#pragma unroll
        for (int r = 0; r < 4; ++r)
#pragma unroll
          for (int k = 0; k < 4; ++k) acc[r][k] += xa[r] * sa[k];
      }
    }
    __syncthreads();
    const float* Pc = P + (bh * d.nC + c) * d.nsplit * C * C;
    for (int idx = threadIdx.x; idx < 64 * 64; idx += blockDim.x) {
      const int j = idx / 64, i = idx % 64;
      float pm = 0.0f;
      if (i < Cn && j < Cn && (kDv ? j > i : j < i)) {
        const int o = kDv ? j * C + i : i * C + j;
        pm = Pc[o];  // split 0 holds the sum (reduce_splits_kernel)
      }
      pt[j][i] = pm;
    }
    for (int idx = threadIdx.x; idx < 64 * ET; idx += blockDim.x) {
      const int j = idx / ET, ee = idx % ET;
      const int64_t e = e0 + ee;
      ys[j][ee] = (j < Cn && e < d.E) ? load<T>(y.p, y.at(b, h, t0 + j, e)) : 0.0f;
    }
    __syncthreads();
    for (int j = 0; j < Cn; ++j) {
      const float4 pv = *reinterpret_cast<const float4*>(&pt[j][gi * 4]);
      const float4 yv = *reinterpret_cast<const float4*>(&ys[j][ge * 4]);
      const float pa[4] = {pv.x, pv.y, pv.z, pv.w}, ya[4] = {yv.x, yv.y, yv.z, yv.w};
#pragma unroll
      for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int k = 0; k < 4; ++k) acc[r][k] += pa[r] * ya[k];
    }
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int i = gi * 4 + r;
      if (i >= Cn) continue;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int64_t e = e0 + ge * 4 + k;
        if (e >= d.E) continue;
        if (out_ws) out_ws[(bh * d.T + t0 + i) * d.E + e] = acc[r][k];
        else store<OutT>(const_cast<void*>(out.p), out.at(b, h, t0 + i, e), acc[r][k]);
      }
    }
  }
}

}  // namespace rhoscan::cuda_detail
