// The whole-sequence ("quadratic") forward of the tensor-core path: for short sequences with no
// initial state, the context without chunk-start states,
//   c_i = sum_{j<i} P[i][j] v_j,   P[i][j] = sum_l Qp_i[l] a_l^(i-1-j) q_j[l],
// as a lower block-triangular product of C×C blocks (chunk C, blocks I >= J, i', j' the tokens'
// indices in their chunks). Diagonal blocks are chunk_scores' P. Below the diagonal, with
// d = I - J - 1 >= 0, the exponent splits into three non-negative parts,
//   i - 1 - j = i' + d C + (C - 1 - j'),
// so with the operands norm_apply writes (Xq_i = Qp_i a^i', Kq_j = q_j a^(Cn-1-j'), and Cn = C for
// every J < I: only the last chunk can be short)
//   P_IJ = Xq_I · diag(a^(d C)) · Kq_J^T        (contraction over L; no a^(-n) anywhere).
// The chunked forward stores a chunk-start state per chunk (L×E per chunk and pair: 1 GiB of bf16
// at BDH-8k) and reads it back; this path stores T×T/2 scores per pair instead (4 MiB of float32
// per pair at T = 1024), at the price of ~T/2 C-token blocks of L-contractions per chunk instead
// of one. The final state comes from final_state_wgmma or final_state_mma (below: the chunk-state
// recurrence as a GEMM-shaped kernel that stores no chunk state).
#pragma once

#include <cstdlib>
#include <cstring>

#include "cuda/chunk_products.cuh"

namespace rhoscan::cuda_detail {

// The longest sequence the forward takes the quadratic path for (tensor-core dtypes, no initial
// rho); 0: never. -DRHOSCAN_QUADRATIC_MAX_T=n overrides it (A/B builds). The environment variable
// RHOSCAN_CUDA_FORWARD_PATH=chunked|quadratic forces a path (forward.cu; for tests).
#ifndef RHOSCAN_QUADRATIC_MAX_T
#define RHOSCAN_QUADRATIC_MAX_T 1024
#endif
constexpr int64_t kQuadraticMaxT = RHOSCAN_QUADRATIC_MAX_T;
// ... and only where L >= min_l_per_t · T: the quadratic path trades the chunk states' L×E
// traffic per chunk for T×T×E products (M, P·V, dv) that do not shrink with L. Measured on the H200
// (bfloat16, T = 512, E = 256, median of 5; `scripts/cuda_device_run.sh crossover`, both paths
// forced per call, bench/results/cuda-h200-2026-11-30.jsonl, commit c00d7c4):
//   L / T (B)             1/2 (24)  1 (24)  2 (16)  4 (8)   16 (8: BDH-8k)
//   backward, chunked     1.43      2.15    2.38    2.20    7.79 (at 7a4ccef)   ms, forward+backward
//   backward, quadratic   1.56      2.03    2.05    1.84    5.54                    minus forward
//   forward, chunked      0.40      0.58    0.68    0.63    2.03
//   forward, quadratic    0.45      0.60    0.66    0.65    1.85
// so the backward took the quadratic path from L = T and the forward from L = 8 T. Re-measured on
// the H200 in round 26 with that round's kernels (849aaf1, the same shapes plus T = 1024, both paths
// forced per call, bench/results/cuda-h200-2026-12-05.jsonl):
//   L / T (B)                      1/2 (24)  1 (24)  2 (16)  4 (8)   16 (8)  1/2 at T = 1024 (12)
//   forward, chunked               0.21      0.35    0.45    0.42    1.42    0.35     ms
//   forward, quadratic             0.27      0.35    0.36    0.31    0.91    0.44
//   forward+backward, chunked      0.92      1.46    1.82    1.83    6.59    1.44
//   forward+backward, quadratic    0.93      1.25    1.37    1.18    3.73    1.60
// so the backward keeps L = T (RHOSCAN_QUADRATIC_MIN_L_PER_T, default 1) and the forward now takes
// the quadratic path from L = 2 T (RHOSCAN_QUADRATIC_FORWARD_MIN_L_PER_T, default 2: equal at L = T,
// 20-35 % faster from 2 T).
#ifndef RHOSCAN_QUADRATIC_MIN_L_PER_T
#define RHOSCAN_QUADRATIC_MIN_L_PER_T 1
#endif
#ifndef RHOSCAN_QUADRATIC_FORWARD_MIN_L_PER_T
#define RHOSCAN_QUADRATIC_FORWARD_MIN_L_PER_T 2
#endif
// The forward's quadratic path by default (0: only when RHOSCAN_CUDA_FORWARD_PATH=quadratic
// forces it). On since final_state_mma made it faster than the chunked forward at BDH-8k (above).
#ifndef RHOSCAN_QUADRATIC_FORWARD
#define RHOSCAN_QUADRATIC_FORWARD 1
#endif
// The shape rule both directions share (the caller checks dtype, initial state, environment):
// T <= kQuadraticMaxT (0: never, not even at T = 0), L >= min_l_per_t · T, and chunks of 64 (the
// kernels' 64-token tiles: smaller chunks would leave most of each tile empty).
inline bool quadratic_shape(int64_t T, int64_t L, int64_t C, int64_t min_l_per_t = RHOSCAN_QUADRATIC_MIN_L_PER_T) {
  return kQuadraticMaxT > 0 && T <= kQuadraticMaxT && L >= min_l_per_t * T && C == kMmaLT;
}
// The backward's rule adds L >= T/2 for T <= RHOSCAN_QUADRATIC_BACKWARD_HALF_L_MAX_T (0: never).
// Measured on the H200 in round 28 (4c8c7df, bfloat16, E = 256, forward+backward with the default
// forward, the backward forced either way, three rounds; bench/results/round28-h200-2026-12-05/):
//   shape (L = T/2)       B24 T512 L256 (BDH-base)  B32 T256 L128  B12 T1024 L512
//   backward, chunked     0.87-0.89                 0.51           1.44-1.49       ms
//   backward, quadratic   0.81-0.85                 0.44-0.49      1.51-1.53
// so the quadratic backward from L = T/2 up to T = 512, and from L = T above (it loses at 1024).
#ifndef RHOSCAN_QUADRATIC_BACKWARD_HALF_L_MAX_T
#define RHOSCAN_QUADRATIC_BACKWARD_HALF_L_MAX_T 512
#endif
inline bool quadratic_backward_shape(int64_t T, int64_t L, int64_t C) {
  const bool half_l = T <= RHOSCAN_QUADRATIC_BACKWARD_HALF_L_MAX_T && 2 * L >= T && quadratic_shape(T, L, C, 0);
  return half_l || quadratic_shape(T, L, C);
}

// ---- cross_scores: the blocks below the diagonal on tensor cores --------------------------------
// Pcross[bh][I][J][i'][j'] (float32, block (I, J) at ((bh nC + I) nC + J) C C, row i' then
// column j'; only blocks J < I are written, rows past the last chunk's length as 0):
//   P_IJ[i'][j'] = sum_l Xq[I C + i'][l] a_l^((I-J-1) C) Kq[J C + j'][l].
// The scaled key is the key times a^(d C) in float32, rounded to bf16 once. (Version 1, 8 warps
// of 32×32 with the keys scaled through shared memory, 0.54 against version 2's 0.37 ms at BDH-8k
// on the H200 (e932816), was removed after that measurement; it is in the history before ff5503c.)
// Version 3 (below) replaced version 2 (items of one row block × two column blocks, 4 warps of
// 64 × 32, 177 registers, 8 warps per SM) after an A/B on the H200 (fc25820, BDH-8k bfloat16, where
// the kernel runs in both directions): forward 1.63 against 1.70 ms, forward+backward 6.95 against
// 7.19 ms; the same outputs bitwise in the emulation. Version 2 is in the history before the commit
// that removed it (after dabd259).
constexpr int kCrossS = kMmaLT + 8;  // bf16 row stride of the operand tiles (conflict-free ldmatrix)
// A bf16 pair (low half first) times its factors, rounded once.
__device__ __forceinline__ uint32_t scale_bf16x2(uint32_t u, float2 fa) {
  __nv_bfloat162 w;
  memcpy(&w, &u, sizeof u);
  const __nv_bfloat162 y = __floats2bfloat162_rn(__low2float(w) * fa.x, __high2float(w) * fa.y);
  memcpy(&u, &y, sizeof u);
  return u;
}
// One warp's share of a 64-latent tile: acc (64 Xq rows × 32 key columns) +=
// Xq · (keys × f)ᵀ, with xs the warp's 64 Xq rows and ks its 32 key rows in shared memory (row
// stride kCrossS) and f the tile's 64 per-latent factors a^(d C): each key pair is scaled in float32
// and rounded to bf16 once, in the B fragments after ldmatrix; the next 16-latent step's fragments
// are loaded while this step's mma run.
// kSwizzle: rows of 64 latents unpadded (128 bytes) with 16-byte chunk c of row r at c ^ (r % 8)
// (cross_scores_mma_kernel's fill); xs and ks then start on 128-byte boundaries, the lane's ldmatrix
// row is at its logical chunk 0 or 1 (XOR the row's r % 8 = lane % 8), and a 16-latent step moves
// the chunk by 2 k: an XOR of the address with 2 k0 bytes (bits 5, 6), the row blocks immediates.
template <bool kSwizzle = false>
__device__ __forceinline__ void cross_warp_tile(float (&acc)[4][4][4], const bf16* xs, const bf16* ks, const float* f,
                                                int lane) {
  constexpr int LT = kMmaLT, S = kSwizzle ? kMmaLT : kCrossS;
  const int tq = lane % 4;
  uint32_t af[2][4][4], bf[2][2][4];  // fragments of two 16-latent steps (double-buffered)
  // (swizzled: the lane's rows at k0 = 0, mt = np = 0)
  const uint32_t xa = smem_addr(xs) + 2 * (lane & 15) * S + 16 * ((lane >> 4) ^ (lane & 7));
  const uint32_t kb = smem_addr(ks) + 2 * ((lane >> 4) * 8 + (lane & 7)) * S + 16 * (((lane >> 3) & 1) ^ (lane & 7));
  auto load = [&](int k0, uint32_t(&a)[4][4], uint32_t(&b)[2][4]) {
    if constexpr (kSwizzle) {
#pragma unroll
      for (int mt = 0; mt < 4; ++mt) ldsm_x4_u32(a[mt], (xa ^ (2u * k0)) + 2 * 16 * S * mt);
#pragma unroll
      for (int np = 0; np < 2; ++np) ldsm_x4_u32(b[np], (kb ^ (2u * k0)) + 2 * 16 * S * np);
    } else {
#pragma unroll
      for (int mt = 0; mt < 4; ++mt) ldsm_x4(a[mt], xs + (16 * mt + (lane & 15)) * S + k0 + (lane >> 4) * 8);
#pragma unroll
      for (int np = 0; np < 2; ++np)  // regs 0, 2: latents k0 + 2 tq (+1); regs 1, 3: k0 + 8 + 2 tq (+1)
        ldsm_x4(b[np], ks + (16 * np + (lane >> 4) * 8 + (lane & 7)) * S + k0 + ((lane >> 3) & 1) * 8);
    }
  };
  load(0, af[0], bf[0]);
#pragma unroll
  for (int k = 0; k < LT / 16; ++k) {
    const int c = k & 1;
    if (k + 1 < LT / 16) load(16 * (k + 1), af[c ^ 1], bf[c ^ 1]);
    const float2 f0 = *reinterpret_cast<const float2*>(f + 16 * k + 2 * tq);
    const float2 f1 = *reinterpret_cast<const float2*>(f + 16 * k + 8 + 2 * tq);
#pragma unroll
    for (int np = 0; np < 2; ++np) {
      bf[c][np][0] = scale_bf16x2(bf[c][np][0], f0), bf[c][np][1] = scale_bf16x2(bf[c][np][1], f1);
      bf[c][np][2] = scale_bf16x2(bf[c][np][2], f0), bf[c][np][3] = scale_bf16x2(bf[c][np][3], f1);
    }
#pragma unroll
    for (int mt = 0; mt < 4; ++mt)
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
        mma_bf16_16816(acc[mt][nt], af[c][mt], bf[c][nt / 2][2 * (nt % 2)], bf[c][nt / 2][2 * (nt % 2) + 1]);
  }
}
// Version 2's column-block groups per pair (sum over I = 1 .. nC-1 of ceil(I / 2) = floor(nC^2 / 4)):
// what cross_splits counts, so that the L splits, and with them the sums, stay version 2's.
__host__ __device__ __forceinline__ int64_t cross_groups(int64_t nC) { return nC * nC / 4; }
// The float32 partial planes of cross_scores' L splits (Pcross's layout each): one per split where
// L is split, none with one split (the kernel then writes Pcross itself).
__host__ __device__ __forceinline__ int64_t cross_parts_planes(int64_t nsplit) { return nsplit > 1 ? nsplit : 0; }
// L splits: slice sp covers tiles [sp·n, (sp+1)·n) of the Lp / 64. With one split the kernel
// writes Pcross (bf16) itself; with more, split sp writes parts[sp] (float32, Pcross's layout), and
// cross_reduce_kernel adds them in split order (deterministic; no atomics) and rounds the sum to
// bf16 into Pcross. (Until round 31 Pcross was float32, split 0 wrote it and the reduce added the
// others into it: the same sums, in the same order; its readers rounded it to bf16.)
// The item (version 3) is two row blocks × two column blocks (a 128 × 128 output tile over two
// Xq and two Kq tiles per 64-latent tile, so each tile read serves two blocks' products: 8 KiB of
// operands per 64×64 product and tile against version 2's 12), 8 warps of 64 × 32, each in one
// (I, J): one distance d = I - J - 1 and one factor per latent per warp, applied to the key's B
// fragments in registers as in version 2. The items of a pair (closed form, no idle items):
//   - rectangles: rows 2m and 2m+1 (m = 1 .. M, M = floor((nC-1)/2)) × columns 2k and 2k+1
//     (k = 0 .. m-1): all four blocks below the diagonal (2k+1 <= 2m-1); row 2m+1 absent where
//     2m+1 = nC (odd nC: those four warps idle). Rectangle g: m (m-1)/2 <= g < m (m+1)/2.
//   - the blocks next to the diagonal that the rectangles leave, (2s+1, 2s) for s = 0 .. S-1
//     (S = floor(nC/2)), two per item: rows 4t+1, 4t+3 × columns 4t, 4t+2, the warps of the
//     two diagonal combinations only (d = 0; the second absent where 4t+3 >= nC).
// At BDH-8k (nC = 8): 6 rectangles and 2 diagonal items, 28 of 32 warp tiles busy (version 2: 16
// items of 2 warp pairs, 28 of 32 too), at 2/3 of version 2's operand traffic. The L splits stay
// cross_splits' (from version 2's group count, so that the sums are version 2's bitwise).
// Three cp.async stages of 4 × 64 rows (one barrier per tile), the factors of the four (row slot,
// key slot) combinations one tile ahead in a double-buffered table (one per thread: 256 = 4 × 64),
// fragments double-buffered across 16-latent steps as in version 2; sized for 2 blocks (16 warps)
// per SM: <= 128 registers and ~110 KiB of shared memory per block.
__host__ __device__ __forceinline__ int64_t cross_items(int64_t nC) {
  const int64_t M = nC > 0 ? (nC - 1) / 2 : 0, S = nC / 2;
  return M * (M + 1) / 2 + (S + 1) / 2;
}
// Item g of a pair -> row blocks xI[0..1] (>= nC: absent), column blocks kJ[0..1], and whether it is
// a diagonal item (only the combinations (0, 0) and (1, 1)).
__device__ __forceinline__ void cross_item_decode(int64_t g, int64_t nC, int (&xI)[2], int (&kJ)[2], bool& diag) {
  const int64_t M = (nC - 1) / 2, R = M * (M + 1) / 2;
  diag = g >= R;
  if (!diag) {
    int64_t m = static_cast<int64_t>((1.0 + sqrt(1.0 + 8.0 * static_cast<double>(g))) / 2.0);
    while (m * (m + 1) / 2 <= g) ++m;  // rounding of the square root, either way
    while (m > 1 && m * (m - 1) / 2 > g) --m;
    const int64_t k = g - m * (m - 1) / 2;
    xI[0] = static_cast<int>(2 * m), xI[1] = static_cast<int>(2 * m + 1);
    kJ[0] = static_cast<int>(2 * k), kJ[1] = static_cast<int>(2 * k + 1);
  } else {
    const int64_t t = g - R;
    xI[0] = static_cast<int>(4 * t + 1), xI[1] = static_cast<int>(4 * t + 3);
    kJ[0] = static_cast<int>(4 * t), kJ[1] = static_cast<int>(4 * t + 2);
  }
}
// Row i's columns j, j + 1 (j even) of a cross-score block at o (the block's start + i C + j):
// float32 into an L split's partials, or, with one split, bf16 into Pcross (what its readers,
// quadratic_output and quad_dv, round it to anyway: the same operands in half the bytes). As pairs
// where C is even (aligned: blocks start at multiples of C C, rows at multiples of C). The kernels
// pick the destination once per block of scores (one split or several: uniform).
// Measured (round 31, H100, Nsight, BDH-base): with bf16 Pcross cross_scores_wgmma takes 0.044-0.045
// ms a launch against 0.039 with float32 (BDH-8k: 0.211 against 0.204-0.208), although it writes
// 0.019 against 0.051 GB over two launches, whether the destination is chosen per store, per block
// or per instantiation (calls 2-4). Its readers gain more (quad_dv 0.090 -> 0.071 ms a backward at
// BDH-base, quadratic_output 0.043 -> 0.032 a forward at BDH-8k). Call 5's SASS (cuobjdump) shows
// why: with the bf16 stores ptxas 13 takes 128 registers, spills 8 bytes and reads threadIdx (S2R)
// three times inside the main loop, 7 more instructions per L tile (d9f3628: 127 registers, no
// spills, no S2R in the loop). cross_scores_wgmma's kParts instantiations are allocated without
// spills (round 34 on an H100: 0.087 against 0.089 ms over BDH-base's two launches).
__device__ __forceinline__ void store_cross_pair(float* o, int j, int C, float x0, float x1) {
  if (C % 2 == 0 && j + 1 < C) {
    *reinterpret_cast<float2*>(o) = make_float2(x0, x1);
  } else {
    if (j < C) o[0] = x0;
    if (j + 1 < C) o[1] = x1;
  }
}
__device__ __forceinline__ void store_cross_pair(bf16* o, int j, int C, float x0, float x1) {
  if (C % 2 == 0 && j + 1 < C) {
    *reinterpret_cast<__nv_bfloat162*>(o) = __floats2bfloat162_rn(x0, x1);
  } else {
    if (j < C) o[0] = __float2bfloat16_rn(x0);
    if (j + 1 < C) o[1] = __float2bfloat16_rn(x1);
  }
}
constexpr int kCrossThreads = 256;
constexpr int kCrossNS = 3;                 // pipeline stages
// kSwizzle (the default; RHOSCAN_CS_SWIZZLE=0 at build time keeps the padded rows): the tiles'
// rows unpadded, chunk c of row r at c ^ (r % 8), as quad_readback_mma's (quadratic_backward.cuh:
// the cp.async fills then write whole aligned 128-byte groups). The same bytes in other places:
// the same products bit for bit (emulated). H200, round 16 (de6c163 with and without the flags of
// all four swizzled kernels, BDH-8k bfloat16, Nsight Compute durations): 1.093 against 1.168 ms
// for four launches (2 forwards each of the forward and the forward+backward benchmarks).
#ifndef RHOSCAN_CS_SWIZZLE
#define RHOSCAN_CS_SWIZZLE 1
#endif
template <bool kSwizzle>
constexpr int cross_stage() {  // bf16 per stage: Xq rows of slots 0, 1, then key rows of slots 0, 1
  return 4 * 64 * (kSwizzle ? kMmaLT : kCrossS);
}
template <bool kSwizzle>
constexpr int cross_smem() {
  return kCrossNS * cross_stage<kSwizzle>() * static_cast<int>(sizeof(bf16)) + 2 * 4 * kMmaLT * static_cast<int>(sizeof(float));
}
constexpr bool kCrossSwizzle = RHOSCAN_CS_SWIZZLE != 0;  // the launcher's layout
constexpr int kCrossSmem = cross_smem<kCrossSwizzle>();
template <bool kSwizzle = kCrossSwizzle>
static __global__ void __launch_bounds__(kCrossThreads, 2)
    cross_scores_mma_kernel(Dims d, const bf16* Xq, const bf16* Kq, const float* a32, bf16* Pcross, float* parts,
                            int nsplit) {
  grid_dependency_wait();
  constexpr int LT = kMmaLT, S = kSwizzle ? kMmaLT : kCrossS, NS = kCrossNS, kCrossStage = cross_stage<kSwizzle>();
  static_assert(kCrossThreads == 4 * LT && kCrossThreads == 256, "one factor per thread, 64 copying threads per slot");
  static_assert(!kSwizzle || (2 * kCrossStage) % 128 == 0, "the swizzled tiles start on 128-byte boundaries");
  // (128-byte aligned: the swizzled tiles' XOR steps need every tile on a 128-byte boundary)
  extern __shared__ __align__(128) unsigned char smem_raw[];
  bf16* tiles = reinterpret_cast<bf16*>(smem_raw);                // [NS][256][S]: Xq rows, raw key rows
  float* fs = reinterpret_cast<float*>(tiles + NS * kCrossStage);  // [2][4 combinations][64 latents]: a^(d C)
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, tq = lane % 4;
  // the warp's row slot, key slot (its combination 2 wr + wk) and columns in the key block
  const int wr = warp / 4, wk = (warp / 2) % 2, wc = 32 * (warp % 2);
  const int C = static_cast<int>(d.C), nC = static_cast<int>(d.nC);
  const int ntiles = static_cast<int>(d.Lp / LT), per_split = (ntiles + nsplit - 1) / nsplit;
  const int64_t groups = cross_items(d.nC), items = d.nbh * groups * nsplit;
  const int64_t plane = d.nbh * d.nC * d.nC * C * C;
  for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    const int64_t bh = item / (groups * nsplit);
    const int sp = static_cast<int>(item % nsplit);
    int xI[2], kJ[2];
    bool diag;
    cross_item_decode(item / nsplit % groups, d.nC, xI, kJ, diag);
    const int xI0 = xI[0], xI1 = xI[1], kJ0 = kJ[0], kJ1 = kJ[1];  // (selected by ternaries: no local memory)
    // tokens of the row slots (0: absent), whether the key slots are read
    const int Cn0 = static_cast<int>(d.chunk_len(xI0)), Cn1 = xI1 < nC ? static_cast<int>(d.chunk_len(xI1)) : 0;
    const bool key1 = !diag || Cn1 > 0;
    const int kt0 = sp * per_split, kt1 = min(ntiles, kt0 + per_split);
    const float* arow = a32 + d.h_of(bh) * d.L;
    const bool active = (wr == 0 || Cn1 > 0) && (!diag || wr == wk);
    // this thread's copies: slot tid / 64 (row slots 0, 1, key slots 0, 1), rows fi + 8 r (r < 8),
    // latents 8 (tid % 8) .. + 7 of the tile: one source pointer per thread (rows past the slot's
    // valid ones, and absent slots, zero-filled; never read as nonzero operands)
    const int fslot = tid / 64, fi = tid % 64 / 8;
    const int fblk = fslot == 0 ? xI0 : fslot == 1 ? (Cn1 > 0 ? xI1 : xI0) : fslot == 2 ? kJ0 : (key1 ? kJ1 : kJ0);
    const int fCn = fslot == 0 ? Cn0 : fslot == 1 ? Cn1 : fslot == 2 || key1 ? C : 0;
    const bf16* fsrc = (fslot < 2 ? Xq : Kq) + (bh * d.T + int64_t{fblk} * C + fi) * d.Lp + 8 * (tid % 8);
    auto fetch = [&](int kt) {  // tile kt's raw rows into stage (kt - kt0) % NS; zeros outside
      // (swizzled: rows 64 fslot + fi + 8 r all have r % 8 = fi)
      bf16* st = tiles + (kt - kt0) % NS * kCrossStage + (64 * fslot + fi) * S + 8 * (kSwizzle ? (tid % 8) ^ fi : tid % 8);
      const bf16* q = fsrc + kt * LT;
#pragma unroll
      for (int r = 0; r < 8; ++r, q += 8 * d.Lp) cp_async16(st + 8 * r * S, fi + 8 * r < fCn ? q : Xq, fi + 8 * r < fCn);
    };
    // the factors a^(d C) of tile kt into fs[(kt - kt0) & 1]: thread tid, combination tid / 64, latent tid % 64
    float anext = 0.0f;  // `a` of this thread's latent in the next tile to factor (0 past L)
    auto load_a = [&](int kt) {
      const int l = kt * LT + tid % LT;
      anext = l < d.L ? __ldg(arow + l) : 0.0f;
    };
    const int cr = tid / LT / 2, ck = tid / LT % 2;  // this thread's combination (row slot, key slot)
    // (an unused combination, d < 0: a factor never read, exponent 0)
    // a^(D C), D = the combination's chunk distance less one (ipow_of_product: by C's squarings where
    // C is a power of two, the same bits)
    const int fdist = max((cr ? xI1 : xI0) - (ck ? kJ1 : kJ0) - 1, 0);
    auto factor = [&](int kt) { fs[((kt - kt0) & 1) * 4 * LT + tid] = ipow_of_product(anext, fdist, C); };
    float acc[4][4][4] = {};  // acc[mt][nt]: rows 16 mt (+ g, + 8), columns wc + 8 nt (+ 2 tq, + 1)
    __syncthreads();          // the previous item's stages are consumed
#pragma unroll
    for (int t = 0; t < NS - 1; ++t) {
      if (kt0 + t < kt1) fetch(kt0 + t);
      cp_async_commit();  // (empty groups past the slice: the group count stays one per tile)
    }
    if (kt0 < kt1) {
      load_a(kt0);
      factor(kt0);
      if (kt0 + 1 < kt1) load_a(kt0 + 1);
    }
    for (int kt = kt0; kt < kt1; ++kt) {
      cp_async_wait<NS - 2>();  // this thread's copies of tile kt have landed ...
      __syncthreads();          // ... and everyone's; the stage refilled next was last read before this
      if (kt + NS - 1 < kt1) fetch(kt + NS - 1);
      cp_async_commit();
      if (kt + 1 < kt1) {  // fs[(kt + 1 - kt0) & 1] was last read before the barrier; read after the next
        factor(kt + 1);
        if (kt + 2 < kt1) load_a(kt + 2);
      }
      if (!active) continue;
      const float* f = fs + ((kt - kt0) & 1) * 4 * LT + (2 * wr + wk) * LT;  // the warp's factors
      const bf16* st = tiles + (kt - kt0) % NS * kCrossStage;
      const bf16* xs = st + 64 * wr * S;              // the warp's 64 Xq rows
      const bf16* ks = st + (128 + 64 * wk + wc) * S;  // the warp's 32 key rows
      cross_warp_tile<kSwizzle>(acc, xs, ks, f, lane);
    }
    cp_async_wait<0>();  // (only empty groups are left)
    if (!active) continue;
    const int I = wr ? xI1 : xI0, J = wk ? kJ1 : kJ0, CnI = wr ? Cn1 : Cn0;
    const int64_t blk = ((bh * d.nC + I) * d.nC + J) * C * C;
    auto store_block = [&](auto* dst) {
#pragma unroll
      for (int mt = 0; mt < 4; ++mt)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
          const int i = 16 * mt + 8 * hf + g;
          if (i >= C) continue;
#pragma unroll
          for (int nt = 0; nt < 4; ++nt) {
            const int j = wc + 8 * nt + 2 * tq;
            const float x0 = i < CnI ? acc[mt][nt][2 * hf] : 0.0f, x1 = i < CnI ? acc[mt][nt][2 * hf + 1] : 0.0f;
            store_cross_pair(dst + i * C + j, j, C, x0, x1);
          }
        }
    };
    if (nsplit > 1) store_block(parts + sp * plane + blk);
    else store_block(Pcross + blk);
  }
}

