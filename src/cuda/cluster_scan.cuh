// The fused chunked forward for any L on tensor cores (cluster_scan_mma): the bfloat16 forward in
// one pass over q, the state split over L across the blocks of a thread-block cluster, and a small
// finalize.
//
// Why: at L >> 256 the state (L × E float32 per pair: 8 MiB at L = 8192, E = 256) fits in no
// multiprocessor, so the chunked forward stores every chunk-start state (1 GB each way at BDH-8k)
// and the quadratic forward pays for the whole T × T score matrix and the operands Xq, Kq and Qp
// in memory (q read four times, three bf16 copies written: ~3.3 GB of traffic at BDH-8k against
// 0.8 GB compulsory). Here a block keeps the state of kLT latents × 256 columns in its mma
// accumulators for the whole sequence and reads its latents of q once; the normaliser scan, the
// read weights, the intra-chunk scores, the chunk-start state's readout and the state update all
// happen on chip, per chunk. The price is that every context element is a sum over all L: each
// block has only its kLT latents' share of it, so the shares (and those of the intra-chunk scores
// and token sums) are summed across the cluster's blocks in distributed shared memory, each block
// owning 256 / CS of the columns (64 / CS of P's rows), and the clusters' sums (one per kLT · CS
// latents) go to a float32 workspace that cluster_scan_finalize_kernel adds up in a fixed order,
// with the intra-chunk product P·V (float32), and divides by s_t.
//
// Per pair (b, h), chunk c of Cn tokens, the block's latents l (a local row of the tiles) and, for
// token i of the chunk (t = c·C + i), N_i the normaliser before token i:
//   x_i[l]   = q_i[l] / (N_i[l] + eps)                       (the read weight times s_i)
//   Xq[i][l] = x_i a^i                                       (the chunk-start state's readout)
//   Kq[i][l] = q_i a^(Cn-1-i)                                (the state keys)
//   P[i][j]  = sum_l x_i a^(i-1-j) q_j, j < i                (intra-chunk scores times s_i,
//              chunk_scores_mma's sub-block split: its tiles Xs, Kd, Xs8, Kd8 and 8×8 triangles)
//   ctx share[i][e] = sum_l Xq[i][l] bf16(S[l][e])
//   S <- a^Cn ⊙ S + Kq^T V
// and c_t = (sum of the pair's shares + sum_j P[t][j] v_j) / s_t, P the sum of the blocks' P and
// s_t = eps + sum_l q_t[l] (the blocks' partial token sums), all reduced the same way. Every factor
// a^n has n >= 0; no a^(-n). N runs as N <- a N + q through the chunks in order (segments of 8
// tokens a warp, combined by Horner in a^8, as chunk_scores_mma's walk), so no normaliser pass
// precedes the kernel.
//
// The block: 256 threads, 8 warps, one block per multiprocessor. Prep (walk, operands, triangles):
// warp w has the chunk's tokens 8w .. 8w + 7, lane λ the latents 64 p + 2λ, + 1 of each 64-latent
// pass p < kLT / 64 (chunk_scores_mma's mapping). State: warp w the latents kLT/2 (w / 4) .. +
// kLT/2 and columns 64 (w % 4) .. + 64, as m16n8 accumulators. Readout: warp w the tokens 16 (w %
// 4) .. + 16 and the columns 64 (w / 4) and 64 (w / 4 + 2) .. + 64, in two passes of 32
// accumulators. ptxas (sm_90a, nvcc 13): kLT = 64 254 registers, no spills, 169.5 KiB of shared
// memory; kLT = 128 255 registers and 220 bytes of spill, 221.5 KiB (taken only when asked for).
//
// One chunk step (barriers: A, B, C, E the block's; cluster arrive/wait #1 and #2):
//   Sb = bf16(S); z sums of the warps' segments and the partial token sums; A; [wait #2: the
//   cluster has read the previous step's exchange tile, which the score tiles overlay, and P];
//   per 64-latent pass: each warp's start N, the walk (x, Xq), Kq, the score tiles, the triangles
//   into P; B; the sub-block products into P; wait for v's tile; C; the readout into the exchange
//   tile X; arrive #1; the next chunk's q into registers; the state update; E; the next chunk's v
//   by cp.async; wait #1; this block's columns of every block's X (and its rows of P, its token
//   sums) summed in rank order into the workspace; arrive #2.
// Items: (pair, latent group g of CS tiles, column tile of 256), the clusters looping over the
// items with the grid's stride; the blocks of a cluster take its group's tiles by rank (a tile past
// L computes zeros).
#pragma once

#include "cuda/chunk_products.cuh"
#include "cuda/cluster.cuh"

