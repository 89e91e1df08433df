// The fast CPU backend: the chunked formulation of SPEC.md ("Useful structure") as matrix
// products, threads across (batch, head) and, in the forward, tiles of E.
//
// Per (b,h) and chunk of n <= C tokens starting at t0 (local index i), with P[k] = a^k and
// Pd[k] = k·a^(k-1) from one [(C+1) × L] table per head, q' = w / (N + eps):
//
//   forward   S[i][j] = sum_l q'_i P[i-1-j] q_j           (j < i; kernels.cpp)
//             c_i     = (q'_i ⊙ P[i]) · R_c + sum_j S[i][j] v_j                (two GEMMs)
//             R_c+1   = P[n] ⊙ R_c + sum_j (q_j ⊙ P[n-1-j]) ⊗ v_j                  (one GEMM)
//   backward  pass 1 (forward in time) recomputes R_c, computes gw_t (stored, [T × L]) and the
//             decay-gradient terms that need R_c; pass 2 (reverse) carries A (dLoss/dR) chunk by
//             chunk and produces dq, dv, the remaining decay-gradient terms and dR_0, dN_0.
//             The cross-chunk term sum_c n·a^(n-1) ⊙ <A_c+1, R_c> (A and R live in different
//             passes) is rewritten forward-mode: Z_c+1 = P[n] ⊙ Z_c + Pd[n] ⊙ R_c, contributing
//             <W_c, Z_c> with W_c the chunk's A summary, plus <GR, Z_end> (README).
// Nothing of size L×E is kept per token or per chunk: R and Z are one L×E buffer each per
// worker (A reuses R's). Per token only gw_t is kept, in grad_q's own memory (float32/float64;
// a [T × L] buffer for 16-bit dtypes); N is kept at chunk starts and rescanned per chunk.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "core/backend.h"
#include "core/dtype.h"
#include "cpu/fast/gemm.h"
#include "cpu/fast/kernels.h"
#include "cpu/fast/packing.h"
#include "cpu/fast/thread_pool.h"

