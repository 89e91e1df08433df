// The chunk products on tensor cores (bf16 operands, float32 accumulators) for bfloat16 and
// float16 inputs, and the launchers that pick them or the float32 FFMA kernels of
// chunk_kernels.cuh (float32 inputs keep exact float32 arithmetic).
//
// Tensor-core path: norm_scan writes the scaled operands Xq = Qp_i a^i and Kq = q_i a^(Cn-1-i)
// in bf16 (rows of d.Lp latents, zero padded), pack_bf16 copies v (and G) into contiguous bf16
// rows of d.Ep columns, and every product accumulates in float32 in the mma accumulators. The
// state recurrence itself (S <- a^Cn S + K^T V) runs in float32 registers across the whole
// sequence. The forward stores the chunk-start states in bf16 (its readout rounds them to bf16
// anyway); the backward stores them in float32, because its local gradient gw_t[l] = G_t·X_t[l,:]
// enters dq as gw - sum_j gw_j w_j, a difference that bf16 states would not resolve.
#pragma once

#include <algorithm>
#include <type_traits>

#include "cuda/chunk_kernels.cuh"
#include "cuda/mma.cuh"
#include "cuda/workspace.h"

namespace rhoscan::cuda_detail {

// Which inputs take the tensor-core path: bfloat16 and float16, forward and backward.
template <typename T>
constexpr bool kTensorCoreForward = !std::is_same_v<T, float>;
template <typename T>
constexpr bool kTensorCoreBackward = !std::is_same_v<T, float>;
// float16 values and upstream gradients enter the tensor cores as bf16 hi + lo pairs (v = hi + lo
// exactly: 11 significant bits fit in two 8-bit bf16 significands, and bf16's exponent range
// covers float16's), so every product with them takes two mma passes. So do the state keys
// Kq = q a^(Cn-1-i) of the backward's recomputed chunk states H: W = H·G enters dq as the
// cancelling difference gw - gc, against a normaliser N computed from the exact q. Rounding the
// values and gradients to bf16 (3 mantissa bits fewer than float16) took grad_q to 0.014-0.026 RMS
// relative error on the harness's decay-0/1, zero-row float16 cases (bar 5e-3); with the values
// split but the keys not, still 0.017 and 0.0068 (H200, c745b5d): at decay 0 and 1 a bfloat16
// q makes exact keys, a float16 q does not.
template <typename T>
constexpr bool kSplitValues = std::is_same_v<T, __half>;
// The element type of the forward's stored chunk states (the backward's are float32).
template <bool kTC>
using StateT = std::conditional_t<kTC, bf16, float>;

constexpr int kMmaThreads = 256;
constexpr int kMmaLT = 64;   // latents per tile (the L padding of the tensor-core path)
constexpr int kMmaET = 128;  // state / output columns per tile (the E padding)

// Sets the state and operand padding of the path.
template <bool kTC>
void set_padding(Dims& d) {
  d.Lp = kTC ? (d.L + kMmaLT - 1) / kMmaLT * kMmaLT : d.L;
  d.Ep = kTC ? (d.E + kMmaET - 1) / kMmaET * kMmaET : d.E;
}
// Workspace bytes per (b, h) pair: one set of chunk states of element type S, and the bf16
// operands of the tensor-core path: `lat` arrays [T][Lp] (Xq, Kq) and `cols` arrays [T][Ep]
// (packed values).
template <typename S>
int64_t chunk_state_bytes(const Dims& d) {
  return Workspace::bytes<S>(d.nC * d.Lp * d.Ep);
}
// (cols counts v and G; split values (float16) double it: hi and lo arrays).
// The float16 backward (cols == 2) also keeps Kq's remainders: one more [T][Lp] array.
template <bool kTC, typename T>
int64_t operand_bytes(const Dims& d, int lat, int cols) {
  const int col_arrays = kSplitValues<T> ? 2 * cols : cols;
  if (kSplitValues<T> && cols == 2) ++lat;
  return kTC ? lat * Workspace::bytes<bf16>(d.T * d.Lp) + col_arrays * Workspace::bytes<bf16>(d.T * d.Ep) : 0;
}

// ---- y (v or G, strided, any 16-bit type) to contiguous bf16 rows [bh][t][Ep], zero padded ----
// (d.v_rows, v with Hv = 1: rows [r][t][Ep] per batch row r = b - bh0 / H instead, see Dims)
// A warp per row (bh, t), 8 rows per block of 256 threads; lane λ converts the row's 8 elements
// from 8 λ on, then every 256th: one 16-byte store (per plane), and one 16-byte load where y's rows
// are contiguous and 16-byte aligned (else 8 element loads, any strides). The row's indices once
// per row (64-bit divisions per element made this copy cost a tenth of the BDH-base
// forward+backward at 6fe913d); since then the warp's first row by divisions and the next ones by
// carries. Until d3079d8 a block of 128 threads per row with 2-byte loads and
// stores: 44 µs per call at BDH-base (25 MB each way, ~12 µs at the DRAM rate) on the H200.
// With lo given, also the remainder lo = y - hi, rounded to bf16 (exact for float16 y).
constexpr int kPackThreads = 256;
// Rows a warp loads together on the fast path (16-bit y, contiguous aligned rows, Ep <= 256, E % 8
// == 0: one 16-byte piece per lane and row): the pieces of kPackRows rows are loaded before any is
// converted, so that a warp has that many loads in flight (with one, the copy was latency-bound:
// ~25 µs per call at BDH-base against ~8 µs at the DRAM rate on the H200). The launcher sizes the
// grid for it. 1 is the one-row loop of before (for the A/B).
#ifndef RHOSCAN_PACK_ROWS
#define RHOSCAN_PACK_ROWS 4
#endif
constexpr int kPackRows = RHOSCAN_PACK_ROWS;
template <typename T>
__global__ void __launch_bounds__(kPackThreads) pack_bf16_kernel(Dims d, Str4 y, bf16* out, bf16* lo = nullptr) {
  grid_dependency_wait();
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);  // (blockDim.x: a multiple of 32)
  // Ep is a multiple of 64, so the rows of out (and lo) start 16-byte aligned; 8 elements of y are
  // one 16-byte load for 16-bit T
  const bool vec = sizeof(T) == 2 && y.s[3] == 1 && ((y.s[0] | y.s[1] | y.s[2]) & 7) == 0 &&
                   reinterpret_cast<uintptr_t>(y.p) % 16 == 0;
  // d.v_rows (Hv = 1): a row per (batch row, t), local batch row r = b - bh0 / H, from v's head 0
  // (as if H were 1); else a row per (pair bh, t)
  const int64_t r0 = blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32, rows = d.v_packed_rows() * d.T;
  if (r0 >= rows) return;
  const int64_t Hr = d.v_rows ? 1 : d.H;  // the heads that the packed rows run over
  // the warp's rows (bh, t) and their (b, h): the first by divisions, then on by the grid's warps
  // with carries (carry_add), so that no row waits for 64-bit divisions before its load
  int64_t bh = r0 / d.T, t = r0 - bh * d.T, b = d.v_rows ? d.bh0 / d.H + bh : d.b_of(bh), h = d.v_rows ? 0 : d.h_of(bh);
  const int64_t dbh = warps / d.T, dt = warps - dbh * d.T, db = dbh / Hr, dh = dbh - db * Hr;
  auto next_row = [&] {
    const int carry = carry_add(t, dt, 0, d.T);
    bh += dbh + carry;
    b += db + carry_add(h, dh, carry, Hr);
  };
  const T* y0 = static_cast<const T*>(y.p);
  // the 8 elements x of row r from column e0 on: hi (and lo) as one 16-byte store each
  auto put = [&](int64_t r, int64_t e0, const float (&x)[8]) {
    uint4 hi_w, lo_w;
    bf16* hi = reinterpret_cast<bf16*>(&hi_w);
    bf16* rem = reinterpret_cast<bf16*>(&lo_w);
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      hi[k] = __float2bfloat16_rn(x[k]);
      rem[k] = __float2bfloat16_rn(x[k] - __bfloat162float(hi[k]));
    }
    *reinterpret_cast<uint4*>(out + r * d.Ep + e0) = hi_w;
    if (lo) *reinterpret_cast<uint4*>(lo + r * d.Ep + e0) = lo_w;
  };
  auto unpack = [](const uint4& w, float (&x)[8]) {  // (reached only for 16-bit T: vec)
    if constexpr (sizeof(T) == 2) {
      const T* v = reinterpret_cast<const T*>(&w);
#pragma unroll
      for (int k = 0; k < 8; ++k) x[k] = to_float(v[k]);
    } else {
#pragma unroll
      for (int k = 0; k < 8; ++k) x[k] = 0.0f;
    }
  };
  if (vec && d.Ep <= 256 && d.E % 8 == 0) {
    // lane's piece: columns e0 .. e0 + 7, all inside E (a load) or all in the padding (zeros)
    const int64_t e0 = 8 * lane;
    const bool has = e0 < d.E, pad = e0 < d.Ep;
    for (int64_t r = r0; r < rows;) {
      uint4 w[kPackRows];
      int64_t rr[kPackRows];
#pragma unroll
      for (int k = 0; k < kPackRows; ++k) {  // (r is warp-uniform)
        rr[k] = r;
        w[k] = make_uint4(0u, 0u, 0u, 0u);
        if (r < rows) {
          if (has) w[k] = __ldg(reinterpret_cast<const uint4*>(y0 + y.at(b, h, t, 0) + e0));
          r += warps;
          next_row();
        }
      }
#pragma unroll
      for (int k = 0; k < kPackRows; ++k) {
        if (rr[k] < rows && pad) {
          float x[8];
          unpack(w[k], x);
          put(rr[k], e0, x);
        }
      }
    }
    return;
  }
  for (int64_t r = r0; r < rows; r += warps) {
    const T* row = y0 + y.at(b, h, t, 0);
    for (int64_t e0 = 8 * lane; e0 < d.Ep; e0 += 256) {
      float x[8];
      if (vec && e0 + 8 <= d.E) {
        unpack(__ldg(reinterpret_cast<const uint4*>(row + e0)), x);
      } else {
#pragma unroll
        for (int k = 0; k < 8; ++k) x[k] = e0 + k < d.E ? to_float(row[(e0 + k) * y.s[3]]) : 0.0f;
      }
      put(r, e0, x);
    }
    next_row();
  }
}

// The remainders of the state keys, Kq_lo = q_i a^(Cn-1-i) - Kq (bf16; Kq as norm_apply wrote it),
// zero in the padding latents: split keys (the float16 backward's recomputed states). A block per
// row (bh, t), its threads along l.
template <typename T>
__global__ void key_remainder_kernel(Dims d, Str4 q, const float* a32, const bf16* Kq, bf16* Kq_lo) {
  grid_dependency_wait();
  for (int64_t r = blockIdx.x; r < d.nbh * d.T; r += gridDim.x) {
    const int64_t bh = r / d.T, t = r - bh * d.T, c = t / d.C, h = d.h_of(bh);
    const int n = static_cast<int>(d.chunk_len(c) - 1 - (t - c * d.C));
    const int64_t q0 = q.at(d.b_of(bh), h, t, 0);
    for (int64_t l = threadIdx.x; l < d.Lp; l += blockDim.x) {
      float x = 0.0f;
      if (l < d.L) x = load<T>(q.p, q0 + l * q.s[3]) * ipow(a32[h * d.L + l], n) - __bfloat162float(Kq[r * d.Lp + l]);
      Kq_lo[r * d.Lp + l] = __float2bfloat16_rn(x);
    }
  }
}