namespace rhoscan::cuda_detail {

// ---- cluster_scan_mma: a cluster per (pair, latent group, column tile), the chunks in order --------
constexpr int kCsThreads = 256;
constexpr int kCsET = 256;        // state columns per block
constexpr int kCsMaxCluster = 8;  // (portable cluster sizes; the launcher takes 1, 2, 4 or 8)

template <int kLT>
struct ClusterScanLayout {
  static constexpr int XS = kLT + 8;     // bf16 rows over the block's latents: score tiles, Xq, Kq
  static constexpr int SBS = kCsET + 8;  // bf16 rows over the state's columns: Sb, v
  static constexpr int XF = kCsET + 4;   // float rows of the exchange tile
  static constexpr int PF = 64 + 4;      // float rows of P
  // the score tiles (chunk_scores_mma's: Xs 64 rows, Kd 96, Xs8 32, Kd8 32), overlaid by X
  static constexpr uint32_t kXs = 0, kKd = 64u * XS * 2, kXs8 = 160u * XS * 2, kKd8 = 192u * XS * 2;
  static constexpr uint32_t kScoreBytes = 224u * XS * 2, kXBytes = 64u * XF * 4;
  static constexpr uint32_t kX = 0;
  static constexpr uint32_t kSb = kScoreBytes > kXBytes ? kScoreBytes : kXBytes;
  static constexpr uint32_t kXq = kSb + uint32_t(kLT) * SBS * 2;
  static constexpr uint32_t kKq = kXq + 64u * XS * 2;
  static constexpr uint32_t kV = kKq + 64u * XS * 2;
  static constexpr uint32_t kP = kV + 64u * SBS * 2;
  static constexpr uint32_t kZ = kP + 64u * PF * 4;          // [8][kLT] float: the warps' z sums
  static constexpr uint32_t kSsum = kZ + 8u * kLT * 4;       // [2][64] float: token sums, by step parity
  static constexpr uint32_t kN = kSsum + 2u * 64 * 4;        // [2][kLT] float: N at the chunk start, by chunk parity
  static constexpr uint32_t kDecay = kN + 2u * kLT * 4;      // [2][kLT] float: a^C, a^Cn of the last chunk
  static constexpr int bytes = static_cast<int>(kDecay + 2u * kLT * 4);
};
static_assert(ClusterScanLayout<128>::bytes <= 227 * 1024, "cluster_scan_mma: shared memory past the H200's");

// The kernel's 32-bit indices: token rows of a pair, latents and columns inside their rows; the
// launcher checks them (cluster_scan_fits).
inline bool cluster_scan_fits(const Dims& d) {
  constexpr int64_t k24 = int64_t{1} << 24, k30 = int64_t{1} << 30;
  return d.T < k30 && d.L < k30 && d.Ep < k24;
}

// q: bf16 [B,H,T,L] strided; vb: [v_row(bh)][T][Ep] (pack_bf16); a32 [H][L]; rho0 (float32,
// null: zeros), N0 [nbh][L] (null: zeros; gather_norm_kernel's copy); G latent groups per pair, nET column tiles of 256; Cp: the
// clusters' context sums [nbh][G][T][nET·256], sp: their token sums [nbh][G][T]; rho, n_out: the
// final state (null: not written); Nc_out: N at every chunk start and N_T [nbh][nC + 1][L] (null:
// not written).
template <int kLT>
__global__ void __launch_bounds__(kCsThreads, 1)
    cluster_scan_mma_kernel(Dims d, Str4 q, const bf16* vb, const float* a32, Str4 rho0, const float* N0, int G, int nET,
                            float* Cp, float* Pp, float* sp, Str4 rho, Str3 n_out, float* Nc_out) {
  grid_dependency_wait();
  using Lay = ClusterScanLayout<kLT>;
  constexpr int XS = Lay::XS, SBS = Lay::SBS, XF = Lay::XF, PF = Lay::PF, NT = kCsThreads, ET = kCsET;
  constexpr int kLP = kLT / 64;  // the prep's 64-latent passes
  constexpr int MT = kLT / 32;   // the warp's m16 tiles of state rows (kLT / 2 latents)
  static_assert(kLT == 64 || kLT == 128, "64 or 128 latents a block");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, tq = lane % 4;
  const int CS = static_cast<int>(cluster_blocks()), rank = static_cast<int>(cluster_rank());
  const int C = static_cast<int>(d.C), nC = static_cast<int>(d.nC), L = static_cast<int>(d.L);
  const int CnLast = nC > 0 ? static_cast<int>(d.chunk_len(nC - 1)) : 0;
  const int64_t CpE = int64_t{nET} * ET, T = d.T;
  const uint32_t s0 = smem_addr(smem_raw);
  auto bf_at = [&](uint32_t off) { return reinterpret_cast<bf16*>(smem_raw + off); };
  auto f_at = [&](uint32_t off) { return reinterpret_cast<float*>(smem_raw + off); };
  bf16* const xs = bf_at(Lay::kXs);
  bf16* const kd = bf_at(Lay::kKd);
  bf16* const xs8 = bf_at(Lay::kXs8);
  bf16* const kd8 = bf_at(Lay::kKd8);
  bf16* const Sb = bf_at(Lay::kSb);
  float* const Pm = f_at(Lay::kP);
  float* const X = f_at(Lay::kX);
  float* const Z = f_at(Lay::kZ);
  float* const ssum = f_at(Lay::kSsum);
  float* const Nsm = f_at(Lay::kN);
  float* const dec = f_at(Lay::kDecay);
  // P's entries j >= i are never written (the products and triangles cover exactly j < i): zero
  // once; the first writes come after the first step's barrier A
  for (int x = tid; x < 64 * PF; x += NT) Pm[x] = 0.0f;

  // the prep's tokens i0 + m (m < 8) and sub-block roles (chunk_scores_mma's)
  const int i0 = 8 * warp, s16 = warp / 2;
  const bool upper8 = warp % 2 == 1;
  const int si = warp < 1 ? 1 : warp < 3 ? 2 : 3, sj = warp - si * (si - 1) / 2;  // warps 0-5: sub-block pair
  // the state's block: latent rows sl0 .., columns 64 eq ..
  const int sl0 = (kLT / 2) * (warp / 4), eq = warp % 4;
  const bool q_vec = q.s[3] == 1 && (q.s[0] % 2 | q.s[1] % 2 | q.s[2] % 2) == 0 && L % 2 == 0 &&
                     reinterpret_cast<uintptr_t>(q.p) % 4 == 0;

  const int64_t items = d.nbh * G * nET;
  const int64_t cstride = gridDim.x / CS;
  int64_t item = blockIdx.x / CS;
  struct Item {
    int64_t bh, b, h;
    int g, et, l0;
  };
  auto decode = [&](int64_t k) {
    Item r;
    r.bh = k / (int64_t{G} * nET);
    const int64_t rem = k - r.bh * G * nET;
    r.g = static_cast<int>(rem / nET), r.et = static_cast<int>(rem - int64_t{r.g} * nET);
    r.b = d.b_of(r.bh), r.h = d.h_of(r.bh);
    r.l0 = (r.g * CS + rank) * kLT;
    return r;
  };
  // q of chunk fc of item fi for the thread's tokens and latent pairs (zeros past Cn and L)
  PairWord<bf16> qw[kLP][8];
  auto fetch_q = [&](const Item& fi, int fc) {
    const int Cn = fc == nC - 1 ? CnLast : C;
#pragma unroll
    for (int p = 0; p < kLP; ++p) {
      const int l = fi.l0 + 64 * p + 2 * lane;
      const bool ok0 = l < L, ok1 = l + 1 < L;
      const bf16* qt = static_cast<const bf16*>(q.p) + q.at(fi.b, fi.h, int64_t{fc} * C + i0, ok0 ? l : 0);
#pragma unroll
      for (int m = 0; m < 8; ++m, qt += q.s[2]) {
        const bool tok = i0 + m < Cn;
        if (q_vec)
          qw[p][m] = tok && ok0 ? __ldg(reinterpret_cast<const PairWord<bf16>*>(qt)) : PairWord<bf16>{};
        else
          qw[p][m] = load_pair_word(qt, 0, q.s[3], tok && ok0, tok && ok1);
      }
    }
  };
  // v of chunk fc (its 64 rows, columns 256 et ..; zeros past Cn and Ep) into the v tile, one group
  auto fetch_v = [&](const Item& fi, int fc) {
    const int Cn = fc == nC - 1 ? CnLast : C;
    const int64_t row0 = d.v_row(fi.bh) * T + int64_t{fc} * C;
#pragma unroll
    for (int r = 0; r < 64 * (ET / 8) / NT; ++r) {
      const int idx = tid + NT * r, i = idx / (ET / 8), col = 8 * (idx % (ET / 8));
      const int64_t e = int64_t{fi.et} * ET + col;
      const bool ok = i < Cn && e < d.Ep;
      const bf16* src = vb + (row0 + (ok ? i : 0)) * d.Ep + (ok ? e : 0);
      cp_async16_u32(s0 + Lay::kV + 2 * (i * SBS + col), src, ok ? 16u : 0u);
    }
    cp_async_commit();
  };

  float accS[MT][8][4];  // the state: rows sl0 + 16 mt + g + 8 (r / 2), columns 64 eq + 8 nt + 2 tq + r % 2
  int l0 = 0;            // the current item's first latent and column
  int64_t e0 = 0;
  // f(x, l, e) for each of the thread's state elements x, at latent l and column e of the pair
  auto for_state = [&](auto&& f) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int r = 0; r < 4; ++r)
          f(accS[mt][nt][r], l0 + sl0 + 16 * mt + g + 8 * (r / 2), e0 + 64 * eq + 8 * nt + 2 * tq + r % 2);
  };
  int par = 0;           // the block's step parity (ssum's buffer)
  bool pending = false;  // an arrive #2 whose wait is still to come
  if (item < items) {
    const Item fi = decode(item);
    fetch_q(fi, 0);
    fetch_v(fi, 0);
  }
  for (; item < items; item += cstride) {
    const Item it = decode(item);
    const int64_t bh = it.bh, b = it.b, h = it.h;
    l0 = it.l0;
    e0 = int64_t{it.et} * ET;
    const bool writes_norm = it.et == 0;  // (every column tile computes the same N and s)
    // the lane's decay, and its powers a^8
    float a[kLP][2], a8[kLP][2];
#pragma unroll
    for (int p = 0; p < kLP; ++p)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int l = l0 + 64 * p + 2 * lane + e;
        a[p][e] = l < L ? a32[h * d.L + l] : 0.0f;
        const float a2 = a[p][e] * a[p][e], a4 = a2 * a2;
        a8[p][e] = a4 * a4;
      }
    __syncthreads();  // the previous item's last readers of the decay table and N are done
    for (int x = tid; x < kLT; x += NT) {
      const int l = l0 + x;
      const float al = l < L ? a32[h * d.L + l] : 0.0f;
      dec[x] = ipow(al, C);
      dec[kLT + x] = ipow(al, CnLast);
      Nsm[x] = N0 != nullptr && l < L ? N0[bh * d.L + l] : 0.0f;
    }
    for_state([&](float& x, int l, int64_t e) {
      x = rho0.p != nullptr && l < L && e < d.E ? static_cast<const float*>(rho0.p)[rho0.at(b, h, l, e)] : 0.0f;
    });
    for (int c = 0; c < nC; ++c, par ^= 1) {
      const bool last = c == nC - 1;
      const int Cn = last ? CnLast : C, cur = c & 1;
      // Sb = bf16(S) (its readers, the previous step's readout, passed barrier E)
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < 8; ++nt)
#pragma unroll
          for (int hf = 0; hf < 2; ++hf)
            *reinterpret_cast<__nv_bfloat162*>(Sb + (sl0 + 16 * mt + 8 * hf + g) * SBS + 64 * eq + 8 * nt + 2 * tq) =
                __floats2bfloat162_rn(accS[mt][nt][2 * hf], accS[mt][nt][2 * hf + 1]);
      auto y = [&](int p, int m, int e) {  // q of token i0 + m, latent e of pass p's pair
        float y0, y1;
        pair_floats<bf16>(qw[p][m], y0, y1);
        return e ? y1 : y0;
      };
      // the segments' z = sum_m a^(7-m) q_m (Horner; the segment holding Cn has zeros past it, and
      // its z is read only by warps with no tokens), and the token sums over the lane's latents
      {
        float ts[8];
#pragma unroll
        for (int m = 0; m < 8; ++m) ts[m] = 0.0f;
#pragma unroll
        for (int p = 0; p < kLP; ++p) {
          float z[2] = {};
#pragma unroll
          for (int m = 0; m < 8; ++m)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const float qm = y(p, m, e);
              z[e] = a[p][e] * z[e] + qm;
              ts[m] += qm;
            }
          *reinterpret_cast<float2*>(Z + warp * kLT + 64 * p + 2 * lane) = make_float2(z[0], z[1]);
        }
        // the lanes' token sums: by recursive halving over lane bits 4, 2, 1 (lane λ keeps token
        // λ % 8), then the other bits: 9 shuffles, a fixed tree