namespace rhoscan::detail {
namespace cpu_fast {
namespace {

constexpr int64_t kDefaultChunk = 64;
// Each thread keeps its workspace between calls (no page faults per call) unless it grew
// beyond this; larger ones are returned after each (b,h) item.
constexpr size_t kKeptWorkspaceBytes = size_t(256) << 20;

int64_t chunk_of(const Options& o) { return o.chunk_size > 0 ? o.chunk_size : kDefaultChunk; }

// The work split must not depend on options.num_threads (results are identical for any thread
// count); it depends only on the problem and the machine.
int64_t forward_e_tiles(int64_t BH, int64_t E) {
  const int64_t hw = std::max<int64_t>(1, std::thread::hardware_concurrency());
  if (BH == 0 || BH >= hw) return 1;
  const int64_t want = (hw + BH - 1) / BH;
  return std::max<int64_t>(1, std::min<int64_t>(want, E / 64));
}

// Decay powers of one head: P[k][l] = a_l^k and Pd[k][l] = k·a_l^(k-1), k = 0..C, from
// repeated multiplication in double (never a negative power; a = 0 gives P[0] = 1, P[k>0] = 0).
template <class T>
void decay_tables(const void* decay, DType dtype, const int64_t* stride, int64_t h, int64_t L, int64_t C,
                  T* P, T* Pd, T* a_out, std::vector<double>& scratch) {
  scratch.resize(2 * L);
  double* a = scratch.data();
  double* p = a + L;
  for (int64_t l = 0; l < L; ++l) {
    a[l] = load_as_double(decay, dtype, h * stride[0] + l * stride[1]);
    a_out[l] = static_cast<T>(a[l]);
    p[l] = 1.0;
    P[l] = 1;
    Pd[l] = 0;
  }
  for (int64_t k = 1; k <= C; ++k) {
    T* Pk = P + k * L;
    T* Pdk = Pd + k * L;
    const double kd = static_cast<double>(k);
    for (int64_t l = 0; l < L; ++l) {
      Pdk[l] = static_cast<T>(kd * p[l]);  // k·a^(k-1)
      p[l] *= a[l];
      Pk[l] = static_cast<T>(p[l]);
    }
  }
}

template <class T>
T row_sum(const T* x, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += x[i];
  return static_cast<T>(s);
}

// N scan over one chunk: Nrow[i] = N before token i (optional), s[i], q'[i] = q_i/s_i/(N+eps),
// and N advanced past the chunk.
template <class T>
void normaliser_scan(int64_t n, int64_t L, const T* Q, const T* a, T* N, T* Qp, T* s, T* Nrows) {
  for (int64_t i = 0; i < n; ++i) {
    const T* q = Q + i * L;
    const T si = row_sum(q, L) + static_cast<T>(kEps);
    s[i] = si;
    const T inv_s = T(1) / si;
    T* qp = Qp + i * L;
    if (Nrows) std::memcpy(Nrows + i * L, N, static_cast<size_t>(L) * sizeof(T));
    for (int64_t l = 0; l < L; ++l) {
      qp[l] = q[l] * inv_s / (N[l] + static_cast<T>(kEps));
      N[l] = a[l] * N[l] + q[l];
    }
  }
}

// Intra-chunk scores S[i][j] = sum_l q'_i a^(i-1-j) q_j (j < i). Pairs inside blocks of kBlock
// tokens are summed directly (kernels.cpp); a block of rows starting at m reads all earlier
// tokens through one matrix product, with a^(i-1-j) = a^(i-m) · a^(m-1-j), both exponents >= 0.
constexpr int64_t kBlock = 16;

template <class T>
void chunk_scores(int64_t n, int64_t L, const T* Qp, const T* Q, const T* P, T* S, T* rows, T* cols) {
  intra_scores_diagonal(n, L, L, Qp, Q, P, S, kBlock);
  for (int64_t m = kBlock; m < n; m += kBlock) {
    const int64_t bn = std::min(kBlock, n - m);
    for (int64_t i = 0; i < bn; ++i) {
      const T* x = Qp + (m + i) * L;
      const T* pk = P + i * L;
      T* o = rows + i * L;
      for (int64_t l = 0; l < L; ++l) o[l] = x[l] * pk[l];
    }
    for (int64_t j = 0; j < m; ++j) {
      const T* y = Q + j * L;
      const T* pk = P + (m - 1 - j) * L;
      T* o = cols + j * L;
      for (int64_t l = 0; l < L; ++l) o[l] = y[l] * pk[l];
    }
    gemm(false, true, bn, m, L, T(1), rows, L, cols, L, T(0), S + m * n, n);
  }
}

// gw's intra-chunk part, out[i] = sum_{j<i} a^(i-1-j) ⊙ q_j · M[i][j], blocked like the scores.
template <class T>
void chunk_mix_earlier(int64_t n, int64_t L, const T* Q, const T* M, const T* P, T* out, T* cols, T* part) {
  mix_earlier(n, L, L, Q, M, P, out, kBlock);
  for (int64_t m = kBlock; m < n; m += kBlock) {
    const int64_t bn = std::min(kBlock, n - m);
    for (int64_t j = 0; j < m; ++j) {
      const T* y = Q + j * L;
      const T* pk = P + (m - 1 - j) * L;
      T* o = cols + j * L;
      for (int64_t l = 0; l < L; ++l) o[l] = y[l] * pk[l];
    }
    gemm(false, false, bn, L, m, T(1), M + m * n, n, cols, L, T(0), part, L);
    for (int64_t i = 0; i < bn; ++i) {
      const T* pk = P + i * L;
      const T* x = part + i * L;
      T* o = out + (m + i) * L;
      for (int64_t l = 0; l < L; ++l) o[l] += pk[l] * x[l];
    }
  }
}

// dq's intra-chunk part out[i] = sum_{u>i} a^(u-i-1) ⊙ q'_u · M[u][i], and its decay derivative
// into da, blocked: for a block [m0, m1) and u >= m1, a^(u-i-1) = a^(u-m1) · a^(m1-1-i), whose
// derivative is Pd[u-m1]·P[m1-1-i] + P[u-m1]·Pd[m1-1-i].
template <class T>
void chunk_mix_later(int64_t n, int64_t L, const T* Qp, const T* Q, const T* M, const T* P, const T* Pd, T* out,
                     double* da, T* cols2 /* [n × 2L] */, T* part2 /* [kBlock × 2L] */) {
  mix_later(n, L, L, Qp, Q, M, P, Pd, out, da, kBlock);
  for (int64_t m0 = 0; m0 + kBlock < n; m0 += kBlock) {
    const int64_t m1 = m0 + kBlock, later = n - m1;
    for (int64_t u = 0; u < later; ++u) {
      const T* x = Qp + (m1 + u) * L;
      const T* pk = P + u * L;
      const T* pdk = Pd + u * L;
      T* o = cols2 + u * 2 * L;
      for (int64_t l = 0; l < L; ++l) o[l] = x[l] * pk[l], o[L + l] = x[l] * pdk[l];
    }
    // part2[i] = sum_{u >= m1} M[u][m0+i] · [q'_u a^(u-m1), q'_u Pd[u-m1]]
    gemm(true, false, kBlock, 2 * L, later, T(1), M + m1 * n + m0, n, cols2, 2 * L, T(0), part2, 2 * L);
    for (int64_t i = 0; i < kBlock; ++i) {
      const int64_t k = m1 - 1 - (m0 + i);
      const T* pk = P + k * L;
      const T* pdk = Pd + k * L;
      const T* y1 = part2 + i * 2 * L;
      const T* y2 = y1 + L;
      const T* q = Q + (m0 + i) * L;
      T* o = out + (m0 + i) * L;
      for (int64_t l = 0; l < L; ++l) {
        o[l] += pk[l] * y1[l];
        da[l] += static_cast<double>(q[l] * (pk[l] * y2[l] + pdk[l] * y1[l]));
      }
    }
  }
}

// Rows of an L × width state tile of about 256 KiB (it stays in L2 between the products).
inline int64_t state_tile_rows(int64_t width) { return std::max<int64_t>(32, (int64_t(64) << 10) / std::max<int64_t>(1, width)); }

// ---------------------------------------------------------------------------------------------
// Forward

template <class T>
struct ForwardWorkspace {
  std::vector<T> P, Pd, a, R, N, Q, Qp, Qs, Qu, V, Ctx, S, s, rows;
  std::vector<double> scratch;
  void release() { *this = ForwardWorkspace(); }
  size_t bytes() const {
    size_t n = 0;
    for (auto* v : {&P, &Pd, &a, &R, &N, &Q, &Qp, &Qs, &Qu, &V, &Ctx, &S, &s, &rows}) n += v->capacity() * sizeof(T);
    return n;
  }
  void size(int64_t L, int64_t Et, int64_t C) {
    P.resize((C + 1) * L);
    Pd.resize((C + 1) * L);
    a.resize(L);
    R.resize(L * Et);
    N.resize(L);
    Q.resize(C * L);
    Qp.resize(C * L);
    Qs.resize(C * L);
    Qu.resize(C * L);
    V.resize(C * Et);
    Ctx.resize(C * Et);
    S.resize(C * C);
    s.resize(C);
    rows.resize(kBlock * L);
  }
};

template <class T>
void forward_item(const ForwardParams& f, int64_t b, int64_t h, int64_t e0, int64_t e1, int64_t C,
                  ForwardWorkspace<T>& w, T* N_out /* [L], written by the first E tile */) {
  const Problem& p = f.p;
  const int64_t L = p.L, T_ = p.T, Et = e1 - e0;
  w.size(L, Et, C);
  decay_tables(f.decay, p.decay_dtype, f.decay_stride, h, L, C, w.P.data(), w.Pd.data(), w.a.data(), w.scratch);
  T* R = w.R.data();
  T* N = w.N.data();
  for (int64_t l = 0; l < L; ++l) {
    if (f.rho0)
      load_row(R + l * Et, f.rho0, p.state_dtype,
               b * f.rho0_stride[0] + h * f.rho0_stride[1] + l * f.rho0_stride[2] + e0 * f.rho0_stride[3],
               f.rho0_stride[3], Et);
    else
      std::fill(R + l * Et, R + (l + 1) * Et, T(0));
  }
  if (f.rho_norm0)
    load_row(N, f.rho_norm0, p.state_dtype, b * f.rho_norm0_stride[0] + h * f.rho_norm0_stride[1],
             f.rho_norm0_stride[2], L);
  else
    std::fill(N, N + L, T(0));

  const T* P = w.P.data();
  for (int64_t t0 = 0; t0 < T_; t0 += C) {
    const int64_t n = std::min(C, T_ - t0);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t t = t0 + i;
      load_row(w.Q.data() + i * L, f.q, p.dtype, b * f.q_stride[0] + h * f.q_stride[1] + t * f.q_stride[2],
               f.q_stride[3], L);
      load_row(w.V.data() + i * Et, f.v, p.dtype,
               b * f.v_stride[0] + h * f.v_stride[1] + t * f.v_stride[2] + e0 * f.v_stride[3], f.v_stride[3], Et);
    }
    normaliser_scan(n, L, w.Q.data(), w.a.data(), N, w.Qp.data(), w.s.data(), static_cast<T*>(nullptr));
    chunk_scores(n, L, w.Qp.data(), w.Q.data(), P, w.S.data(), w.rows.data(), w.Qs.data());
    // (q'_i ⊙ a^i) for the readout of the chunk-start state, (q_j ⊙ a^(n-1-j)) for the update
    for (int64_t i = 0; i < n; ++i) {
      const T* qp = w.Qp.data() + i * L;
      const T* q = w.Q.data() + i * L;
      const T* pi = P + i * L;
      const T* pj = P + (n - 1 - i) * L;
      T* qs = w.Qs.data() + i * L;
      T* qu = w.Qu.data() + i * L;
      for (int64_t l = 0; l < L; ++l) qs[l] = qp[l] * pi[l], qu[l] = q[l] * pj[l];
    }
    // context = S · V + (q'_i ⊙ a^i) · R_c;  R = a^n ⊙ R + sum_j (q_j ⊙ a^(n-1-j)) ⊗ v_j.
    // Latent tiles of the state are read, scaled and updated while they sit in L2.
    gemm(false, false, n, Et, n, T(1), w.S.data(), n, w.V.data(), Et, T(0), w.Ctx.data(), Et);
    const T* pn = P + n * L;
    const int64_t lt = state_tile_rows(Et);
    for (int64_t l0 = 0; l0 < L; l0 += lt) {
      const int64_t rows = std::min(lt, L - l0);
      T* Rt = R + l0 * Et;
      gemm(false, false, n, Et, rows, T(1), w.Qs.data() + l0, L, Rt, Et, T(1), w.Ctx.data(), Et);
      for (int64_t l = 0; l < rows; ++l) {
        T* r = Rt + l * Et;
        const T an = pn[l0 + l];
        for (int64_t e = 0; e < Et; ++e) r[e] *= an;
      }
      gemm(true, false, rows, Et, n, T(1), w.Qu.data() + l0, L, w.V.data(), Et, T(1), Rt, Et);
    }
    for (int64_t i = 0; i < n; ++i)
      store_row(w.Ctx.data() + i * Et, f.context, p.dtype,
                b * f.context_stride[0] + h * f.context_stride[1] + (t0 + i) * f.context_stride[2] +
                    e0 * f.context_stride[3],
                f.context_stride[3], Et);
  }
  for (int64_t l = 0; l < L; ++l)
    store_row(R + l * Et, f.rho, p.state_dtype,
              b * f.rho_stride[0] + h * f.rho_stride[1] + l * f.rho_stride[2] + e0 * f.rho_stride[3],
              f.rho_stride[3], Et);
  if (e0 == 0) std::memcpy(N_out, N, static_cast<size_t>(L) * sizeof(T));
}

template <class T>
void forward_all(const ForwardParams& f) {
  const Problem& p = f.p;
  const int64_t C = chunk_of(f.options);
  const int64_t BH = p.B * p.H;
  const int64_t tiles = forward_e_tiles(BH, p.E);
  const int64_t tile = (p.E + tiles - 1) / tiles;
  const int threads = resolve_threads(f.options.num_threads);
  // Every E tile of a (b,h) reads the initial rho_norm, which may be the very memory the final
  // one goes to (in-place update): the final N is written only after all tiles are done.
  std::vector<T> N_final(static_cast<size_t>(BH * p.L));
  BlasSingleThreaded blas;
  parallel_for(BH * tiles, threads, [&](int64_t item, int) {
    const int64_t bh = item / tiles, k = item % tiles;
    const int64_t e0 = k * tile, e1 = std::min(p.E, e0 + tile);
    if (e0 >= e1) return;
    thread_local ForwardWorkspace<T> w;
    forward_item<T>(f, bh / p.H, bh % p.H, e0, e1, C, w, N_final.data() + bh * p.L);
    if (w.bytes() > kKeptWorkspaceBytes) w.release();
  });
  for (int64_t bh = 0; bh < BH; ++bh)
    store_row(N_final.data() + bh * p.L, f.rho_norm, p.state_dtype,
              (bh / p.H) * f.rho_norm_stride[0] + (bh % p.H) * f.rho_norm_stride[1], f.rho_norm_stride[2], p.L);
}

// ---------------------------------------------------------------------------------------------
// Backward

template <class T>
struct BackwardWorkspace {
  std::vector<T> P, Pd, a, RZ, N, Bv, Nck, Nc, gwc, gwst, sst, Q, Qp, Qs, Qu, V, G, P23, P1, M, S, dq, dv, rows, rows2;
  std::vector<double> scratch;
  void release() { *this = BackwardWorkspace(); }
  size_t bytes() const {
    size_t n = 0;
    for (auto* v : {&P, &Pd, &a, &RZ, &N, &Bv, &Nck, &Nc, &gwc, &gwst, &sst, &Q, &Qp, &Qs, &Qu, &V, &G, &P23, &P1, &M, &S, &dq, &dv, &rows, &rows2})
      n += v->capacity() * sizeof(T);
    return n;
  }
  void size(int64_t T_, int64_t L, int64_t E, int64_t C, bool gw_in_grad_q) {
    P.resize((C + 1) * L);
    Pd.resize((C + 1) * L);
    a.resize(L);
    RZ.resize(2 * L * E);
    N.resize(L);
    Bv.resize(L);
    Nck.resize(((T_ + C - 1) / C) * L);
    Nc.resize(C * L);
    gwc.resize(C * L);
    if (!gw_in_grad_q) gwst.resize(T_ * L);
    sst.resize(C);
    Q.resize(C * L);
    Qp.resize(C * L);
    Qs.resize(C * L);
    Qu.resize(C * L);
    V.resize(C * E);
    G.resize(C * E);
    P23.resize(C * 2 * L);
    P1.resize(C * L);
    M.resize(C * C);
    S.resize(C * C);
    dq.resize(C * L);
    dv.resize(C * E);
    rows.resize(kBlock * L);
    rows2.resize(kBlock * 2 * L);
  }
};

template <class T>
void backward_item(const BackwardParams& g, int64_t b, int64_t h, int64_t C, BackwardWorkspace<T>& w,
                   T* dv_out /* [T × E] when Hv == 1, else null */, double* da /* [L] */) {
  const Problem& p = g.p;
  const int64_t L = p.L, E = p.E, T_ = p.T;
  // gw_t is needed in reverse order; it is parked in grad_q's own memory when grad_q holds T's
  // values exactly (float32 / float64), else in a [T × L] buffer.
  const bool gw_in_grad_q = (p.dtype == DType::float32 && sizeof(T) == 4) || (p.dtype == DType::float64 && sizeof(T) == 8);
  w.size(T_, L, E, C, gw_in_grad_q);
  auto gw_offset = [&](int64_t t) { return b * g.grad_q_stride[0] + h * g.grad_q_stride[1] + t * g.grad_q_stride[2]; };
  decay_tables(g.decay, p.decay_dtype, g.decay_stride, h, L, C, w.P.data(), w.Pd.data(), w.a.data(), w.scratch);
  const T* P = w.P.data();
  const T* Pd = w.Pd.data();
  const T* a = w.a.data();
  T* R = w.RZ.data();
  T* Z = R + L * E;
  T* N = w.N.data();
  std::fill(da, da + L, 0.0);
  for (int64_t l = 0; l < L; ++l) {
    if (g.rho0)
      load_row(R + l * E, g.rho0, p.state_dtype, b * g.rho0_stride[0] + h * g.rho0_stride[1] + l * g.rho0_stride[2],
               g.rho0_stride[3], E);
    else
      std::fill(R + l * E, R + (l + 1) * E, T(0));
  }
  std::fill(Z, Z + L * E, T(0));
  if (g.rho_norm0)
    load_row(N, g.rho_norm0, p.state_dtype, b * g.rho_norm0_stride[0] + h * g.rho_norm0_stride[1],
             g.rho_norm0_stride[2], L);
  else
    std::fill(N, N + L, T(0));

  auto pack_chunk = [&](int64_t t0, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t t = t0 + i;
      load_row(w.Q.data() + i * L, g.q, p.dtype, b * g.q_stride[0] + h * g.q_stride[1] + t * g.q_stride[2],
               g.q_stride[3], L);
      load_row(w.V.data() + i * E, g.v, p.dtype, b * g.v_stride[0] + h * g.v_stride[1] + t * g.v_stride[2],
               g.v_stride[3], E);
      load_row(w.G.data() + i * E, g.grad_context, p.dtype,
               b * g.grad_context_stride[0] + h * g.grad_context_stride[1] + t * g.grad_context_stride[2],
               g.grad_context_stride[3], E);
    }
    // M[i][j] = G_i · v_j
    gemm(false, true, n, n, E, T(1), w.G.data(), E, w.V.data(), E, T(0), w.M.data(), n);
  };