// ---- cross_scores on warpgroup MMA (sm_90a) ----------------------------------------------------
// cross_scores_mma_kernel's items (two row blocks × two column blocks over a slice of L), L splits,
// fills (three cp.async stages of 4 × 64 rows, one barrier per tile) and factor tables, with wgmma
// in place of the 8 warps' mma.sync: warpgroup wr owns row slot wr (M = 64 rows of Xq) and computes
// both key slots (N = 64 keys each) as instructions m64n64k16 with A from registers. The factor
// a^(d C) of a combination (row slot, key slot) runs along the contraction (latents), so it cannot
// scale the accumulators; the keys in shared memory are read by the tensor cores as they are, so
// the factor goes to A: each warp loads its 16 Xq rows of a 16-latent step by ldmatrix (as
// mma.sync would) and scales them once per key slot, pair by pair in float32 rounded to bf16
//   P_IJ = (Xq_I · diag(a^(d C)))_bf16 · Kq_J^T,
// where version 3 rounds the scaled key instead: one bf16 rounding of a scaled operand either way,
// not the same bits (the emulation checks both against float64). The keys are B, K-major ([j][l]
// rows of 64 latents, 128-byte swizzled: the fill's layout; the tiles on 1024-byte boundaries).
// Every combination is multiplied, also those an item does not store (a diagonal item's (0, 1) and
// (1, 0), a row slot past nC: zero rows), so that no divergent path surrounds the products (ptxas
// would serialize them); a tile's 8 products per warpgroup are issued, then waited for at once,
// in two groups of two 16-latent steps (each step and key slot with its own A registers). 256
// threads, 2 blocks per SM. Measured on the H200 (round 20, BDH-8k bfloat16, Nsight Compute, four
// forwards): 0.219 ms a launch against cross_scores_mma's 0.274; Nsight Compute's full set
// (bench/results/round20-h200-2026-12-04): tensor pipe 37 % active, L2 67 %, DRAM 51 %, issue
// slots 48 %, 1 eligible warp per scheduler.
constexpr uint32_t kCwTile = 64 * 128;  // bytes of one 64 × 64 bf16 tile (a slot's rows of one L tile)
constexpr uint32_t kCwStage = 4 * kCwTile;
constexpr int kCwSmem = static_cast<int>(kWgmmaAtom - 16 + kCrossNS * kCwStage + 2 * 4 * kMmaLT * sizeof(float));
static_assert(2 * (kCwSmem + 1024) <= 228 * 1024, "cross_scores_wgmma: two blocks per SM");
// kParts: the launch's L splits are several (the float32 partials), else one (bf16 Pcross): one
// store path per instantiation. Why (round 31, ptxas 13 -v and the SASS from cuobjdump): with both
// paths behind a branch on nsplit, or with the bf16 one alone addressed as Pcross + blk, ptxas took
// 128 registers and spilled 8 bytes, and read threadIdx again (S2R) three times inside the main
// loop, 7 more instructions per L tile; the kernel measured 0.039 -> 0.044 ms a launch at BDH-base
// on an H100. The bf16 instantiation addressed as Pcross + sp plane + blk (sp = 0 with one split:
// the same address) compiles with no spills (128 registers; d9f3628's float32 kernel: 127, none).
template <bool kParts>
static __global__ void __launch_bounds__(kCrossThreads, 2)
    cross_scores_wgmma_kernel(Dims d, const bf16* Xq, const bf16* Kq, const float* a32, bf16* Pcross, float* parts,
                              int nsplit) {
  grid_dependency_wait();
  constexpr int LT = kMmaLT, NS = kCrossNS;
  static_assert(kCrossThreads == 4 * LT && kCrossThreads == 256, "one factor per thread, 64 copying threads per slot");
  extern __shared__ __align__(128) unsigned char smem_raw[];
  // the tiles on 1024-byte boundaries (the swizzle's atoms): the base rounded up
  const uint32_t s_raw = smem_addr(smem_raw), s0 = (s_raw + kWgmmaAtom - 1) & ~(kWgmmaAtom - 1);
  float* fs = reinterpret_cast<float*>(smem_raw + (s0 - s_raw) + NS * kCwStage);  // [2][4 combinations][64]
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, tq = lane % 4;
  const int wr = warp / 4, w4 = warp % 4;  // the warpgroup's row slot; the warp's 16 rows 16 w4 ..
  const int C = static_cast<int>(d.C), nC = static_cast<int>(d.nC);
  const int ntiles = static_cast<int>(d.Lp / LT), per_split = (ntiles + nsplit - 1) / nsplit;
  const int64_t groups = cross_items(d.nC), items = d.nbh * groups * nsplit;
  const int64_t plane = d.nbh * d.nC * d.nC * C * C;
  // the lane's ldmatrix row of its warp's Xq rows (k step 0; a 16-latent step k: XOR 32 k), and
  // the keys' descriptors (slot wk at tile 2 + wk of a stage; a k step: 32 bytes)
  const int xrow = 16 * w4 + (lane & 15);
  const uint32_t xa = s0 + wr * kCwTile + xrow * 128 + (((lane >> 4) ^ (xrow & 7)) << 4);
  const uint64_t desc_k = wgmma_desc_sw128(s0 + 2 * kCwTile, 0, kWgmmaAtom);
  // this thread's copies (version 3's): slot tid / 64, rows fi + 8 r, 16-byte chunk tid % 8
  const int fslot = tid / 64, fi = tid % 64 / 8;
  const uint32_t fdst = s0 + fslot * kCwTile + fi * 128 + (((tid % 8) ^ fi) << 4);
  for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    const int64_t bh = item / (groups * nsplit);
    const int sp = static_cast<int>(item % nsplit);
    int xI[2], kJ[2];
    bool diag;
    cross_item_decode(item / nsplit % groups, d.nC, xI, kJ, diag);
    const int xI0 = xI[0], xI1 = xI[1], kJ0 = kJ[0], kJ1 = kJ[1];
    const int Cn0 = static_cast<int>(d.chunk_len(xI0)), Cn1 = xI1 < nC ? static_cast<int>(d.chunk_len(xI1)) : 0;
    const bool key1 = !diag || Cn1 > 0;
    const int kt0 = sp * per_split, kt1 = min(ntiles, kt0 + per_split);
    const float* arow = a32 + d.h_of(bh) * d.L;
    const int fblk = fslot == 0 ? xI0 : fslot == 1 ? (Cn1 > 0 ? xI1 : xI0) : fslot == 2 ? kJ0 : (key1 ? kJ1 : kJ0);
    const int fCn = fslot == 0 ? Cn0 : fslot == 1 ? Cn1 : fslot == 2 || key1 ? C : 0;
    const bf16* fsrc = (fslot < 2 ? Xq : Kq) + (bh * d.T + int64_t{fblk} * C + fi) * d.Lp + 8 * (tid % 8);
    auto fetch = [&](int kt) {  // tile kt's raw rows into stage (kt - kt0) % NS; zeros outside
      const uint32_t st = fdst + (kt - kt0) % NS * kCwStage;
      const bf16* q = fsrc + kt * LT;
#pragma unroll
      for (int r = 0; r < 8; ++r, q += 8 * d.Lp) cp_async16_u32(st + 8 * 128 * r, q, fi + 8 * r < fCn ? 16u : 0u);
    };
    float anext = 0.0f;  // the factors a^(d C), one tile ahead (version 3's table)
    auto load_a = [&](int kt) {
      const int l = kt * LT + tid % LT;
      anext = l < d.L ? __ldg(arow + l) : 0.0f;
    };
    const int cr = tid / LT / 2, ck = tid / LT % 2;
    // a^(D C), D = the combination's chunk distance less one (ipow_of_product: by C's squarings where
    // C is a power of two, the same bits)
    const int fdist = max((cr ? xI1 : xI0) - (ck ? kJ1 : kJ0) - 1, 0);
    auto factor = [&](int kt) { fs[((kt - kt0) & 1) * 4 * LT + tid] = ipow_of_product(anext, fdist, C); };
    float acc[2][32];  // acc[wk][i]: row 16 w4 + g + 8 ((i >> 1) & 1), key 8 (i >> 2) + 2 tq + (i & 1)
#pragma unroll
    for (int i = 0; i < 32; ++i) acc[0][i] = acc[1][i] = 0.0f;
    __syncthreads();  // the previous item's stages are consumed
#pragma unroll
    for (int t = 0; t < NS - 1; ++t) {
      if (kt0 + t < kt1) fetch(kt0 + t);
      cp_async_commit();
    }
    if (kt0 < kt1) {
      load_a(kt0);
      factor(kt0);
      if (kt0 + 1 < kt1) load_a(kt0 + 1);
    }
    for (int kt = kt0; kt < kt1; ++kt) {
      cp_async_wait<NS - 2>();  // this thread's copies of tile kt have landed ...
      fence_proxy_async();      // ... and are visible to the tensor cores
      __syncthreads();          // ... and everyone's; the stage refilled next was last read before this
      // the next tiles' fetch and factors, issued under the first group's products (their
      // instructions off the path from the barrier to the tensor cores)
      auto refill = [&]() {
        if (kt + NS - 1 < kt1) fetch(kt + NS - 1);
        cp_async_commit();
        if (kt + 1 < kt1) {  // fs[(kt + 1 - kt0) & 1] was last read before the barrier
          factor(kt + 1);
          if (kt + 2 < kt1) load_a(kt + 2);
        }
      };
      const int so = (kt - kt0) % NS;
      const float* f = fs + ((kt - kt0) & 1) * 4 * LT + 2 * wr * LT;  // the warpgroup's two combinations' factors
      const uint32_t xs = xa + so * kCwStage;
      const uint64_t sd = so * (kCwStage / 16);
      // two groups of two 16-latent steps, each issued and waited for before the next group's A is
      // scaled (half the A registers live: 127 registers, no spills; one group of four spilled 20
      // bytes per thread at 128 and measured the same, 0.219 ms a launch at BDH-8k)
#pragma unroll
      for (int part = 0; part < 2; ++part) {
        constexpr int KP = 2;
        uint32_t a[KP][2][4];  // per 16-latent step and key slot: the scaled A fragment (the tensor cores' until the wait)
#pragma unroll
        for (int kk = 0; kk < KP; ++kk) {
          const int k = KP * part + kk;
          uint32_t x[4];
          ldsm_x4_u32(x, xs ^ (32u * k));
#pragma unroll
          for (int wk = 0; wk < 2; ++wk) {
            // regs 0, 1: latents 16 k + 2 tq (+1); regs 2, 3: 16 k + 8 + 2 tq (+1)
            const float2 f0 = *reinterpret_cast<const float2*>(f + wk * LT + 16 * k + 2 * tq);
            const float2 f1 = *reinterpret_cast<const float2*>(f + wk * LT + 16 * k + 8 + 2 * tq);
            a[kk][wk][0] = scale_bf16x2(x[0], f0), a[kk][wk][1] = scale_bf16x2(x[1], f0);
            a[kk][wk][2] = scale_bf16x2(x[2], f1), a[kk][wk][3] = scale_bf16x2(x[3], f1);
          }
        }
        wgmma_fence_operand(acc[0]);
        wgmma_fence_operand(acc[1]);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < KP; ++kk)
#pragma unroll
          for (int wk = 0; wk < 2; ++wk)
            wgmma_m64n64k16_bf16_rs<0>(acc[wk], a[kk][wk], desc_k + sd + wk * (kCwTile / 16) + (KP * part + kk) * 2);
        wgmma_commit();
        if (part == 0) refill();
        wgmma_wait<0>();
        wgmma_fence_operand(acc[0]);
        wgmma_fence_operand(acc[1]);
#pragma unroll
        for (int kk = 0; kk < KP; ++kk)  // (live through the refill: see wgmma_fence_operand)
#pragma unroll
          for (int wk = 0; wk < 2; ++wk) wgmma_fence_operand(a[kk][wk]);
      }
    }
    cp_async_wait<0>();  // (only empty groups are left)
    const int I = wr ? xI1 : xI0, CnI = wr ? Cn1 : Cn0;