#pragma unroll
        for (int n = 4; n >= 1; n /= 2) {
          const bool up = lane & n;
#pragma unroll
          for (int k = 0; k < n; ++k) {
            const float lo = ts[k], hi = ts[k + n];
            ts[k] = (up ? hi : lo) + __shfl_xor_sync(0xffffffffu, up ? lo : hi, n);
          }
        }
        ts[0] += __shfl_xor_sync(0xffffffffu, ts[0], 8);
        ts[0] += __shfl_xor_sync(0xffffffffu, ts[0], 16);
        if (lane < 8) ssum[par * 64 + i0 + lane] = ts[0];
      }
      __syncthreads();  // A: the warps' z
      if (Nc_out != nullptr && writes_norm)
        for (int x = tid; x < kLT; x += NT)
          if (l0 + x < L) Nc_out[(bh * (nC + 1) + c) * d.L + l0 + x] = Nsm[cur * kLT + x];
      if (pending) cluster_wait();  // #2: the cluster is done with the previous step's X (the score tiles' space)
      pending = false;
      // Per 64-latent pass (a pass's registers only: the walk's x as bf16 pairs, its triangle sums):
      // each warp's start N (Horner in a^8 over the earlier warps' z), the walk x = q / (N + eps)
      // (zero past Cn, where N stops) with Xq = x a^i; Kq; the score tiles (chunk_scores_mma's
      // operands); the 8×8 triangles, summed over the warp's lanes into P.
      float tri_sum = 0.0f;  // lane t < 28: pair t of the warp's triangle, over the passes