  // Pass 1, forward in time: N at chunk starts stored, chunk-start states recomputed, gw_t stored.
  for (int64_t t0 = 0; t0 < T_; t0 += C) {
    const int64_t n = std::min(C, T_ - t0);
    pack_chunk(t0, n);
    std::memcpy(w.Nck.data() + (t0 / C) * L, N, static_cast<size_t>(L) * sizeof(T));
    normaliser_scan(n, L, w.Q.data(), a, N, w.Qp.data(), w.sst.data(), w.Nc.data());
    // Per latent tile (kept in L2): P23[i] = [R_c G_i ; Z_c G_i], then
    // Z = a^n ⊙ Z + n·a^(n-1) ⊙ R_c and R = a^n ⊙ R + sum_j (q_j ⊙ a^(n-1-j)) ⊗ v_j.
    for (int64_t j = 0; j < n; ++j) {
      const T* q = w.Q.data() + j * L;
      const T* pj = P + (n - 1 - j) * L;
      T* qu = w.Qu.data() + j * L;
      for (int64_t l = 0; l < L; ++l) qu[l] = q[l] * pj[l];
    }
    const T* pn = P + n * L;
    const T* pdn = Pd + n * L;
    const int64_t lt = state_tile_rows(E);
    for (int64_t l0 = 0; l0 < L; l0 += lt) {
      const int64_t rows = std::min(lt, L - l0);
      gemm(false, true, n, rows, E, T(1), w.G.data(), E, R + l0 * E, E, T(0), w.P23.data() + l0, 2 * L);
      gemm(false, true, n, rows, E, T(1), w.G.data(), E, Z + l0 * E, E, T(0), w.P23.data() + L + l0, 2 * L);
      for (int64_t l = l0; l < l0 + rows; ++l) {
        T* r = R + l * E;
        T* z = Z + l * E;
        const T an = pn[l], kn = pdn[l];
        for (int64_t e = 0; e < E; ++e) {
          z[e] = an * z[e] + kn * r[e];
          r[e] *= an;
        }
      }
      gemm(true, false, rows, E, n, T(1), w.Qu.data() + l0, L, w.V.data(), E, T(1), R + l0 * E, E);
    }
    T* gw = w.gwc.data();
    chunk_mix_earlier(n, L, w.Q.data(), w.M.data(), P, gw, w.Qs.data(), w.P1.data());
    for (int64_t i = 0; i < n; ++i) {
      const T* rg = w.P23.data() + i * 2 * L;
      const T* zg = rg + L;
      const T* pi = P + i * L;
      const T* pdi = Pd + i * L;
      const T* qp = w.Qp.data() + i * L;
      const T* nt = w.Nc.data() + i * L;
      T* gwi = gw + i * L;
      for (int64_t l = 0; l < L; ++l) {
        gwi[l] = (pi[l] * rg[l] + gwi[l]) / (nt[l] + static_cast<T>(kEps));
        // decay gradient: sum_u u·a^(u-1) q'_u (R_c G_u)  +  <W_c, Z_c> = sum_u a^u q'_u (Z_c G_u)
        da[l] += static_cast<double>(qp[l] * (pdi[l] * rg[l] + pi[l] * zg[l]));
      }
      if (gw_in_grad_q) store_row(gwi, g.grad_q, p.dtype, gw_offset(t0 + i), g.grad_q_stride[3], L);
      else std::memcpy(w.gwst.data() + (t0 + i) * L, gwi, static_cast<size_t>(L) * sizeof(T));
    }
  }