// ---- chunk states on tensor cores: one block per (bh, 128 latents, 128 columns) ---------------
// The recurrence of chunk_states_kernel with the state tile as mma accumulators: per chunk,
// store S (as S_T) unless Hs is null, S <- a^Cn ⊙ S (each thread scales its own rows), S += K^T V
// over the chunk's tokens, with V = vals (packed v forward, G backward) and K = keys: Kq =
// q_i a^(Cn-1-i) (forward) or Xq = Qp_i a^i (backward), both written by norm_apply. The next
// chunk's tiles are fetched by cp.async while the current one is multiplied. (Computing the keys
// here from q instead cost 16 strided loads, 16 products and 16 shared stores per thread and chunk:
// the kernel was issue-bound on them at 25 % occupancy.) kStatesStages shared-memory stages: the
// tiles of chunk step + kStatesStages - 1 are in flight while chunk step is multiplied. Two, as
// measured (H200, de4791b, BDH-8k forward+backward): 17.75 ms against 18.26 ms with three (78 KiB
// of shared memory per block, so 2 blocks per SM for the float32 states as well).
//
// Tile shape (states-v2). Nsight Compute of the 64-latent block (6fe913d, BDH-8k forward,
// 0.755 ms): L2 throughput 76 % (the top unit), DRAM 44 %, 0.45 issued warps per scheduler at
// 25 % occupancy (105 registers, 2 blocks of 8 warps per SM). Per chunk each block read a 64×64 K
// tile and a 64×128 V tile from L2 (24 KB) for 1 MFLOP, and all 128 latent tiles of a pair re-read
// the same V: 1.5 GB of L2 loads per forward beside the 1 GiB of state stores. A block of
// kStatesLT = 128 latents feeds each V tile to twice the products: 32 KB per 2 MFLOP, 1.0 GB of
// loads (2.0 GB of L2 traffic in all instead of 2.5) and a third fewer cp.async per product. The
// warp tile stays 32×32 (a 64×32 warp tile would hold 32 more accumulators per thread on top of
// 105 registers, past the 128 that 2 blocks of 256 threads allow), so the block has 16 warps (512
// threads) and 1 block per SM: the same 16 warps per SM as before.
// With one block per SM nothing covers a block's item changes any more, so the cp.async pipeline
// runs across items: the first chunk of the block's next item is fetched while its current item's
// last chunk is multiplied (the 64-latent block waited for the first tiles of every item, and BDH's
// T = 512 makes 8 chunks per item).
// Where Lp / 64 is odd, the last latent tile's upper half lies past Lp: its warps fetch, multiply
// and store nothing (they join the barriers).
// Measured on the H200 (c6644ca, BDH-8k / long / BDH-base forward+backward): 10.24 / 5.56 / 1.94
// ms with 128 latents, 10.03 / 5.44 / 1.82 with 64 (forward 2.09 against 2.02 ms): one block of
// 16 warps per SM hides its two barriers per step worse than two blocks of 8, more than the L2
// saving gives back. So RHOSCAN_STATES_LT defaults to 64 (8 warps, 2 blocks per SM), with the
// rest of this round kept (the pipeline across items, the persistent grid, the staging swizzle);
// RHOSCAN_STATES_LT=128 builds the 128-latent block.
// ptxas (sm_90a, nvcc 13), either shape: 105 registers (bf16 states), 124 (split stores), 125
// (float16 backward: split values, keys and stores), no spills. Not yet explained: ncu's 27 %
// excess global sectors (1 GiB at BDH-8k, i.e. 16 KB per block and chunk: the size of a V tile or
// of a bf16 state tile, though both are read or written in whole 32-byte sectors).
#ifndef RHOSCAN_STATES_LT
#define RHOSCAN_STATES_LT 64
#endif
constexpr int kStatesLT = RHOSCAN_STATES_LT;
static_assert(kStatesLT == 64 || kStatesLT == 128, "RHOSCAN_STATES_LT: 64 or 128 latents per block");
constexpr int kStatesThreads = kStatesLT / 32 * (kMmaET / 32) * 32;  // a warp per 32×32 block of the tile
#ifndef RHOSCAN_STATES_STAGES
#define RHOSCAN_STATES_STAGES 2
#endif
constexpr int kStatesStages = RHOSCAN_STATES_STAGES;
constexpr int kStKS = kStatesLT + 8, kStVS = kMmaET + 8;  // rows padded: ldmatrix without bank conflicts
// kSwizzle (version 2 only; the default, RHOSCAN_ST_SWIZZLE=0 at build time keeps the padded
// rows): K's and V's rows unpadded, chunk c of row r at c ^ (r % 8) (mma.cuh's swizzled tiles), so
// that the cp.async fills write whole aligned 128-byte groups; the same products bit for bit
// (emulated). states_mma_smem stays the padded layout's size, an upper bound for both. H200, round
// 16 (de6c163's A/B, Nsight Compute durations, the long case's 8 launches of two forwards and a
// backward): 2.316 against 2.531 ms; BDH-base 0.287 against 0.309.
#ifndef RHOSCAN_ST_SWIZZLE
#define RHOSCAN_ST_SWIZZLE 1
#endif
constexpr bool kStatesSwizzle = RHOSCAN_ST_SWIZZLE != 0;
// Chunk states leave through a per-warp staging tile in shared memory, so that each row goes out
// in 16-byte pieces (the accumulator layout gives 4- or 8-byte pieces: half of every 32-byte
// sector written per instruction). Measured on the H200 at BDH-8k: bf16 states (the forward) took
// the forward from 3.41 to 2.97 ms (1a64848); float32 states (the backward; 40 KiB more shared
// memory, so 2 blocks per SM instead of 3) forward+backward from 17.04 to 15.69 ms (b029cae).
// RHOSCAN_STATES_STAGED_STORE: 0 no staging, 1 bf16 states only, 2 (default) both.
#ifndef RHOSCAN_STATES_STAGED_STORE
#define RHOSCAN_STATES_STAGED_STORE 2
#endif
template <typename S>
constexpr bool kStatesStaged = RHOSCAN_STATES_STAGED_STORE >= (std::is_same_v<S, bf16> ? 1 : 2);
// A warp's 32×32 staging tile. float32: rows padded by 8 elements (conflict-free 8-byte stores of
// the accumulator layout; a 16-byte read instruction takes one 128-byte row per 8 lanes). bf16:
// rows of 32 elements (64 bytes) with the 16-byte chunk c of row r at c ^ (r / 2 mod 4): the 4-byte
// stores of the accumulator layout (8 rows g of one chunk) and the 16-byte reads (2 rows per 8
// lanes) are both conflict-free. (Rows padded by 8 bf16 made every read a 2-way conflict: rows r
// and r + 1, 80 bytes apart, shared 4 banks — part of ncu's 31 % excess shared wavefronts.)
template <typename S>
constexpr int kStStS = std::is_same_v<S, bf16> ? 32 : 32 + 8;
template <typename S>
__device__ __forceinline__ int staging_at(int r, int c) {
  if constexpr (std::is_same_v<S, bf16>)
    return r * 32 + ((((c >> 3) ^ (r >> 1)) & 3) << 3) + (c & 7);
  else
    return r * kStStS<S> + c;
}
// staging_at(16 mt + 8 hf + g, 8 nt + 2 tq) (a thread's pairs of the accumulator layout) from
// s0 = staging_at(g, 2 tq): rows 8 apart share the bf16 swizzle, so nt goes into s0's chunk bits by
// XOR (one instruction per store, no offset registers)
template <typename S>
__device__ __forceinline__ int staging_pair_at(int s0, int mt, int nt, int hf) {
  if constexpr (std::is_same_v<S, bf16>)
    return (s0 ^ (8 * nt)) + (16 * mt + 8 * hf) * 32;
  else
    return s0 + (16 * mt + 8 * hf) * kStStS<S> + 8 * nt;
}
template <typename S, bool kLo = false, bool kKeyLo = false>
constexpr int states_mma_smem() {
  return kStatesStages * 64 * ((kKeyLo ? 2 : 1) * kStKS + (kLo ? 2 : 1) * kStVS) * static_cast<int>(sizeof(bf16)) +
         (kStatesStaged<S> ? kStatesThreads / 32 * 32 * kStStS<S> * static_cast<int>(sizeof(S)) : 0) +
         2 * kStatesLT * static_cast<int>(sizeof(float));  // the tile's a^C and a^Cn of the last chunk
}
static_assert(states_mma_smem<bf16, true, true>() <= 227 * 1024, "chunk_states_mma: shared memory past the H200's");
// Blocks per multiprocessor the registers are budgeted for. 128-latent blocks (512 threads): 1,
// i.e. 128 registers. 64-latent blocks with two stages (H200, 13e3caa, BDH-8k): 3 (80 registers,
// a few bytes of spill) suited the backward's float32 states (fwd+bwd 19.55 against 20.09 ms with
// 2), 2 (114 registers) the forward's bf16 states (3.57 against 3.66 ms with 3).
// RHOSCAN_STATES_MIN_BLOCKS=n builds every variant with n, for comparisons.
template <typename S>
constexpr int states_min_blocks() {
#ifdef RHOSCAN_STATES_MIN_BLOCKS
  return RHOSCAN_STATES_MIN_BLOCKS;
#else
  if (kStatesLT == 128) return 1;
  return kStatesStages == 2 && std::is_same_v<S, float> && !kStatesStaged<S> ? 3 : 2;
#endif
}
// The blocks' work items: (bh, latent tile, column tile).
inline int64_t states_items(const Dims& d) {
  return d.nbh * ((d.Lp + kStatesLT - 1) / kStatesLT) * (d.Ep / kMmaET);
}
// kLo: vals_lo holds the values' bf16 remainders (split values), multiplied in a second pass;
// kKeyLo: keys_lo the keys' (split keys), a third pass K_lo^T V (K_lo^T V_lo is left out).
// kSplitStore (S = bf16, the backward): the states go out as two bf16 planes, hi = bf16(x) to Hs
// and lo = bf16(x - hi) to Hs_lo (x to about 2^-16 relative: what the readback's hi + lo products
// use anyway), so that their readers fetch bf16 tiles by cp.async (dv reads the hi plane only).
// chunk_states_mma_wide_kernel: version 1, kept only as the fallback for what the faster
// chunk_states_mma_kernel (version 2, below; H200: 84 -> 74 us per call at BDH-base, 0.376 ->
// 0.317 ms at the long case) does not support: its indices are 64-bit and it runs any number of
// stages, so the launcher takes it where states_fit_32bit(d) fails (Lp or Ep >= 2^24, bh0 + nbh >=
// 2^30, nbh T or nbh nC Lp >= 2^31: far past any real problem, but the library must not refuse or
// overflow there) and where RHOSCAN_STATES_STAGES != 2. The same outputs bit for bit as version 2
// (the emulation compares the two on every states case).
template <typename S, bool kReverse, bool kLo = false, bool kKeyLo = false, bool kSplitStore = false>
__global__ void __launch_bounds__(kStatesThreads, states_min_blocks<S>())
    chunk_states_mma_wide_kernel(Dims d, const bf16* keys, const bf16* vals, const float* a32, Str4 init, S* Hs, Str4 out,
                            const bf16* vals_lo = nullptr, const bf16* keys_lo = nullptr, S* Hs_lo = nullptr) {
  grid_dependency_wait();
  static_assert(!kSplitStore || std::is_same_v<S, bf16>, "split stores are bf16 planes");
  constexpr int LT = kStatesLT, ET = kMmaET, KS = kStKS, VS = kStVS, NT = kStatesThreads;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  constexpr int NS = kStatesStages;
  bf16* ks = reinterpret_cast<bf16*>(smem_raw);  // [NS stages][64 tokens][KS]: K[i][l]
  bf16* vs = ks + NS * 64 * KS;                   // [NS stages][64 tokens][VS]: V[i][e]
  bf16* vs_lo = vs + NS * 64 * VS;                 // [NS stages][64 tokens][VS] if kLo: V's remainders
  bf16* ks_lo = vs + (kLo ? 2 : 1) * NS * 64 * VS;  // [NS stages][64 tokens][KS] if kKeyLo: K's remainders
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
  S* staging_all = reinterpret_cast<S*>(ks_lo + (kKeyLo ? NS * 64 * KS : 0));
  S* staging = staging_all + warp * 32 * kStStS<S>;  // if staged
  // [2][LT]: a^C and a^Cn (Cn: the last chunk's length, the only one that can be shorter) of the
  // tile's latents. In shared memory, not in 8 registers per thread: they took the split keys'
  // variant past 128 registers (spills).
  float* decay_s = reinterpret_cast<float*>(staging_all + (kStatesStaged<S> ? NT / 32 * 32 * kStStS<S> : 0));
  const int wm = (warp % (LT / 32)) * 32, wn = (warp / (LT / 32)) * 32;  // the warp's latents and columns in the tile
  const int64_t nlt = (d.Lp + LT - 1) / LT, net = d.Ep / ET, nitems = d.nbh * nlt * net;
  const float* init_p = static_cast<const float*>(init.p);
  float* out_p = const_cast<float*>(static_cast<const float*>(out.p));
  // The cp.async pipeline runs over the block's whole sequence of (item, step), across items.
  // fetch(it, bh, l0, e0, target, fst) brings the tiles of step `target` counted from the start of
  // item it (bh, l0, e0 are its; a target past its last step is a step of the block's next items)
  // into stage fst. One commit group per call, empty past the block's last item, so that
  // cp_async_wait<NS - 1> before a step always means: the tiles of this step have landed. (The
  // item's indices come from the caller: dividing the item index at every step took registers,
  // spills in the split stores, and ~100 instructions per step.)
  // (l0 and e0 as int: fewer registers; Lp and Ep are far below 2^31)
  auto decode = [&](int64_t it, int64_t& bh, int& l0, int& e0) {
    bh = it / (nlt * net), l0 = static_cast<int>((it / net) % nlt * LT), e0 = static_cast<int>(it % net * ET);
  };
  auto fetch = [&](int64_t it, int64_t bh, int l0, int e0, int64_t target, int fst) {
    if (d.nC > 0 && target >= d.nC) {
      it += target / d.nC * gridDim.x, target %= d.nC;
      decode(it, bh, l0, e0);
    }
    if (d.nC > 0 && it < nitems) {
      const int64_t c = kReverse ? d.nC - 1 - target : target;
      const int Cn = static_cast<int>(d.chunk_len(c));
      const int lw = d.Lp - l0 < LT ? static_cast<int>(d.Lp - l0) : LT;  // the tile's latents inside Lp
      const bf16* kc = keys + (bh * d.T + c * d.C) * d.Lp + l0;
#pragma unroll 1  // not hoisted: the addresses of unrolled copies took registers past 128
      for (int idx = threadIdx.x; idx < 64 * (LT / 8); idx += NT) {
        const int i = idx / (LT / 8), p = 8 * (idx % (LT / 8));
        if (p < lw) {
          cp_async16(ks + (fst * 64 + i) * KS + p, kc + min(i, Cn - 1) * d.Lp + p, i < Cn);
          if constexpr (kKeyLo)
            cp_async16(ks_lo + (fst * 64 + i) * KS + p, keys_lo + (kc - keys) + min(i, Cn - 1) * d.Lp + p, i < Cn);
        }
      }
      // (v_row: Hv = 1's values per batch row; reverse: G, per pair)
      const bf16* vc = vals + ((kReverse ? bh : d.v_row(bh)) * d.T + c * d.C) * d.Ep + e0;
#pragma unroll 1
      for (int idx = threadIdx.x; idx < 64 * (ET / 8); idx += NT) {
        const int i = idx / (ET / 8), p = 8 * (idx % (ET / 8));
        cp_async16(vs + (fst * 64 + i) * VS + p, vc + min(i, Cn - 1) * d.Ep + p, i < Cn);
        if constexpr (kLo)
          cp_async16(vs_lo + (fst * 64 + i) * VS + p, vals_lo + (vc - vals) + min(i, Cn - 1) * d.Ep + p, i < Cn);
      }
    }
    cp_async_commit();
  };
  {
    int64_t bh;
    int l0, e0;
    decode(blockIdx.x, bh, l0, e0);
    for (int k = 0; k < NS - 1; ++k) fetch(blockIdx.x, bh, l0, e0, k, k);
  }
  int stage = 0;  // the stage of the current step's tiles
  for (int64_t item = blockIdx.x; item < nitems; item += gridDim.x) {
    int64_t bh;
    int l0, e0;
    decode(item, bh, l0, e0);
    const int64_t b = d.b_of(bh), h = d.h_of(bh);
    const bool active = l0 + wm < d.Lp;  // false: the warp's latents are past Lp (an odd last tile)
    // acc[mt][nt][r] is the state at latent l0 + row(mt, r), column e0 + wn + 8 nt + 2 tq + r % 2
    auto row = [&](int mt, int r) { return wm + 16 * mt + g + 8 * (r / 2); };
    float acc[2][4][4];
    // the warp's 32×32 block of acc, rounded to S, to base[at(mt, nt, hf)]: acc[mt][nt]'s pair in
    // row 16 mt + 8 hf + g, columns 8 nt + 2 tq (+ 1) of the warp's block; lo: the bf16
    // remainders acc - bf16(acc) instead (split stores)
    auto put_warp_tile = [&](S* base, auto at, bool lo) {
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
          for (int hf = 0; hf < 2; ++hf) {
            S* dst = base + at(mt, nt, hf);
            const float x0 = acc[mt][nt][2 * hf], x1 = acc[mt][nt][2 * hf + 1];
            if constexpr (std::is_same_v<S, float>) {
              *reinterpret_cast<float2*>(dst) = make_float2(x0, x1);
            } else {
              __nv_bfloat162 hi = __floats2bfloat162_rn(x0, x1);
              if (lo) hi = __floats2bfloat162_rn(x0 - __low2float(hi), x1 - __high2float(hi));
              *reinterpret_cast<__nv_bfloat162*>(dst) = hi;
            }
          }
    };
    // read after the first step's barrier; the previous item's last reads were before its last
    if (threadIdx.x < LT && d.nC > 0) {
      const int64_t l = l0 + threadIdx.x;
      const float al = l < d.L ? a32[h * d.L + l] : 0.0f;
      decay_s[threadIdx.x] = ipow(al, static_cast<int>(d.C));
      decay_s[LT + threadIdx.x] = ipow(al, static_cast<int>(d.chunk_len(d.nC - 1)));
    }
    for_each_acc(acc, wm, wn, [&](int lr, int ec, float& x) {
      const int64_t l = l0 + lr, e = e0 + ec;
      x = (init_p && l < d.L && e < d.E) ? init_p[init.at(b, h, l, e)] : 0.0f;
    });
    for (int64_t step = 0; step < d.nC; ++step) {
      const int64_t c = kReverse ? d.nC - 1 - step : step;
      const int Cn = static_cast<int>(d.chunk_len(c));
      const int64_t warp_tile = ((bh * d.nC + c) * d.Lp + l0 + wm) * d.Ep + e0 + wn;
#pragma unroll
      for (int part = 0; part < (kSplitStore ? 2 : 1); ++part) {  // hi (and lo) plane
        S* Hp = part == 0 ? Hs : Hs_lo;
        if (Hs != nullptr && active && kStatesStaged<S>) {
          // the warp's tile to shared memory, then out by rows in 16-byte pieces (PR of them per
          // row, E16 elements each); the warp reads only what it wrote (__syncwarp orders it)
          constexpr int E16 = 16 / static_cast<int>(sizeof(S)), PR = 32 / E16;
          const int s0 = staging_at<S>(g, 2 * tq);
          put_warp_tile(staging, [s0](int mt, int nt, int hf) { return staging_pair_at<S>(s0, mt, nt, hf); }, part == 1);
          __syncwarp();
          S* Hw = Hp + warp_tile;
#pragma unroll
          for (int k = 0; k < PR; ++k) {  // lane -> row lane / PR + (32 / PR) k, piece lane % PR
            const int r = lane / PR + (32 / PR) * k, cp = E16 * (lane % PR);
            *reinterpret_cast<uint4*>(Hw + r * d.Ep + cp) =
                *reinterpret_cast<const uint4*>(&staging[staging_at<S>(r, cp)]);
          }
          __syncwarp();  // read before the next step overwrites it
        } else if (Hs != nullptr && active) {
          const int64_t ld = d.Ep;
          put_warp_tile(Hp + warp_tile, [&](int mt, int nt, int hf) { return (16 * mt + g + 8 * hf) * ld + 8 * nt + 2 * tq; },
                        part == 1);
        }
      }
      fetch(item, bh, l0, e0, step + NS - 1, stage == 0 ? NS - 1 : stage - 1);  // the stage consumed at the last step
      cp_async_wait<NS - 1>();
      __syncthreads();
      if (active) {
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
          for (int hf = 0; hf < 2; ++hf) {
            const float f = decay_s[(Cn == d.C ? 0 : LT) + row(mt, 2 * hf)];
#pragma unroll
            for (int nt = 0; nt < 4; ++nt) {
              acc[mt][nt][2 * hf] *= f;
              acc[mt][nt][2 * hf + 1] *= f;
            }
          }
        // S[l][e] += sum_i K[i][l] V[i][e]: A = K^T (stored [i][l]), B = V (stored [i][e])
        const bf16 *K = ks + stage * 64 * KS, *V = vs + stage * 64 * VS;
        if (Cn == 64) {  // every chunk but a tail at the default chunk: the k loop fully unrolled
          warp_mma_32x32<true, false>(acc, K, KS, V, VS, wm, wn, 64);
          if constexpr (kLo) warp_mma_32x32<true, false>(acc, K, KS, vs_lo + stage * 64 * VS, VS, wm, wn, 64);
          if constexpr (kKeyLo) warp_mma_32x32<true, false>(acc, ks_lo + stage * 64 * KS, KS, V, VS, wm, wn, 64);
        } else {
          const int kdim = (Cn + 15) / 16 * 16;
          warp_mma_32x32<true, false>(acc, K, KS, V, VS, wm, wn, kdim);
          if constexpr (kLo) warp_mma_32x32<true, false>(acc, K, KS, vs_lo + stage * 64 * VS, VS, wm, wn, kdim);
          if constexpr (kKeyLo) warp_mma_32x32<true, false>(acc, ks_lo + stage * 64 * KS, KS, V, VS, wm, wn, kdim);
        }
      }
      stage = stage + 1 == NS ? 0 : stage + 1;
      __syncthreads();  // this stage is refilled by the next step's fetch
    }
    if (out_p) {
      for_each_acc(acc, wm, wn, [&](int lr, int ec, float& x) {
        const int64_t l = l0 + lr, e = e0 + ec;
        if (l < d.L && e < d.E) out_p[out.at(b, h, l, e)] = x;
      });
    }
  }
}