#pragma unroll
    for (int wk = 0; wk < 2; ++wk) {
      if (CnI == 0 || (diag && wk != wr)) continue;  // a row slot past nC; a diagonal item's unused combinations
      const int J = wk ? kJ1 : kJ0;
      const int64_t blk = ((bh * d.nC + I) * d.nC + J) * C * C;
      auto store_block = [&](auto* dst) {
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
          const int i = 16 * w4 + 8 * hf + g;
          if (i >= C) continue;
#pragma unroll
          for (int j8 = 0; j8 < 8; ++j8) {
            const int j = 8 * j8 + 2 * tq;
            const float x0 = i < CnI ? acc[wk][4 * j8 + 2 * hf] : 0.0f, x1 = i < CnI ? acc[wk][4 * j8 + 2 * hf + 1] : 0.0f;
            store_cross_pair(dst + i * C + j, j, C, x0, x1);
          }
        }
      };
      if constexpr (kParts) store_block(parts + sp * plane + blk);
      else store_block(Pcross + sp * plane + blk);  // (sp = 0: see kParts)
    }
  }
}

// Pcross (lower blocks) = bf16(parts[0] + parts[1] + ...), summed in split order in float32.
static __global__ void cross_reduce_kernel(Dims d, const float* parts, bf16* Pcross, int nsplit) {
  grid_dependency_wait();
  const int64_t CC = d.C * d.C, n = d.nbh * d.nC * d.nC * CC;
  for (int64_t x = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; x < n; x += int64_t(gridDim.x) * blockDim.x) {
    const int64_t IJ = x / CC % (d.nC * d.nC);
    if (IJ % d.nC >= IJ / d.nC) continue;  // J >= I: not a cross block
    float acc = parts[x];
    for (int s = 1; s < nsplit; ++s) acc += parts[s * n + x];
    Pcross[x] = __float2bfloat16_rn(acc);
  }
}