  // A starts at dLoss/dR_T in R's buffer; the cross-chunk decay term closes with <GR, Z_end>.
  T* A = R;
  T* Bv = w.Bv.data();
  for (int64_t l = 0; l < L; ++l) {
    T* arow = A + l * E;
    if (g.grad_rho_out) {
      load_row(arow, g.grad_rho_out, p.state_dtype,
               b * g.grad_rho_out_stride[0] + h * g.grad_rho_out_stride[1] + l * g.grad_rho_out_stride[2],
               g.grad_rho_out_stride[3], E);
      const T* z = Z + l * E;
      T acc = 0;
      for (int64_t e = 0; e < E; ++e) acc += arow[e] * z[e];
      da[l] += static_cast<double>(acc);
    } else {
      std::fill(arow, arow + E, T(0));
    }
  }
  if (g.grad_rho_norm_out)
    load_row(Bv, g.grad_rho_norm_out, p.state_dtype,
             b * g.grad_rho_norm_out_stride[0] + h * g.grad_rho_norm_out_stride[1], g.grad_rho_norm_out_stride[2], L);
  else
    std::fill(Bv, Bv + L, T(0));

  // Pass 2, reverse in time: A_end of each chunk is in A.
  const int64_t nchunks = (T_ + C - 1) / C;
  for (int64_t c = nchunks - 1; c >= 0; --c) {
    const int64_t t0 = c * C, n = std::min(C, T_ - t0);
    pack_chunk(t0, n);
    // N_t, s_t, q'_t of the chunk again from its stored start N (the same arithmetic as pass 1)
    std::memcpy(N, w.Nck.data() + c * L, static_cast<size_t>(L) * sizeof(T));
    normaliser_scan(n, L, w.Q.data(), a, N, w.Qp.data(), w.sst.data(), w.Nc.data());
    for (int64_t i = 0; i < n; ++i) {
      T* gwi = w.gwc.data() + i * L;
      if (gw_in_grad_q) load_row(gwi, g.grad_q, p.dtype, gw_offset(t0 + i), g.grad_q_stride[3], L);
      else std::memcpy(gwi, w.gwst.data() + (t0 + i) * L, static_cast<size_t>(L) * sizeof(T));
    }
    chunk_scores(n, L, w.Qp.data(), w.Q.data(), P, w.S.data(), w.rows.data(), w.Qs.data());
    // Per latent tile of A (kept in L2): P1[i] = A_end v_i;
    // dv_i = (q_i ⊙ a^(n-1-i)) · A_end + sum_{u>i} S[u][i] G_u;  A = a^n ⊙ A + sum_u (q'_u ⊙ a^u) ⊗ G_u.
    for (int64_t i = 0; i < n; ++i) {
      const T* q = w.Q.data() + i * L;
      const T* qp = w.Qp.data() + i * L;
      const T* pe = P + (n - 1 - i) * L;
      const T* pu = P + i * L;
      T* qs = w.Qs.data() + i * L;
      T* qu = w.Qu.data() + i * L;
      for (int64_t l = 0; l < L; ++l) qs[l] = q[l] * pe[l], qu[l] = qp[l] * pu[l];
    }
    gemm(true, false, n, E, n, T(1), w.S.data(), n, w.G.data(), E, T(0), w.dv.data(), E);
    const T* pn = P + n * L;
    const int64_t lt = state_tile_rows(E);
    for (int64_t l0 = 0; l0 < L; l0 += lt) {
      const int64_t rows = std::min(lt, L - l0);
      T* At = A + l0 * E;
      gemm(false, true, n, rows, E, T(1), w.V.data(), E, At, E, T(0), w.P1.data() + l0, L);
      gemm(false, false, n, E, rows, T(1), w.Qs.data() + l0, L, At, E, T(1), w.dv.data(), E);
      for (int64_t l = 0; l < rows; ++l) {
        T* arow = At + l * E;
        const T an = pn[l0 + l];
        for (int64_t e = 0; e < E; ++e) arow[e] *= an;
      }
      gemm(true, false, rows, E, n, T(1), w.Qu.data() + l0, L, w.G.data(), E, T(1), At, E);
    }
    // dq intra part, and sum_{j<u} (u-j-1)·a^(u-j-2) q'_u q_j M[u][j] into da
    chunk_mix_later(n, L, w.Qp.data(), w.Q.data(), w.M.data(), P, Pd, w.dq.data(), da, w.P23.data(), w.rows2.data());
    for (int64_t i = n - 1; i >= 0; --i) {
      const T* q = w.Q.data() + i * L;
      const T* qp = w.Qp.data() + i * L;
      const T* gw = w.gwc.data() + i * L;
      const T* nt = w.Nc.data() + i * L;
      const T* p1 = w.P1.data() + i * L;
      const T* pe = P + (n - 1 - i) * L;
      const T* pde = Pd + (n - 1 - i) * L;
      const T s = w.sst[i], inv_s = T(1) / s;
      double dot = 0;
      for (int64_t l = 0; l < L; ++l) dot += static_cast<double>(gw[l]) * static_cast<double>(q[l] * inv_s);
      const T gw_dot_w = static_cast<T>(dot);
      T* dq = w.dq.data() + i * L;
      for (int64_t l = 0; l < L; ++l) {
        dq[l] += (gw[l] - gw_dot_w) * inv_s + Bv[l] + pe[l] * p1[l];
        // decay gradient: B_{t+1} N_t, and sum_j (n-1-j)·a^(n-2-j) q_j (A_end v_j)
        da[l] += static_cast<double>(Bv[l] * nt[l] + pde[l] * q[l] * p1[l]);
        Bv[l] = -qp[l] * gw[l] + a[l] * Bv[l];
      }
    }
    for (int64_t i = 0; i < n; ++i)
      store_row(w.dq.data() + i * L, g.grad_q, p.dtype,
                b * g.grad_q_stride[0] + h * g.grad_q_stride[1] + (t0 + i) * g.grad_q_stride[2], g.grad_q_stride[3], L);
    if (dv_out) {
      std::memcpy(dv_out + t0 * E, w.dv.data(), static_cast<size_t>(n * E) * sizeof(T));
    } else {
      for (int64_t i = 0; i < n; ++i)
        store_row(w.dv.data() + i * E, g.grad_v, p.dtype,
                  b * g.grad_v_stride[0] + h * g.grad_v_stride[1] + (t0 + i) * g.grad_v_stride[2],
                  g.grad_v_stride[3], E);
    }
  }
  if (g.grad_rho0)
    for (int64_t l = 0; l < L; ++l)
      store_row(A + l * E, g.grad_rho0, p.state_dtype,
                b * g.grad_rho0_stride[0] + h * g.grad_rho0_stride[1] + l * g.grad_rho0_stride[2],
                g.grad_rho0_stride[3], E);
  if (g.grad_rho_norm0)
    store_row(Bv, g.grad_rho_norm0, p.state_dtype, b * g.grad_rho_norm0_stride[0] + h * g.grad_rho_norm0_stride[1],
              g.grad_rho_norm0_stride[2], L);
}

template <class T>
void backward_all(const BackwardParams& g) {
  const Problem& p = g.p;
  const int64_t C = chunk_of(g.options);
  const int64_t BH = p.B * p.H;
  const int threads = resolve_threads(g.options.num_threads);
  // Cross-item sums happen after the parallel part, in a fixed order: dv over heads (Hv = 1),
  // da over the batch.
  std::vector<double> da_part(static_cast<size_t>(BH * p.L));
  std::vector<T> dv_part(p.Hv == 1 && p.H > 1 ? static_cast<size_t>(BH * p.T * p.E) : 0);
  BlasSingleThreaded blas;
  parallel_for(BH, threads, [&](int64_t bh, int) {
    T* dv_out = dv_part.empty() ? nullptr : dv_part.data() + bh * p.T * p.E;
    thread_local BackwardWorkspace<T> w;
    backward_item<T>(g, bh / p.H, bh % p.H, C, w, dv_out, da_part.data() + bh * p.L);
    if (w.bytes() > kKeptWorkspaceBytes) w.release();
  });
  if (!dv_part.empty()) {
    std::vector<T> row(static_cast<size_t>(p.E));
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t t = 0; t < p.T; ++t) {
        std::fill(row.begin(), row.end(), T(0));
        for (int64_t h = 0; h < p.H; ++h) {
          const T* src = dv_part.data() + ((b * p.H + h) * p.T + t) * p.E;
          for (int64_t e = 0; e < p.E; ++e) row[e] += src[e];
        }
        store_row(row.data(), g.grad_v, p.dtype, b * g.grad_v_stride[0] + t * g.grad_v_stride[2], g.grad_v_stride[3],
                  p.E);
      }
  }
  std::vector<double> da(static_cast<size_t>(p.L));
  for (int64_t h = 0; h < p.H; ++h) {
    std::fill(da.begin(), da.end(), 0.0);
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t l = 0; l < p.L; ++l) da[l] += da_part[(b * p.H + h) * p.L + l];
    store_row(da.data(), g.grad_decay, p.decay_dtype, h * g.grad_decay_stride[0], g.grad_decay_stride[1], p.L);
  }
}