// ---- chunk_states_mma version 2: version 1's products with less integer work ------------------
// Version 1 profiled issue-bound on its address arithmetic (Nsight Compute, H200, B=1 H=4 T=8192
// L=2048 E=256: 147 M warp instructions, 0.51 issued per scheduler; IMAD 18.5 %, IADD3 8.4 %, LEA
// 7.9 %, ISETP 7.8 %, LOP3 5.9 %, SHF 5.5 % against HMMA 5.7 %; the top stalls at the fetch
// loops' address arithmetic and compares). Version 2 computes the same values in the same order
// (the same tiles in shared memory, the same mma sequence per accumulator, the same scaling and
// stores: every output bit for bit version 1's, checked in the host emulation) with
// quad_readback_mma's and final_state_mma's playbook:
//   - fetch: each thread's 16-byte pieces are fixed (K: rows tid / (LT / 8) + (NT / (LT / 8)) r,
//     column 8 (tid % (LT / 8)); V and its lo plane: rows tid / 16 + (NT / 16) r, column
//     8 (tid % 16)), their shared destinations 32-bit addresses computed once per kernel (a stage
//     and a piece are immediates or one add); the global sources from a running token row that
//     moves by one chunk per step (forward + C, reverse - C) and is set once per item (one
//     IMAD.WIDE per operand and step, then a running offset along the pieces); version 1's
//     min(i, Cn - 1) clamp and zero fill only on a chunk of fewer than 64 tokens;
//   - one fetch cursor: the fetch runs one step ahead of the products (two stages), so its item is
//     the current one, or at an item's last step the next (version 1 decoded the fetch's item);
//   - items: a running decomposition (bh, latent tile, column tile) advanced by gridDim.x (the
//     grid's own decomposition once per thread) instead of 64-bit divisions; b, h by one 32-bit
//     division per item; the indices in 32 bits (states_fit_32bit: beyond its limits, far past any
//     real problem, the launcher runs version 1, chunk_states_mma_wide_kernel);
//   - the products by warp_mma_32x32_u32 (32-bit shared addresses, immediate offsets; the same
//     ldmatrix fragments and mma order as warp_mma_32x32, so the same sums), k steps of 16 tokens
//     in a loop (fully unrolled, the float16 variants took more than 128 registers);
//   - stores: the staged stores from a running 32-bit state row (one chunk state per step, + or -
//     Lp) times Ep plus the lane's fixed column and piece, then a running pointer along its rows;
//     the staging tile's read offsets k rows on are immediates (rows 8 apart share the bf16
//     swizzle); init and the final state through a row pointer where the warp's block is inside L
//     and E and the column stride is 1 (else version 1's checked element loop).
// ptxas (sm_90a, nvcc 13): see docs/CUDA.md (every bf16-state variant within 128 registers, no
// spills: 2 blocks per SM as version 1). Version 2 needs two stages (RHOSCAN_STATES_STAGES=2, the
// default); with more the launcher runs version 1 (chunk_states_mma_wide_kernel). Measured on the
// H200 (seventh round's integration build, Nsight Compute durations per call, bfloat16): 84 -> 74
// us at BDH-base, 0.376 -> 0.317 ms at the long case against version 1, whose A/B switch
// (RHOSCAN_STATES_VERSION) was then removed.
template <typename S, bool kReverse, bool kLo = false, bool kKeyLo = false, bool kSplitStore = false,
          bool kSwizzle = kStatesSwizzle>
__global__ void __launch_bounds__(kStatesThreads, states_min_blocks<S>())
    chunk_states_mma_kernel(Dims d, const bf16* keys, const bf16* vals, const float* a32, Str4 init, S* Hs,
                               Str4 out, const bf16* vals_lo = nullptr, const bf16* keys_lo = nullptr,
                               S* Hs_lo = nullptr) {
  grid_dependency_wait();
  static_assert(!kSplitStore || std::is_same_v<S, bf16>, "split stores are bf16 planes");
  constexpr int LT = kStatesLT, ET = kMmaET, NT = kStatesThreads, NS = kStatesStages;
  constexpr int KS = kSwizzle ? LT : kStKS, VS = kSwizzle ? ET : kStVS;  // bf16 row strides
  // the fetch's fixed pieces: KPR (VPR) pieces per K (V) row, a thread's pieces KRS (VRS) rows apart
  constexpr int KPR = LT / 8, VPR = ET / 8, KRS = NT / KPR, VRS = NT / VPR;
  static_assert(NS == 2, "version 2: two stages (the fetch one step ahead)");
  static_assert(NT % KPR == 0 && NT % VPR == 0 && 64 % KRS == 0 && 64 % VRS == 0, "whole pieces per thread");
  // version 1's shared-memory layout, in bytes: K [NS][64][KS], V [NS][64][VS] (, V_lo, K_lo), staging, decay
  constexpr uint32_t kKB = 2 * 64 * KS, kVB = 2 * 64 * VS;  // a stage of K's, V's tile
  constexpr uint32_t kVOff = NS * kKB, kVloOff = kVOff + NS * kVB, kKloOff = kVOff + (kLo ? 2 : 1) * NS * kVB;
  constexpr uint32_t kStagingOff = kKloOff + (kKeyLo ? NS * kKB : 0);
  // (128-byte aligned: the swizzled tiles' XOR steps need every tile on a 128-byte boundary)
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, tq = lane % 4;
  S* staging_all = reinterpret_cast<S*>(smem_raw + kStagingOff);
  S* staging = staging_all + warp * 32 * kStStS<S>;  // if staged
  float* decay_s = reinterpret_cast<float*>(staging_all + (kStatesStaged<S> ? NT / 32 * 32 * kStStS<S> : 0));
  const int wm = (warp % (LT / 32)) * 32, wn = (warp / (LT / 32)) * 32;  // the warp's latents and columns in the tile
  const int C = static_cast<int>(d.C), nC = static_cast<int>(d.nC);
  const int CnLast = nC > 0 ? static_cast<int>(d.chunk_len(nC - 1)) : 0;
  const int last_off = CnLast == C ? 0 : LT;  // the last chunk's factor in decay_s
  const int nlt = static_cast<int>((d.Lp + LT - 1) / LT), net = static_cast<int>(d.Ep / ET);
  if (nlt == 0 || net == 0) return;  // no items (and no divisions by zero below)
  const float* init_p = static_cast<const float*>(init.p);
  float* out_p = const_cast<float*>(static_cast<const float*>(out.p));
  const uint32_t s0 = smem_addr(smem_raw);
  // the lane's ldmatrix addresses in stage 0 (k = 0, mt = np = 0)
  const uint32_t a_ln = s0 + warp_mma_lane_a_tile<kSwizzle, true>(lane, wm, KS);
  const uint32_t b_ln = s0 + kVOff + warp_mma_lane_b_tile<kSwizzle, false>(lane, wn, VS);
  // the thread's fetch pieces: K rows kr0 + KRS r, latents kp ..; V rows vr0 + VRS r, columns vp ..
  // (KRS, VRS multiples of 8: every piece of a thread has its first row's swizzle)
  static_assert(!kSwizzle || (KRS % 8 == 0 && VRS % 8 == 0 && kKB % 128 == 0 && kVB % 128 == 0),
                "swizzled pieces: rows 8 apart, tiles on 128-byte boundaries");
  const int kr0 = tid / KPR, kp = 8 * (tid % KPR), vr0 = tid / VPR, vp = 8 * (tid % VPR);
  const uint32_t k_dst = s0 + tile_offset<kSwizzle>(kr0, tid % KPR, KS);
  const uint32_t v_dst = s0 + kVOff + tile_offset<kSwizzle>(vr0, tid % VPR, VS);
  // items (bh, latent tile lt, column tile et), item = (bh nlt + lt) net + et, advanced by the grid
  // (bh as int: the launcher takes version 1 where bh0 + nbh >= 2^30)
  const int grid = static_cast<int>(gridDim.x), per_bh = nlt * net;
  const int det = grid % net, dlt = grid / net % nlt, dbh = grid / per_bh;
  auto advance = [&](int& bh, int& lt, int& et) {
    bh += dbh + carry_add(lt, dlt, carry_add(et, det, 0, net), nlt);
  };
  // The fetch runs one step ahead of the multiplication (two stages), across the block's items:
  // step s of an item fetches its step s + 1, or at its last step the first step of the block's
  // next item (bh, lt, et advanced by the grid); one commit group per step, empty past the block's
  // last item (so that cp_async_wait<1> before a step means: its tiles have landed). ft: the token
  // row of the fetched chunk's first token (bh T + c C), running by one chunk per step; the
  // sources' element offsets ft Lp + the tile's latent + k_thr and ft Ep + its column + v_thr (the
  // same in the lo planes), k_thr, v_thr: the thread's first piece. (32-bit: the launcher takes
  // version 1 where Lp or Ep >= 2^24 or nbh T >= 2^31. A running 64-bit offset per operand took
  // the registers past 128: spills.) Values packed per batch row (d.v_rows, Hv = 1): their token
  // row is ft + vd, vd = (v_row(bh) - bh) T <= 0 per item, so within [0, nbh T) as ft is.
  const int k_thr = kr0 * static_cast<int>(d.Lp) + kp, v_thr = vr0 * static_cast<int>(d.Ep) + vp;
  const int c_first = kReverse ? nC - 1 : 0, ft_step = kReverse ? -C : C;  // an item's first chunk, the step's move
  // the step's copies; kFull: a chunk of 64 tokens (no clamp, no zero fill), else rows i >= lim
  // zero-filled with the source row clamped to lim - 1 (version 1's min(i, Cn - 1))
  // (the first rows again from threadIdx.x where a chunk is short: not held in registers across the steps)
  auto k_row0 = [] { return static_cast<int>(threadIdx.x) / KPR; };
  auto v_row0 = [] { return static_cast<int>(threadIdx.x) / VPR; };
  auto copies = [&](uint32_t kso, uint32_t vso, int64_t ko, int64_t vo, int lim, bool k_pieces, auto full) {
    constexpr bool kFull = decltype(full)::value;
    // piece r of a tile: rows row0 + rs r; o: the element offset of row row0's piece; full: a
    // running offset (+ rs ld per piece), else the row clamped to lim - 1, zero-filled past it
    auto tile = [&](uint32_t dst, const bf16* hi, const bf16* lo, uint32_t lo_b, int64_t o, int64_t ld, auto rs_n,
                    uint32_t rs_b, int lim_rel, auto with_lo) {
      constexpr int rs = decltype(rs_n)::value, n = 64 / rs;
      constexpr bool kWithLo = decltype(with_lo)::value;
#pragma unroll(kWithLo ? 2 : n)  // (the float16 variants' 8 or 12 copies: registers)
      for (int r = 0; r < n; ++r) {
        if constexpr (kFull) {
          cp_async16_u32(dst + rs_b * r, hi + o);
          if constexpr (kWithLo) cp_async16_u32(dst + lo_b + rs_b * r, lo + o);
          o += rs * ld;
        } else {
          const bool ok = rs * r < lim_rel;
          const int64_t oc = o + (ok ? rs * r : lim_rel - 1) * ld;
          cp_async16_u32(dst + rs_b * r, hi + oc, ok ? 16u : 0u);
          if constexpr (kWithLo) cp_async16_u32(dst + lo_b + rs_b * r, lo + oc, ok ? 16u : 0u);
        }
      }
    };
    if (k_pieces)
      tile(k_dst + kso, keys, keys_lo, kKloOff, ko, d.Lp, std::integral_constant<int, KRS>{}, 2 * KRS * KS,
           lim - k_row0(), std::bool_constant<kKeyLo>{});
    tile(v_dst + vso, vals, vals_lo, kVloOff - kVOff, vo, d.Ep, std::integral_constant<int, VRS>{}, 2 * VRS * VS,
         lim - v_row0(), std::bool_constant<kLo>{});
  };

  // the copies of step fstep of item (., flt, fet), chunk start ft, into stage fst (the K pieces of
  // a 128-latent tile may lie past Lp, and are then not fetched)
  // fvd: the item's v_row_delta32 times T (0 but for Hv = 1's values: their token row is ft + fvd)
  auto fetch = [&](int fst, int fstep, int ft, int fvd, int flt, int fet) {
    const int lim = (kReverse ? fstep == 0 : fstep == nC - 1) ? CnLast : C;  // the chunk's tokens
    const bool k_pieces = LT == kMmaLT || flt * LT + kp < d.Lp;  // (64-latent tiles: Lp is a multiple of 64)
    const int64_t ko = static_cast<int64_t>(ft) * d.Lp + (flt * LT + k_thr);
    const int64_t vo = static_cast<int64_t>(ft + fvd) * d.Ep + (fet * ET + v_thr);
    if (lim == 64)
      copies(fst * kKB, fst * kVB, ko, vo, lim, k_pieces, std::true_type{});
    else
      copies(fst * kKB, fst * kVB, ko, vo, lim, k_pieces, std::false_type{});
  };
  const int bh_first = static_cast<int>(blockIdx.x) / per_bh;
  const int lt_first = static_cast<int>(blockIdx.x / net % nlt), et_first = static_cast<int>(blockIdx.x % net);
  int ft = bh_first * static_cast<int>(d.T) + c_first * C;
  // the values' token row less ft: (v_row(bh) - bh) T (0 but for Hv = 1's values; reverse: G, per pair)
  auto v_delta = [&](int vbh) { return kReverse ? 0 : d.v_row_delta32(vbh) * static_cast<int>(d.T); };
  if (bh_first < d.nbh && nC > 0) fetch(0, 0, ft, v_delta(bh_first), lt_first, et_first);
  cp_async_commit();
  int stage = 0;  // the stage of the current step's tiles
  // the staged stores: lane -> rows lane / PR + (32 / PR) k of the warp's block, piece lane % PR
  constexpr int E16 = 16 / static_cast<int>(sizeof(S)), PR = 32 / E16;
  const int h_warp = wm * static_cast<int>(d.Ep) + wn;  // the warp's block in a chunk state's tile
  const int h_lane = h_warp + (lane / PR) * static_cast<int>(d.Ep) + E16 * (lane % PR);
  const int64_t h_rows = (32 / PR) * d.Ep;
  // the lane's staging offsets (from threadIdx.x at the stores: not held across the steps): its
  // reads, + k (32 / PR) rows at an immediate (rows 8 apart share the bf16 swizzle); its writes
  auto st_rd = [] { const int ln = threadIdx.x % 32; return staging_at<S>(ln / PR, E16 * (ln % PR)); };
  auto st_wr = [] { const int ln = threadIdx.x % 32; return staging_at<S>(ln / 4, 2 * (ln % 4)); };
  int bh = bh_first, lt = lt_first, et = et_first;
  for (; bh < d.nbh; advance(bh, lt, et)) {
    const int l0 = lt * LT, e0 = et * ET;
    // b, h of bh by one 32-bit division (bh0 + nbh < 2^30); again for the final state (not held
    // across the steps)
    auto b_h = [&](int& b, int& h) {
      const uint32_t x = static_cast<uint32_t>(d.bh0 + bh), H = static_cast<uint32_t>(d.H), q = x / H;
      b = q, h = x - q * H;
    };
    int b, h;
    b_h(b, h);
    const int vd = v_delta(bh);  // the values' token row less ft (fetch)
    const bool active = l0 + wm < d.Lp;  // false: the warp's latents are past Lp (an odd last tile)
    // the warp's 32 x 32 block inside L and E: init and out through row pointers, unchecked
    auto full = [&] { return l0 + wm + 32 <= d.L && e0 + wn + 32 <= d.E; };
    // acc[mt][nt][r] is the state at latent l0 + wm + 16 mt + g + 8 (r / 2), column e0 + wn + 8 nt + 2 tq + r % 2
    float acc[2][4][4];
    auto put_warp_tile = [&](S* base, auto at, bool lo) {  // version 1's
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
          for (int hf = 0; hf < 2; ++hf) {
            S* dst = base + at(mt, nt, hf);
            const float x0 = acc[mt][nt][2 * hf], x1 = acc[mt][nt][2 * hf + 1];
            if constexpr (std::is_same_v<S, float>) {
              *reinterpret_cast<float2*>(dst) = make_float2(x0, x1);
            } else {
              __nv_bfloat162 hi = __floats2bfloat162_rn(x0, x1);
              if (lo) hi = __floats2bfloat162_rn(x0 - __low2float(hi), x1 - __high2float(hi));
              *reinterpret_cast<__nv_bfloat162*>(dst) = hi;
            }
          }
    };
    // read after the first step's barrier; the previous item's last reads were before its last
    if (tid < LT && nC > 0) {
      const int64_t l = l0 + tid;
      const float al = l < d.L ? a32[int64_t{h} * d.L + l] : 0.0f;
      decay_s[tid] = ipow(al, C);
      decay_s[LT + tid] = ipow(al, CnLast);
    }
    if (init_p && full() && init.s[3] == 1) {
      const float* row = init_p + init.at(b, h, l0 + wm + g, e0 + wn + 2 * tq);
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
#pragma unroll
          for (int nt = 0; nt < 4; ++nt) acc[mt][nt][2 * hf] = row[8 * nt], acc[mt][nt][2 * hf + 1] = row[8 * nt + 1];
          row += 8 * init.s[2];
        }
    } else {
      for_each_acc(acc, wm, wn, [&](int lr, int ec, float& x) {
        const int64_t l = l0 + lr, e = e0 + ec;
        x = (init_p && l < d.L && e < d.E) ? init_p[init.at(b, h, l, e)] : 0.0f;
      });
    }
    // the thread's first store in the step's chunk state: row hr (bh nC + c) Lp + l0 of the
    // states, running by one chunk state per step, and column h_col: the item's tile, then the
    // lane's staged row and piece (h_lane) or the warp's block (h_warp, unstaged). (32-bit: the
    // launcher takes version 1 where nbh nC Lp >= 2^31.)
    int hr = (bh * nC + c_first) * static_cast<int>(d.Lp) + l0;
    const int h_col = e0 + (kStatesStaged<S> ? h_lane : h_warp);
    const int hr_step = kReverse ? -static_cast<int>(d.Lp) : static_cast<int>(d.Lp);
    for (int step = 0; step < nC; ++step, hr += hr_step) {
      const int64_t hw = static_cast<int64_t>(hr) * d.Ep + h_col;
      const bool last = kReverse ? step == 0 : step == nC - 1;  // chunk nC - 1 (the one that may be short)
#pragma unroll 1  // (registers: unrolled, the split stores spilled)
      for (int part = 0; part < (kSplitStore ? 2 : 1); ++part) {  // hi (and lo) plane
        S* Hp = part == 0 ? Hs : Hs_lo;
        if (Hs != nullptr && active && kStatesStaged<S>) {
          const int sw = st_wr(), sr = st_rd();
          put_warp_tile(staging, [sw](int mt, int nt, int hf) { return staging_pair_at<S>(sw, mt, nt, hf); },
                        part == 1);
          __syncwarp();
          S* Hw = Hp + hw;
#pragma unroll
          for (int k = 0; k < PR; ++k, Hw += h_rows)
            *reinterpret_cast<uint4*>(Hw) = *reinterpret_cast<const uint4*>(&staging[sr + k * (32 / PR) * kStStS<S>]);
          __syncwarp();  // read before the next step overwrites it
        } else if (Hs != nullptr && active) {
          const int64_t ld = d.Ep;
          put_warp_tile(Hp + hw, [&](int mt, int nt, int hf) { return (16 * mt + g + 8 * hf) * ld + 8 * nt + 2 * tq; },
                        part == 1);
        }
      }
      if (step + 1 < nC) {  // this item's next step
        ft += ft_step;
        fetch(stage ^ 1, step + 1, ft, vd, lt, et);
      } else {  // the first step of the block's next item
        int nbh = bh, nlt_ = lt, net_ = et;
        advance(nbh, nlt_, net_);
        if (nbh < d.nbh) {
          ft = nbh * static_cast<int>(d.T) + c_first * C;
          fetch(stage ^ 1, 0, ft, v_delta(nbh), nlt_, net_);
        }
      }
      cp_async_commit();  // (empty past the block's last item)
      cp_async_wait<1>();
      __syncthreads();
      if (active) {
        const int Cn = last ? CnLast : C;
        const float* f = decay_s + (last ? last_off : 0) + wm + g;
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
          for (int hf = 0; hf < 2; ++hf) {
            const float x = f[16 * mt + 8 * hf];
#pragma unroll
            for (int nt = 0; nt < 4; ++nt) {
              acc[mt][nt][2 * hf] *= x;
              acc[mt][nt][2 * hf + 1] *= x;
            }
          }
        // S[l][e] += sum_i K[i][l] V[i][e]: A = K^T (stored [i][l]), B = V (stored [i][e])
        const uint32_t a = a_ln + stage * kKB, bv = b_ln + stage * kVB;
        // k steps of 16 tokens (rows past Cn are zero), each pass in version 1's order; a loop, not
        // unrolled: the unrolled 64-token products took the float16 variants past 128 registers
        const int nk = (Cn + 15) / 16;
        constexpr uint32_t kKA = 2 * 16 * KS, kKV = 2 * 16 * VS;  // 16 tokens on in K's, V's tile
#pragma unroll 1
        for (int j = 0; j < nk; ++j) warp_mma_32x32_tile<kSwizzle, true, false, KS, VS, 16>(acc, a + j * kKA, bv + j * kKV);
        if constexpr (kLo) {
#pragma unroll 1
          for (int j = 0; j < nk; ++j)
            warp_mma_32x32_tile<kSwizzle, true, false, KS, VS, 16>(acc, a + j * kKA, bv + (kVloOff - kVOff) + j * kKV);
        }
        if constexpr (kKeyLo) {
#pragma unroll 1
          for (int j = 0; j < nk; ++j)
            warp_mma_32x32_tile<kSwizzle, true, false, KS, VS, 16>(acc, a + kKloOff + j * kKA, bv + j * kKV);
        }
      }
      stage ^= 1;
      __syncthreads();  // this stage is refilled by the next step's fetch
    }
    if (out_p) {
      b_h(b, h);
      if (full() && out.s[3] == 1) {
        float* row = out_p + out.at(b, h, l0 + wm + g, e0 + wn + 2 * tq);
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
          for (int hf = 0; hf < 2; ++hf) {
#pragma unroll
            for (int nt = 0; nt < 4; ++nt) row[8 * nt] = acc[mt][nt][2 * hf], row[8 * nt + 1] = acc[mt][nt][2 * hf + 1];
            row += 8 * out.s[2];
          }
      } else {
        for_each_acc(acc, wm, wn, [&](int lr, int ec, float& x) {
          const int64_t l = l0 + lr, e = e0 + ec;
          if (l < d.L && e < d.E) out_p[out.at(b, h, l, e)] = x;
        });
      }
    }
  }
}
// The kernel the launcher runs where states_fit_32bit holds, with its name for error messages.
template <typename S, bool kReverse, bool kLo, bool kKeyLo, bool kSplitStore>
constexpr auto chunk_states_mma_selected() {
  if constexpr (kStatesStages != 2)  // (version 2: two stages only)
    return &chunk_states_mma_wide_kernel<S, kReverse, kLo, kKeyLo, kSplitStore>;
  else
    return &chunk_states_mma_kernel<S, kReverse, kLo, kKeyLo, kSplitStore>;
}
// Version 2 keeps its indices in 32 bits: a thread's offsets inside a chunk state's or an operand's
// rows (Lp, Ep < 2^24), the pair indices (bh0 + nbh < 2^30), the operands' token rows (nbh T <
// 2^31) and the states' rows (nbh nC Lp < 2^31); beyond them the launcher runs version 1
// (chunk_states_mma_wide_kernel, 64-bit indices).
inline bool states_fit_32bit(const Dims& d) {
  constexpr int64_t k24 = int64_t{1} << 24, k30 = int64_t{1} << 30, k31 = int64_t{1} << 31;
  return d.Lp < k24 && d.Ep < k24 && d.bh0 + d.nbh < k30 && d.nbh * d.T < k31 && d.nbh * d.nC * d.Lp < k31;
}
constexpr const char* kStatesKernelName =
    kStatesStages != 2 ? "chunk_states_mma_wide_kernel" : "chunk_states_mma_kernel";