#pragma unroll 1
      for (int p = 0; p < kLP; ++p) {
        const int col = 64 * p, x0 = col + 2 * lane;
        // 32-bit shared addresses of the thread's pair in token row i0 (Xq, Kq, Xs, Kd) and in row
        // 8 s16 (Xs8, Kd8); every row of its 8 tokens and every tile at an immediate offset
        const uint32_t r0 = s0 + 2 * (i0 * XS + x0), r8 = s0 + 2 * (8 * s16 * XS + x0);
        constexpr uint32_t kRow = 2 * XS;
        const float ap[2] = {a[p][0], a[p][1]}, a8p[2] = {a8[p][0], a8[p][1]};
        PairWord<bf16> qn[8];
        {
          float N[2] = {Nsm[cur * kLT + x0], Nsm[cur * kLT + x0 + 1]};
          for (int w = 0; w < warp; ++w) {
            const float2 zw = *reinterpret_cast<const float2*>(Z + w * kLT + x0);
            N[0] = a8p[0] * N[0] + zw.x;
            N[1] = a8p[1] * N[1] + zw.y;
          }
          float pw[2];  // a^(i0 + m): a^(8 warp) by the bits of warp, then a running product
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float f16 = a8p[e] * a8p[e], f32 = f16 * f16;
            pw[e] = (warp & 1 ? a8p[e] : 1.0f) * (warp & 2 ? f16 : 1.0f) * (warp & 4 ? f32 : 1.0f);
          }
#pragma unroll
          for (int m = 0; m < 8; ++m) {
            const bool tok = i0 + m < Cn;
            float xv[2];
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const float qm = y(p, m, e);
              xv[e] = tok ? __fdividef(qm, N[e] + kEpsF) : 0.0f;
              if (tok) N[e] = ap[e] * N[e] + qm;
            }
            st_shared_bf2(r0 + Lay::kXq + kRow * m, xv[0] * pw[0], xv[1] * pw[1]);
            pw[0] *= ap[0], pw[1] *= ap[1];
            const __nv_bfloat162 w2 = __floats2bfloat162_rn(xv[0], xv[1]);
            memcpy(&qn[m], &w2, sizeof w2);
          }
          if (warp == (Cn - 1) / 8)  // N after the chunk's last token: the next chunk's start
            *reinterpret_cast<float2*>(Nsm + (cur ^ 1) * kLT + x0) = make_float2(N[0], N[1]);
        }
        auto x = [&](int m, int e) {  // x of token i0 + m as bf16
          float v0, v1;
          pair_floats<bf16>(qn[m], v0, v1);
          return e ? v1 : v0;
        };
        // Kq = q a^(Cn-1-i), from the segment's last token down (zeros past Cn)
        {
          const int e7 = Cn - 8 - i0;  // the exponent at m = 7 (negative: a short or empty segment)
          float pk[2];
#pragma unroll
          for (int e = 0; e < 2; ++e) pk[e] = e7 >= 0 ? ipow(ap[e], e7) : 1.0f;
#pragma unroll
          for (int m = 7; m >= 0; --m) {
            const bool tok = i0 + m < Cn;
            st_shared_bf2(r0 + Lay::kKq + kRow * m, tok ? y(p, m, 0) * pk[0] : 0.0f, tok ? y(p, m, 1) * pk[1] : 0.0f);
            if (tok) pk[0] *= ap[0], pk[1] *= ap[1];
          }
        }
        // the rows of tokens i = i0 + m: u = x a^m, v = q a^(7-m); Kd's exponent is 16 (d-1) + 15 -
        // (i mod 16), i.e. v times a^(16 (d-1)) (upper half) or a^(16 (d-1) + 8)
        if (upper8) {  // i mod 16 = 8 + m: Xs8 = u, Xs = u a^8, Kd_d = v a^(16 (d-1))
          float pu[2] = {1.0f, 1.0f};
#pragma unroll
          for (int m = 0; m < 8; ++m) {
            const float u0 = x(m, 0) * pu[0], u1 = x(m, 1) * pu[1];
            st_shared_bf2(r8 + Lay::kXs8 + kRow * m, u0, u1);
            st_shared_bf2(r0 + Lay::kXs + kRow * m, u0 * a8p[0], u1 * a8p[1]);
            pu[0] *= ap[0], pu[1] *= ap[1];
          }
          if (warp < 6) {  // Kd rows j < 48 (d = 1), < 32 (d = 2), < 16 (d = 3)
            float f16[2], f32[2], pv[2] = {1.0f, 1.0f};
#pragma unroll
            for (int e = 0; e < 2; ++e) f16[e] = a8p[e] * a8p[e], f32[e] = f16[e] * f16[e];
#pragma unroll
            for (int m = 7; m >= 0; --m) {
              const float v0 = y(p, m, 0) * pv[0], v1 = y(p, m, 1) * pv[1];
              st_shared_bf2(r0 + Lay::kKd + kRow * (score_kd_row(1) + m), v0, v1);
              if (warp < 4) st_shared_bf2(r0 + Lay::kKd + kRow * (score_kd_row(2) + m), v0 * f16[0], v1 * f16[1]);
              if (warp < 2) st_shared_bf2(r0 + Lay::kKd + kRow * (score_kd_row(3) + m), v0 * f32[0], v1 * f32[1]);
              pv[0] *= ap[0], pv[1] *= ap[1];
            }
          }
        } else {  // i mod 16 = m: Xs = u, Kd8 = v, Kd_d = v a^(16 (d-1) + 8)
          float pu[2] = {1.0f, 1.0f};
#pragma unroll
          for (int m = 0; m < 8; ++m) {
            st_shared_bf2(r0 + Lay::kXs + kRow * m, x(m, 0) * pu[0], x(m, 1) * pu[1]);
            pu[0] *= ap[0], pu[1] *= ap[1];
          }
          float f24[2], f40[2], pv[2] = {1.0f, 1.0f};
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float f16 = a8p[e] * a8p[e];
            f24[e] = f16 * a8p[e], f40[e] = f16 * f16 * a8p[e];
          }