// ---------------------------------------------------------------------------------------------
// Step: one token, in place, one pass over the state: read row l, then update it.

// v and the context accumulator live on the stack up to this E (SPEC.md's E is 64…1024), so a
// step allocates nothing, on whichever pool thread its items land; wider E uses thread-local
// buffers that grow once per thread.
constexpr int64_t kStepStackE = 2048;

template <class S>
void step_item(const StepParams& sp, int64_t b, int64_t h) {
  const Problem& p = sp.p;
  const int64_t L = p.L, E = p.E;
  S v_stack[kStepStackE], c_stack[kStepStackE];
  thread_local std::vector<S> v_heap, c_heap;
  S* v = v_stack;
  S* c = c_stack;
  if (E > kStepStackE) {
    if (static_cast<int64_t>(v_heap.size()) < E) v_heap.resize(E), c_heap.resize(E);
    v = v_heap.data();
    c = c_heap.data();
  }
  load_row(v, sp.v, p.dtype, b * sp.v_stride[0] + h * sp.v_stride[1], sp.v_stride[2], E);
  const int64_t q0 = b * sp.q_stride[0] + h * sp.q_stride[1], ql_stride = sp.q_stride[2];
  const int64_t a0 = h * sp.decay_stride[0], al_stride = sp.decay_stride[1];
  double s = kEps;
  for (int64_t l = 0; l < L; ++l) s += load_as_double(sp.q, p.dtype, q0 + l * ql_stride);
  const S inv_s = static_cast<S>(1.0 / s);
  std::fill(c, c + E, S(0));
  S* R = static_cast<S*>(sp.rho) + b * sp.rho_stride[0] + h * sp.rho_stride[1];
  S* N = static_cast<S*>(sp.rho_norm) + b * sp.rho_norm_stride[0] + h * sp.rho_norm_stride[1];
  const int64_t rl = sp.rho_stride[2], re = sp.rho_stride[3], nl = sp.rho_norm_stride[2];
  for (int64_t l = 0; l < L; ++l) {
    S* r = R + l * rl;
    const S ql = static_cast<S>(load_as_double(sp.q, p.dtype, q0 + l * ql_stride));
    const S al = static_cast<S>(load_as_double(sp.decay, p.decay_dtype, a0 + l * al_stride));
    const S n_old = N[l * nl];
    const S coef = ql * inv_s / (n_old + static_cast<S>(kEps));
    if (re == 1) {
      for (int64_t e = 0; e < E; ++e) {
        c[e] += coef * r[e];
        r[e] = al * r[e] + ql * v[e];
      }
    } else {
      for (int64_t e = 0; e < E; ++e) {
        c[e] += coef * r[e * re];
        r[e * re] = al * r[e * re] + ql * v[e];
      }
    }
    N[l * nl] = al * n_old + ql;
  }
  store_row(c, sp.context, p.dtype, b * sp.context_stride[0] + h * sp.context_stride[1], sp.context_stride[2], E);
}