// ---- chunk outputs on tensor cores: one block per (bh, c, 128 columns) ------------------------
// out[i][e] = sum_l X[i][l] S[l][e] + sum_j Pm[i][j] Y[j][e], as chunk_output_kernel, with
// X = Xq, S = H_c (forward) or X = Kq, S = A_end (dv), and Y the packed bf16 v or G. The L
// contraction streams 64-latent tiles of X and S through two shared-memory stages: cp.async for
// bf16 states, loads converted to bf16 for float32 states.
constexpr int kOutXS = kMmaLT + 8, kOutHS = kMmaET + 8;
constexpr int kOutMmaSmem = 2 * 64 * (kOutXS + kOutHS) * static_cast<int>(sizeof(bf16));  // (an upper bound for the swizzled layout)
// kSwizzle of version 2 (below; the default, RHOSCAN_OUT_SWIZZLE=0 at build time keeps the padded
// rows): X's and S's rows unpadded, chunk c of row r at c ^ (r % 8) (mma.cuh's swizzled tiles), as
// chunk_states_mma's; the same products bit for bit (emulated). H200, round 17 (706f542's A/B,
// Nsight Compute durations, the long case's 6 launches of two forwards and a backward): 1.064
// against 1.176 ms.
#ifndef RHOSCAN_OUT_SWIZZLE
#define RHOSCAN_OUT_SWIZZLE 1
#endif
constexpr bool kOutSwizzle = RHOSCAN_OUT_SWIZZLE != 0;
// kLo: Y_lo holds Y's bf16 remainders (split values), the intra-chunk product's second pass.
template <typename S, typename OutT, bool kDv, bool kLo = false>
__global__ void __launch_bounds__(kMmaThreads, 2) chunk_output_mma_kernel(Dims d, const bf16* X, const S* Hs,
                                                                          const float* P, const bf16* Y, Str4 out,
                                                                          float* out_ws, const bf16* Y_lo = nullptr) {
  grid_dependency_wait();
  constexpr int LT = kMmaLT, ET = kMmaET, XS = kOutXS, HS = kOutHS;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  bf16* xs = reinterpret_cast<bf16*>(smem_raw);  // [2 stages][64 tokens][XS]
  bf16* hs = xs + 2 * 64 * XS;                    // [2 stages][64 latents][HS]
  const int warp = threadIdx.x / 32;
  const int wm = (warp & 1) * 32, wn = (warp >> 1) * 32;  // the warp's tokens and columns in the tile
  const int C = static_cast<int>(d.C);
  const int64_t nlt = d.Lp / LT, net = d.Ep / ET;
  for (int64_t item = blockIdx.x; item < d.nbh * d.nC * net; item += gridDim.x) {
    const int64_t bh = item / (d.nC * net), c = (item / net) % d.nC, et = item % net;
    const int64_t b = d.b_of(bh), h = d.h_of(bh), t0 = c * d.C, e0 = et * ET;
    const int Cn = static_cast<int>(d.chunk_len(c));
    const bf16* Xc = X + (bh * d.T + t0) * d.Lp;
    const S* Hc = Hs + (bh * d.nC + c) * d.Lp * d.Ep + e0;
    // rows i < Cn of a [64][cols] bf16 tile from rows of `stride` elements (zeros below Cn)
    auto fetch_rows = [&](bf16* dst, int dst_stride, const bf16* src, int64_t stride, int cols) {
      for (int idx = threadIdx.x; idx < 64 * (cols / 8); idx += blockDim.x) {
        const int i = idx / (cols / 8), p = 8 * (idx % (cols / 8));
        cp_async16(dst + i * dst_stride + p, src + min(i, Cn - 1) * stride + p, i < Cn);
      }
    };
    auto load_stage = [&](int stage, int64_t l0) {
      fetch_rows(xs + stage * 64 * XS, XS, Xc + l0, d.Lp, LT);
      bf16* hd = hs + stage * 64 * HS;
      if constexpr (std::is_same_v<S, bf16>) {
        for (int idx = threadIdx.x; idx < LT * (ET / 8); idx += blockDim.x) {
          const int r = idx / (ET / 8), p = 8 * (idx % (ET / 8));
          cp_async16(hd + r * HS + p, Hc + (l0 + r) * d.Ep + p);
        }
      } else {
        for (int idx = threadIdx.x; idx < LT * (ET / 4); idx += blockDim.x) {
          const int r = idx / (ET / 4), p = 4 * (idx % (ET / 4));
          const float4 x = *reinterpret_cast<const float4*>(Hc + (l0 + r) * d.Ep + p);
          *reinterpret_cast<__nv_bfloat162*>(hd + r * HS + p) = __floats2bfloat162_rn(x.x, x.y);
          *reinterpret_cast<__nv_bfloat162*>(hd + r * HS + p + 2) = __floats2bfloat162_rn(x.z, x.w);
        }
      }
      cp_async_commit();
    };
    float acc[2][4][4] = {};
    __syncthreads();  // the previous item's tiles are consumed
    if (nlt > 0) load_stage(0, 0);
    for (int64_t kt = 0; kt < nlt; ++kt) {
      if (kt + 1 < nlt) {
        load_stage((kt + 1) & 1, (kt + 1) * LT);
        cp_async_wait<1>();
      } else {
        cp_async_wait<0>();
      }
      __syncthreads();
      warp_mma_32x32<false, false>(acc, xs + (kt & 1) * 64 * XS, XS, hs + (kt & 1) * 64 * HS, HS, wm, wn, LT);
      __syncthreads();
    }
    // intra-chunk part: Pm [i][j] and Y [j][e] in stage 0
    const float* Pc = P + (bh * d.nC + c) * d.nsplit * C * C;  // split 0 holds the sum
    for (int idx = threadIdx.x; idx < 64 * 64; idx += blockDim.x) {
      const int i = idx / 64, j = idx % 64;
      float pm = 0.0f;
      if (i < Cn && j < Cn && (kDv ? j > i : j < i)) pm = Pc[kDv ? j * C + i : i * C + j];
      xs[i * XS + j] = __float2bfloat16_rn(pm);
    }
    const int64_t yr = (kDv ? bh : d.v_row(bh)) * d.T + t0;  // Y's token row (v_row: Hv = 1's values; dv: G)
    fetch_rows(hs, HS, Y + yr * d.Ep + e0, d.Ep, ET);
    if constexpr (kLo) fetch_rows(hs + 64 * HS, HS, Y_lo + yr * d.Ep + e0, d.Ep, ET);  // stage 1
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    warp_mma_32x32<false, false>(acc, xs, XS, hs, HS, wm, wn, 64);
    if constexpr (kLo) warp_mma_32x32<false, false>(acc, xs, XS, hs + 64 * HS, HS, wm, wn, 64);
    for_each_acc(acc, wm, wn, [&](int i, int ec, float& x) {
      const int64_t e = e0 + ec;
      if (i >= Cn || e >= d.E) return;
      if (out_ws) out_ws[(bh * d.T + t0 + i) * d.E + e] = x;
      else store<OutT>(const_cast<void*>(out.p), out.at(b, h, t0 + i, e), x);
    });
  }
}