// Row i, columns p .. p + 3 of a C × C float32 block of scores at src, zeros at rows i >= n and
// columns past C: one aligned float4 where C % 4 == 0 (blocks start at multiples of C C, rows of C).
__device__ __forceinline__ void load_block_row4(const float* src, int i, int p, int C, int n, float (&x)[4]) {
  x[0] = x[1] = x[2] = x[3] = 0.0f;
  if (i < n && p < C) {
    if (C % 4 == 0) {
      const float4 w = *reinterpret_cast<const float4*>(src + i * C + p);
      x[0] = w.x, x[1] = w.y, x[2] = w.z, x[3] = w.w;
    } else {
#pragma unroll
      for (int k = 0; k < 4; ++k)
        if (p + k < C) x[k] = src[i * C + p + k];
    }
  }
}
// Row i, columns p .. p + 3 (p a multiple of 4) of a C × C bf16 block at src, as they are (4 bf16 in
// a uint2), zeros at rows i >= n and columns past C: one aligned 8-byte load where C % 4 == 0.
__device__ __forceinline__ uint2 load_block_row4_bits(const bf16* src, int i, int p, int C, int n) {
  uint2 w = make_uint2(0u, 0u);
  if (i < n && p < C) {
    if (C % 4 == 0) {
      w = *reinterpret_cast<const uint2*>(src + i * C + p);
    } else {
      uint32_t h[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        uint16_t bits = 0;
        if (p + k < C) memcpy(&bits, src + i * C + p + k, sizeof bits);
        h[k] = bits;
      }
      w = make_uint2(h[0] | h[1] << 16, h[2] | h[3] << 16);
    }
  }
  return w;
}
// Row i, columns p .. p + 7 (p a multiple of 8) of a C × C bf16 block at src, as they are (8 bf16 in
// a uint4), zeros at rows i >= n and columns past C: one aligned 16-byte load where C % 8 == 0.
__device__ __forceinline__ uint4 load_block_row8(const bf16* src, int i, int p, int C, int n) {
  uint4 w = make_uint4(0u, 0u, 0u, 0u);
  if (i < n && p < C) {
    if (C % 8 == 0) {
      w = *reinterpret_cast<const uint4*>(src + i * C + p);
    } else {
      uint32_t h[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        uint16_t bits = 0;
        if (p + k < C) memcpy(&bits, src + i * C + p + k, sizeof bits);
        h[k] = bits;
      }
      w = make_uint4(h[0] | h[1] << 16, h[2] | h[3] << 16, h[4] | h[5] << 16, h[6] | h[7] << 16);
    }
  }
  return w;
}
// ---- a state's readout by a chunk's key rows, on tensor cores --------------------------------
// acc (a 64-token × 128-column block's 32 × 32 warp tiles, quadratic_output_mma's) gains
//   acc[i][e] += sum_l keys[i][l] (a_l^n S[l][e0 + e]),   i < Cn,
// contracted over L in 64-latent tiles: A = the key rows (bf16 [Cn][Lp], by cp.async into the A
// stages; rows past Cn zero-filled, the keys' padded latents are 0), B = a^n ⊙ S (S's float32 rows,
// each latent's row scaled by a^n and rounded to bf16 once, into the B stages; kLo: its bf16
// remainder too). The forward's context from an initial state (S = rho0, keys Xq_I, n = I C) and the
// backward's dv from grad_rho_out (S = GR, keys Kq_J, n = T - e_J). The factors a^n of the tile's 64
// latents: threads 0-63 make the next tile's into fac[st ^ 1] before the step's barrier (one ipow a
// latent, not one a thread and row). S's float32 tile: where its columns are contiguous and 16-byte
// aligned (staged), each thread's own 4 pieces of 8 columns come by cp.async a step ahead into the
// staging tile (the thread reads back only what it copied: no barrier for it; columns past E
// zero-filled); else loaded where they are converted. Both stages must be free at the call (after a
// barrier), and are again at its return.
struct StateStages {  // byte offsets in shared memory
  uint32_t a, a_stride;  // the key tiles [64][PS] of stages 0 and 1
  uint32_t b, b_stride;  // the state tiles [64][VS]
  uint32_t b_lo;         // kLo: the remainders' tiles, from b
  uint32_t fac;          // the factors [2][64] floats, then the staging tile [64][kMmaET] floats
};
constexpr int state_readout_extra_smem() {
  return (2 * 64 + 64 * kMmaET) * static_cast<int>(sizeof(float));
}
template <bool kLo, bool kSwizzle, int PS, int VS>
__device__ __forceinline__ void state_readout_mma(float (&acc)[2][4][4], unsigned char* smem_raw, StateStages at,
                                                  const Dims& d, const bf16* keys, int Cn, int n, const float* a_h,
                                                  const float* r0, int64_t row_stride, int64_t col_stride,
                                                  int64_t e0) {
  constexpr int ET = kMmaET;
  const uint32_t s0 = smem_addr(smem_raw);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int wm = (warp & 1) * 32, wn = (warp >> 1) * 32;
  const uint32_t a_k = s0 + at.a + warp_mma_lane_a_tile<kSwizzle, false>(lane, wm, PS);
  const uint32_t b_s = s0 + at.b + warp_mma_lane_b_tile<kSwizzle, false>(lane, wn, VS);
  float(*fac_s)[64] = reinterpret_cast<float(*)[64]>(smem_raw + at.fac);
  float* stage_f = reinterpret_cast<float*>(smem_raw + at.fac + 2 * 64 * sizeof(float));  // [64][ET]
  const int nlt = static_cast<int>(d.Lp / 64);
  const bool staged = col_stride == 1 && (row_stride % 4) == 0 && (reinterpret_cast<uintptr_t>(r0) % 16) == 0;
  constexpr int kPieces = 64 * (ET / 8) / kMmaThreads;  // the thread's: rows tid / 16 + 16 k, columns 8 (tid % 16)
  const int pr = tid / (ET / 8), pc = 8 * (tid % (ET / 8));
  auto make_factors = [&](int lt, int st) {
    if (tid < 64) {
      const int64_t l = int64_t{lt} * 64 + tid;
      fac_s[st][tid] = l < d.L ? ipow(a_h[l], n) : 0.0f;
    }
  };
  auto fetch = [&](int lt, int st) {  // the keys' tile and, staged, the thread's S pieces: one commit group
    for (int idx = tid; idx < 64 * 8; idx += kMmaThreads) {
      const int i = idx / 8, c = idx % 8;
      cp_async16_u32(s0 + at.a + st * at.a_stride + tile_offset<kSwizzle>(i, c, PS),
                     keys + min(i, Cn - 1) * d.Lp + lt * 64 + 8 * c, i < Cn ? 16u : 0u);
    }
    if (staged) {
#pragma unroll
      for (int k = 0; k < kPieces; ++k) {
        const int r = pr + 16 * k;
        const int64_t l = int64_t{lt} * 64 + r, e = e0 + pc;
        const float* src = r0 + (l < d.L ? l : 0) * row_stride + e;
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int64_t left = l < d.L ? d.E - (e + 4 * half) : 0;  // columns of this half inside E
          const uint32_t bytes = left >= 4 ? 16u : left > 0 ? static_cast<uint32_t>(4 * left) : 0u;
          cp_async16_u32(smem_addr(stage_f + r * ET + pc + 4 * half), bytes > 0 ? src + 4 * half : r0, bytes);
        }
      }
    }
    cp_async_commit();
  };
  auto put_state = [&](int lt, int st) {  // a^n ⊙ S's tile as bf16 (zeros past L and E)
#pragma unroll
    for (int k = 0; k < kPieces; ++k) {
      const int r = pr + 16 * k;
      const int64_t l = int64_t{lt} * 64 + r, e = e0 + pc;
      const float f = fac_s[st][r];  // (0 past L)
      float x[8];
      if (staged) {
        const float4 u = *reinterpret_cast<const float4*>(stage_f + r * ET + pc),
                     w = *reinterpret_cast<const float4*>(stage_f + r * ET + pc + 4);
        x[0] = u.x, x[1] = u.y, x[2] = u.z, x[3] = u.w, x[4] = w.x, x[5] = w.y, x[6] = w.z, x[7] = w.w;
      } else {
        const float* src = r0 + l * row_stride;
#pragma unroll
        for (int j = 0; j < 8; ++j) x[j] = l < d.L && e + j < d.E ? __ldg(src + (e + j) * col_stride) : 0.0f;
      }
#pragma unroll
      for (int j = 0; j < 8; ++j) x[j] *= f;
      __nv_bfloat162 hi[4], lo[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        hi[j] = __floats2bfloat162_rn(x[2 * j], x[2 * j + 1]);
        if constexpr (kLo)
          lo[j] = __floats2bfloat162_rn(x[2 * j] - __low2float(hi[j]), x[2 * j + 1] - __high2float(hi[j]));
      }
      const uint32_t o = at.b + st * at.b_stride + tile_offset<kSwizzle>(r, pc / 8, VS);
      memcpy(smem_raw + o, hi, sizeof hi);
      if constexpr (kLo) memcpy(smem_raw + o + at.b_lo, lo, sizeof lo);
    }
  };
  make_factors(0, 0);
  fetch(0, 0);
  __syncthreads();  // (the first tile's factors)
  for (int lt = 0; lt < nlt; ++lt) {
    const int st = lt & 1;
    cp_async_wait<0>();  // this tile's pieces (the thread's own: its staging, read next)
    put_state(lt, st);   // stage st was last read two steps ago, before the last barrier
    if (lt + 1 < nlt) {
      asm volatile("" ::: "memory");  // (the staging's reads above before its refill)
      make_factors(lt + 1, st ^ 1);  // (fac_s[st ^ 1] was last read by put_state(lt - 1), before the last barrier)
      fetch(lt + 1, st ^ 1);
    }
    __syncthreads();  // everyone's key tile and B stage
    warp_mma_32x32_tile<kSwizzle, false, false, PS, VS, 64>(acc, a_k + st * at.a_stride, b_s + st * at.b_stride);
    if constexpr (kLo)
      warp_mma_32x32_tile<kSwizzle, false, false, PS, VS, 64>(acc, a_k + st * at.a_stride, b_s + at.b_lo + st * at.b_stride);
    __syncthreads();
  }
}

// ---- quadratic output: c_I = sum_{J <= I} P_IJ V_J on tensor cores ---------------------------
// A block's item is (bh, row block I, 128 columns of E): a 64 × 128 output tile (a 32×32 warp tile
// per warp) contracted over the tokens of the column blocks J = 0 .. I, one C-token block per step:
// A = P_IJ rounded to bf16 (J = I: chunk_scores' P, split 0, entries j' < i'; J < I: Pcross), as
// chunk_output_mma rounds its intra-chunk P; B = V_J (the packed bf16 values, rows past the block's
// tokens zero-filled). Everything outside the block's valid rows and columns enters as 0, so the
// upper triangle of the diagonal block and the padding are never read as operands. Two stages: the
// next block's P (the diagonal block's float32 loads into registers, rounded when stored; Pcross's
// bf16 blocks moved as they are) and V (cp.async) are fetched while the current one is multiplied. kLo: the values' bf16 remainders, a second pass with the
// same P (split values: float16 inputs).
// kSwizzle (the default; RHOSCAN_QO_SWIZZLE=0 at build time keeps the padded rows): the P and V
// tiles' rows unpadded, chunk c of row r at c ^ (r % 8) (mma.cuh's swizzled tiles), so that V's
// cp.async fills write whole aligned 128-byte groups; P's 8-byte stores stay conflict-free (half a
// warp writes one row's 128 bytes). The same products bit for bit (emulated). H200, round 17
// (359c57f's A/B, Nsight Compute durations, BDH-8k's 4 launches): 0.203 against 0.206 ms, a small
// gain (the kernel is not fill-bound), kept for one layout across the mma kernels.
#ifndef RHOSCAN_QO_SWIZZLE
#define RHOSCAN_QO_SWIZZLE 1
#endif
constexpr bool kQOutSwizzle = RHOSCAN_QO_SWIZZLE != 0;
constexpr int kQOutPS = 64 + 8, kQOutVS = kMmaET + 8;  // padded bf16 row strides (conflict-free ldmatrix)
// (the padded layout's size: an upper bound for the swizzled one)
// (kState: and two 64-latent rows of factors and rho0's float32 staging tile after the stages)
template <bool kLo, bool kState = false>
constexpr int quadratic_output_smem() {
  return 2 * 64 * (kQOutPS + (kLo ? 2 : 1) * kQOutVS) * static_cast<int>(sizeof(bf16)) +
         (kState ? state_readout_extra_smem() : 0);
}
// kState (a forward from an initial state rho0): after the blocks J, the contraction goes on over
// L in 64-latent tiles, A = Xq_I (the chunk's rows of the operand Xq = Qp a^i, by cp.async into P's
// stages) and B = a^(I C) ⊙ rho0 (rho0's float32 rows, each latent's row scaled by a^(I C) and rounded
// to bf16 once, into V's stages; kLo: its bf16 remainder too, into V_lo's): c_t gains Qp_t · (a^t
// rho0), t = I C + i, in the same accumulators, so the context is rounded once. Items then run the
// chunks of a (pair, columns) together (I fastest), so that their reads of rho0's tiles meet in the L2.
template <typename OutT, bool kLo, bool kSwizzle = kQOutSwizzle, bool kState = false>
static __global__ void __launch_bounds__(kMmaThreads, 2)
    quadratic_output_mma_kernel(Dims d, const float* P, const bf16* Pcross, const bf16* V, const bf16* V_lo,
                                Str4 out, const bf16* Xq = nullptr, const float* a32 = nullptr, Str4 rho0 = Str4{}) {
  grid_dependency_wait();
  constexpr int ET = kMmaET, PS = kSwizzle ? 64 : kQOutPS, VS = kSwizzle ? kMmaET : kQOutVS;
  // byte offsets in shared memory: [2 stages][64 tokens i'][PS] P_IJ[i'][j'], [2 stages][64 tokens
  // j'][VS] V_J[j'][e], [2 stages][64][VS] if kLo: V_J's remainders (every stage on a 128-byte
  // boundary)
  constexpr uint32_t kPStage = 2 * 64 * PS, kVStage = 2 * 64 * VS, kV = 2 * kPStage, kVlo = kV + 2 * kVStage;
  constexpr uint32_t kFac = kVlo + (kLo ? 2 * kVStage : 0);  // kState: the factors [2][64], then rho0's staging tile
  static_assert(kPStage % 128 == 0 && kVStage % 128 == 0, "");
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const uint32_t s0 = smem_addr(smem_raw);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int wm = (warp & 1) * 32, wn = (warp >> 1) * 32;  // the warp's tokens and columns in the tile
  const uint32_t a_p = s0 + warp_mma_lane_a_tile<kSwizzle, false>(lane, wm, PS);
  const uint32_t b_v = s0 + kV + warp_mma_lane_b_tile<kSwizzle, false>(lane, wn, VS);
  const int C = static_cast<int>(d.C);
  const int64_t net = d.Ep / ET, per_row = d.nbh * net, items = d.nC * per_row;
  // Items in decreasing row block: item k has I = nC - 1 - k / (nbh net), so the blocks dispatched
  // first (in blockIdx order) take the longest items (I + 1 steps each) and the short ones fill the
  // multiprocessors as they free up. In (bh, I, columns) order (until round 25) the last blocks
  // dispatched held a pair's I = nC - 1 items too, whose nC steps then ran after the others'.
  for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    const int64_t rest = kState ? item / d.nC : item % per_row, bh = rest / net, e0 = rest % net * ET;
    const int64_t vr = d.v_row(bh);  // V's row: bh, or its batch row (d.v_rows: Hv = 1)
    const int I = static_cast<int>(kState ? item % d.nC : d.nC - 1 - item / per_row);
    const int CnI = static_cast<int>(d.chunk_len(I));
    const int64_t t0 = int64_t{I} * C;
    // this thread's P pieces of the next block, four of 4 columns (row (tid + 256 r) / 16, columns
    // p .. p + 3): of the diagonal block (J = I, chunk_scores' float32 P) as floats, rounded in put;
    // of Pcross's blocks (J < I, bf16) as they are, their bits in preg[r][0 .. 1]: no conversion
    // (until round 31 Pcross was float32 and rounded here; the same bf16 values)
    float preg[4][4];
    const int p = 4 * (tid % 16);
    auto fetch = [&](int J, int st) {
      const int CnJ = static_cast<int>(d.chunk_len(J));
      if (J == I) {
        const float* src = P + (bh * d.nC + I) * d.nsplit * C * C;
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const int i = (tid + kMmaThreads * r) / 16;
          float x[4];
          load_block_row4(src, i, p, C, CnI, x);
#pragma unroll
          for (int k = 0; k < 4; ++k) {  // select, not multiply: what lies outside is never used
            const int j = p + k;
            preg[r][k] = i < CnI && j < CnJ && j < i ? x[k] : 0.0f;
          }
        }
      } else {  // (CnJ = C: every column of an earlier chunk; rows past CnI and columns past C zero-filled)
        const bf16* src = Pcross + ((bh * d.nC + I) * d.nC + J) * C * C;
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const uint2 w = load_block_row4_bits(src, (tid + kMmaThreads * r) / 16, p, C, CnI);
          preg[r][0] = __uint_as_float(w.x), preg[r][1] = __uint_as_float(w.y);
        }
      }
      const bf16* Vj = V + (vr * d.T + int64_t{J} * C) * d.Ep + e0;
      for (int idx = tid; idx < 64 * (ET / 8); idx += kMmaThreads) {
        const int j = idx / (ET / 8), q8 = 8 * (idx % (ET / 8));
        const uint32_t dst = s0 + kV + st * kVStage + tile_offset<kSwizzle>(j, q8 / 8, VS), bytes = j < CnJ ? 16u : 0u;
        cp_async16_u32(dst, Vj + min(j, CnJ - 1) * d.Ep + q8, bytes);
        if constexpr (kLo) cp_async16_u32(dst + (kVlo - kV), V_lo + (Vj - V) + min(j, CnJ - 1) * d.Ep + q8, bytes);
      }
      cp_async_commit();
    };
    auto put = [&](int J, int st) {  // block J's pieces (fetched by fetch(J, .)) into stage st
      if (J == I) {
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const int i = (tid + kMmaThreads * r) / 16;
          __nv_bfloat162 w[2] = {__floats2bfloat162_rn(preg[r][0], preg[r][1]),
                                 __floats2bfloat162_rn(preg[r][2], preg[r][3])};
          memcpy(smem_raw + st * kPStage + tile_offset<kSwizzle>(i, p / 8, PS) + 2 * (p % 8), w, sizeof w);
        }
      } else {
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const int i = (tid + kMmaThreads * r) / 16;
          const uint2 w = make_uint2(__float_as_uint(preg[r][0]), __float_as_uint(preg[r][1]));
          *reinterpret_cast<uint2*>(smem_raw + st * kPStage + tile_offset<kSwizzle>(i, p / 8, PS) + 2 * (p % 8)) = w;
        }
      }
    };
    float acc[2][4][4] = {};
    __syncthreads();  // the previous item's tiles are consumed
    fetch(0, 0);
    for (int J = 0; J <= I; ++J) {
      const int st = J & 1;
      put(J, st);  // stage st was last read two steps ago, before the last barrier
      if (J < I) {
        fetch(J + 1, st ^ 1);
        cp_async_wait<1>();
      } else {
        cp_async_wait<0>();
      }
      __syncthreads();
      warp_mma_32x32_tile<kSwizzle, false, false, PS, VS, 64>(acc, a_p + st * kPStage, b_v + st * kVStage);
      if constexpr (kLo)
        warp_mma_32x32_tile<kSwizzle, false, false, PS, VS, 64>(acc, a_p + st * kPStage, b_v + (kVlo - kV) + st * kVStage);
      __syncthreads();
    }
    const int64_t b = d.b_of(bh), h = d.h_of(bh);
    if constexpr (kState) {
      const StateStages stages{0, kPStage, kV, kVStage, kVlo - kV, kFac};
      state_readout_mma<kLo, kSwizzle, PS, VS>(acc, smem_raw, stages, d, Xq + (bh * d.T + t0) * d.Lp, CnI, I * C,
                                               a32 + h * d.L, static_cast<const float*>(rho0.p) + rho0.at(b, h, 0, 0),
                                               rho0.s[2], rho0.s[3], e0);
    }
    for_each_acc(acc, wm, wn, [&](int i, int ec, float& x) {
      const int64_t e = e0 + ec;
      if (i < CnI && e < d.E) store<OutT>(const_cast<void*>(out.p), out.at(b, h, t0 + i, e), x);
    });
  }
}