#pragma unroll
          for (int m = 7; m >= 0; --m) {
            const float v0 = y(p, m, 0) * pv[0], v1 = y(p, m, 1) * pv[1];
            st_shared_bf2(r8 + Lay::kKd8 + kRow * m, v0, v1);
            if (warp < 6) st_shared_bf2(r0 + Lay::kKd + kRow * (score_kd_row(1) + m), v0 * a8p[0], v1 * a8p[1]);
            if (warp < 4) st_shared_bf2(r0 + Lay::kKd + kRow * (score_kd_row(2) + m), v0 * f24[0], v1 * f24[1]);
            if (warp < 2) st_shared_bf2(r0 + Lay::kKd + kRow * (score_kd_row(3) + m), v0 * f40[0], v1 * f40[1]);
            pv[0] *= ap[0], pv[1] *= ap[1];
          }
        }
        // the 8×8 triangle: pair (m, n) += x_m a^(m-1-n) q_n, the power by a running product; then
        // summed over the warp's lanes by recursive halving (31 shuffles): lane t gets pair t
        float v[32];
#pragma unroll
        for (int k = 0; k < 32; ++k) v[k] = 0.0f;
#pragma unroll
        for (int e = 0; e < 2; ++e)
#pragma unroll
          for (int n = 0; n < 7; ++n) {
            float r = y(p, n, e);
#pragma unroll
            for (int m = n + 1; m < 8; ++m) {
              v[m * (m - 1) / 2 + n] += x(m, e) * r;
              if (m < 7) r *= ap[e];
            }
          }
        halving_step<16>(v, lane), halving_step<8>(v, lane), halving_step<4>(v, lane);
        halving_step<2>(v, lane), halving_step<1>(v, lane);
        tri_sum += v[0];
      }
      if (lane < 28) {
        int m = 1, n = lane;  // lane = m (m-1) / 2 + n
        while (n >= m) n -= m, ++m;
        Pm[(i0 + m) * PF + i0 + n] = tri_sum;
      }
      __syncthreads();  // B: the score tiles, Xq, Kq, Sb, the triangles, ssum
      // the sub-block products (chunk_scores_mma's, over the block's kLT latents) into P
      {
        float mac[2][4] = {};
        if (warp < 6) {
          const bf16* A = xs + 16 * si * XS;
          const bf16* B = kd + (score_kd_row(si - sj) + 16 * sj) * XS;
#pragma unroll
          for (int k0 = 0; k0 < kLT; k0 += 16) {
            uint32_t af[4], bfr[4];
            ldsm_x4(af, A + (lane & 15) * XS + k0 + (lane >> 4) * 8);
            ldsm_x4(bfr, B + ((lane >> 4) * 8 + (lane & 7)) * XS + k0 + ((lane >> 3) & 1) * 8);
            mma_bf16_16816(mac[0], af, bfr[0], bfr[1]);
            mma_bf16_16816(mac[1], af, bfr[2], bfr[3]);
          }
#pragma unroll
          for (int nt = 0; nt < 2; ++nt)
#pragma unroll
            for (int hr = 0; hr < 2; ++hr)
              *reinterpret_cast<float2*>(Pm + (16 * si + g + 8 * hr) * PF + 16 * sj + 8 * nt + 2 * tq) =
                  make_float2(mac[nt][2 * hr], mac[nt][2 * hr + 1]);
        } else {  // warps 6, 7: the lower-left quadrants of diagonal blocks 2 (warp - 6) and + 1
#pragma unroll
          for (int hb = 0; hb < 2; ++hb) {
            const int sb = 2 * (warp - 6) + hb;
            const bf16* A = xs8 + 8 * sb * XS;  // A rows r and 8 + r both read Xs8 row r
            const bf16* B = kd8 + 8 * sb * XS;
#pragma unroll
            for (int k0 = 0; k0 < kLT; k0 += 32) {
              uint32_t bfr[4];
              ldsm_x4(bfr, B + (lane & 7) * XS + k0 + (lane >> 3) * 8);
#pragma unroll
              for (int kk = 0; kk < 2; ++kk) {
                uint32_t af[4];
                ldsm_x4(af, A + (lane & 7) * XS + k0 + 16 * kk + (lane >> 4) * 8);
                mma_bf16_16816(mac[hb], af, bfr[2 * kk], bfr[2 * kk + 1]);
              }
            }
            // the accumulator rows g + 8: tokens 16 sb + 8 + g, columns 16 sb + 2 tq, + 1
            *reinterpret_cast<float2*>(Pm + (16 * sb + 8 + g) * PF + 16 * sb + 2 * tq) = make_float2(mac[hb][2], mac[hb][3]);
          }
        }
      }
      cp_async_wait<0>();  // this thread's copies of v's tile
      __syncthreads();     // C: P complete, v's tile landed; the score tiles are dead (X may be written)
      // the readout: this block's share of the context, rows 16 tb .., columns 64 eb .. in two passes,
      // into X
      {
        const int tb = warp % 4;
        const uint32_t aX = s0 + Lay::kXq + 2 * ((16 * tb + (lane & 15)) * XS + (lane >> 4) * 8);
        const int brow = ((lane >> 3) & 1) * 8 + (lane & 7), bcol = (lane >> 4) * 8;
#pragma unroll 1
        for (int k2 = 0; k2 < 2; ++k2) {
          const int eb = warp / 4 + 2 * k2;
          const uint32_t bS = s0 + Lay::kSb + 2 * (brow * SBS + 64 * eb + bcol);
          float acc[8][4];
#pragma unroll
          for (int nt = 0; nt < 8; ++nt)
#pragma unroll
            for (int r = 0; r < 4; ++r) acc[nt][r] = 0.0f;
          auto kstep = [&](uint32_t af_addr, uint32_t b_addr) {
            uint32_t af[4], bfr[4][4];
            ldsm_x4_u32(af, af_addr);
#pragma unroll
            for (int np = 0; np < 4; ++np) ldsm_x4_trans_u32(bfr[np], b_addr + 2 * 16 * np);
#pragma unroll
            for (int nt = 0; nt < 8; ++nt) mma_bf16_16816(acc[nt], af, bfr[nt / 2][2 * (nt % 2)], bfr[nt / 2][2 * (nt % 2) + 1]);
          };
#pragma unroll 1
          for (int kt = 0; kt < kLT / 16; ++kt) kstep(aX + 2 * 16 * kt, bS + 2 * 16 * kt * SBS);
#pragma unroll
          for (int nt = 0; nt < 8; ++nt)
#pragma unroll
            for (int hf = 0; hf < 2; ++hf)
              *reinterpret_cast<float2*>(X + (16 * tb + g + 8 * hf) * XF + 64 * eb + 8 * nt + 2 * tq) =
                  make_float2(acc[nt][2 * hf], acc[nt][2 * hf + 1]);
        }
      }
      cluster_arrive();  // #1: this block's X and ssum[par] readable by the cluster
      // the next chunk's q (or the block's next item's first) into registers, in flight during the
      // update and the exchange
      int64_t next = item;
      int nc = c + 1;
      if (last) next = item + cstride, nc = 0;
      Item ni{};
      if (next < items) {
        ni = last ? decode(next) : it;
        fetch_q(ni, nc);
      }
      // the update S <- a^Cn ⊙ S + Kq^T V
      {
        const float* f = dec + (last ? kLT : 0) + sl0 + g;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int hf = 0; hf < 2; ++hf) {
            const float fx = f[16 * mt + 8 * hf];
#pragma unroll
            for (int nt = 0; nt < 8; ++nt) accS[mt][nt][2 * hf] *= fx, accS[mt][nt][2 * hf + 1] *= fx;
          }
        const uint32_t aK = s0 + Lay::kKq + 2 * (((lane >> 4) * 8 + (lane & 7)) * XS + sl0 + ((lane >> 3) & 1) * 8);
        const uint32_t bV = s0 + Lay::kV + 2 * ((((lane >> 3) & 1) * 8 + (lane & 7)) * SBS + 64 * eq + (lane >> 4) * 8);
        const int nk = (Cn + 15) / 16;