// ---- chunk_output_mma version 2: version 1's products with less integer work -------------------
// Version 1 (above) profiled with over half of its executed instructions integer address work
// (Nsight Compute, H200, round 7: IMAD/IADD3/LEA/ISETP/SHF against HMMA; ~0.115 ms per call at
// B=24 H=4 T=512 L=256 E=256, ~0.23 ms at B=1 H=4 T=8192 L=2048 E=256). Version 2 computes the same
// values in the same order (the same tiles in shared memory, the same ldmatrix fragments and mma
// sequence per accumulator: the L tiles' products, then the intra-chunk product, then Y_lo's pass;
// every output bit for bit version 1's, checked in the host emulation) with chunk_states_mma
// version 2's playbook:
//   - items (bh, chunk c, column tile et) by a running decomposition advanced by gridDim.x (the
//     grid's own decomposition once per thread), b, h by one 32-bit division per item where the
//     strided output needs them; no 64-bit divisions (output_fit_32bit: beyond its limits, far past
//     any real problem, the launcher runs version 1);
//   - fetch: each thread's 16-byte pieces are fixed (X: rows tid / 8 + 32 r, latents 8 (tid % 8);
//     S, Y, Y_lo: rows tid / 16 + 16 r, columns 8 (tid % 16)), their shared destinations 32-bit
//     addresses computed once per kernel; the sources from per-item pointers that run along the L
//     tiles (X + 64, S + 64 Ep per tile); version 1's min(i, Cn - 1) clamp and zero fill only on a
//     chunk of fewer than 64 tokens (the last one, or every one where C < 64); float32 S (the
//     emulation's dv variant) loaded and converted by the same pieces, one 16-byte shared store;
//   - Pm (the intra-chunk weights, bf16 in the X tile): forward, a thread's two pieces of 8 weights
//     along a row i, from two float4 loads where C == 64 (none where the piece lies in the upper
//     triangle or past Cn), one 16-byte shared store; dv (Pm = P^T, j > i), a thread's two columns
//     j, j + 1 over 8 rows, from two float4 loads of P's rows j, j + 1, eight packed bf16x2 stores;
//     where C < 64 (or P is not 16-byte aligned) the same pieces element by element; the same
//     values as version 1 (0 outside i, j < Cn and the triangle, selected, not multiplied);
//   - the products by warp_mma_32x32_u32 (32-bit lane addresses computed once);
//   - stores: where the warp's 32 x 32 block lies inside Cn and E, packed pairs of adjacent columns
//     through a running row pointer (16-bit OutT at column stride 1 with even, 4-byte aligned rows;
//     out_ws as float2 where E is even and out_ws 8-byte aligned); else version 1's element loop.
// ptxas (sm_90a, nvcc 13): 126-128 registers, no spills (version 1: 104-120), 2 blocks per SM as
// version 1; see docs/CUDA.md. Not yet measured on the H200.
template <typename S, typename OutT, bool kDv, bool kLo = false, bool kSwizzle = kOutSwizzle>
__global__ void __launch_bounds__(kMmaThreads, 2)
    chunk_output_mma_v2_kernel(Dims d, const bf16* X, const S* Hs, const float* P, const bf16* Y, Str4 out,
                               float* out_ws, const bf16* Y_lo = nullptr) {
  grid_dependency_wait();
  constexpr int LT = kMmaLT, ET = kMmaET, XS = kSwizzle ? LT : kOutXS, HS = kSwizzle ? ET : kOutHS;
  static_assert(kMmaThreads == 256 && LT == 64 && ET == 128, "the fixed pieces below");
  // version 1's shared-memory layout, in bytes: X [2][64][XS], then S [2][64][HS]
  constexpr uint32_t kXB = 2 * 64 * XS, kHB = 2 * 64 * HS, kHOff = 2 * kXB;
  // (128-byte aligned: the swizzled tiles' XOR steps need every tile on a 128-byte boundary)
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, tq = lane % 4;
  const int wm = (warp & 1) * 32, wn = (warp >> 1) * 32;  // the warp's tokens and columns in the tile
  const int C = static_cast<int>(d.C), nC = static_cast<int>(d.nC), net = static_cast<int>(d.Ep / ET);
  const int nlt = static_cast<int>(d.Lp / LT), Lp = static_cast<int>(d.Lp), Ep = static_cast<int>(d.Ep);
  if (nC == 0 || net == 0) return;  // no items (and no divisions by zero below)
  const int CnLast = static_cast<int>(d.chunk_len(nC - 1));
  const uint32_t s0 = smem_addr(smem_raw);
  // the lane's ldmatrix addresses in stage 0 (k = 0, mt = np = 0): A = X [i][l], B = S [l][e]
  const uint32_t a_ln = s0 + warp_mma_lane_a_tile<kSwizzle, false>(lane, wm, XS);
  const uint32_t b_ln = s0 + kHOff + warp_mma_lane_b_tile<kSwizzle, false>(lane, wn, HS);
  // the fetch's fixed pieces: X rows xr0 + 32 r (r < 2), latents xp ..; S / Y rows hr0 + 16 r (r < 4),
  // columns hp .. (swizzled: every piece of a thread in its first row's chunk, rows 16 or 32 apart)
  const int xr0 = tid / 8, xp = 8 * (tid % 8), hr0 = tid / 16, hp = 8 * (tid % 16);
  const uint32_t x_dst = s0 + tile_offset<kSwizzle>(xr0, tid % 8, XS);
  const uint32_t h_dst = s0 + kHOff + tile_offset<kSwizzle>(hr0, tid % 16, HS);
  const int x_thr = xr0 * Lp + xp, h_thr = hr0 * Ep + hp;
  // P's float4 path: chunks of 64 (every Pm index inside the chunk's C x C block) and P 16-byte aligned
  const bool p_vec = C == 64 && reinterpret_cast<uintptr_t>(P) % 16 == 0;
  // items (bh, c, et), item = (bh nC + c) net + et, advanced by the grid
  const int grid = static_cast<int>(gridDim.x), per_bh = nC * net;
  const int det = grid % net, dc = grid / net % nC, dbh = grid / per_bh;
  int bh = static_cast<int>(blockIdx.x) / per_bh;
  int c = static_cast<int>(blockIdx.x) / net % nC, et = static_cast<int>(blockIdx.x) % net;
  for (; bh < d.nbh; ) {
    const int Cn = c == nC - 1 ? CnLast : C, e0 = et * ET;
    const int trow = bh * static_cast<int>(d.T) + c * C;  // the chunk's first token row (nbh T < 2^31)
    // the thread's first X piece (L tile 0) and S piece (row hr0 of L tile 0)
    const bf16* xg = X + static_cast<int64_t>(trow) * Lp + x_thr;
    const S* hg = Hs + static_cast<int64_t>(bh * nC + c) * Lp * Ep + (e0 + h_thr);
    const bool full = Cn == 64;  // no clamp, no zero fill
    // rows i = row0 + rs r of a [64][.] tile from rows ld apart at src (row row0's piece): version 1's
    // zero fill past Cn with the source row clamped to Cn - 1, only where the chunk is short
    auto rows = [&](uint32_t dst, const bf16* src, int ld, int row0, auto rs_n, uint32_t rs_b) {
      constexpr int rs = decltype(rs_n)::value, n = 64 / rs;
      if (full) {
#pragma unroll
        for (int r = 0; r < n; ++r) cp_async16_u32(dst + rs_b * r, src + rs * r * ld);
      } else {
#pragma unroll
        for (int r = 0; r < n; ++r) {
          const bool ok = row0 + rs * r < Cn;
          cp_async16_u32(dst + rs_b * r, src + (ok ? rs * r : Cn - 1 - row0) * ld, ok ? 16u : 0u);
        }
      }
    };
    auto load_stage = [&](uint32_t st, const bf16* xs_src, const S* hs_src) {
      rows(x_dst + st * kXB, xs_src, Lp, xr0, std::integral_constant<int, 32>{}, 2 * 32 * XS);
      if constexpr (std::is_same_v<S, bf16>) {
#pragma unroll
        for (int r = 0; r < 4; ++r) cp_async16_u32(h_dst + st * kHB + 2 * 16 * HS * r, hs_src + 16 * r * Ep);
      } else {  // float32 states: loaded and converted to bf16 (rn, as version 1), one 16-byte store
        unsigned char* hd = smem_raw + (h_dst - s0) + st * kHB;
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const float4 u = *reinterpret_cast<const float4*>(hs_src + 16 * r * Ep);
          const float4 v = *reinterpret_cast<const float4*>(hs_src + 16 * r * Ep + 4);
          __align__(16) __nv_bfloat162 w[4] = {__floats2bfloat162_rn(u.x, u.y), __floats2bfloat162_rn(u.z, u.w),
                                               __floats2bfloat162_rn(v.x, v.y), __floats2bfloat162_rn(v.z, v.w)};
          *reinterpret_cast<uint4*>(hd + 2 * 16 * HS * r) = *reinterpret_cast<const uint4*>(w);
        }
      }
      cp_async_commit();
    };
    float acc[2][4][4] = {};
    __syncthreads();  // the previous item's tiles are consumed
    if (nlt > 0) load_stage(0, xg, hg);
    for (int kt = 0; kt < nlt; ++kt) {
      if (kt + 1 < nlt) {
        xg += LT, hg += static_cast<int64_t>(LT) * Ep;
        load_stage((kt + 1) & 1, xg, hg);
        cp_async_wait<1>();
      } else {
        cp_async_wait<0>();
      }
      __syncthreads();
      warp_mma_32x32_tile<kSwizzle, false, false, XS, HS, LT>(acc, a_ln + (kt & 1) * kXB, b_ln + (kt & 1) * kHB);
      __syncthreads();
    }
    // intra-chunk part: Pm [i][j] into X's stage 0, Y [j][e] into S's stage 0 (Y_lo: stage 1)
    const float* Pc = P + static_cast<int64_t>(bh * nC + c) * d.nsplit * C * C;  // split 0 holds the sum
    unsigned char* xs0 = smem_raw;
    if constexpr (!kDv) {
      // Pm[i][j] = P[i][j] for j < i < Cn: pieces (row i = xr0 + 32 r, columns xp .. xp + 7)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int i = xr0 + 32 * r;
        float pm[8];
        if (p_vec && i < Cn && xp < i) {
          const float4 u = *reinterpret_cast<const float4*>(Pc + i * 64 + xp);
          const float4 v = *reinterpret_cast<const float4*>(Pc + i * 64 + xp + 4);
          const float x[8] = {u.x, u.y, u.z, u.w, v.x, v.y, v.z, v.w};
#pragma unroll
          for (int k = 0; k < 8; ++k) pm[k] = xp + k < i ? x[k] : 0.0f;
        } else {
#pragma unroll
          for (int k = 0; k < 8; ++k) pm[k] = !p_vec && i < Cn && xp + k < i ? Pc[i * C + xp + k] : 0.0f;
        }
        __align__(16) __nv_bfloat162 w[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) w[k] = __floats2bfloat162_rn(pm[2 * k], pm[2 * k + 1]);
        *reinterpret_cast<uint4*>(xs0 + (x_dst - s0) + 2 * 32 * XS * r) = *reinterpret_cast<const uint4*>(w);
      }
    } else {
      // Pm[i][j] = P[j][i] for i < j < Cn: columns j = 2 lane, j + 1, rows i0 .. i0 + 7 (i0 = 8 warp)
      const int j = 2 * lane, i0 = 8 * warp;
      float pm[2][8];  // [column][row]
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const int jj = j + u;
        if (p_vec && jj < Cn && i0 < jj) {
          const float4 a = *reinterpret_cast<const float4*>(Pc + jj * 64 + i0);
          const float4 b = *reinterpret_cast<const float4*>(Pc + jj * 64 + i0 + 4);
          const float x[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
          for (int k = 0; k < 8; ++k) pm[u][k] = i0 + k < jj ? x[k] : 0.0f;
        } else {
#pragma unroll
          for (int k = 0; k < 8; ++k) pm[u][k] = !p_vec && jj < Cn && i0 + k < jj ? Pc[jj * C + i0 + k] : 0.0f;
        }
      }
      // (row i0 + k, columns j, j + 1: in chunk j / 8, swizzled by the row's k = (i0 + k) % 8)
#pragma unroll
      for (int k = 0; k < 8; ++k)
        *reinterpret_cast<__nv_bfloat162*>(xs0 + tile_offset<kSwizzle>(i0 + k, j / 8, XS) + 2 * (j % 8)) =
            __floats2bfloat162_rn(pm[0][k], pm[1][k]);
    }
    // Y's token row: trow, or for values packed per batch row (Hv = 1) trow + (v_row(bh) - bh) T,
    // which is smaller (so within nbh T < 2^31 as trow)
    // (dv: Y is G, per pair)
    const int ydelta = kDv ? 0 : d.v_row_delta32(bh) * static_cast<int>(d.T);
    const int64_t yo = static_cast<int64_t>(trow + ydelta) * Ep + (e0 + h_thr);
    rows(h_dst, Y + yo, Ep, hr0, std::integral_constant<int, 16>{}, 2 * 16 * HS);
    if constexpr (kLo) rows(h_dst + kHB, Y_lo + yo, Ep, hr0, std::integral_constant<int, 16>{}, 2 * 16 * HS);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    warp_mma_32x32_tile<kSwizzle, false, false, XS, HS, 64>(acc, a_ln, b_ln);
    if constexpr (kLo) warp_mma_32x32_tile<kSwizzle, false, false, XS, HS, 64>(acc, a_ln, b_ln + kHB);
    // the epilogue: acc[mt][nt][r] is out[t0 + wm + 16 mt + g + 8 (r / 2)][e0 + wn + 8 nt + 2 tq + r % 2]
    const bool inside = wm + 32 <= Cn && e0 + wn + 32 <= d.E;  // the warp's block: no checks
    if (out_ws != nullptr && inside && d.E % 2 == 0 && reinterpret_cast<uintptr_t>(out_ws) % 8 == 0) {
      float* row = out_ws + (static_cast<int64_t>(trow) + wm + g) * d.E + (e0 + wn + 2 * tq);
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
#pragma unroll
          for (int nt = 0; nt < 4; ++nt)
            *reinterpret_cast<float2*>(row + 8 * nt) = make_float2(acc[mt][nt][2 * hf], acc[mt][nt][2 * hf + 1]);
          row += 8 * d.E;
        }
    } else {
      // b, h of bh by one 32-bit division (bh0 + nbh < 2^30)
      const uint32_t x = static_cast<uint32_t>(d.bh0 + bh), H = static_cast<uint32_t>(d.H), q = x / H;
      const int64_t b = q, h = x - q * H, t0 = static_cast<int64_t>(c) * C;
      OutT* row = nullptr;
      if constexpr (sizeof(OutT) == 2) {
        if (out_ws == nullptr && inside && out.s[3] == 1 && out.s[2] % 2 == 0) {
          row = static_cast<OutT*>(const_cast<void*>(out.p)) + out.at(b, h, t0 + wm + g, e0 + wn + 2 * tq);
          if (reinterpret_cast<uintptr_t>(row) % 4 != 0) row = nullptr;
        }
      }
      if (row != nullptr) {  // packed pairs of 16-bit outputs, rows 8 s[2] apart
        struct alignas(4) Pair {
          OutT x, y;
        };
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
          for (int hf = 0; hf < 2; ++hf) {
#pragma unroll
            for (int nt = 0; nt < 4; ++nt)
              *reinterpret_cast<Pair*>(row + 8 * nt) =
                  Pair{from_float<OutT>(acc[mt][nt][2 * hf]), from_float<OutT>(acc[mt][nt][2 * hf + 1])};
            row += 8 * out.s[2];
          }
      } else {  // version 1's element loop
        for_each_acc(acc, wm, wn, [&](int i, int ec, float& v) {
          const int64_t e = e0 + ec;
          if (i >= Cn || e >= d.E) return;
          if (out_ws) out_ws[(static_cast<int64_t>(trow) + i) * d.E + e] = v;
          else store<OutT>(const_cast<void*>(out.p), out.at(b, h, t0 + i, e), v);
        });
      }
    }
    // the next item: (bh, c, et) + the grid
    et += det;
    const int c1 = et >= net;
    et -= c1 ? net : 0;
    c += dc + c1;
    const int c2 = c >= nC;
    c -= c2 ? nC : 0;
    bh += dbh + c2;
  }
}
// RHOSCAN_OUTPUT_VERSION: 2 (default) runs chunk_output_mma_v2_kernel, 1 version 1
// (chunk_output_mma_kernel), for the A/B; version 2 outputs version 1's bits.
#ifndef RHOSCAN_OUTPUT_VERSION
#define RHOSCAN_OUTPUT_VERSION 2
#endif
// The kernel the launcher runs where output_fit_32bit holds, with its name for error messages.
template <typename S, typename OutT, bool kDv, bool kLo>
constexpr auto chunk_output_mma_selected() {
  if constexpr (RHOSCAN_OUTPUT_VERSION == 1)
    return &chunk_output_mma_kernel<S, OutT, kDv, kLo>;
  else
    return &chunk_output_mma_v2_kernel<S, OutT, kDv, kLo>;
}
constexpr const char* kOutputKernelName =
    RHOSCAN_OUTPUT_VERSION == 1 ? "chunk_output_mma_kernel" : "chunk_output_mma_v2_kernel";