// ---- quadratic rows: a row block's cross scores and context in one kernel (short latent rows) ----
// cross_scores (Pcross to global memory in float32, with L-split partials and their reduction) and
// quadratic_output (Pcross read back) as one kernel where a pair's latent rows are short (Lp <=
// kRowsMaxLp): a block's item is (bh, row block I, 128 columns of E), and it makes each P_IJ,
// J < I, on chip,
//   P_IJ = Xq_I · diag(a^((I-J-1) C)) · Kq_J^T    (contraction over Lp),
// with the keys scaled in float32 and rounded to bf16 once (as cross_scores_mma scales them), rounds
// it to bf16 (as quadratic_output rounds Pcross) and multiplies it into V_J at once; the diagonal
// block is chunk_scores' P (split 0), as in quadratic_output. Pcross never reaches global memory, and
// the forward's context takes one launch instead of three. Aimed at BDH-base (L = 256 = T / 2),
// where the chunked forward's chunk_scan_mma (0.126 of 0.22 ms, a chain of 8 dependent chunk steps
// per item) and the quadratic forward's small kernels are bound by latency, not by work: here an
// item depends on no other, and a row block's steps are as many as its earlier chunks. Measured on
// the H200 (round 28): slower, 0.165 against chunk_scan_mma's 0.124 ms at BDH-base (67.7 against
// 37.2 M warp instructions: issue-bound), so the forward takes it only where forced.
// Costs: each of a pair's Ep / 128 column tiles makes its row's P_IJ again (twice at E = 256: the
// scores' products 1.5 times the quadratic forward's at L = E), and Xq_I stays in shared memory for
// the item (hence the bound on Lp).
// Shared memory: Xq_I and Kq_J [64][Lp + 8] (rows padded by 8 bf16: conflict-free ldmatrix), V_J
// [64][136], P_IJ [64][72] bf16, the factors a^((I-J-1) C) and a^C [Lp] float32: 94 KiB at Lp =
// 256, two blocks per SM. One stage (the other block hides the fetches; a second stage of Kq_J and
// V_J would leave one block per SM). Warps: the scores in 16 × 32 blocks (rows 16 (w % 4), columns
// 32 (w / 4)) over all of Lp, the product with V in quadratic_output's 32 × 32 warp tiles.
// Steps in decreasing J from the diagonal (d = I - J - 1 = 0, 1, ...: the factor a^(d C) by one
// product per step from a^C, exponents >= 0, exact at a = 0 and 1), items in decreasing I (the
// longest first, as quadratic_output). Rows past the chunk's tokens (the last chunk's tail, or C <
// 64) enter as zeros, so no padding is read as an operand. Any chunk C <= 64; bfloat16 values only
// (float16's lo pass would take the shared memory past two blocks per SM).
constexpr int kRowsMaxLp = 256, kRowsPS = 64 + 8, kRowsVS = kMmaET + 8;
// the dynamic shared memory of an item at Lp latents
__host__ __device__ constexpr int quadratic_rows_smem(int64_t Lp) {
  return static_cast<int>(2 * 64 * (Lp + 8) * 2 + 64 * kRowsVS * 2 + 64 * kRowsPS * 2 + 2 * Lp * 4);
}
static_assert(2 * (quadratic_rows_smem(kRowsMaxLp) + 1024) <= 228 * 1024, "quadratic_rows_mma: two blocks per SM");
// where the kernel takes a batch (the launcher's caller checks the dtype)
inline bool quadratic_rows_applies(const Dims& d) { return d.Lp <= kRowsMaxLp && d.C <= 64; }
template <typename OutT>
static __global__ void __launch_bounds__(kMmaThreads, 2)
    quadratic_rows_mma_kernel(Dims d, const float* P, const bf16* Xq, const bf16* Kq, const bf16* V, const float* a32,
                              Str4 out) {
  grid_dependency_wait();
  constexpr int ET = kMmaET, PS = kRowsPS, VS = kRowsVS;
  const int Lp = static_cast<int>(d.Lp), XS = Lp + 8, C = static_cast<int>(d.C), cpr = Lp / 8;
  // byte offsets: Xs [64][XS], Ks [64][XS], Vs [64][VS], Ps [64][PS] (bf16), then fpow, aC [Lp] float
  const uint32_t kKs = 2 * 64 * XS, kVs = 2 * kKs, kPs = kVs + 2 * 64 * VS, kF = kPs + 2 * 64 * PS;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  float* fpow = reinterpret_cast<float*>(smem_raw + kF);  // a^(d C) of the step's d
  float* aC = fpow + Lp;                                  // a^C
  const uint32_t s0 = smem_addr(smem_raw);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, tq = lane % 4;
  const int wm = (warp & 1) * 32, wn = (warp >> 1) * 32;      // the output's warp tile
  const int sm0 = 16 * (warp % 4), sn0 = 32 * (warp / 4);     // the scores' warp block
  const uint32_t a_p = s0 + kPs + warp_mma_lane_a_tile<false, false>(lane, wm, PS);
  const uint32_t b_v = s0 + kVs + warp_mma_lane_b_tile<false, false>(lane, wn, VS);
  // the scores' ldmatrix rows at k0 = 0: A = Xs rows sm0 .., B = Ks rows (key tokens) sn0 ..
  const uint32_t x_a = s0 + 2 * ((sm0 + (lane & 15)) * XS + (lane >> 4) * 8);
  const uint32_t k_b = s0 + kKs + 2 * ((sn0 + (lane >> 4) * 8 + (lane & 7)) * XS + ((lane >> 3) & 1) * 8);
  const int64_t net = d.Ep / ET, per_row = d.nbh * net, items = d.nC * per_row;
  // rows r < n of a [64][Lp] operand tile from src's rows (Lp apart), the rest zero-filled
  auto fetch_rows = [&](uint32_t dst, const bf16* src, int n) {
    for (int idx = tid; idx < 64 * cpr; idx += kMmaThreads) {
      const int r = idx / cpr, c8 = idx % cpr;
      cp_async16_u32(dst + 2 * (r * XS + 8 * c8), src + int64_t{r < n ? r : n - 1} * Lp + 8 * c8, r < n ? 16u : 0u);
    }
  };
  for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    const int64_t rest = item % per_row, bh = rest / net, e0 = rest % net * ET;
    const int64_t vr = d.v_row(bh), h = d.h_of(bh);
    const int I = static_cast<int>(d.nC - 1 - item / per_row), CnI = static_cast<int>(d.chunk_len(I));
    const int64_t t0 = int64_t{I} * C;
    // V_J's rows j < n at column tile e0 (the rest zero-filled)
    auto fetch_v = [&](int J, int n) {
      const bf16* Vj = V + (vr * d.T + int64_t{J} * C) * d.Ep + e0;
      for (int idx = tid; idx < 64 * (ET / 8); idx += kMmaThreads) {
        const int j = idx / (ET / 8), q8 = 8 * (idx % (ET / 8));
        cp_async16_u32(s0 + kVs + 2 * (j * VS + q8), Vj + int64_t{j < n ? j : n - 1} * d.Ep + q8, j < n ? 16u : 0u);
      }
    };
    float acc[2][4][4] = {};
    __syncthreads();  // the previous item's tiles are consumed
    fetch_rows(s0, Xq + (bh * d.T + t0) * Lp, CnI);
    fetch_v(I, CnI);
    cp_async_commit();
    // a^C of the item's latents by ipow's squares (latents past L: a = 0, their keys are 0 anyway)
    for (int l = tid; l < Lp; l += kMmaThreads) aC[l] = ipow(l < d.L ? a32[h * d.L + l] : 0.0f, C);
    // the diagonal block: P_II[i'][j'] (split 0) for j' < i' < CnI into Ps as bf16, zeros elsewhere
    // (quadratic_output's fetch and rounding of its J = I step)
    {
      const float* src = P + (bh * d.nC + I) * d.nsplit * C * C;
      const int p = 4 * (tid % 16);
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int i = (tid + kMmaThreads * r) / 16;
        float x[4];
        load_block_row4(src, i, p, C, CnI, x);
        float y[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) y[k] = i < CnI && p + k < i ? x[k] : 0.0f;  // select: the rest is never used
        const __nv_bfloat162 w[2] = {__floats2bfloat162_rn(y[0], y[1]), __floats2bfloat162_rn(y[2], y[3])};
        memcpy(smem_raw + kPs + 2 * (i * PS + p), w, sizeof w);
      }
    }
    cp_async_wait<0>();
    __syncthreads();  // Xs, V_I, P_II, aC
    warp_mma_32x32_tile<false, false, false, PS, VS, 64>(acc, a_p, b_v);
    for (int J = I - 1; J >= 0; --J) {
      const int dist = I - 1 - J;
      __syncthreads();  // Ks, Vs, Ps consumed (the previous step's products)
      fetch_rows(s0 + kKs, Kq + (bh * d.T + int64_t{J} * C) * Lp, C);
      fetch_v(J, C);
      cp_async_commit();
      if (dist > 0)  // (d = 0: no factor)
        for (int l = tid; l < Lp; l += kMmaThreads) fpow[l] = dist == 1 ? aC[l] : fpow[l] * aC[l];
      cp_async_wait<0>();
      __syncthreads();  // Ks, Vs and the factors
      if (dist > 0) {   // the keys times a^(d C), rounded to bf16 once
        for (int idx = tid; idx < 64 * cpr; idx += kMmaThreads) {
          const int r = idx / cpr, c8 = idx % cpr;
          uint4* kp = reinterpret_cast<uint4*>(smem_raw + kKs + 2 * (r * XS + 8 * c8));
          const float4 f0 = *reinterpret_cast<const float4*>(fpow + 8 * c8);
          const float4 f1 = *reinterpret_cast<const float4*>(fpow + 8 * c8 + 4);
          uint4 k = *kp;
          k.x = scale_bf16x2(k.x, make_float2(f0.x, f0.y)), k.y = scale_bf16x2(k.y, make_float2(f0.z, f0.w));
          k.z = scale_bf16x2(k.z, make_float2(f1.x, f1.y)), k.w = scale_bf16x2(k.w, make_float2(f1.z, f1.w));
          *kp = k;
        }
        __syncthreads();  // the scaled keys
      }
      // P_IJ: the warp's 16 × 32 block over Lp
      float pacc[4][4] = {};
      for (int k0 = 0; k0 < Lp; k0 += 16) {
        uint32_t af[4], bfr[2][4];
        ldsm_x4_u32(af, x_a + 2 * k0);
        ldsm_x4_u32(bfr[0], k_b + 2 * k0);
        ldsm_x4_u32(bfr[1], k_b + 2 * (16 * XS + k0));
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) mma_bf16_16816(pacc[nt], af, bfr[nt / 2][2 * (nt % 2)], bfr[nt / 2][2 * (nt % 2) + 1]);
      }
      // rounded to bf16 into Ps (rows past CnI and columns past C are zeros: their operands were)
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf)
          *reinterpret_cast<__nv_bfloat162*>(smem_raw + kPs + 2 * ((sm0 + g + 8 * hf) * PS + sn0 + 8 * nt + 2 * tq)) =
              __floats2bfloat162_rn(pacc[nt][2 * hf], pacc[nt][2 * hf + 1]);
      __syncthreads();  // Ps
      warp_mma_32x32_tile<false, false, false, PS, VS, 64>(acc, a_p, b_v);
    }
    const int64_t b = d.b_of(bh);
    for_each_acc(acc, wm, wn, [&](int i, int ec, float& x) {
      const int64_t e = e0 + ec;
      if (i < CnI && e < d.E) store<OutT>(const_cast<void*>(out.p), out.at(b, h, t0 + i, e), x);
    });
  }
}

// From an initial state rho0 (init), the final state gains a^T ⊙ rho0. The kernels add it to what
// they stored, each thread to its own elements of rho_T (still in the L2), after the stores: an init
// of the accumulators before the chunk loop spilled 132 bytes in final_state_wgmma, an add to them
// before the stores 304. One accumulator row: latent l, columns e_base + 8 j + c (j < kBlocks: the
// kernel's column blocks, c < 2), f(e, x) for each inside L and E.
template <int kBlocks, typename F>
__device__ __forceinline__ void initial_state_row(const Dims& d, const float* a32, const Str4& init, int64_t b, int64_t h,
                                                  int64_t l, int64_t e_base, F&& f) {
  if (l >= d.L) return;
  const float fac = ipow(__ldg(a32 + h * d.L + l), static_cast<int>(d.T));  // (T = 0: a^0, rho_T = rho0)
  const float* row = static_cast<const float*>(init.p) + init.at(b, h, l, 0);
#pragma unroll
  for (int j = 0; j < kBlocks; ++j)
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const int64_t e = e_base + 8 * j + c;
      if (e < d.E) f(e, fac * __ldg(row + e * init.s[3]));
    }
}

// ---- final state: rho_T without chunk states, GEMM-shaped ----------------------------------------
// The quadratic forward stores no chunk-start state; it needs only (with an initial rho, plus a_l^T
// rho0[l][e], added after the stores: kInit, initial_state_row)
//   rho_T[l][e] = sum_c a_l^(sum of the later chunks' lengths) sum_{i<Cn_c} Kq_c[i][l] V_c[i][e],
// i.e. S <- a^Cn_c ⊙ S + Kq_c^T V_c over the chunks (each thread scales the rows of its own
// accumulators; exponents >= 0, exact at a = 0 and 1, never a^(-n)), with Kq = q_i a^(Cn-1-i)
// (norm_apply's bf16 rows of Lp latents) and V the packed values (float16: the lo plane V_lo in a
// second pass with the same A fragments). final_state_mma:
//   - item (bh, 128 latents, 128 columns), 4 warps of 64×64 (2 × 2): per 16 tokens a warp issues 8
//     ldmatrix.trans (4 for K^T, 4 for V) for 32 mma (float16: 12 for 64), and each 128-column V
//     tile serves 128 latents: 16 KB of L2 reads per MFLOP (chunk_states_mma's 64-latent items: 24);
//   - steps of kFsTT = 64 tokens: one step per chunk (C <= 64, so the step index k inside a chunk is
//     0), zero-filled past the chunk's tokens (C = 32 wastes half the mma), kFsNS = 2 cp.async
//     stages, one barrier per step (4 k16 per barrier), rows padded by 8 bf16 (ldmatrix without bank
//     conflicts: 272-byte rows put the 8 row addresses of a matrix in 8 different 16-byte groups);
//   - a persistent grid (as many blocks as fit at once) whose pipeline runs across items: the first
//     tiles of the block's next item are fetched during its current item's last steps;
//   - a step's cp.async (for the stage NS - 1 steps ahead) issued after its first sub-step's mma,
//     not right after the barrier, so that the fetch's address arithmetic runs while the tensor
//     cores work rather than between the barrier and the first ldmatrix (the copies then have one
//     sub-step less to land);
//   - double-buffered fragments (CUTLASS-style): the fragments of a step's next k16 (and, float16,
//     of its lo pass) loaded into a second register set before this sub-step's mma are issued, so
//     that the mma chain does not wait on ldmatrix;
//   - the decay a^C and a^(Cn of the last chunk) of the item's 128 latents once per item in shared
//     memory, applied at each chunk's first step (8 loads per thread per chunk);
//   - rho_T written as float2 pairs (adjacent columns) where rho's column stride is 1 and the base,
//     the batch, head and row strides are even (a runtime check, else scalar stores): 8 full
//     32-byte sectors per warp store instead of 8 half-used.
// Any chunk C <= 64, any T (T = 0: zeros), odd L and E: the last latent tile may reach past Lp (its
// upper warps then fetch, multiply and store nothing); stores only inside L and E.
// Registers: 128 accumulators per thread; __launch_bounds__(128, 2) leaves up to 255 (ptxas sm_90a:
// 228, float16 224, no spills); shared memory 69 KiB (float16 103): 2 blocks per SM for both.
// History (H200, BDH-8k bfloat16, the kernel alone): chunk_states_mma without stores 0.59 ms, this
// kernel at 32-token steps over 4 stages 0.49 ms, as written ~0.3 ms (forward 2.03 -> 1.67 ms); the
// versions and A/B switches in between were measured and removed (docs/CUDA.md).
// 128-latent items, 64-token steps over 2 stages: 256-latent items and 32-token steps / 3-4 stages
// were measured no faster (docs/CUDA.md).
constexpr int kFsLT = 128, kFsET = kMmaET, kFsTT = 64, kFsNS = 2;
constexpr int kFsThreads = kFsLT / 64 * (kFsET / 64) * 32;  // a warp per 64×64 block of the tile
constexpr int kFsMinBlocks = 2;                             // blocks per SM the registers are budgeted for
constexpr int kFsKS = kFsLT + 8, kFsVS = kFsET + 8;  // bf16 row strides (conflict-free ldmatrix)
// kSwizzle (the default; RHOSCAN_FS_SWIZZLE=0 at build time keeps the padded rows): K's and V's
// rows unpadded (256 bytes), 16-byte chunk c of row r at c ^ (r % 8) (c's bit 3 kept), as
// quad_readback_mma's operand tiles (quadratic_backward.cuh): the cp.async fills write whole
// aligned 128-byte groups; a fragment's row block (mt, np: chunks 2 mt, 2 np on) is an XOR of the
// lane's address with 32 mt bytes, a k16 step an immediate (16 rows keep r % 8). The same products
// bit for bit (emulated). H200, round 16 (de6c163's A/B, BDH-8k, four launches): 1.004 against
// 1.112 ms; ptxas 232 registers (split values 239), no spills.
#ifndef RHOSCAN_FS_SWIZZLE
#define RHOSCAN_FS_SWIZZLE 1
#endif
constexpr bool kFsSwizzle = RHOSCAN_FS_SWIZZLE != 0;  // the launcher's layout
template <bool kLo, bool kSwizzle = kFsSwizzle>
constexpr int final_state_stage() {  // bf16 per stage: TT rows of K, of V (and of V_lo)
  return kFsTT * ((kSwizzle ? kFsLT : kFsKS) + (kLo ? 2 : 1) * (kSwizzle ? kFsET : kFsVS));
}
template <bool kLo, bool kSwizzle = kFsSwizzle>
constexpr int final_state_smem() {
  return kFsNS * final_state_stage<kLo, kSwizzle>() * static_cast<int>(sizeof(bf16)) +
         2 * kFsLT * static_cast<int>(sizeof(float));
}
static_assert(kFsMinBlocks * final_state_smem<false, false>() <= 227 * 1024 &&
                  kFsMinBlocks * final_state_smem<true, false>() <= 227 * 1024,
              "final_state_mma: shared memory past the H200's for the blocks budgeted for");