#pragma unroll 1
        for (int kt = 0; kt < nk; ++kt) {
          uint32_t af[MT][4], bfr[4][4];
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) ldsm_x4_trans_u32(af[mt], aK + 2 * (16 * kt * XS + 16 * mt));
#pragma unroll
          for (int np = 0; np < 4; ++np) ldsm_x4_trans_u32(bfr[np], bV + 2 * (16 * kt * SBS + 16 * np));
#pragma unroll
          for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < 8; ++nt)
              mma_bf16_16816(accS[mt][nt], af[mt], bfr[nt / 2][2 * (nt % 2)], bfr[nt / 2][2 * (nt % 2) + 1]);
        }
      }
      __syncthreads();  // E: Xq, Kq, Sb, P and v's tile read
      if (next < items) fetch_v(ni, nc);
      cluster_wait();  // #1: every block's X complete
      // this block's columns 256 et + W rank .. of the cluster's shares, summed in rank order
      {
        const int W = ET / CS, quads = W / 4;
        const uint32_t xcol = s0 + Lay::kX + 4 * (W * rank);
        float* out = Cp + ((bh * G + it.g) * T + int64_t{c} * C) * CpE + e0 + W * rank;
#pragma unroll 1
        for (int idx = tid; idx < 64 * quads; idx += NT) {
          const int t = idx / quads, k = idx - t * quads;
          if (t >= Cn) break;
          const uint32_t xa = xcol + 4 * (t * XF + 4 * k);
          float4 s4 = ld_cluster_f4(cluster_map(xa, 0u));
#pragma unroll 1
          for (int r = 1; r < CS; ++r) {
            const float4 v = ld_cluster_f4(cluster_map(xa, static_cast<unsigned>(r)));
            s4.x += v.x, s4.y += v.y, s4.z += v.z, s4.w += v.w;
          }
          store_float4(out + t * CpE + 4 * k, s4);
        }
        // the intra-chunk scores (the first column tile's clusters): rows 64 / CS rank .. of every
        // block's P, summed in rank order
        if (writes_norm) {
          const int RP = 64 / CS;
          float* pout = Pp + ((bh * G + it.g) * nC + c) * 4096 + 64 * RP * rank;
#pragma unroll 1
          for (int idx = tid; idx < RP * 16; idx += NT) {
            const int r = idx / 16, k = idx % 16;
            const uint32_t pa = s0 + Lay::kP + 4 * ((RP * rank + r) * PF + 4 * k);
            float4 s4 = ld_cluster_f4(cluster_map(pa, 0u));
#pragma unroll 1
            for (int rk = 1; rk < CS; ++rk) {
              const float4 v = ld_cluster_f4(cluster_map(pa, static_cast<unsigned>(rk)));
              s4.x += v.x, s4.y += v.y, s4.z += v.z, s4.w += v.w;
            }
            store_float4(pout + 64 * r + 4 * k, s4);
          }
        }
        if (rank == 0 && writes_norm && tid < Cn) {
          const uint32_t sa = s0 + Lay::kSsum + 4 * (par * 64 + tid);
          float s = 0.0f;
          for (int r = 0; r < CS; ++r) s += ld_cluster_f32(cluster_map(sa, static_cast<unsigned>(r)));
          sp[(bh * G + it.g) * T + int64_t{c} * C + tid] = s;
        }
      }
      cluster_arrive();  // #2 (its wait: the next step's, before the score tiles overwrite X)
      pending = true;
    }
    // the final state and normaliser (E of the last step passed: N_T complete in Nsm)
    if (rho.p != nullptr) {
      float* rp = const_cast<float*>(static_cast<const float*>(rho.p));
      for_state([&](float& x, int l, int64_t e) {
        if (l < L && e < d.E) rp[rho.at(b, h, l, e)] = x;
      });
    }
    if (writes_norm)
      for (int x = tid; x < kLT; x += NT) {
        const int l = l0 + x;
        if (l >= L) continue;
        const float nT = Nsm[(nC & 1) * kLT + x];
        if (n_out.p != nullptr) const_cast<float*>(static_cast<const float*>(n_out.p))[n_out.at(b, h, l)] = nT;
        if (Nc_out != nullptr) Nc_out[(bh * (nC + 1) + nC) * d.L + l] = nT;
      }
  }
  if (pending) cluster_wait();  // no block leaves while the cluster may still read its shared memory
}