// Version 2 keeps its item indices in 32 bits: offsets inside an operand's or a chunk state's rows
// (Lp, Ep < 2^24), the pair indices (bh0 + nbh < 2^30), the token rows (nbh T < 2^31; hence the
// (bh, c) pairs) and the items (nbh nC Ep / 128 < 2^31); beyond them the launcher runs version 1
// (chunk_output_mma_kernel, 64-bit indices).
inline bool output_fit_32bit(const Dims& d) {
  constexpr int64_t k24 = int64_t{1} << 24, k30 = int64_t{1} << 30, k31 = int64_t{1} << 31;
  return d.Lp < k24 && d.Ep < k24 && d.bh0 + d.nbh < k30 && d.nbh * d.T < k31 && d.nbh * d.nC * (d.Ep / kMmaET) < k31;
}

// ---- intra-chunk scores on tensor cores: one block per (bh, c, slice of L) -------------------
// P[i][j] = sum_l Qp_i[l] a_l^(i-1-j) q_j[l], j < i, over 16-token sub-blocks si, sj of the chunk.
// Off the diagonal (sj < si) the exponent splits at r = 16 si into two non-negative parts,
//   a^(i-1-j) = a^(i-r) · a^(r-1-j),  i - r = i mod 16,  r-1-j = 16 (si-sj-1) + 15 - j mod 16,
// so each of the six 16×16 blocks is one bf16 mma product over L of Xs[i] = Qp_i a^(i mod 16)
// and Kd[j] = q_j a^(16 (d-1) + 15 - j mod 16), d = si - sj (warps 0-5, one block each). Inside
// each of the four diagonal blocks the same split at its middle r = 16 s + 8 makes the lower-left
// 8×8 quadrant (i mod 16 >= 8 > j mod 16) an mma product of Xs8[i] = Qp_i a^(i mod 16 - 8) and
// Kd8[j] = q_j a^(7 - j mod 16) (warps 6 and 7, two blocks each). What is left are the 8×8
// triangles (i, j in the same 8 tokens, exponent i-1-j < 7), in float32 FFMA. Like
// chunk_scores_kernel, a block covers one of d.nsplit slices of L (multiples of 64 latents) and
// writes that split's partial P; reduce_splits adds them.
//
// Per 64-latent tile, thread (warp w, lane) owns the 8 tokens 8w .. 8w+7 and the latent pair
// 2 lane, 2 lane + 1: it loads them (4- or 8-byte pair loads where the strides allow), writes its
// rows of the operand tiles as bf16 pairs (one cvt and one 4-byte store per row: a warp writes a
// row's 128 contiguous bytes, one wavefront), and accumulates its 28 triangle pairs (m, n < m of
// its 8 tokens) in registers over the whole slice, summed over the warp's lanes at the end. The
// operand tiles are double-buffered (one barrier per tile), and the next tile's loads are issued
// before this tile's arithmetic.
//
// Why (the kernel up to 080c4c9, "v1": thread (latent, 16 tokens) wrote 7 operand tiles element by
// element, with the all-zero halves of Xs8 and Kd8, plus float32 copies of Qp and q in shared
// memory that thread (token, quarter of the tile) read back for the triangles; 2 barriers per
// tile): Nsight Compute at 6fe913d (BDH-8k forward, 0.88 ms) found it issue-bound on its own
// instructions, not on tensor cores (~0.05 ms of work) or DRAM (13 %): 0.50 issued warps per
// scheduler, L1 64 %, 113M shared wavefronts (38M excess), 128 registers and 82 KB of shared
// memory (2 blocks per SM). Per thread and tile v1 issued ~32 scalar loads, ~104 scalar shared
// stores with as many cvts, and triangles of 7 predicated steps (2 shared loads, 2 FP ops) per
// latent for every token, half of them idle: ~150 shared loads; ~880 instructions per thread
// and tile in all, and ~2300 shared wavefronts per block and tile. Now (from the PTX, per thread
// and tile): 16 paired loads, 16-40 bf16x2 cvts and 4-byte stores, ~110 FMULs for the operands,
// the triangles from registers (28 FFMA + 21 FMUL per latent, none idle, no shared loads): ~380
// instructions, and ~510 wavefronts per block (224 row stores, 72 ldmatrix). Xs8 and Kd8 keep
// only their 8 used rows per diagonal block (the quadrant mma's A rows 0-7 repeat rows 8-15, whose
// products are discarded, and its B has 8 columns); 2 × 31.5 KB of shared memory. Registers stay
// at 128 (2 blocks per SM; sm_90a, nvcc 13: 4 bytes of spill with bf16 Qp, 40 with float32 Qp;
// none with RHOSCAN_SCORES_EARLY_FETCH=0): the 28 triangle sums, the 8 mma accumulators and two
// tiles of loaded pairs; at 80 (3 blocks) ptxas spills 200+ bytes.
// RHOSCAN_SCORES_MIN_BLOCKS: __launch_bounds__'s blocks per SM (2: up to 128 registers; 3: 80).
#ifndef RHOSCAN_SCORES_MIN_BLOCKS
#define RHOSCAN_SCORES_MIN_BLOCKS 2
#endif
// RHOSCAN_SCORES_EARLY_FETCH: 1 issues the next tile's loads before this tile's arithmetic (their
// latency hidden by it; 16-24 registers more: the spills above), 0 after it, before the barrier
// (no spills; the latency left to the block's barrier, its mma and the other block). 0 measured
// faster on the H200 (c6644ca, forward+backward: BDH-8k 10.15 against 10.24 ms, BDH-base 1.83
// against 1.94; forward unchanged at 2.08 ms), so it is the default.
#ifndef RHOSCAN_SCORES_EARLY_FETCH
#define RHOSCAN_SCORES_EARLY_FETCH 0
#endif
constexpr bool kScoresEarlyFetch = RHOSCAN_SCORES_EARLY_FETCH;
constexpr int kScS = kMmaLT + 8;  // bf16 row stride of the operand tiles (conflict-free ldmatrix)
// Row of Kd's d-th tile (d = 1, 2, 3: rows j < 16 (4 - d)) in ScoreTiles::kd.
constexpr int score_kd_row(int d) { return d == 1 ? 0 : d == 2 ? 48 : 80; }
// The operand tiles of one 64-latent tile, rows of latents.
struct ScoreTiles {
  bf16 xs[64][kScS];   // Xs[i] = Qp_i a^(i mod 16)
  bf16 kd[96][kScS];   // row score_kd_row(d) + j: Kd[j] = q_j a^(16 (d-1) + 15 - j mod 16)
  bf16 xs8[32][kScS];  // row 8 s + r: Xs8 of token 16 s + 8 + r = Qp a^r (r < 8)
  bf16 kd8[32][kScS];  // row 8 s + r: Kd8 of token 16 s + r = q a^(7 - r)
};
struct ScoreSmem {
  __align__(16) ScoreTiles buf[2];  // tile n in buf[n % 2]
};
// Two adjacent elements of X as one word (a 16-bit pair, or a float2), and as two floats.
template <typename X>
using PairWord = std::conditional_t<sizeof(X) == 2, unsigned, float2>;
// Elements i and i + step of p as a pair word (zero where !ok0 / !ok1), by two loads: for any
// stride and alignment.
template <typename X>
__device__ __forceinline__ PairWord<X> load_pair_word(const X* p, int64_t i, int64_t step, bool ok0, bool ok1) {
  Pair<X> v{from_float<X>(0.0f), from_float<X>(0.0f)};
  if (ok0) v.x = __ldg(p + i);
  if (ok1) v.y = __ldg(p + i + step);
  PairWord<X> w;
  memcpy(&w, &v, sizeof w);
  return w;
}
template <typename X>
__device__ __forceinline__ void pair_floats(const PairWord<X>& w, float& x0, float& x1) {
  Pair<X> v;
  memcpy(&v, &w, sizeof v);
  x0 = to_float(v.x), x1 = to_float(v.y);
}
// Rounds (x0, x1) to a bf16 pair at row[2 lane] (4 bytes).
__device__ __forceinline__ void put_pair(bf16* row, int lane, float x0, float x1) {
  *reinterpret_cast<__nv_bfloat162*>(row + 2 * lane) = __floats2bfloat162_rn(x0, x1);
}
// One step of a warp sum of 2N values per lane by recursive halving: lanes with bit N keep the
// upper N sums, the others the lower N, each plus its partner's (v[k] holds the sum of k or k + N).
template <int N>
__device__ __forceinline__ void halving_step(float (&v)[32], int lane) {
  const bool up = lane & N;
#pragma unroll
  for (int k = 0; k < N; ++k) {
    const float lo = v[k], hi = v[k + N];
    const float send = up ? lo : hi, keep = up ? hi : lo;
    v[k] = keep + __shfl_xor_sync(0xffffffffu, send, N);
  }
}
// norm_scores_mma's shared memory: chunk_scores_mma's tiles, the segments' sums z of the tile
// being read (red[warp][latent]) and the item's token sums s.
// kStaged (norm_scores_mma_kernel's staged fetch): the next tile's q pairs, decays and N_0 pairs,
// each thread's own, by cp.async (qst[buf][token][lane], ast / nst[buf][warp][lane]).
struct NormScoreSmem : ScoreSmem {
  float red[8][kMmaLT];
  float s[64];
  unsigned qst[2][64][32];  // (PairWord of a 16-bit T)
  float2 ast[2][8][32], nst[2][8][32];
};
// norm_scores_mma's normaliser step for one tile (every thread of the block: it holds a barrier):
// Qp of the thread's tokens i0 + m (m < 8, inside the chunk) and latents l, l + 1 into pc as bf16
// pairs (norm_apply's bf16 Qp), and their Xq and Kq into the operands' rows (latents past L: q and
// N_0 are 0 there, so Qp, Xq and Kq are the zeros norm_apply writes), each operation norm_apply's
// (norm_read_weight's division included): N at token i0 from the chunk's N_0 by N <- a^8 N + z over
// the earlier warps' segments, then token by token; Xq's a^i from the squares (a^i0, ipow's
// products: i0 = 8 warp has bits 3-5 only) and a running product in the segment; Kq's a^(Cn-1-i) by
// norm_apply's batch rule (ipow of the segment's last exponent, then a product per token
// downwards). y(m, e): q of token i0 + m, latent l + e, as a float. The powers are formed before
// the barrier (the squares are dead by the walk: fewer live registers beside the scores' sums).
template <typename T, bool kUnrolledCarry, typename Y>
__device__ __forceinline__ void norm_scores_tile(NormScoreSmem& S, PairWord<bf16> (&pc)[8], const float (&a)[2],
                                                 const float (&n0)[2], Y&& y, const Dims& d, int64_t bh, int64_t t0,
                                                 int l, int i0, int Cn, bf16* Xq, bf16* Kq) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int n = Cn - i0;                       // the segment's tokens in the chunk (8 or more: all)
  const int ex0 = n > 8 ? n - 8 : 0;           // Kq's exponent of token i0 + 7 (0 past the chunk)
  float a8[2], ap[2], pw[2];                   // a^8; a^i0 (Xq); a^ex0 (Kq)
  float sq[2][6];                              // a^(2^j)
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    sq[e][0] = a[e];
#pragma unroll
    for (int j = 1; j < 6; ++j) sq[e][j] = sq[e][j - 1] * sq[e][j - 1];
    a8[e] = sq[e][3];
    ap[e] = 1.0f;
#pragma unroll
    for (int j = 0; j < 3; ++j)
      if (warp >> j & 1) ap[e] *= sq[e][3 + j];
    pw[e] = 1.0f;
  }
  // a^ex0 from the squares, bitwise ipow(a, ex0) (its products in its order), the low three bits
  // under one warp-uniform branch: ex0 = Cn - 8 (warp + 1) has them of Cn alone, so every warp skips
  // their three predicated products (and selects) a latent in full chunks
  if (ex0 & 7) {
#pragma unroll
    for (int e = 0; e < 2; ++e)
#pragma unroll
      for (int j = 0; j < 3; ++j)
        if (ex0 >> j & 1) pw[e] *= sq[e][j];
  }
#pragma unroll
  for (int e = 0; e < 2; ++e)