inline int64_t final_state_items(const Dims& d) { return d.nbh * ((d.Lp + kFsLT - 1) / kFsLT) * (d.Ep / kFsET); }
// Less integer work around the mma. A source-level Nsight Compute profile of the earlier version 3
// on the H200 (BDH-8k, bench/results/ncu-h200-c0d0bdc): 0.36 instructions issued per cycle with 0.46
// eligible warps of 2 per scheduler; IMAD 16.9 %, FMUL 14.5, ISETP 8.7, LEA 7.8, VIADD 4.6, IADD3
// 4.2 % against HMMA 16.1 %; the item start (a 64-bit division decoding the item, the accumulators
// zeroed, a barrier) ~21 % of the stall samples, the store epilogue (a compare and branch per
// element) ~15 %. Hence (quad_readback's playbook):
//   - ldmatrix rows as 32-bit shared addresses computed once per thread: a fragment load is the
//     lane's base plus the stage's offset plus an immediate (k16, mt / np, the lo pass);
//   - fetch: the thread's pieces are fixed (rows tid / 16 + 8 r, r < 8, columns 8 (tid % 16), of K
//     and of V), their shared destinations precomputed; the global sources from a running token row
//     that moves by one chunk per step and is set once per item; the zero fill of rows past
//     the chunk's tokens from a per-step row limit (full chunk or the last one), the rows not clamped
//     (a zero-filled piece reads nothing); one step per chunk (C <= 64 = kFsTT);
//   - items decoded by a running decomposition (bh, latent tile, column tile) advanced by gridDim.x
//     (the grid's own decomposition once per thread) instead of 64-bit divisions per item, and b, h of
//     bh by one 32-bit division (bh, b, h as int: a launch needs bh0 + nbh < 2^30; launch_final_state
//     splits larger batches, see final_state_batches);
//   - the store epilogue: where rho's strides allow float2 and the warp's 64 latents and 64 columns
//     are all inside L and E (a full tile), float2 stores through a running row pointer (8 rows on
//     per (mt, hf)) at immediate column offsets, no per-element check; else checked stores.
// PTX of a step (bfloat16, an active warp after chunk 0, nvcc 13): the first sub-step with its
// fetch 127 + 61 instructions, the factor block 148, the other sub-steps 130; a full tile's stores
// 82 instructions for 64 st.global.v2 at immediate offsets.
// History: version 3 (until a5227ea: the same items, steps, stages, fragments and mma sequence,
// with 64-bit item decoding and address arithmetic per step and only checked stores; 238 / 232
// registers; per step 214 + 123, 153 and 130 instructions; its checked float2 stores 9 per pair)
// gave rho_T bit for bit as this kernel (emulated). Measured on the H200 (cd8634c's A/B, BDH-8k):
// this kernel (then version 4) 0.28 against 0.32 ms per forward (Nsight Compute durations), forward
// 1.41 against 1.44 ms; version 3 was then removed.
template <bool kLo, bool kSwizzle = kFsSwizzle, bool kInit = false>  // kInit: from an initial state (initial_state_row)
static __global__ void __launch_bounds__(kFsThreads, kFsMinBlocks)
    final_state_mma_kernel(Dims d, const bf16* Kq, const bf16* V, const bf16* V_lo, const float* a32, Str4 out,
                           Str4 init = Str4{}) {
  grid_dependency_wait();
  constexpr int LT = kFsLT, ET = kFsET, TT = kFsTT, NS = kFsNS, NT = kFsThreads;
  constexpr int KS = kSwizzle ? LT : kFsKS, VS = kSwizzle ? ET : kFsVS;
  constexpr int kStage = final_state_stage<kLo, kSwizzle>();
  static_assert(NS == 2 && NT == 128 && LT == 128 && ET == 128 && TT == 64,
                "two stages; fixed fetch pieces: rows tid / 16 + 8 r (r < 8), columns 8 (tid % 16)");
  constexpr uint32_t kStageB = 2 * kStage, kVB = 2 * TT * KS, kVloB = 2 * TT * VS;  // bytes: a stage, V's tile, V_lo's
  static_assert(!kSwizzle || (kStageB % 128 == 0 && kVB % 128 == 0 && kVloB % 128 == 0),
                "the swizzled tiles start on 128-byte boundaries");
  // (128-byte aligned: the swizzled tiles' XOR steps need every tile on a 128-byte boundary)
  extern __shared__ __align__(128) unsigned char smem_raw[];
  bf16* tiles = reinterpret_cast<bf16*>(smem_raw);                  // [NS][TT K rows, TT V rows (, TT V_lo rows)]
  float* decay_s = reinterpret_cast<float*>(tiles + NS * kStage);  // [2][LT]: a^C, a^(Cn of the last chunk)
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, tq = lane % 4;
  const int wm = 64 * (warp % (LT / 64)), wn = 64 * (warp / (LT / 64));  // the warp's latents and columns in the tile
  const int C = static_cast<int>(d.C), nC = static_cast<int>(d.nC);
  const int CnLast = nC > 0 ? static_cast<int>(d.chunk_len(nC - 1)) : 0;
  const int last_off = CnLast == C ? 0 : LT;  // the last chunk's factor in decay_s
  const int nlt = static_cast<int>((d.Lp + LT - 1) / LT), net = static_cast<int>(d.Ep / ET);
  if (nlt == 0 || net == 0) return;  // no items (and no divisions by zero below)
  const uint32_t s0 = smem_addr(smem_raw);
  // the lane's ldmatrix addresses in stage 0 (k16 = 0, mt = np = 0, the hi pass)
  // (swizzled: the row's r % 8 is lane % 8, the lane's logical chunk wm / 8 + ((lane >> 3) & 1), resp.
  // wn / 8 + (lane >> 4), XORed with it in its low 3 bits)
  const int sw = kSwizzle ? lane & 7 : 0;
  const uint32_t a_ln = s0 + 2 * (((lane >> 4) * 8 + (lane & 7)) * KS + wm + (((lane >> 3) & 1) ^ sw) * 8);
  const uint32_t b_ln = s0 + kVB + 2 * ((((lane >> 3) & 1) * 8 + (lane & 7)) * VS + wn + ((lane >> 4) ^ sw) * 8);
  // the thread's fetch pieces: rows row0 + 8 r, columns p .. p + 7 (of K's and V's tiles; swizzled:
  // stored at chunk (tid % 16) ^ (row0 % 8), the same for every r)
  const int row0 = tid / 16, p = 8 * (tid % 16), pd = kSwizzle ? 8 * ((tid % 16) ^ (row0 & 7)) : p;
  const uint32_t k_dst = s0 + 2 * (row0 * KS + pd), v_dst = s0 + kVB + 2 * (row0 * VS + pd);
  // items (bh, latent tile lt, column tile et), item = (bh nlt + lt) net + et, advanced by the grid
  const int64_t grid = gridDim.x;
  const int det = static_cast<int>(grid % net), dlt = static_cast<int>(grid / net % nlt);
  const int dbh = static_cast<int>(grid / (int64_t{net} * nlt));
  auto advance = [&](int& bh, int& lt, int& et) {  // (bh as int: bh0 + nbh < 2^30, the launcher's condition)
    bh += dbh + carry_add(lt, dlt, carry_add(et, det, 0, net), nlt);
  };
  // The fetch cursor runs NS - 1 steps ahead of the multiplication, across the block's items: one
  // commit group per step, empty past the block's last item.
  int fbh = static_cast<int>(blockIdx.x / (net * nlt));
  int flt = static_cast<int>(blockIdx.x / net % nlt), fet = static_cast<int>(blockIdx.x % net), fstep = 0;
  int64_t ft = int64_t{fbh} * d.T + row0;  // the token row of the thread's first piece in the fetch step's chunk
  // V's token row less ft: 0, or for values packed per batch row (d.v_rows, Hv = 1) (v_row(fbh) -
  // fbh) T <= 0, set once per item (bh0 + nbh < 2^30: the 32-bit division)
  int64_t fvd = int64_t{d.v_row_delta32(fbh < d.nbh ? fbh : 0)} * d.T;
  auto fetch_next = [&](uint32_t so) {  // so: the stage's byte offset
    if (fbh < d.nbh && nC > 0) {
      const int lim = (fstep == nC - 1 ? CnLast : C) - row0;  // piece r holds a token where 8 r < lim
      const bf16* ksrc = Kq + ft * d.Lp + flt * LT + p;
      const int64_t voff = (ft + fvd) * d.Ep + fet * ET + p;
      if (flt * LT + p < d.Lp) {  // the piece's latents inside Lp (else not fetched)
#pragma unroll
        for (int r = 0; r < 8; ++r) cp_async16_u32(k_dst + so + 2 * 8 * KS * r, ksrc + r * 8 * d.Lp, 8 * r < lim ? 16u : 0u);
      }
#pragma unroll
      for (int r = 0; r < 8; ++r) {
        const uint32_t n = 8 * r < lim ? 16u : 0u;
        cp_async16_u32(v_dst + so + 2 * 8 * VS * r, V + voff + r * 8 * d.Ep, n);
        if constexpr (kLo) cp_async16_u32(v_dst + so + kVloB + 2 * 8 * VS * r, V_lo + voff + r * 8 * d.Ep, n);
      }
      if (++fstep == nC) {
        fstep = 0;
        advance(fbh, flt, fet);
        ft = int64_t{fbh} * d.T + row0;
        if (fbh < d.nbh) fvd = int64_t{d.v_row_delta32(fbh)} * d.T;
      } else {
        ft += d.C;
      }
    }
    cp_async_commit();
  };
  fetch_next(0);
  uint32_t so = 0;  // the current step's stage (byte offset)
  float* out_p = static_cast<float*>(const_cast<void*>(out.p));
  int bh = static_cast<int>(blockIdx.x / (net * nlt));
  int lt = static_cast<int>(blockIdx.x / net % nlt), et = static_cast<int>(blockIdx.x % net);
  for (; bh < d.nbh; advance(bh, lt, et)) {
    const int l0 = lt * LT, e0 = et * ET;
    int b, h;  // b, h of bh in 32-bit arithmetic (bh0 + nbh < 2^30)
    {
      const uint32_t x = static_cast<uint32_t>(d.bh0 + bh), H = static_cast<uint32_t>(d.H), q = x / H;
      b = q, h = x - q * H;
    }
    const bool active = l0 + wm < d.Lp;  // false: the warp's latents are past Lp (an odd last tile)
    // acc[mt][nt][r]: latent l0 + wm + 16 mt + g + 8 (r / 2), column e0 + wn + 8 nt + 2 tq + r % 2
    float acc[4][8][4];
#pragma unroll
    for (int mt = 0; mt < 4; ++mt)
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int r = 0; r < 4; ++r) acc[mt][nt][r] = 0.0f;
    for (int c = 0; c < nC; ++c) {  // step c: chunk c
      cp_async_wait<NS - 2>();  // this step's tiles have landed (this thread's copies) ...
      __syncthreads();          // ... everyone's (and the stage fetch_next refills was read at the last step)
      const uint32_t refill = kStageB - so;  // the stage read at the last step
      if (c == 0) {  // the previous item's factors were last read before this barrier; these first after the next
        const int l = l0 + tid;
        const float a = l < d.L ? __ldg(a32 + h * d.L + l) : 0.0f;
        decay_s[tid] = ipow(a, C);
        decay_s[LT + tid] = ipow(a, CnLast);
      }
      if (!active) {
        fetch_next(refill);
        so = refill;
        continue;
      }
      if (c > 0) {  // S <- a^Cn_c S before chunk c's first tokens (chunk 0 starts from S = 0)
        const float* f = decay_s + (c == nC - 1 ? last_off : 0) + wm + g;
#pragma unroll
        for (int mt = 0; mt < 4; ++mt)
#pragma unroll
          for (int hf = 0; hf < 2; ++hf) {
            const float x = f[16 * mt + 8 * hf];
#pragma unroll
            for (int nt = 0; nt < 8; ++nt) acc[mt][nt][2 * hf] *= x, acc[mt][nt][2 * hf + 1] *= x;
          }
      }
      // S[l][e] += sum_i K[i][l] V[i][e]: A = K^T (stored [i][l], ldmatrix.trans), B = V (stored [i][e]);
      // sub-steps j = (k16, pass): A fragments per k16 (set k16 % 2), B per sub-step (set j % 2);
      // sub-step j + 1's fragments are loaded before sub-step j's mma
      constexpr int kPasses = kLo ? 2 : 1, kSub = TT / 16 * kPasses;
      const uint32_t a_st = a_ln + so, b_st = b_ln + so;
      auto frag_a = [&](uint32_t(&fa)[4][4], int k16) {
#pragma unroll
        for (int mt = 0; mt < 4; ++mt)
          ldsm_x4_trans_u32(fa[mt], kSwizzle ? (a_st ^ (32u * mt)) + 2 * 16 * k16 * KS : a_st + 2 * (16 * k16 * KS + 16 * mt));
      };
      auto frag_b = [&](uint32_t(&fb)[4][4], int k16, int pass) {  // fb[np]: {0,1} columns 16 np + 0..7, {2,3} + 8..15
#pragma unroll
        for (int np = 0; np < 4; ++np)
          ldsm_x4_trans_u32(fb[np], kSwizzle ? ((b_st + pass * kVloB) ^ (32u * np)) + 2 * 16 * k16 * VS
                                             : b_st + pass * kVloB + 2 * (16 * k16 * VS + 16 * np));
      };
      uint32_t fa[2][4][4], fb[2][4][4];
      frag_a(fa[0], 0);
      frag_b(fb[0], 0, 0);
#pragma unroll
      for (int j = 0; j < kSub; ++j) {
        if (j + 1 < kSub) {
          if ((j + 1) % kPasses == 0) frag_a(fa[((j + 1) / kPasses) % 2], (j + 1) / kPasses);
          frag_b(fb[(j + 1) % 2], (j + 1) / kPasses, (j + 1) % kPasses);
        }
        const uint32_t(&a)[4][4] = fa[(j / kPasses) % 2];
        const uint32_t(&bb)[4][4] = fb[j % 2];
#pragma unroll
        for (int mt = 0; mt < 4; ++mt)
#pragma unroll
          for (int nt = 0; nt < 8; ++nt)
            mma_bf16_16816(acc[mt][nt], a[mt], bb[nt / 2][2 * (nt % 2)], bb[nt / 2][2 * (nt % 2) + 1]);
        if (j == 0) fetch_next(refill);  // (its address arithmetic under the first sub-step's mma)
      }
      so = refill;
    }
    if (!active) continue;
    const int64_t o0 = out.at(b, h, 0, 0);
    auto add_initial_state = [&] {  // + a^T ⊙ rho0 to the thread's stored elements (initial_state_row)
      if constexpr (kInit) {
#pragma unroll 1
        for (int r = 0; r < 8; ++r) {
          const int l = l0 + wm + 16 * (r / 2) + 8 * (r % 2) + g;
          initial_state_row<8>(d, a32, init, b, h, l, e0 + wn + 2 * tq,
                               [&](int64_t e, float x) { out_p[o0 + l * out.s[2] + e * out.s[3]] += x; });
        }
      }
    };
    // float2 pairs (columns 2 tq, 2 tq + 1: e even) where every pair is 8-byte aligned
    const bool pairs = out.s[3] == 1 && (o0 | out.s[2]) % 2 == 0 && reinterpret_cast<uintptr_t>(out_p) % 8 == 0;
    if (pairs && l0 + wm + 64 <= d.L && e0 + wn + 64 <= d.E) {  // a full tile: no checks
      float* row = out_p + o0 + (l0 + wm + g) * out.s[2] + e0 + wn + 2 * tq;
#pragma unroll
      for (int mt = 0; mt < 4; ++mt)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
#pragma unroll
          for (int nt = 0; nt < 8; ++nt)
            *reinterpret_cast<float2*>(row + 8 * nt) = make_float2(acc[mt][nt][2 * hf], acc[mt][nt][2 * hf + 1]);
          row += 8 * out.s[2];
        }
      add_initial_state();
      continue;
    }
    auto for_each_row = [&](auto&& f) {  // f(mt, hf, l) for the thread's accumulator rows l inside L
#pragma unroll
      for (int mt = 0; mt < 4; ++mt)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
          const int l = l0 + wm + 16 * mt + 8 * hf + g;
          if (l < d.L) f(mt, hf, l);
        }
    };
    if (pairs) {
      for_each_row([&](int mt, int hf, int l) {
        float* row = out_p + o0 + l * out.s[2];
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
          const int e = e0 + wn + 8 * nt + 2 * tq;
          if (e + 1 < d.E)
            *reinterpret_cast<float2*>(row + e) = make_float2(acc[mt][nt][2 * hf], acc[mt][nt][2 * hf + 1]);
          else if (e < d.E)  // (odd E: the last column alone)
            row[e] = acc[mt][nt][2 * hf];
        }
      });
    } else {  // scalar stores at rho's strides
      for_each_row([&](int mt, int hf, int l) {
#pragma unroll
        for (int nt = 0; nt < 8; ++nt)
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const int e = e0 + wn + 8 * nt + 2 * tq + r;
            if (e < d.E) out_p[o0 + l * out.s[2] + e * out.s[3]] = acc[mt][nt][2 * hf + r];
          }
      });
    }
    add_initial_state();
  }
  cp_async_wait<0>();  // (only empty groups are left)
}