template <class S>
void step_all(const StepParams& sp) {
  const Problem& p = sp.p;
  const int threads = resolve_threads(sp.options.num_threads);
  // Small steps are not worth waking threads for.
  const int use = p.B * p.H * p.L * p.E < (int64_t(1) << 16) ? 1 : threads;
  // A capture of one pointer fits std::function's local storage: no allocation per call.
  parallel_for(p.B * p.H, use, [params = &sp](int64_t bh, int) {
    step_item<S>(*params, bh / params->p.H, bh % params->p.H);
  });
}

}  // namespace

class CpuFastBackend final : public BackendImpl {
 public:
  Backend id() const override { return Backend::cpu; }
  Device device() const override { return Device::cpu; }

  void forward(const ForwardParams& f) const override {
    guarded("forward", f.p, [&] {
      if (f.p.dtype == DType::float64) forward_all<double>(f);
      else forward_all<float>(f);
    });
  }
  void backward(const BackwardParams& g) const override {
    guarded("backward", g.p, [&] {
      if (g.p.dtype == DType::float64) backward_all<double>(g);
      else backward_all<float>(g);
    });
  }
  void step(const StepParams& s) const override {
    guarded("step", s.p, [&] {
      if (s.p.state_dtype == DType::float64) step_all<double>(s);
      else step_all<float>(s);
    });
  }

 private:
  // Workspace that cannot be allocated is the caller's out_of_memory, not a std::bad_alloc.
  template <class F>
  static void guarded(const char* op, const Problem& p, F&& body) {
    try {
      body();
    } catch (const std::bad_alloc&) {
      throw Error(ErrorKind::out_of_memory,
                  std::string("rhoscan.") + op + " (cpu backend): cannot allocate the workspace for B=" +
                      std::to_string(p.B) + " H=" + std::to_string(p.H) + " T=" + std::to_string(p.T) +
                      " L=" + std::to_string(p.L) + " E=" + std::to_string(p.E));
    }
  }
};

}  // namespace cpu_fast

const BackendImpl& cpu_fast_backend() {
  static const cpu_fast::CpuFastBackend backend;
  return backend;
}

}  // namespace rhoscan::detail