#pragma unroll
    for (int j = 3; j < 6; ++j)
      if (ex0 >> j & 1) pw[e] *= sq[e][j];
  {
    float z[2] = {};
#pragma unroll
    for (int m = 0; m < 8; ++m)
#pragma unroll
      for (int e = 0; e < 2; ++e) z[e] = a[e] * z[e] + y(m, e);  // (tokens past Cn: q = 0)
    *reinterpret_cast<float2*>(&S.red[warp][2 * lane]) = make_float2(z[0], z[1]);
  }
  __syncthreads();  // the segments' z (and, at the item's first tile, its token sums S.s)
  if (n <= 0) {
#pragma unroll
    for (int m = 0; m < 8; ++m) pc[m] = PairWord<bf16>{};
    return;
  }
  float N[2] = {n0[0], n0[1]};
  // the earlier segments, v ascending (the same operations in the same order either way).
  // kUnrolledCarry (the staged fetch's instantiations): unrolled with each step under v < warp
  // (warp-uniform), so that the loads issue together, where a loop of the warp's trip count waits for
  // each in turn (warp 7's seven load latencies, which the products' barrier waits for: 7 % of the
  // stall samples there in round 36's source profile at BDH-8k, an H100). (The register fetch's
  // instantiations keep the loop: unrolled, they spilled 12 bytes.)
  if constexpr (kUnrolledCarry) {
#pragma unroll
    for (int v = 0; v < 7; ++v) {
      if (v < warp) {
        const float2 zv = *reinterpret_cast<const float2*>(&S.red[v][2 * lane]);
        N[0] = a8[0] * N[0] + zv.x;
        N[1] = a8[1] * N[1] + zv.y;
      }
    }
  } else {
    for (int v = 0; v < warp; ++v) {
      const float2 zv = *reinterpret_cast<const float2*>(&S.red[v][2 * lane]);
      N[0] = a8[0] * N[0] + zv.x;
      N[1] = a8[1] * N[1] + zv.y;
    }
  }
  const float4 s_lo = *reinterpret_cast<const float4*>(&S.s[i0]), s_hi = *reinterpret_cast<const float4*>(&S.s[i0 + 4]);
  const float sv[8] = {s_lo.x, s_lo.y, s_lo.z, s_lo.w, s_hi.x, s_hi.y, s_hi.z, s_hi.w};
  const int64_t row0 = (bh * d.T + t0 + i0) * d.Lp + l;  // Xq, Kq at token i0
  // The keys, then the walk (pw dead before it), unpredicated for a whole segment (n >= 8: every
  // warp's but the tail's).
  auto walk = [&](auto full_type) {
    constexpr bool kFull = decltype(full_type)::value;
    int ex = n - 8;  // Kq's exponent of token i0 + m, m from 7 down (negative: past the chunk)
    bf16* krow = Kq + row0 + int64_t{kFull ? 7 : n - 1} * d.Lp;  // the segment's last token
#pragma unroll
    for (int m = 7; m >= 0; --m, ++ex) {
      if (kFull || m < n) {
        *reinterpret_cast<__nv_bfloat162*>(krow) = __floats2bfloat162_rn(y(m, 0) * pw[0], y(m, 1) * pw[1]);
        krow -= d.Lp;
      }
      if (kFull || ex >= 0) pw[0] *= a[0], pw[1] *= a[1];
    }
    bf16* xrow = Xq + row0;
#pragma unroll
    for (int m = 0; m < 8; ++m) {
      if (kFull || m < n) {
        float qp[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) qp[e] = norm_read_weight<true>(y(m, e), sv[m], N[e]);
        const __nv_bfloat162 qp16 = __floats2bfloat162_rn(qp[0], qp[1]);
        memcpy(&pc[m], &qp16, sizeof qp16);
        *reinterpret_cast<__nv_bfloat162*>(xrow) = __floats2bfloat162_rn(qp[0] * ap[0], qp[1] * ap[1]);
        xrow += d.Lp;
#pragma unroll
        for (int e = 0; e < 2; ++e) ap[e] *= a[e], N[e] = a[e] * N[e] + y(m, e);
      } else {
        pc[m] = PairWord<bf16>{};
      }
    }
  };
  if (n >= 8)
    walk(std::true_type{});
  else
    walk(std::false_type{});
}
// kFused (norm_scores_mma_kernel, below): Qp is not read but made here from q, s and the chunk's N_0
// (Nc), and the tensor-core operands Xq, Kq of the thread's tokens and latents are written on the
// way (norm_apply's outputs, bitwise: see norm_scores_mma_kernel).
// kStaged (with kFused, where q's latent pairs and L allow: launch_norm_scores): the next tile's
// operands by 4- and 8-byte cp.async into the thread's own slots of shared memory, issued at this
// tile's start (a whole tile ahead, no registers held) instead of register loads issued before the
// tile's last barrier: in the Nsight Compute source profile of the register fetch (round 21, BDH-8k)
// the first use of q at a tile's start held 10 % of the warps' stall samples (long scoreboard) and
// the barrier after it 9 %. A thread reads only what it copied itself: its cp.async wait suffices.
// (after the kernel's grid_dependency_wait)
template <typename T, typename QpT, bool kFused, bool kStaged = false>
__device__ __forceinline__ void chunk_scores_mma_body(Dims d, Str4 q, const float* a32, const QpT* Qp, float* P,
                                                      const float* s, const float* Nc, bf16* Xq, bf16* Kq) {
  static_assert(kFused || !kStaged, "the staged fetch is norm_scores_mma's");
  static_assert(!kStaged || sizeof(PairWord<T>) == sizeof(unsigned), "staged q pairs: a 16-bit T");
  constexpr int LT = kMmaLT;
  using Smem = std::conditional_t<kFused, NormScoreSmem, ScoreSmem>;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  Smem& S = *reinterpret_cast<Smem*>(smem_raw);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
  const int C = static_cast<int>(d.C);
  // mma warps 0-5: the sub-block pairs (1,0), (2,0), (2,1), (3,0), (3,1), (3,2)
  const int si = warp < 1 ? 1 : warp < 3 ? 2 : 3, sj = warp - si * (si - 1) / 2;
  // operand and triangle threads: tokens 8 warp + m (m < 8) of sub-block warp / 2, lower half
  // (i mod 16 < 8) for even warps; latents 2 lane, 2 lane + 1 of the tile
  const int i0 = 8 * warp, s16 = warp / 2;
  const bool upper8 = warp % 2 == 1;
  // pair loads where every pair is aligned (the tile and slice starts are even; L even makes every
  // slice end even)
  const bool q_vec = q.s[3] == 1 && (q.s[0] % 2 | q.s[1] % 2 | q.s[2] % 2) == 0 &&
                     reinterpret_cast<uintptr_t>(q.p) % sizeof(PairWord<T>) == 0;
  const bool qp_vec = d.L % 2 == 0 && reinterpret_cast<uintptr_t>(Qp) % sizeof(PairWord<QpT>) == 0;
  const int64_t lslice = (d.L + d.nsplit * LT - 1) / (d.nsplit * LT) * LT;
  int buf = 0;  // runs on across items: the barrier of a block's tile n guards buf[(n + 1) % 2]
  for (int64_t item = blockIdx.x; item < d.nbh * d.nC * d.nsplit; item += gridDim.x) {
    const int64_t bh = item / (d.nC * d.nsplit), c = (item / d.nsplit) % d.nC, sp = item % d.nsplit;
    const int64_t b = d.b_of(bh), h = d.h_of(bh), t0 = c * d.C;
    // (32-bit latent indices: L < 2^31; the item's indices folded into pointers before the loop,
    // as every register counts here)
    const int l_begin = static_cast<int>(sp * lslice), l_end = static_cast<int>(min(d.L, sp * lslice + lslice));
    const int Cn = static_cast<int>(d.chunk_len(c));
    const T* qrow = static_cast<const T*>(q.p) + q.at(b, h, t0 + i0, 0);  // token i0 (read if i0 < Cn)
    const QpT* prow = kFused ? nullptr : Qp + (bh * d.T + t0 + i0) * d.L;
    const float* arow = a32 + h * d.L;
    const float* nrow = kFused ? Nc + (bh * (d.nC + 1) + c) * d.L : nullptr;  // N at the chunk's start
    float* Pc = P + ((bh * d.nC + c) * d.nsplit + sp) * C * C;
    if constexpr (kFused) {  // the item's token sums (read after the first tile's barrier)
      if (threadIdx.x < 64) S.s[threadIdx.x] = threadIdx.x < Cn ? s[bh * d.T + t0 + threadIdx.x] : 1.0f;
    }
    PairWord<T> qw[8];  // the next tile: tokens i0 + m, the thread's latent pair (kStaged: unused)
    PairWord<QpT> pw[8];  // (kFused: unused)
    float aw[2], nw[2];   // (nw: kFused's N_0 of the pair)
    auto fetch = [&](int l0, int sb) {  // (sb: kStaged's buffer)
      const int l = l0 + 2 * lane;
      if constexpr (kStaged) {  // (L even: a pair is inside the slice or outside)
        const bool ok = l < l_end;
        cp_async_small<8>(&S.ast[sb][warp][lane], arow + l, ok);
        cp_async_small<8>(&S.nst[sb][warp][lane], nrow + l, ok);
        const T* qt = qrow + l;  // (unit latent stride)
#pragma unroll
        for (int m = 0; m < 8; ++m, qt += q.s[2]) cp_async_small<4>(&S.qst[sb][i0 + m][lane], qt, ok && i0 + m < Cn);
        cp_async_commit();
        return;
      }
      const bool ok0 = l < l_end, ok1 = l + 1 < l_end;
      aw[0] = ok0 ? arow[l] : 0.0f;
      aw[1] = ok1 ? arow[l + 1] : 0.0f;
      if constexpr (kFused) {
        nw[0] = ok0 ? nrow[l] : 0.0f;
        nw[1] = ok1 ? nrow[l + 1] : 0.0f;
      }
      const T* qt = qrow + l * q.s[3];  // stepped a token at a time: no 8 live row pointers
      const QpT* pt = kFused ? nullptr : prow + l;
      if (q_vec && (kFused || qp_vec)) {  // one pair load per token and operand, predicated, no branches
#pragma unroll
        for (int m = 0; m < 8; ++m, qt += q.s[2]) {
          const bool ok = ok0 && i0 + m < Cn;
          qw[m] = ok ? __ldg(reinterpret_cast<const PairWord<T>*>(qt)) : PairWord<T>{};
          if constexpr (!kFused) {
            pw[m] = ok ? __ldg(reinterpret_cast<const PairWord<QpT>*>(pt)) : PairWord<QpT>{};
            pt += d.L;
          }
        }
      } else {
#pragma unroll
        for (int m = 0; m < 8; ++m, qt += q.s[2]) {
          const bool tok = i0 + m < Cn;
          qw[m] = load_pair_word(qt, 0, q.s[3], tok && ok0, tok && ok1);
          if constexpr (!kFused) {
            pw[m] = load_pair_word(pt, 0, 1, tok && ok0, tok && ok1);
            pt += d.L;
          }
        }
      }
    };
    float mac[2][4] = {}, tri[28] = {};  // tri[m (m-1) / 2 + n]: pair (i0 + m, i0 + n), n < m
    if (l_begin < l_end) fetch(l_begin, buf);
    for (int l0 = l_begin; l0 < l_end; l0 += LT, buf ^= 1) {
      ScoreTiles& W = S.buf[buf];
      PairWord<T> qc[8];  // this tile, as loaded: unpacked where used (fewer live registers)
      PairWord<QpT> pc[8];
      float a[2], n0[2];
      if constexpr (kStaged) {
        cp_async_wait<0>();
        const float2 a2 = S.ast[buf][warp][lane], n2 = S.nst[buf][warp][lane];
        a[0] = a2.x, a[1] = a2.y, n0[0] = n2.x, n0[1] = n2.y;
#pragma unroll
        for (int m = 0; m < 8; ++m) qc[m] = S.qst[buf][i0 + m][lane];
        if (l0 + LT < l_end) fetch(l0 + LT, buf ^ 1);  // (buf ^ 1 was read at the previous tile's start)
      } else {
        a[0] = aw[0], a[1] = aw[1], n0[0] = nw[0], n0[1] = nw[1];
#pragma unroll
        for (int m = 0; m < 8; ++m) qc[m] = qw[m];
      }
      if constexpr (!kFused) {
#pragma unroll
        for (int m = 0; m < 8; ++m) pc[m] = pw[m];
      }
      auto x = [&](int m, int e) {  // Qp of token i0 + m, latent e of the pair
        float x0, x1;
        pair_floats<QpT>(pc[m], x0, x1);
        return e ? x1 : x0;
      };
      auto y = [&](int m, int e) {  // q
        float y0, y1;
        pair_floats<T>(qc[m], y0, y1);
        return e ? y1 : y0;
      };
      if constexpr (kFused)
        norm_scores_tile<T, kStaged>(S, pc, a, n0, y, d, bh, t0, static_cast<int>(l0 + 2 * lane), i0, Cn, Xq, Kq);
      if (!kStaged && kScoresEarlyFetch && l0 + LT < l_end) fetch(l0 + LT, 0);  // in flight during this tile's work
      float a8[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float a2 = a[e] * a[e], a4 = a2 * a2;
        a8[e] = a4 * a4;
      }
      // The operand rows of tokens i = i0 + m: u = Qp a^m, v = q a^(7-m); Kd's exponent is
      // 16 (d-1) + 15 - (i mod 16), i.e. v times a^(16 (d-1)) (upper half) or a^(16 (d-1) + 8).
      // The powers as running products, Xs rows upwards and Kd rows downwards (a table of a^k
      // cost 14 registers more).
      if (upper8) {  // i mod 16 = 8 + m: Xs8 = u, Xs = u a^8, Kd_d = v a^(16 (d-1))
        float pu[2] = {1.0f, 1.0f};  // a^m
#pragma unroll
        for (int m = 0; m < 8; ++m) {
          const float u0 = x(m, 0) * pu[0], u1 = x(m, 1) * pu[1];
          put_pair(W.xs8[8 * s16 + m], lane, u0, u1);
          put_pair(W.xs[i0 + m], lane, u0 * a8[0], u1 * a8[1]);
          pu[0] *= a[0], pu[1] *= a[1];
        }
        if (warp < 6) {  // Kd rows j < 48 (d = 1), < 32 (d = 2), < 16 (d = 3)
          float f16[2], f32[2], pv[2] = {1.0f, 1.0f};  // a^16, a^32, a^(7-m)
#pragma unroll
          for (int e = 0; e < 2; ++e) f16[e] = a8[e] * a8[e], f32[e] = f16[e] * f16[e];
#pragma unroll
          for (int m = 7; m >= 0; --m) {
            const int i = i0 + m;
            const float v0 = y(m, 0) * pv[0], v1 = y(m, 1) * pv[1];
            put_pair(W.kd[score_kd_row(1) + i], lane, v0, v1);
            if (warp < 4) put_pair(W.kd[score_kd_row(2) + i], lane, v0 * f16[0], v1 * f16[1]);
            if (warp < 2) put_pair(W.kd[score_kd_row(3) + i], lane, v0 * f32[0], v1 * f32[1]);
            pv[0] *= a[0], pv[1] *= a[1];
          }
        }
      } else {  // i mod 16 = m: Xs = u, Kd8 = v, Kd_d = v a^(16 (d-1) + 8)
        float pu[2] = {1.0f, 1.0f};
#pragma unroll
        for (int m = 0; m < 8; ++m) {
          put_pair(W.xs[i0 + m], lane, x(m, 0) * pu[0], x(m, 1) * pu[1]);
          pu[0] *= a[0], pu[1] *= a[1];
        }
        float f24[2], f40[2], pv[2] = {1.0f, 1.0f};  // a^24, a^40, a^(7-m)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float f16 = a8[e] * a8[e];
          f24[e] = f16 * a8[e], f40[e] = f16 * f16 * a8[e];
        }
#pragma unroll
        for (int m = 7; m >= 0; --m) {
          const int i = i0 + m;
          const float v0 = y(m, 0) * pv[0], v1 = y(m, 1) * pv[1];
          put_pair(W.kd8[8 * s16 + m], lane, v0, v1);
          if (warp < 6) put_pair(W.kd[score_kd_row(1) + i], lane, v0 * a8[0], v1 * a8[1]);
          if (warp < 4) put_pair(W.kd[score_kd_row(2) + i], lane, v0 * f24[0], v1 * f24[1]);
          if (warp < 2) put_pair(W.kd[score_kd_row(3) + i], lane, v0 * f40[0], v1 * f40[1]);
          pv[0] *= a[0], pv[1] *= a[1];
        }
      }
      // the 8×8 triangle: pair (m, n) += Qp_m a^(m-1-n) q_n, the power by a running product
#pragma unroll
      for (int e = 0; e < 2; ++e)
#pragma unroll
        for (int n = 0; n < 7; ++n) {
          float r = y(n, e);  // q_n a^(m-1-n)
#pragma unroll
          for (int m = n + 1; m < 8; ++m) {
            tri[m * (m - 1) / 2 + n] += x(m, e) * r;
            if (m < 7) r *= a[e];
          }
        }
      if (!kStaged && !kScoresEarlyFetch && l0 + LT < l_end) fetch(l0 + LT, 0);
      __syncthreads();  // W complete (and, for the next tile, the other buffer consumed)
      if (warp < 6) {
        const bf16* A = W.xs[16 * si];
        const bf16* B = W.kd[score_kd_row(si - sj) + 16 * sj];
#pragma unroll
        for (int k0 = 0; k0 < LT; k0 += 16) {
          uint32_t af[4], bfr[4];
          ldsm_x4(af, A + (lane & 15) * kScS + k0 + (lane >> 4) * 8);
          ldsm_x4(bfr, B + ((lane >> 4) * 8 + (lane & 7)) * kScS + k0 + ((lane >> 3) & 1) * 8);
          mma_bf16_16816(mac[0], af, bfr[0], bfr[1]);
          mma_bf16_16816(mac[1], af, bfr[2], bfr[3]);
        }
      } else {  // warps 6, 7: the lower-left quadrants of diagonal blocks 2 (warp - 6) and + 1
#pragma unroll
        for (int hb = 0; hb < 2; ++hb) {
          const int sb = 2 * (warp - 6) + hb;
          const bf16* A = W.xs8[8 * sb];  // A rows r and 8 + r both read Xs8 row r
          const bf16* B = W.kd8[8 * sb];
#pragma unroll
          for (int k0 = 0; k0 < LT; k0 += 32) {
            uint32_t bfr[4];  // B for k0 (regs 0, 1) and k0 + 16 (regs 2, 3): the 8 columns
            ldsm_x4(bfr, B + (lane & 7) * kScS + k0 + (lane >> 3) * 8);
#pragma unroll
            for (int kk = 0; kk < 2; ++kk) {
              uint32_t af[4];
              ldsm_x4(af, A + (lane & 7) * kScS + k0 + 16 * kk + (lane >> 4) * 8);
              mma_bf16_16816(mac[hb], af, bfr[2 * kk], bfr[2 * kk + 1]);
            }
          }
        }
      }
    }
    // Every entry of the slot is written once: here the zeros (rows past Cn, the diagonal and
    // above), below the products'. Thread t takes column t % 64 of rows t / 64 + 4 k (C <= 64): no
    // division by the runtime C for each of a thread's 16 entries an item (an integer division is
    // some 20 instructions: by that estimate, not a profile, ~5 % of norm_scores_mma's at BDH-8k).
    static_assert(kMmaThreads == 256, "a column per thread, 4 rows apart (the slot is at most 64 × 64)");
    if (const int j = threadIdx.x % 64; j < C) {
      float* pz = Pc + threadIdx.x / 64 * C + j;
      for (int i = threadIdx.x / 64; i < C; i += 4, pz += 4 * C)
        if (i >= Cn || j >= i) *pz = 0.0f;
    }
    if (warp < 6) {
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const int i = 16 * si + g + 8 * (r / 2), j = 16 * sj + 8 * nt + 2 * tq + r % 2;
          if (i < Cn) Pc[i * C + j] = mac[nt][r];
        }
    } else {
#pragma unroll
      for (int hb = 0; hb < 2; ++hb)
#pragma unroll
        for (int r = 2; r < 4; ++r) {  // the accumulator rows g + 8: tokens 16 sb + 8 + g
          const int sb = 2 * (warp - 6) + hb, i = 16 * sb + 8 + g, j = 16 * sb + 2 * tq + r % 2;
          if (i < Cn) Pc[i * C + j] = mac[hb][r];
        }
    }
    // the triangles summed over the warp's lanes by recursive halving (31 shuffles): at step n the
    // lanes with bit n keep the upper n of their 2n partial sums, so lane t ends with pair t
    float v[32];