// ---- final state on warpgroup MMA (sm_90a) ------------------------------------------------------
// final_state_mma_kernel's sums with wgmma in place of its 4 warps' mma.sync: the same items (bh,
// 128 latents, 128 columns), the same recurrence S <- a^Cn ⊙ S + Kq_c^T V_c (one step per chunk,
// the factor applied to each thread's accumulator rows before the chunk's products) and the same
// k steps per element in the same order (k16 0..3, float16's lo pass after each hi one), so rho_T
// is bit for bit final_state_mma's in the host emulation (on the GPU the tensor cores' order of
// accumulation inside a k step may differ in the last bits). The block's two warpgroups each own
// 64 of the item's latents (M = 64) and its 128 columns (N = 128): a step is 4 instructions
// m64n128k16 per warpgroup (float16: 8) where final_state_mma's warps issued 128 mma.sync and 32
// ldmatrix.trans each, and the tensor cores read the tiles through descriptors (mma.cuh,
// wgmma_desc_sw128), every tile 64 wide and 128-byte swizzled (quad_readback_wgmma's storage):
//   Kq  [64 tokens][128 latents] as two tiles, one per warpgroup: A = Kq^T, M-major (k = token
//       rows, m = latents along them);
//   V   [64 tokens][128 columns] as two tiles 8 KiB apart: B = V, N-major (LBO = 8 KiB, the next 64
//       columns); float16: V_lo's tiles after them.
// The fills are 16-byte cp.async pieces (rows row0 + 16 r of a 128-element row pair of tiles),
// zero-filled past the chunk's tokens, the latents past Lp not fetched (Lp is a multiple of 64);
// the fetch cursor runs kStages - 1 steps ahead across the block's items (a persistent grid, as
// final_state_mma's). One barrier per step: every warpgroup waits for its step's products at the
// step's end, so that after the next barrier the stage that step's fetch refills is free. Every
// warpgroup multiplies, one whose latents are past Lp on stale tiles that it never stores: no
// divergent path around the products (ptxas serializes products with one in between: C7518). The
// factors a^C and a^(Cn of the last chunk) of the thread's two rows in registers. rho_T stored as
// final_state_mma stores it (float2 pairs where rho's strides allow, a full tile's without
// checks, else checked). 3 stages (float16: 2), 2 blocks per SM, 124 registers.
// Measured on the H200 (round 20, BDH-8k bfloat16, Nsight Compute, two forwards): 0.203-0.207 ms
// a launch against final_state_mma's 0.253; Nsight Compute's full set: tensor pipe 39 % active,
// L2 67 %, DRAM 53 % (rho_T's float32 stores are half its DRAM bytes). Also measured, and removed:
// 256-column items (two warpgroups of m64n256k16, 1 block per SM: each Kq tile read once per 256
// columns) with 3 or 4 stages, 0.227 ms; the same with the wait for a step's products deferred to
// the next step, after its barrier and fetch (the products running under them), 0.215 ms, which
// needed a branch-free fetch (a division per step), 0.222 ms for the 128-column kernel.
constexpr int kFwThreads = 256, kFwLT = 128;
constexpr uint32_t kFwTile = 64 * 128;  // bytes of one 64 × 64 bf16 tile
template <bool kLo>
constexpr int kFwStages = kLo ? 2 : 3;
template <bool kLo>
constexpr uint32_t final_state_wgmma_stage() {  // bytes: Kq's two tiles, V's two (and V_lo's)
  return (kLo ? 6 : 4) * kFwTile;
}
template <bool kLo>
constexpr int final_state_wgmma_smem() {  // (1008 bytes of slack: the tiles on 1024-byte boundaries)
  return static_cast<int>(kWgmmaAtom - 16 + kFwStages<kLo> * final_state_wgmma_stage<kLo>());
}
static_assert(2 * (final_state_wgmma_smem<false>() + 1024) <= 228 * 1024 &&
                  2 * (final_state_wgmma_smem<true>() + 1024) <= 228 * 1024,
              "final_state_wgmma: two blocks per SM (each with the 1 KiB the system reserves)");
template <bool kLo, bool kInit = false>  // kInit: from an initial state (initial_state_row)
__global__ void __launch_bounds__(kFwThreads, 2)
    final_state_wgmma_kernel(Dims d, const bf16* Kq, const bf16* V, const bf16* V_lo, const float* a32, Str4 out,
                             Str4 init = Str4{}) {
  grid_dependency_wait();
  constexpr int LT = kFwLT, kN = 128, ET = kN, NS = kFwStages<kLo>, kDist = NS - 1;  // kDist: the fetch's distance in steps
  constexpr uint32_t kStage = final_state_wgmma_stage<kLo>();
  constexpr uint32_t kVB = 2 * kFwTile, kVloB = kVB + (kN / 64) * kFwTile;  // V's tiles and V_lo's in a stage
  extern __shared__ __align__(128) unsigned char smem_raw[];
  // the tiles on 1024-byte boundaries (the swizzle's atoms): the base rounded up
  const uint32_t s_raw = smem_addr(smem_raw), s0 = (s_raw + kWgmmaAtom - 1) & ~(kWgmmaAtom - 1);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, q = lane % 4;
  const int wg = warp / 4, lr = 64 * wg + 16 * (warp % 4) + g;  // the thread's accumulator rows lr, lr + 8
  const int C = static_cast<int>(d.C), nC = static_cast<int>(d.nC);
  const int CnLast = nC > 0 ? static_cast<int>(d.chunk_len(nC - 1)) : 0;
  const int nlt = static_cast<int>((d.Lp + LT - 1) / LT), net = static_cast<int>(d.Ep / ET);
  if (nlt == 0 || net == 0) return;  // no items (and no divisions by zero below)
  // the thread's fetch pieces: rows row0 + 16 r (r < 4), 16-byte chunk pc of a 128-element row
  // (tile pc / 8, chunk pc % 8 stored at (pc % 8) ^ (row0 % 8): 16 rows keep r % 8)
  const int row0 = tid / 16, pc = tid % 16;
  const uint32_t dst = s0 + (pc / 8) * kFwTile + row0 * 128 + (((pc % 8) ^ (row0 & 7)) << 4);
  // descriptors in stage 0 (a stage or a k step is an add to the start address field, in 16-byte
  // units): A the warpgroup's Kq tile (M-major), B V's tiles (N-major, 64-column tiles LBO apart)
  const uint64_t desc_a = wgmma_desc_sw128(s0 + wg * kFwTile, kWgmmaAtom, kWgmmaAtom);
  const uint64_t desc_b = wgmma_desc_sw128(s0 + kVB, kFwTile, kWgmmaAtom);
  constexpr uint64_t kKStep = 2 * kWgmmaAtom / 16, kLoStep = (kVloB - kVB) / 16;  // 16 tokens: two atoms
  // items (bh, latent tile lt, column tile et), item = (bh nlt + lt) net + et, advanced by the grid
  const int64_t grid = gridDim.x;
  const int det = static_cast<int>(grid % net), dlt = static_cast<int>(grid / net % nlt);
  const int dbh = static_cast<int>(grid / (int64_t{net} * nlt));
  auto advance = [&](int& bh, int& lt, int& et) {  // (bh as int: bh0 + nbh < 2^30, the launcher's condition)
    bh += dbh + carry_add(lt, dlt, carry_add(et, det, 0, net), nlt);
  };
  // The fetch cursor runs kDist steps ahead of the products, across the block's items: one commit
  // group per step, empty past the block's last item. fso: the stage it fills next (byte offset).
  int fbh = static_cast<int>(blockIdx.x / (net * nlt));
  int flt = static_cast<int>(blockIdx.x / net % nlt), fet = static_cast<int>(blockIdx.x % net), fstep = 0;
  int64_t ft = int64_t{fbh} * d.T + row0;  // the token row of the thread's first piece in the fetch step's chunk
  // V's token row less ft (values packed per batch row: see final_state_mma)
  int64_t fvd = int64_t{d.v_row_delta32(fbh < d.nbh ? fbh : 0)} * d.T;
  uint32_t fso = 0;
  auto next_stage = [](uint32_t so) { return so + kStage == NS * kStage ? 0u : so + kStage; };
  auto fetch_next = [&]() {
    if (fbh < d.nbh && nC > 0) {
      const int lim = (fstep == nC - 1 ? CnLast : C) - row0;  // piece r holds a token where 16 r < lim
      const bf16* ksrc = Kq + ft * d.Lp + flt * LT + 8 * pc;
      const int64_t voff = (ft + fvd) * d.Ep + fet * ET + 8 * pc;
      const uint32_t kd = dst + fso;
      if (flt * LT + 8 * pc < d.Lp) {  // the piece's tile inside Lp (else its warpgroup multiplies stale tiles)
#pragma unroll
        for (int r = 0; r < 4; ++r) cp_async16_u32(kd + 16 * 128 * r, ksrc + r * 16 * d.Lp, 16 * r < lim ? 16u : 0u);
      }
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const uint32_t n = 16 * r < lim ? 16u : 0u, vd = kd + kVB + 16 * 128 * r;
        const int64_t vo = voff + r * 16 * d.Ep;
        cp_async16_u32(vd, V + vo, n);
        if constexpr (kLo) cp_async16_u32(vd + (kVloB - kVB), V_lo + vo, n);
      }
      if (++fstep == nC) {
        fstep = 0;
        advance(fbh, flt, fet);
        ft = int64_t{fbh} * d.T + row0;
        if (fbh < d.nbh) fvd = int64_t{d.v_row_delta32(fbh)} * d.T;
      } else {
        ft += d.C;
      }
    }
    cp_async_commit();
    fso = next_stage(fso);
  };