// The batch's initial normalisers, [nbh][L] from the strided rho_norm0 (a copy: rho_norm may
// alias it, and the first column tile writes rho_norm while the others may not have read it yet).
static __global__ void gather_norm_kernel(Dims d, Str3 n0, float* out) {
  grid_dependency_wait();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < d.nbh * d.L; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t bh = i / d.L, l = i - bh * d.L;
    out[i] = static_cast<const float*>(n0.p)[n0.at(d.b_of(bh), d.h_of(bh), l)];
  }
}

// The context from the clusters' sums, a block of 256 threads per (pair, chunk):
//   c_i[e] = (sum_g Cp_g[i][e] + sum_{j<i} P[i][j] v_j[e]) / s_i,  P = sum_g Pp_g,  s_i = eps + sum_g sp_g[i]
// (every sum over the groups in group order), P·V in float32 FFMA over 64-column tiles (a thread 4
// rows × 4 columns); s and P / s (chunk_scores_mma's P: the scores of the read weights, zeros
// where j >= i or i >= Cn) to the saved buffer where given.
constexpr int kFinThreads = 256;
constexpr int kFinSmem = (2 * 64 * 65 + 64) * 4;
template <typename OutT>
__global__ void __launch_bounds__(kFinThreads, 1) cluster_scan_finalize_kernel(Dims d, int G, int64_t CpE, const float* Cp,
                                                                            const float* Pp, const float* sp,
                                                                            const bf16* vb, Str4 ctx, float* s_out,
                                                                            float* P_out) {
  grid_dependency_wait();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  float(*Ps)[65] = reinterpret_cast<float(*)[65]>(smem_raw);  // P [64][65]
  float(*Vs)[65] = Ps + 64;                                     // v's tile as float [64][65]
  float* ss = &Vs[64][0];                                       // s [64]
  const int tid = threadIdx.x, tr = tid / 16, tc = tid % 16;
  const int C = static_cast<int>(d.C), nC = static_cast<int>(d.nC);
  const int64_t T = d.T;
  for (int64_t item = blockIdx.x; item < d.nbh * nC; item += gridDim.x) {
    const int64_t bh = item / nC, b = d.b_of(bh), h = d.h_of(bh);
    const int c = static_cast<int>(item - bh * nC), Cn = static_cast<int>(d.chunk_len(c));
    const int64_t t0 = int64_t{c} * C, vrow = d.v_row(bh) * T + t0;
    __syncthreads();  // the previous item's reads of Ps and ss
    for (int x = tid; x < 64 * 64; x += kFinThreads) {
      const int i = x / 64, j = x % 64;
      float v = 0.0f;
      if (i < Cn && j < i)
        for (int gg = 0; gg < G; ++gg) v += Pp[((bh * G + gg) * nC + c) * 4096 + x];
      Ps[i][j] = v;
    }
    if (tid < 64) {
      float sum = 0.0f;
      if (tid < Cn)
        for (int gg = 0; gg < G; ++gg) sum += sp[(bh * G + gg) * T + t0 + tid];
      ss[tid] = sum + kEpsF;
    }
    __syncthreads();
    if (s_out != nullptr && tid < Cn) s_out[bh * T + t0 + tid] = ss[tid];
    if (P_out != nullptr)
      for (int x = tid; x < C * C; x += kFinThreads) {
        const int i = x / C, j = x % C;
        P_out[(bh * nC + c) * C * C + x] = i < Cn && j < i ? Ps[i][j] / ss[i] : 0.0f;
      }
    for (int e0 = 0; e0 < d.E; e0 += 64) {
      __syncthreads();  // the previous tile's reads of Vs
      for (int x = tid; x < 64 * 64; x += kFinThreads) {
        const int j = x / 64, e = x % 64;
        Vs[j][e] = j < Cn && e0 + e < d.E ? to_float(vb[(vrow + j) * d.Ep + e0 + e]) : 0.0f;
      }
      __syncthreads();
      float acc[4][4] = {};
#pragma unroll 4
      for (int j = 0; j < 64; ++j) {
        float pv[4], vv[4];
#pragma unroll
        for (int r = 0; r < 4; ++r) pv[r] = Ps[4 * tr + r][j];
#pragma unroll
        for (int k = 0; k < 4; ++k) vv[k] = Vs[j][tc + 16 * k];
#pragma unroll
        for (int r = 0; r < 4; ++r)
#pragma unroll
          for (int k = 0; k < 4; ++k) acc[r][k] += pv[r] * vv[k];
      }
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int i = 4 * tr + r;
        if (i >= Cn) continue;
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const int64_t e = e0 + tc + 16 * k;
          if (e >= d.E) continue;
          float sum = 0.0f;
          for (int gg = 0; gg < G; ++gg) sum += Cp[((bh * G + gg) * T + t0 + i) * CpE + e];
          store<OutT>(const_cast<void*>(ctx.p), ctx.at(b, h, t0 + i, e), (sum + acc[r][k]) / ss[i]);
        }
      }
    }
  }
}