#pragma unroll
    for (int k = 0; k < 32; ++k) v[k] = k < 28 ? tri[k] : 0.0f;
    halving_step<16>(v, lane), halving_step<8>(v, lane), halving_step<4>(v, lane);
    halving_step<2>(v, lane), halving_step<1>(v, lane);
    if (lane < 28) {
      int m = 1, n = lane;  // lane = m (m-1) / 2 + n
      while (n >= m) n -= m, ++m;
      if (i0 + m < Cn) Pc[(i0 + m) * C + i0 + n] = v[0];
    }
  }
}
template <typename T, typename QpT>
__global__ void __launch_bounds__(kMmaThreads, RHOSCAN_SCORES_MIN_BLOCKS)
    chunk_scores_mma_kernel(Dims d, Str4 q, const float* a32, const QpT* Qp, float* P) {
  grid_dependency_wait();
  chunk_scores_mma_body<T, QpT, false>(d, q, a32, Qp, P, nullptr, nullptr, nullptr, nullptr);
}
// ---- norm_apply and the intra-chunk scores in one pass (the tensor-core forward) --------------
// chunk_scores_mma_kernel's items, tiles and products with the read weights made where they are
// used instead of read back: per tile, each thread turns its 8 tokens' q (which it loads anyway)
// into Qp = q / (s (N + eps)) and writes the tensor-core operands Xq = Qp a^i and Kq = q a^(Cn-1-i)
// of those tokens and its two latents, so the forward runs no norm_apply: Qp's bf16 plane is
// neither written nor read again (at BDH-8k norm_apply wrote 1.07 GB, Qp a quarter of it, and
// chunk_scores_mma read q and Qp again, 536 MB). The N walk needs N at the warp's first token:
// each warp's segment sum z = sum_m a^(7-m) q_(i0+m) (Horner) goes through shared memory, and N at
// token i0 = 8 warp is N_0 carried over the earlier segments by N <- a^8 N + z; norm_apply runs the
// same recurrence over its batches of 8 tokens (the same operations in the same order), so Qp
// (rounded to bf16, as norm_apply stores it: the scores' operands are chunk_scores_mma's on
// norm_apply's Qp, bit for bit), Xq and Kq are norm_apply's bit for bit, and a backward that makes
// its own keys makes the forward's (the saved-keys test holds that bitwise). s and Nc: the
// normaliser scan's (launch_norm_scan without norm_apply, `apply` false).
template <typename T, bool kStaged>
__global__ void __launch_bounds__(kMmaThreads, RHOSCAN_SCORES_MIN_BLOCKS)
    norm_scores_mma_kernel(Dims d, Str4 q, const float* a32, const float* s, const float* Nc, float* P, bf16* Xq,
                           bf16* Kq) {
  grid_dependency_wait();
  chunk_scores_mma_body<T, bf16, true, kStaged>(d, q, a32, nullptr, P, s, Nc, Xq, Kq);
}

// ---- launchers: the tensor-core kernels (kTC) or the float32 FFMA kernels --------------------
// The bf16 operands of one batch on the tensor-core path (null where unused).
struct Operands16 {
  bf16* Xq = nullptr;  // Qp_i a^i       [bh][T][Lp]
  bf16* Kq = nullptr;  // q_i a^(Cn-1-i) [bh][T][Lp] (the state keys; backward: also the dv operand)
  bf16* vb = nullptr;  // v packed       [bh][T][Ep], or [r][T][Ep] per batch row r (d.v_rows: Hv = 1)
  bf16* gb = nullptr;  // G packed       [bh][T][Ep] (backward)
  bf16* vlo = nullptr;  // v - vb, bf16   as vb (split values only)
  bf16* glo = nullptr;  // G - gb, bf16   [bh][T][Ep] (split values, backward)
  bf16* Kq_lo = nullptr;  // the remainders of Kq [bh][T][Lp] (split values, backward)
};
// keys: Xq and Kq from the workspace (false: the caller points them into the saved buffer).
template <bool kTC, typename T>
Operands16 take_operands(Workspace& ws, const Dims& d, bool backward, bool keys = true) {
  Operands16 o;
  if constexpr (kTC) {
    if (keys) {
      o.Xq = ws.take_array<bf16>(d.nbh * d.T * d.Lp);
      o.Kq = ws.take_array<bf16>(d.nbh * d.T * d.Lp);
    }
    // (the values' arrays: d.v_packed_rows() rows, at most nbh; operand_bytes budgets nbh)
    o.vb = ws.take_array<bf16>(d.v_packed_rows() * d.T * d.Ep);
    if (backward) o.gb = ws.take_array<bf16>(d.nbh * d.T * d.Ep);
    if constexpr (kSplitValues<T>) {
      o.vlo = ws.take_array<bf16>(d.v_packed_rows() * d.T * d.Ep);
      if (backward) o.glo = ws.take_array<bf16>(d.nbh * d.T * d.Ep);
      if (backward) o.Kq_lo = ws.take_array<bf16>(d.nbh * d.T * d.Lp);
    }
  }
  return o;
}
// Where y already is what pack_bf16 would write — bfloat16 (no remainders), E a multiple of 64
// (Ep = E: no padding), each packed row's [T][E] contiguous and the rows one after the other,
// 16-byte aligned — the operands point into y instead of a copy of it (a copy cost ~8 µs a call
// at BDH-base on the H200, ~4 % of its forward; outputs never overlap the inputs: validate.cpp).
// Null where it is not, or where RHOSCAN_CUDA_VALUES_IN_PLACE=0 (the tests' copy to compare with).
#ifndef RHOSCAN_VALUES_IN_PLACE
#define RHOSCAN_VALUES_IN_PLACE 1
#endif
template <typename T>
bf16* values_in_place(const Dims& d, Str4 y) {
  if constexpr (!std::is_same_v<T, bf16>) {
    return nullptr;
  } else {
    if (d.T == 0 || d.E != d.Ep || y.s[3] != 1 || y.s[2] != d.Ep || reinterpret_cast<uintptr_t>(y.p) % 16 != 0 ||
        !env_switch("RHOSCAN_CUDA_VALUES_IN_PLACE", RHOSCAN_VALUES_IN_PLACE != 0))
      return nullptr;
    const int64_t row = d.T * d.Ep;  // one packed row [T][Ep]
    int64_t first;                   // the batch's first packed row in y
    if (d.v_rows) {                  // a row per batch row b (head 0)
      if (y.s[0] != row) return nullptr;
      first = d.bh0 / d.H * row;
    } else {  // a row per pair bh = b H + h
      if (y.s[0] != d.H * row || (d.H > 1 && y.s[1] != row)) return nullptr;
      first = d.bh0 * row;
    }
    return const_cast<bf16*>(static_cast<const bf16*>(y.p)) + first;  // (read only from here on)
  }
}
// y packed into out (and lo): per pair, or per batch row where d.v_rows (v with Hv = 1; pack G
// with d.per_pair()); or, where values_in_place finds y already packed, out pointed into y.
template <bool kTC, typename T>
void pack_values(const Dims& d, Str4 y, bf16*& out, bf16* lo, cudaStream_t stream) {
  if constexpr (kTC) {
    if (bf16* in_place = values_in_place<T>(d, y)) {
      out = in_place;
      return;
    }
    launch_kernel("pack_bf16_kernel", pack_bf16_kernel<T>,
                  grid_for(d.v_packed_rows() * d.T, kPackThreads / 32 * kPackRows), kPackThreads, 0, stream, d, y, out,
                  lo);
  }
}

// Kq's remainders where the operands have room for them (the float16 backward), after norm_scan.
template <bool kTC, typename T>
void make_key_remainders(const Dims& d, Str4 q, const float* a32, const Operands16& o, cudaStream_t stream) {
  if constexpr (kTC) {
    if (o.Kq_lo == nullptr) return;
    launch_kernel("key_remainder_kernel", key_remainder_kernel<T>, grid_for(d.nbh * d.T), 256, 0, stream, d, q, a32,
                  o.Kq, o.Kq_lo);
  }
}

// chunk_states_mma's grid: as many blocks as fit on the device at once (at most one per item), so
// that each block's cp.async pipeline runs on across its items (a block per item would start
// every item with its first tiles' full latency, and at one 512-thread block per SM nothing else
// would cover it).
template <typename K>
unsigned states_grid(K kernel, int smem, int64_t items) {
  int dev = 0, sms = 0, per_sm = 0;
  RHOSCAN_CUDA_CHECK(cudaGetDevice(&dev));
  RHOSCAN_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  RHOSCAN_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kStatesThreads, smem));
  return grid_for(items, 1, std::max<int64_t>(1, int64_t{sms} * per_sm));
}
// Chunk states (forward: keys Kq = q a^(Cn-1-i), values v; reverse: keys Qp a^i = Xq, values G).
template <bool kTC, typename T, bool kReverse, typename S, typename QpT>
// Hs_lo (tensor-core path, bf16 states): the states as hi and lo planes (the backward).
void launch_chunk_states(const Dims& d, Str4 key, Str4 val, const float* a32, const QpT* Qp, const Operands16& o,
                         Str4 init, S* Hs, Str4 out, cudaStream_t stream, S* Hs_lo = nullptr) {
  if constexpr (kTC) {
    constexpr bool kLo = kSplitValues<T>;
    auto launch = [&](auto key_lo, auto split_store) {
      constexpr bool kKeyLo = decltype(key_lo)::value, kSplit = decltype(split_store)::value;
      auto kernel = chunk_states_mma_selected<S, kReverse, kLo, kKeyLo, kSplit>();
      const char* name = kStatesKernelName;
      if (!states_fit_32bit(d))  // (past version 2's 32-bit indices: version 1)
        kernel = chunk_states_mma_wide_kernel<S, kReverse, kLo, kKeyLo, kSplit>, name = "chunk_states_mma_wide_kernel";
      constexpr int smem = states_mma_smem<S, kLo, kKeyLo>();
      RHOSCAN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
      // (reverse: the values are G, per pair)
      launch_kernel(name, kernel, states_grid(kernel, smem, states_items(d)), kStatesThreads, smem, stream,
                    kReverse ? d.per_pair() : d, kReverse ? o.Xq : o.Kq, kReverse ? o.gb : o.vb, a32, init, Hs, out,
                    kReverse ? o.glo : o.vlo, o.Kq_lo, Hs_lo);
    };
    auto launch_store = [&](auto key_lo) {
      if constexpr (std::is_same_v<S, bf16>) {
        if (Hs_lo) return launch(key_lo, std::true_type{});
      }
      launch(key_lo, std::false_type{});
    };
    if constexpr (kLo && !kReverse) {  // split keys where their remainders were made (the backward)
      if (o.Kq_lo) launch_store(std::true_type{});
      else launch_store(std::false_type{});
    } else {
      launch_store(std::false_type{});
    }
  } else {
    const int64_t items = d.nbh * ((d.L + kStateLT - 1) / kStateLT) * ((d.E + kStateET - 1) / kStateET);
    launch_kernel("chunk_states_kernel", chunk_states_kernel<T, kReverse>, grid_for(items), kStateThreads, 0, stream, d,
                  key, val, a32, Qp, init, Hs, out);
  }
}

// Chunk outputs (forward: X = Qp a^i = Xq, Y = v; dv: X = q a^(Cn-1-i) = Kq, Y = G).
template <bool kTC, typename T, typename OutT, bool kDv, typename S, typename QpT>
void launch_chunk_output(const Dims& d, Str4 q, Str4 y, const float* a32, const QpT* Qp, const Operands16& o,
                         const S* Hs, const float* P, Str4 out, float* out_ws, cudaStream_t stream) {
  if constexpr (kTC) {
    constexpr bool kLo = kSplitValues<T>;
    auto kernel = chunk_output_mma_selected<S, OutT, kDv, kLo>();
    const char* name = kOutputKernelName;
    if (!output_fit_32bit(d))  // (past version 2's 32-bit indices: version 1)
      kernel = chunk_output_mma_kernel<S, OutT, kDv, kLo>, name = "chunk_output_mma_kernel";
    RHOSCAN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kOutMmaSmem));
    // (dv: G, per pair)
    launch_kernel(name, kernel, grid_for(d.nbh * d.nC * (d.Ep / kMmaET)), kMmaThreads, kOutMmaSmem, stream,
                  kDv ? d.per_pair() : d, kDv ? o.Kq : o.Xq, Hs, P, kDv ? o.gb : o.vb, out, out_ws,
                  kDv ? o.glo : o.vlo);
  } else {
    launch_kernel("chunk_output_kernel", chunk_output_kernel<T, OutT, kDv>, grid_for(d.nbh * d.nC * ((d.E + 63) / 64)),
                  kOutThreads, 0, stream, d, q, y, a32, Qp, Hs, P, out, out_ws);
  }
}

// X's d.nsplit partials over slices of L ([bh][c][split][C][C]) summed into split 0 (none with one split).
inline void launch_reduce_splits(const Dims& d, float* X, cudaStream_t stream) {
  if (X == nullptr || d.nsplit == 1) return;
  launch_kernel("reduce_splits_kernel", reduce_splits_kernel, grid_for(d.nbh * d.nC * d.C * d.C, 256), 256, 0, stream, d,
                X);
}

// Intra-chunk scores P (and, with G, M = G v^T): d.nsplit partials over slices of L, summed into
// split 0.
// Qp: float32, or bf16 on the tensor-core forward (the FFMA kernel, which takes M, reads float32).
template <bool kTC, typename T, typename QpT>
void launch_chunk_scores(const Dims& d, Str4 q, Str4 v, Str4 g, const float* a32, const QpT* Qp, float* P, float* M,
                         cudaStream_t stream) {
  if constexpr (kTC) {
    auto kernel = chunk_scores_mma_kernel<T, QpT>;
    RHOSCAN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(sizeof(ScoreSmem))));
    launch_kernel("chunk_scores_mma_kernel", kernel, grid_for(d.nbh * d.nC * d.nsplit), kMmaThreads, sizeof(ScoreSmem),
                  stream, d, q, a32, Qp, P);
  }
  float* P_ffma = kTC ? nullptr : P;
  if constexpr (std::is_same_v<QpT, float>) {
    if (P_ffma != nullptr || M != nullptr) {
      launch_kernel("chunk_scores_kernel", chunk_scores_kernel<T>, grid_for(d.nbh * d.nC * d.nsplit), kScoreThreads, 0,
                    stream, d, q, v, g, a32, Qp, P_ffma, M);
    }
  } else if (!kTC || M != nullptr) {
    throw Error(ErrorKind::internal, "rhoscan (cuda): bf16 Qp reaches only the tensor-core forward's scores");
  }
  for (float* X : {P, M}) launch_reduce_splits(d, X, stream);
}

// The tensor-core forward's Qp, Xq, Kq and intra-chunk scores P in one pass (norm_scores_mma_kernel,
// after launch_norm_scan with apply false), P's splits summed into split 0.
template <typename T>
void launch_norm_scores(const Dims& d, Str4 q, const float* a32, const float* s, const float* Nc, float* P,
                        const Operands16& o, cudaStream_t stream) {
  // the staged fetch where q's latents pair up (aligned, unit latent stride, even strides and L)
  auto kernel = norm_pairs_ok<T>(d, q) ? norm_scores_mma_kernel<T, true> : norm_scores_mma_kernel<T, false>;
  constexpr int smem = static_cast<int>(sizeof(NormScoreSmem));
  RHOSCAN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  launch_kernel("norm_scores_mma_kernel", kernel, grid_for(d.nbh * d.nC * d.nsplit), kMmaThreads, smem, stream, d, q,
                a32, s, Nc, P, o.Xq, o.Kq);
  launch_reduce_splits(d, P, stream);
}

// Pairs per batch: as many as the cap allows, then spread evenly over the batches that takes
// (two batches of 16 pairs rather than 31 and 1: the latency-bound kernels take as long for one
// pair as for many).
inline int64_t balanced_batch(int64_t pairs, int64_t cap_pairs) {
  cap_pairs = std::max<int64_t>(1, std::min(pairs, cap_pairs));
  const int64_t batches = (pairs + cap_pairs - 1) / cap_pairs;
  return (pairs + batches - 1) / batches;
}

}  // namespace rhoscan::cuda_detail