#pragma unroll
  for (int s = 0; s < kDist; ++s) fetch_next();
  uint32_t so = 0;  // the current step's stage (byte offset)
  float* out_p = static_cast<float*>(const_cast<void*>(out.p));
  int bh = static_cast<int>(blockIdx.x / (net * nlt));
  int lt = static_cast<int>(blockIdx.x / net % nlt), et = static_cast<int>(blockIdx.x % net);
  // acc[4 j + 2 hf + c]: latent l0 + lr + 8 hf, column e0 + 8 j + 2 q + c
  float acc[kN / 2];
  // The decays of the thread's rows, an item ahead: loaded at the previous item's start, so that
  // their latency runs under its steps (loaded at the item's start, their first use held 8-10 % of
  // the warps' stall samples at BDH-8k: round 36's source profile, an H100).
  auto head_of = [&](int x) {  // h of pair bh0 + x (32-bit: bh0 + nbh < 2^30)
    const uint32_t y = static_cast<uint32_t>(d.bh0 + x), H = static_cast<uint32_t>(d.H);
    return static_cast<int>(y - y / H * H);
  };
  float a_next[2] = {0.0f, 0.0f};
  auto load_decays = [&](int xbh, int xlt) {
    if (xbh >= d.nbh) return;
    const int xh = head_of(xbh);
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int l = xlt * LT + lr + 8 * hf;
      a_next[hf] = l < d.L ? __ldg(a32 + xh * d.L + l) : 0.0f;
    }
  };
  load_decays(bh, lt);
  for (; bh < d.nbh; advance(bh, lt, et)) {
    const int l0 = lt * LT, e0 = et * ET;
    int b, h;  // b, h of bh in 32-bit arithmetic (bh0 + nbh < 2^30)
    {
      const uint32_t x = static_cast<uint32_t>(d.bh0 + bh), H = static_cast<uint32_t>(d.H), qt = x / H;
      b = qt, h = x - qt * H;
    }
    const bool active = l0 + 64 * wg < d.Lp;  // false: the warpgroup's latents are past Lp (an odd last tile)
    const float a_item[2] = {a_next[0], a_next[1]};
    {
      int xbh = bh, xlt = lt, xet = et;  // the block's next item
      advance(xbh, xlt, xet);
      load_decays(xbh, xlt);
    }
    float fC[2], fLast[2];  // a^C and a^CnLast of the thread's rows
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) fC[hf] = ipow(a_item[hf], C), fLast[hf] = ipow(a_item[hf], CnLast);
#pragma unroll
    for (int i = 0; i < kN / 2; ++i) acc[i] = 0.0f;
    for (int c = 0; c < nC; ++c) {  // step c: chunk c
      cp_async_wait<kDist - 1>();  // this step's pieces (this thread's) have landed ...
      fence_proxy_async();          // ... and are visible to the tensor cores' reads
      __syncthreads();  // everyone's; and every warpgroup has waited for the products that read fso
      fetch_next();
      if (c > 0) {  // S <- a^Cn_c S before chunk c's first tokens (chunk 0 starts from S = 0)
        const float f0 = c == nC - 1 ? fLast[0] : fC[0], f1 = c == nC - 1 ? fLast[1] : fC[1];
#pragma unroll
        for (int j = 0; j < kN / 8; ++j) acc[4 * j] *= f0, acc[4 * j + 1] *= f0, acc[4 * j + 2] *= f1, acc[4 * j + 3] *= f1;
      }
      const uint64_t st = so / 16;
      wgmma_fence_operand(acc);
      wgmma_fence();
#pragma unroll
      for (int k = 0; k < 4; ++k) {  // S[l][e] += sum_i K[i][l] V[i][e]: A = K^T (M-major), B = V (N-major)
        wgmma_m64k16_bf16<kN, 1, 1>(acc, desc_a + st + k * kKStep, desc_b + st + k * kKStep);
        if constexpr (kLo) wgmma_m64k16_bf16<kN, 1, 1>(acc, desc_a + st + k * kKStep, desc_b + st + kLoStep + k * kKStep);
      }
      wgmma_commit();
      wgmma_wait<0>();
      wgmma_fence_operand(acc);
      so = next_stage(so);
    }
    if (!active) continue;
    const int64_t o0 = out.at(b, h, 0, 0);
    auto add_initial_state = [&] {  // + a^T ⊙ rho0 to the thread's stored elements (initial_state_row)
      if constexpr (kInit) {
#pragma unroll 1
        for (int hf = 0; hf < 2; ++hf) {
          const int l = l0 + lr + 8 * hf;
          initial_state_row<kN / 8>(d, a32, init, b, h, l, e0 + 2 * q,
                                    [&](int64_t e, float x) { out_p[o0 + l * out.s[2] + e * out.s[3]] += x; });
        }
      }
    };
    // float2 pairs (columns 2 q, 2 q + 1: e even) where every pair is 8-byte aligned
    const bool pairs = out.s[3] == 1 && (o0 | out.s[2]) % 2 == 0 && reinterpret_cast<uintptr_t>(out_p) % 8 == 0;
    if (pairs && l0 + 64 * wg + 64 <= d.L && e0 + ET <= d.E) {  // a full tile: no checks
      float* row = out_p + o0 + (l0 + lr) * out.s[2] + e0 + 2 * q;
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
#pragma unroll
        for (int j = 0; j < kN / 8; ++j)
          *reinterpret_cast<float2*>(row + 8 * j) = make_float2(acc[4 * j + 2 * hf], acc[4 * j + 2 * hf + 1]);
        row += 8 * out.s[2];
      }
      add_initial_state();
      continue;
    }
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int l = l0 + lr + 8 * hf;
      if (l >= d.L) continue;
      float* row = out_p + o0 + l * out.s[2];
#pragma unroll
      for (int j = 0; j < kN / 8; ++j) {
        const int e = e0 + 8 * j + 2 * q;
        const float x0 = acc[4 * j + 2 * hf], x1 = acc[4 * j + 2 * hf + 1];
        if (pairs) {
          if (e + 1 < d.E)
            *reinterpret_cast<float2*>(row + e) = make_float2(x0, x1);
          else if (e < d.E)  // (odd E: the last column alone)
            row[e] = x0;
        } else {  // scalar stores at rho's strides
          if (e < d.E) row[e * out.s[3]] = x0;
          if (e + 1 < d.E) row[(e + 1) * out.s[3]] = x1;
        }
      }
    }
    add_initial_state();
  }
  cp_async_wait<0>();  // (only empty groups are left)
}

// final_state_mma_kernel's launches for a batch: f(s, first, a32_s, out_s, init_s) per launch, with
// the launch's Dims s (pairs first .. first + s.nbh - 1 of the batch: its Kq and V rows from pair
// first on), a32, rho and the initial state (if any) rebased to them. The kernel keeps bh, b and h
// in 32-bit registers, so a launch needs s.bh0 + s.nbh < limit (2^30): one launch with d where that
// holds, else sub-batches with s.bh0 = 0, a32 and rho moved to the sub-batch's first pair (b0, h0)
// and at most limit - 1 pairs, ending with their row of heads where h0 > 0 (so that the pair's h is
// h0 + its index and b is b0); from h0 = 0 on, the kernel's own b, h from its index. (A parameter, not the constant,
// so that the emulation runs the sub-batches on small problems.)
template <typename F>
void final_state_batches(const Dims& d, const float* a32, Str4 out, Str4 init, int64_t limit, F&& f) {
  if (d.bh0 + d.nbh < limit) {
    f(d, int64_t{0}, a32, out, init);
    return;
  }
  for (int64_t first = 0; first < d.nbh;) {
    const int64_t g = d.bh0 + first, b0 = g / d.H, h0 = g - b0 * d.H;
    Dims s = d;
    s.bh0 = 0;
    s.nbh = std::min(d.nbh - first, h0 > 0 ? std::min(limit - 1, d.H - h0) : limit - 1);
    Str4 o = out, i = init;
    o.p = static_cast<const float*>(out.p) + b0 * out.s[0] + h0 * out.s[1];
    if (init.p != nullptr) i.p = static_cast<const float*>(init.p) + b0 * init.s[0] + h0 * init.s[1];
    f(s, first, a32 + h0 * d.L, o, i);
    first += s.nbh;
  }
}

// ---- launchers (quadratic) -----------------------------------------------------------------------
// The wgmma kernels (cross_scores_wgmma and final_state_wgmma here, quad_readback_wgmma in
// quadratic_backward.cuh) run where this build has sm_90a code (RHOSCAN_CUDA_WGMMA, which CMake
// sets when CMAKE_CUDA_ARCHITECTURES holds 90a) and the device is compute capability 9.0.
#ifndef RHOSCAN_CUDA_WGMMA
#define RHOSCAN_CUDA_WGMMA 0
#endif
inline bool wgmma_runs() { return RHOSCAN_CUDA_WGMMA && device_compute_capability() == 90; }
// Whether a kernel with an mma.sync and a wgmma version takes the wgmma one: where wgmma_runs,
// `fallback` (the build's default) unless the environment variable `env` (read per call) says
// mma or wgmma (for tests and A/B runs; another value counts as unset).
inline bool wgmma_chosen(const char* env, bool fallback) {
  if (!wgmma_runs()) return false;
  if (const char* v = std::getenv(env)) {
    if (std::strcmp(v, "mma") == 0) return false;
    if (std::strcmp(v, "wgmma") == 0) return true;
  }
  return fallback;
}
// L splits of cross_scores for a call of `pairs` (b, h) pairs in all: enough items to fill the GPU
// (RHOSCAN_CROSS_SPLIT_ITEMS), at most 16, at most one per
// 64-latent tile. From the call's pairs, not a batch's: the sums do not depend on the batching
// (a workspace cap changes no bit of the context).
// RHOSCAN_CROSS_SPLIT_ITEMS is the item count aimed at: 264 (one block per slot of 132
// multiprocessors × 2) since two A/Bs on the H200 (389f245, 4af9530): at BDH-8k it means one split
// (256 items, no cross_reduce) against two with the earlier 528, forward 1.43 against 1.47 ms both
// times, forward+backward 6.47 / 6.49 and 6.08 / 6.17 ms.
#ifndef RHOSCAN_CROSS_SPLIT_ITEMS
#define RHOSCAN_CROSS_SPLIT_ITEMS 264
#endif
inline int64_t cross_splits(int64_t pairs, const Dims& d) {
  const int64_t items = pairs * cross_groups(d.nC);
  if (items == 0) return 1;
  int64_t n = std::min<int64_t>((RHOSCAN_CROSS_SPLIT_ITEMS + items - 1) / items, 16);
  n = std::min<int64_t>(n, d.Lp / kMmaLT);
  return std::max<int64_t>(n, 1);
}
// The cross scores' kernel: cross_scores_wgmma_kernel where wgmma_runs, unless built with
// -DRHOSCAN_CS_WGMMA=0; else cross_scores_mma_kernel. RHOSCAN_CUDA_CROSS_SCORES=mma|wgmma
// (environment, read per call) forces either (wgmma only where it runs).
#ifndef RHOSCAN_CS_WGMMA
#define RHOSCAN_CS_WGMMA 1
#endif
// Pcross (bf16) of one batch; scratch: cross_parts_planes(nsplit) planes of d.nbh nC^2 C^2 floats.
inline void launch_cross_scores(const Dims& d, int64_t nsplit, const bf16* Xq, const bf16* Kq, const float* a32,
                                bf16* Pcross, float* scratch, cudaStream_t stream) {
  const int64_t items = d.nbh * cross_items(d.nC) * nsplit;
  if (items == 0) return;
  auto run = [&](const char* name, auto kernel, int smem) {  // both kernels take the same arguments
    RHOSCAN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    launch_kernel(name, kernel, grid_for(items), kCrossThreads, smem, stream, d, Xq, Kq, a32, Pcross, scratch,
                  static_cast<int>(nsplit));
  };
  if (wgmma_chosen("RHOSCAN_CUDA_CROSS_SCORES", RHOSCAN_CS_WGMMA != 0))
    nsplit > 1 ? run("cross_scores_wgmma_kernel", cross_scores_wgmma_kernel<true>, kCwSmem)
               : run("cross_scores_wgmma_kernel", cross_scores_wgmma_kernel<false>, kCwSmem);
  else
    run("cross_scores_mma_kernel", cross_scores_mma_kernel<kCrossSwizzle>, kCrossSmem);
  if (nsplit > 1) {
    launch_kernel("cross_reduce_kernel", cross_reduce_kernel, grid_for(d.nbh * d.nC * d.nC * d.C * d.C, 256), 256, 0,
                  stream, d, scratch, Pcross, static_cast<int>(nsplit));
  }
}

// The context of one batch (bf16 / float16 inputs; float16 values split into hi + lo).
// rho0 (optional, float32): the initial state's share of the context too (kState).
template <typename T>
void launch_quadratic_output(const Dims& d, const float* P, const bf16* Pcross, const Operands16& o, Str4 ctx,
                             cudaStream_t stream, const float* a32 = nullptr, Str4 rho0 = Str4{}) {
  constexpr bool kLo = kSplitValues<T>;
  auto kernel = rho0.p != nullptr ? quadratic_output_mma_kernel<T, kLo, kQOutSwizzle, true>
                                  : quadratic_output_mma_kernel<T, kLo, kQOutSwizzle, false>;
  const int smem = rho0.p != nullptr ? quadratic_output_smem<kLo, true>() : quadratic_output_smem<kLo, false>();
  RHOSCAN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  launch_kernel("quadratic_output_mma_kernel", kernel, grid_for(d.nbh * d.nC * (d.Ep / kMmaET)), kMmaThreads, smem,
                stream, d, P, Pcross, o.vb, o.vlo, ctx, o.Xq, a32, rho0);
}

// The context of one batch by quadratic_rows_mma (bfloat16 values; where quadratic_rows_applies).
template <typename T>
void launch_quadratic_rows(const Dims& d, const float* P, const Operands16& o, const float* a32, Str4 ctx,
                           cudaStream_t stream) {
  static_assert(!kSplitValues<T>, "quadratic_rows_mma: no lo pass for split values");
  auto kernel = quadratic_rows_mma_kernel<T>;
  RHOSCAN_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, quadratic_rows_smem(kRowsMaxLp)));
  launch_kernel("quadratic_rows_mma_kernel", kernel, grid_for(d.nbh * d.nC * (d.Ep / kMmaET)), kMmaThreads,
                quadratic_rows_smem(d.Lp), stream, d, P, o.Xq, o.Kq, o.vb, a32, ctx);
}

// The final state's kernel: final_state_wgmma_kernel where wgmma_runs, unless built with
// -DRHOSCAN_FS_WGMMA=0; else final_state_mma_kernel. RHOSCAN_CUDA_FINAL_STATE=mma|wgmma
// (environment, read per call) forces either (wgmma only where it runs).
#ifndef RHOSCAN_FS_WGMMA
#define RHOSCAN_FS_WGMMA 1
#endif
// The final state rho_T of one batch by final_state_wgmma or final_state_mma, from the initial state
// `init` where given (initial_state_row). A persistent grid: as many blocks as fit at once (at most one per
// item), so that each block's cp.async pipeline runs on across its items.
template <typename T>
void launch_final_state(const Dims& d, const float* a32, const Operands16& o, Str4 out, cudaStream_t stream,
                        Str4 init = Str4{}) {
  if (out.p == nullptr) return;
  constexpr bool kLo = kSplitValues<T>;
  int dev = 0, sms = 0;
  RHOSCAN_CUDA_CHECK(cudaGetDevice(&dev));
  RHOSCAN_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  auto run = [&](const char* name, auto kernel, int threads, int smem) {
    RHOSCAN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    int per_sm = 0;
    RHOSCAN_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
    // (one launch, or sub-batches past 2^30 pairs: the kernels' 32-bit pair indices)
    final_state_batches(d, a32, out, init, int64_t{1} << 30, [&](const Dims& s, int64_t first, const float* as, Str4 os,
                                                                 Str4 is) {
      const unsigned grid = grid_for(final_state_items(s), 1, std::max<int64_t>(1, int64_t{sms} * per_sm));
      // the sub-batch's first token row of Kq, and of V: d.v_row(first)'s (values packed per batch row
      // where d.v_rows: the sub-batch's pairs lie in one batch row, or start at h = 0, so that s's
      // own v_row, from s.bh0 = 0, counts its rows from there)
      const int64_t kv = first * d.T, vv = d.v_row(first) * d.T;
      launch_kernel(name, kernel, grid, threads, smem, stream, s, o.Kq + kv * d.Lp, o.vb + vv * d.Ep,
                    o.vlo != nullptr ? o.vlo + vv * d.Ep : nullptr, as, os, is);
    });
  };
  static_assert(kFwLT == kFsLT && kFsET == 128, "final_state_wgmma's items are final_state_mma's (final_state_items)");
  const bool from_init = init.p != nullptr;
  if (wgmma_chosen("RHOSCAN_CUDA_FINAL_STATE", RHOSCAN_FS_WGMMA != 0))
    run("final_state_wgmma_kernel", from_init ? final_state_wgmma_kernel<kLo, true> : final_state_wgmma_kernel<kLo, false>,
        kFwThreads, final_state_wgmma_smem<kLo>());
  else
    run("final_state_mma_kernel",
        from_init ? final_state_mma_kernel<kLo, kFsSwizzle, true> : final_state_mma_kernel<kLo, kFsSwizzle, false>,
        kFsThreads, final_state_smem<kLo>());
}

}  // namespace rhoscan::cuda_detail