// RHOSCAN_CLUSTER_FORWARD: 1 takes the cluster forward by default wherever it applies (bfloat16,
// T >= 1, clusters on the device); 0, the default until it is measured on the H200, only where
// RHOSCAN_CUDA_FORWARD_PATH=cluster asks for it.
#ifndef RHOSCAN_CLUSTER_FORWARD
#define RHOSCAN_CLUSTER_FORWARD 0
#endif

// How a call's pairs are cut into clusters: latents per block (64 or 128), blocks per cluster
// (1, 2, 4 or 8), latent groups per pair (clusters along L), column tiles of 256.
struct ClusterScanPlan {
  int lt = 128, cs = 1, groups = 1, col_tiles = 1;
  int64_t cp_cols() const { return int64_t{col_tiles} * kCsET; }
  // workspace floats per pair: the clusters' context sums and token sums
  int64_t floats_per_pair(int64_t T, int64_t nC) const { return int64_t{groups} * (T * (cp_cols() + 1) + nC * 4096); }
};
// ---- launchers (cluster_scan) -----------------------------------------------------------------
// 64 latents a block (128 only where RHOSCAN_CLUSTER_LT=128 asks: that kernel spills), the largest
// power-of-two cluster up to 8 that the latent tiles fill and the device holds, the groups that
// cover L. RHOSCAN_CLUSTER_LT=64|128 and RHOSCAN_CLUSTER_SIZE=1|2|4|8 (environment, per call)
// override them, for the A/B.
ClusterScanPlan cluster_scan_plan(const Dims& d);

// The cluster forward of one batch of pairs: the kernel, then the finalize (context, s and P).
void launch_cluster_scan(const Dims& d, const ClusterScanPlan& plan, Str4 q, const bf16* vb, const float* a32, Str4 rho0,
                         const float* N0, float* Cp, float* Pp, float* sp, Str4 rho, Str3 n_out, float* Nc_out, Str4 ctx,
                         float* s_out, float* P_out, cudaStream_t stream);

}  // namespace rhoscan::cuda_detail
