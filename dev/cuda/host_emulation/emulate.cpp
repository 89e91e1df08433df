// Host emulation check of CUDA kernel changes, for a machine without a GPU: runs the working
// tree's normaliser scan (norm_chunk_sums, norm_carry, norm_apply) and bwd_local against the
// same kernels at a base revision (extract.py cuts both out of the sources), and the fused token
// and chunk sums (norm_sums_kernel + token_sum_reduce_kernel: s against a float64 sum, the chunk
// sums bitwise norm_chunk_sums_kernel<T, 2>'s), on small random
// problems with tails, chunk 1, decay exactly 0 and 1, odd L and E, both bwd_local paths (E loop
// and readback), and odd grid sizes (grid-stride loops). Outputs start as NaN, so an element
// left unwritten shows. It checks index logic and synchronisation, not GPU rounding or speed:
// dev/cuda/norm_scan.cu and the CUDA tests do that on the GPU.
//   dev/cuda/host_emulation/run.sh [BASE_REV]      (from the repository root)
#include <cstdio>
#include <random>

#include "kernels.h"

namespace {

std::mt19937 rng(7);
std::vector<float> uniform(size_t n, float lo, float hi, float zeros = 0.0f) {
  std::uniform_real_distribution<float> U(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = U(rng) < zeros ? 0.0f : lo + (hi - lo) * U(rng);
  return v;
}
std::vector<float> decays(size_t n) {  // every fifth exactly 0, every fifth exactly 1
  auto a = uniform(n, 0.0f, 1.0f);
  for (size_t i = 0; i < n; ++i) a[i] = i % 5 == 0 ? 0.0f : i % 5 == 1 ? 1.0f : a[i];
  return a;
}
std::vector<float> nans(size_t n) { return std::vector<float>(n, std::nanf("")); }
Str4 str4(const float* p, int64_t s0, int64_t s1, int64_t s2) {
  Str4 r;
  r.p = p;
  r.s[0] = s0, r.s[1] = s1, r.s[2] = s2, r.s[3] = 1;
  return r;
}
Str3 str3(const float* p, int64_t s0, int64_t s1) {
  Str3 r;
  r.p = p;
  r.s[0] = s0, r.s[1] = s1, r.s[2] = 1;
  return r;
}
Dims dims(int64_t H, int64_t nbh, int64_t T, int64_t L, int64_t E, int64_t C) {
  Dims d;
  d.H = H, d.T = T, d.L = L, d.E = E, d.C = C, d.nC = (T + C - 1) / C, d.bh0 = 0, d.nbh = nbh, d.nsplit = 1;
  d.Lp = L, d.Ep = E;
  return d;
}

// max |x - y| / max |y| over the elements, and whether NaN sits in the same places.
bool same(const char* what, const std::vector<float>& x, const std::vector<float>& y) {
  double diff = 0, scale = 0;
  size_t nan = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) || std::isnan(y[i])) {
      nan += std::isnan(x[i]) != std::isnan(y[i]);
      continue;
    }
    diff = std::max(diff, double(std::fabs(x[i] - y[i])));
    scale = std::max(scale, double(std::fabs(y[i])));
  }
  const double rel = scale > 0 ? diff / scale : diff;
  if (nan == 0 && rel <= 1e-5) return true;
  std::printf("    %s: %zu NaN mismatches, max difference / max %.3g\n", what, nan, rel);
  return false;
}

// bf16 operands: each element within one bf16 rounding step (relative 2^-7) of the other's,
// since the two kernels may compute the float before rounding in a different order.
bool same_bf16(const char* what, const std::vector<float>& x, const std::vector<float>& y) {
  size_t nan = 0, off = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) || std::isnan(y[i])) {
      nan += std::isnan(x[i]) != std::isnan(y[i]);
      continue;
    }
    off += std::fabs(x[i] - y[i]) > std::ldexp(std::fabs(y[i]), -7);
  }
  if (nan == 0 && off == 0) return true;
  std::printf("    %s: %zu NaN mismatches, %zu elements more than one bf16 step apart\n", what, nan, off);
  return false;
}

// q's layouts: [B,H,T,L] and [B,T,H,L] (norm_apply's latent pairs when L is even), [B,H,L,T]
// (latent stride T: single latents) and [B,H,T,L] one element past an aligned start (odd pointer:
// single latents).
enum class Layout { bhtl, bthl, bhlt, bhtl_odd };
const char* layout_name(Layout y) {
  return y == Layout::bhtl ? "" : y == Layout::bthl ? " [B,T,H,L]" : y == Layout::bhlt ? " [B,H,L,T]" : " odd pointer";
}

std::vector<float> floats(const std::vector<__nv_bfloat16>& x) {
  std::vector<float> f(x.size());
  for (size_t i = 0; i < x.size(); ++i) f[i] = __bfloat162float(x[i]);
  return f;
}
template <typename X>
std::vector<float> as_floats(const std::vector<X>& x) {
  if constexpr (std::is_same_v<X, float>)
    return x;
  else
    return floats(x);
}
// Bitwise equal (NaN to NaN): the paired kernels do the old ones' arithmetic, operation for operation.
template <typename X>
bool bitwise(const char* what, const std::vector<X>& x, const std::vector<X>& y) {
  size_t off = 0;
  for (size_t i = 0; i < x.size(); ++i) off += std::memcmp(&x[i], &y[i], sizeof(X)) != 0;
  if (off == 0) return true;
  std::printf("    %s: %zu of %zu elements not bitwise equal\n", what, off, x.size());
  return false;
}

// s against a float64 evaluation of eps + sum_l q_t[l] (q as the kernels read it): each element
// within `rel` of the reference, relative, and no NaN (an unwritten element).
template <typename Q>
std::vector<double> token_sums_f64(const std::vector<Q>& qbuf, const Str4& qs, int64_t H, int64_t nbh, int64_t T,
                                   int64_t L) {
  std::vector<double> ref(nbh * T);
  const Q* q = static_cast<const Q*>(qs.p);
  for (int64_t bh = 0; bh < nbh; ++bh)
    for (int64_t t = 0; t < T; ++t) {
      double acc = 0;
      for (int64_t l = 0; l < L; ++l) acc += to_float(q[qs.at(bh / H, bh % H, t, l)]);
      ref[bh * T + t] = acc + 1e-6;
    }
  return ref;
}
bool near_f64(const char* what, const std::vector<float>& x, const std::vector<double>& ref, double rel = 1e-6,
              double* worst_out = nullptr) {
  size_t off = 0;
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double e = std::fabs(double(x[i]) - ref[i]) / std::fabs(ref[i]);
    if (!(e <= rel)) ++off;
    if (!(e <= worst)) worst = e;
  }
  if (worst_out) *worst_out = worst;
  if (off == 0) return true;
  std::printf("    %s: %zu of %zu elements off the float64 sum by more than %.0e relative (worst %.3g)\n", what, off,
              x.size(), rel, worst);
  return false;
}

// The paired path's token sums and chunk sums as launch_norm_scan makes them: norm_sums_kernel
// (`grid` blocks) and token_sum_reduce_kernel into s and Nc, or, where one latent block covers L,
// norm_sums_kernel alone writing s. two_kernels: the partials and the reduce at any L (the
// single-block path's reference: the same bits).
template <typename Q>
void norm_sums(const Dims& d, const Str4& qs, const float* a, float* Nc, float* s, unsigned grid = 3,
               bool two_kernels = false) {
  const int64_t nlb = norm_sums_blocks(d.L);
  std::vector<float> parts = nans(d.nbh * nlb * d.T);
  float* direct = nlb == 1 && !two_kernels ? s : nullptr;
  emu::launch(grid, norm_sums_threads(d.L), norm_sums_smem(d.L),
              [&] { norm_sums_kernel<Q>(d, qs, a, Nc, parts.data(), nlb, direct); });
  if (direct == nullptr) emu::launch(2, 64, 0, [&] { token_sum_reduce_kernel(d, parts.data(), nlb, s); });
}

// The working tree's token sums and normaliser scan on one problem, with q as Q and Qp as QpT:
// against the kernels at PREV_REV bitwise, and (float Qp) against the token-by-token kernel at
// BASE_REV within 1e-5. `single` forces one latent per thread where pairs would be taken.
// With latent pairs the token sums come from norm_sums_kernel (launch_norm_scan's paired path),
// not bitwise token_sum's: there s is held to the float64 sum (1e-6 relative), and what depends on
// it (Qp, Xq) to PREV_REV's within 1e-5 / a bf16 step, also where PREV_REV's norm_apply is fed
// the same s (bitwise until norm_apply's N went over its batches by a^8 N + z, for norm_scores_mma);
// the chunk sums, N, rho_norm and Kq stay bitwise PREV_REV's.
template <typename Q, typename QpT>
bool norm_scan_case(int64_t H, int64_t nbh, int64_t T, int64_t L, int64_t C, Layout layout, bool with_n0, bool ops,
                    bool single = false, bool with_kq = true) {
  Dims d = dims(H, nbh, T, L, 1, C);
  d.Lp = ops ? (L + 63) / 64 * 64 : L;
  const int64_t B = nbh / H;
  const auto qf = uniform(nbh * T * L + 1, 0.0f, 1.0f, 0.8f), a = decays(H * L), n0 = uniform(nbh * L, 0.0f, 2.0f);
  std::vector<Q> qbuf(qf.size());
  for (size_t i = 0; i < qf.size(); ++i) qbuf[i] = from_float<Q>(qf[i]);
  Str4 qs;
  qs.p = qbuf.data() + (layout == Layout::bhtl_odd);
  const int64_t strides[4][4] = {{H * T * L, T * L, L, 1}, {T * H * L, L, H * L, 1}, {H * L * T, L * T, 1, T},
                                 {H * T * L, T * L, L, 1}};
  for (int k = 0; k < 4; ++k) qs.s[k] = strides[int(layout)][k];
  const Str3 n0s = with_n0 ? str3(n0.data(), H * L, L) : Str3{};
  const bool pairs = !single && norm_pairs_ok<Q>(d, qs);
  struct Out {
    std::vector<float> s, Nc, nout;
    std::vector<QpT> Qp;
    std::vector<__nv_bfloat16> Xq, Kq;
  } o[3];  // the working tree, PREV_REV, BASE_REV
  const int runs = std::is_same_v<QpT, float> ? 3 : 2;
  for (int k = 0; k < runs; ++k) {
    const __nv_bfloat16 nan16 = __float2bfloat16_rn(std::nanf(""));
    o[k] = {nans(nbh * T), nans(nbh * (d.nC + 1) * L), nans(B * H * L), std::vector<QpT>(nbh * T * L, from_float<QpT>(std::nanf(""))),
            std::vector<__nv_bfloat16>(nbh * T * d.Lp, nan16), {}};
    o[k].Kq = o[k].Xq;
    __nv_bfloat16 *Xq = ops ? o[k].Xq.data() : nullptr, *Kq = ops && with_kq ? o[k].Kq.data() : nullptr;
    const Str3 nout = str3(o[k].nout.data(), H * L, L);
    QpT* Qp = o[k].Qp.data();
    float *Nc = o[k].Nc.data(), *s = o[k].s.data();
    if (k == 0) {
      const int V = pairs ? kNormVec : 1;
      if (pairs) {
        norm_sums<Q>(d, qs, a.data(), Nc, s);
      } else {
        emu::launch(3, 64, 0, [&] { token_sum_kernel<Q>(d, qs, s); });
        emu::launch(4, 7, 0, [&] { norm_chunk_sums_kernel<Q, 1>(d, qs, a.data(), Nc); });
      }
      // (the launcher's batch: kCarryBatchFew where the chunks are few)
      if (d.nC <= kCarryBatchFew)
        emu::launch(2, 3, 0, [&] { norm_carry_kernel<kCarryBatchFew>(d, a.data(), n0s, Nc, nout); });
      else
        emu::launch(2, 3, 0, [&] { norm_carry_kernel<kCarryBatch>(d, a.data(), n0s, Nc, nout); });
      auto apply = [&](auto kernel) { emu::launch(5, 6, 0, [&] { kernel(d, qs, a.data(), s, Nc, Qp, Xq, Kq); }); };
      if (V == 2 && ops && Kq)
        apply(norm_apply_kernel<Q, QpT, kNormVec, true, true>);
      else if (V == 2 && ops)
        apply(norm_apply_kernel<Q, QpT, kNormVec, true, false>);
      else if (V == 2)
        apply(norm_apply_kernel<Q, QpT, kNormVec, false, false>);
      else if (ops && Kq)
        apply(norm_apply_kernel<Q, QpT, 1, true, true>);
      else if (ops)
        apply(norm_apply_kernel<Q, QpT, 1, true, false>);
      else
        apply(norm_apply_kernel<Q, QpT, 1, false, false>);
    } else if (k == 1) {
      emu::launch(2, 96, 0, [&] { prev::token_sum_kernel<Q>(d, qs, s); });
      emu::launch(4, 7, 0, [&] { prev::norm_chunk_sums_kernel<Q>(d, qs, a.data(), Nc); });
      emu::launch(2, 3, 0, [&] { prev::norm_carry_kernel(d, a.data(), n0s, Nc, nout); });
      emu::launch(5, 6, 0, [&] { prev::norm_apply_kernel<Q, QpT>(d, qs, a.data(), s, Nc, Qp, Xq, Kq); });
    } else if constexpr (std::is_same_v<QpT, float>) {
      o[k].s = o[1].s;  // the same s: the comparison is of the scan
      s = o[k].s.data();
      emu::launch(3, 5, 0, [&] { norm_scan_kernel_old<Q>(d, qs, a.data(), n0s, s, Qp, Nc, nout, Xq, Kq); });
    }
  }
  bool ok = bitwise("N", o[0].Nc, o[1].Nc) & bitwise("rho_norm", o[0].nout, o[1].nout) & bitwise("Kq", o[0].Kq, o[1].Kq);
  if (!pairs) {  // (Qp and Xq: norm_apply carries N over its batches of 8 tokens by a^8 N + z since
                 // norm_scores_mma came, and takes each batch's a^i from the squares; Kq is unchanged)
    ok &= bitwise("s", o[0].s, o[1].s) & same("Qp", as_floats(o[0].Qp), as_floats(o[1].Qp)) &
          same_bf16("Xq", floats(o[0].Xq), floats(o[1].Xq));
  } else {
    ok &= near_f64("s", o[0].s, token_sums_f64(qbuf, qs, H, nbh, T, L)) &
          same("Qp (PREV_REV's s)", as_floats(o[0].Qp), as_floats(o[1].Qp)) &
          same_bf16("Xq (PREV_REV's s)", floats(o[0].Xq), floats(o[1].Xq));
    // PREV_REV's norm_apply with this s and Nc: Qp and Xq bitwise
    std::vector<QpT> Qp(o[0].Qp.size(), from_float<QpT>(std::nanf("")));
    std::vector<__nv_bfloat16> Xq(o[0].Xq.size(), __float2bfloat16_rn(std::nanf("")));
    std::vector<__nv_bfloat16> Kq = Xq;
    __nv_bfloat16 *xq = ops ? Xq.data() : nullptr, *kq = ops && with_kq ? Kq.data() : nullptr;
    emu::launch(5, 6, 0, [&] {
      prev::norm_apply_kernel<Q, QpT>(d, qs, a.data(), o[0].s.data(), o[0].Nc.data(), Qp.data(), xq, kq);
    });
    ok &= same("Qp (the same s)", as_floats(o[0].Qp), as_floats(Qp)) & same_bf16("Xq (the same s)", floats(o[0].Xq), floats(Xq));
  }
  if (runs == 3)
    ok &= same("Qp", as_floats(o[0].Qp), as_floats(o[2].Qp)) & same("N", o[0].Nc, o[2].Nc) &
          same("rho_norm", o[0].nout, o[2].nout) & same_bf16("Xq", floats(o[0].Xq), floats(o[2].Xq)) &
          same_bf16("Kq", floats(o[0].Kq), floats(o[2].Kq));
  std::printf("norm_scan %s q, %s Qp, H%lld pairs%lld T%lld L%lld C%lld%s%s%s, %s: %s\n",
              std::is_same_v<Q, float> ? "f32" : "bf16", std::is_same_v<QpT, float> ? "f32" : "bf16", (long long)H,
              (long long)nbh, (long long)T, (long long)L, (long long)C, layout_name(layout), with_n0 ? " n0" : "",
              ops ? (with_kq ? " Xq+Kq" : " Xq") : "", pairs ? "latent pairs" : "single latents", ok ? "same" : "DIFFERENT");
  return ok;
}

// norm_sums_kernel + token_sum_reduce_kernel alone: s within 1e-6 (relative) of the float64 sum
// and the chunk sums (Nc rows 1..nC before the carry) bitwise norm_chunk_sums_kernel<Q, 2>'s.
// q [B,H,T,L] (or [B,T,H,L]) with every `zero_every`-th token row all zero (s = eps there).
template <typename Q>
bool norm_sums_case(int64_t H, int64_t nbh, int64_t T, int64_t L, int64_t C, unsigned grid, bool bthl = false,
                    int zero_every = 5) {
  const Dims d = dims(H, nbh, T, L, 1, C);
  auto qf = uniform(nbh * T * L, 0.0f, 1.0f, 0.5f);
  std::vector<Q> qbuf(qf.size());
  for (size_t i = 0; i < qf.size(); ++i) qbuf[i] = from_float<Q>(qf[i]);
  const Str4 qs = bthl ? str4(reinterpret_cast<const float*>(qbuf.data()), T * H * L, L, H * L)
                       : str4(reinterpret_cast<const float*>(qbuf.data()), H * T * L, T * L, L);
  const int64_t B = nbh / H;
  for (int64_t bh = 0; bh < nbh; ++bh)
    for (int64_t t = 0; t < T; ++t)
      if ((bh * T + t) % zero_every == 1)
        for (int64_t l = 0; l < L; ++l) qbuf[qs.at(bh / H, bh % H, t, l)] = from_float<Q>(0.0f);
  const auto a = decays(H * L);
  std::vector<float> s = nans(nbh * T), Nc = nans(nbh * (d.nC + 1) * L), Nc_ref = Nc;
  if (!norm_pairs_ok<Q>(d, qs)) {
    std::printf("norm_sums L%lld: not a paired layout (a bug of the case)\n", (long long)L);
    return false;
  }
  norm_sums<Q>(d, qs, a.data(), Nc.data(), s.data(), grid);
  emu::launch(4, 7, 0, [&] { norm_chunk_sums_kernel<Q, kNormVec>(d, qs, a.data(), Nc_ref.data()); });
  // one latent block: norm_sums' own s against the partials and the reduce (the same bits)
  std::vector<float> s2 = nans(nbh * T), Nc2 = nans(nbh * (d.nC + 1) * L);
  const bool direct = norm_sums_blocks(L) == 1;
  if (direct) norm_sums<Q>(d, qs, a.data(), Nc2.data(), s2.data(), grid, true);
  double worst = 0;
  const bool ok = near_f64("s", s, token_sums_f64(qbuf, qs, H, nbh, T, L), 1e-6, &worst) &
                  bitwise("chunk sums", Nc, Nc_ref) & (!direct || bitwise("s, one block against two kernels", s, s2));
  std::printf("norm_sums %s q, B%lld H%lld T%lld L%lld C%lld%s: %lld latent blocks of %d threads%s, grid %u: %s (s: worst %.1e relative)\n",
              std::is_same_v<Q, float> ? "f32" : "bf16", (long long)B, (long long)H, (long long)T, (long long)L,
              (long long)C, bthl ? " [B,T,H,L]" : "", (long long)norm_sums_blocks(L), norm_sums_threads(L),
              direct ? " (s written by norm_sums, bitwise the reduce's)" : "", grid,
              ok ? "same" : "DIFFERENT", worst);
  return ok;
}

// gc_t from a kernel's partials [pairs][T][nlt] (the sum gc_reduce_kernel forms): the two layouts
// differ in the latent block width (nlt), so their sums are compared, not the partials.
std::vector<float> gc_sums(const std::vector<float>& gcp, int64_t rows, int64_t nlt) {
  std::vector<float> gc(rows);
  for (int64_t x = 0; x < rows; ++x) {
    double acc = 0;
    for (int64_t lt = 0; lt < nlt; ++lt) acc += gcp[x * nlt + lt];
    gc[x] = static_cast<float>(acc);
  }
  return gc;
}

bool bwd_local_case(int64_t H, int64_t nbh, int64_t T, int64_t L, int64_t E, int64_t C, bool readback,
                    unsigned grid = 3) {
  const Dims d = dims(H, nbh, T, L, E, C);
  const int64_t nC = d.nC, nlt[2] = {(L + kLocalLTOld - 1) / kLocalLTOld, (L + kLocalLT - 1) / kLocalLT};
  const auto q = uniform(nbh * T * L, 0.0f, 1.0f, 0.7f), v = uniform(nbh * T * E, -1, 1), g = uniform(nbh * T * E, -1, 1);
  const auto a = decays(H * L), Qp = uniform(nbh * T * L, 0, 1), s = uniform(nbh * T, 1, 2);
  const auto Nc = uniform(nbh * (nC + 1) * L, 0, 3), Hs = uniform(nbh * nC * L * E, -1, 1);
  const auto dHs = uniform(nbh * nC * L * E, -1, 1), M = uniform(nbh * nC * C * C, -1, 1);
  const auto W = uniform(nbh * T * L, -1, 1), U = uniform(nbh * T * L, -1, 1), HdH = uniform(nbh * nC * L, -1, 1);
  const Str4 qs = str4(q.data(), H * T * L, T * L, L), vs = str4(v.data(), H * T * E, T * E, E);
  const Str4 gs = str4(g.data(), H * T * E, T * E, E);
  const float *Wr = readback ? W.data() : nullptr, *Ur = readback ? U.data() : nullptr;
  const float* HdHr = readback ? HdH.data() : nullptr;
  struct Out {
    std::vector<float> gcp, dqp, dap, Bsum, Zs;
  } o[2];
  for (int k = 0; k < 2; ++k) {
    o[k] = {nans(nbh * T * nlt[k]), nans(nbh * T * L), nans(nbh * nC * L), nans(nbh * nC * L), nans(nbh * nC * L)};
    auto run = [&](auto kernel, size_t smem, unsigned grid) {
      emu::launch(grid, kLocalThreads, smem, [&] {
        kernel(d, qs, vs, gs, a.data(), Qp.data(), s.data(), Nc.data(), Hs.data(), dHs.data(), M.data(), Wr, Ur, HdHr,
               o[k].gcp.data(), o[k].dqp.data(), o[k].dap.data(), o[k].Bsum.data(), o[k].Zs.data());
      });
    };
    if (k == 0)
      run(bwd_local_kernel_old<float>, sizeof(LocalSmemOld), 2);
    else if (readback)  // version 2 (version 5, the 16-bit path's, is run_mma.sh's: bwd_local_case)
      run(bwd_local_kernel<float, true, 2>, sizeof(LocalSmem), grid);
    else
      run(bwd_local_kernel<float, false>, sizeof(LocalSmem), grid);
  }
  const bool ok = same("gc", gc_sums(o[1].gcp, nbh * T, nlt[1]), gc_sums(o[0].gcp, nbh * T, nlt[0])) &
                  same("dq partial", o[1].dqp, o[0].dqp) & same("da", o[1].dap, o[0].dap) &
                  same("Bsum", o[1].Bsum, o[0].Bsum) & same("Zs", o[1].Zs, o[0].Zs);
  std::printf("bwd_local H%lld pairs%lld T%lld L%lld E%lld C%lld %s grid%u: %s\n", (long long)H, (long long)nbh,
              (long long)T, (long long)L, (long long)E, (long long)C, readback ? "readback" : "E loop", grid,
              ok ? "same" : "DIFFERENT");
  return ok;
}

}  // namespace

int main() {
  int bad = 0;
  // EMU_ONLY=norm_sums: the fused token and chunk sums' cases only (mutants_norm_sums.sh)
  const char* only = std::getenv("EMU_ONLY");
  const bool sums_only = only && std::strcmp(only, "norm_sums") == 0;
  using bf16 = __nv_bfloat16;
  constexpr auto bhtl = Layout::bhtl, bthl = Layout::bthl, bhlt = Layout::bhlt, odd = Layout::bhtl_odd;
  if (!sums_only) {
    bad += !norm_scan_case<float, float>(3, 6, 300, 70, 64, bhtl, true, true);
    bad += !norm_scan_case<float, float>(3, 6, 300, 70, 64, bhtl, true, true, true);
    bad += !norm_scan_case<float, float>(2, 4, 200, 13, 32, bthl, false, true);
    bad += !norm_scan_case<float, float>(2, 4, 200, 14, 32, bthl, false, true);
    bad += !norm_scan_case<float, float>(2, 2, 129, 33, 64, bhtl, true, false);
    bad += !norm_scan_case<float, float>(2, 2, 129, 34, 64, bhtl, true, false);
    bad += !norm_scan_case<float, float>(1, 1, 1, 64, 64, bhtl, true, true);
    bad += !norm_scan_case<float, float>(2, 2, 0, 10, 64, bhtl, true, true);
    bad += !norm_scan_case<float, float>(2, 2, 50, 4, 1, bhtl, true, true);
    bad += !norm_scan_case<float, float>(1, 2, 64, 7, 64, bhtl, false, true);
    bad += !norm_scan_case<float, float>(1, 1, 2000, 9, 17, bhtl, true, true);
    bad += !norm_scan_case<float, float>(1, 1, 2000, 10, 17, bhtl, true, true);
    bad += !norm_scan_case<float, float>(2, 2, 77, 20, 7, bhlt, true, true);
    bad += !norm_scan_case<float, float>(2, 2, 77, 20, 7, odd, true, false);
    bad += !norm_scan_case<float, float>(1, 2, 100, 130, 64, bhtl, false, true);
    bad += !norm_scan_case<bf16, float>(3, 6, 300, 70, 64, bhtl, true, true);
    bad += !norm_scan_case<bf16, float>(2, 2, 77, 21, 13, bthl, true, true);
    bad += !norm_scan_case<bf16, float>(2, 2, 77, 20, 7, odd, true, true);
    bad += !norm_scan_case<bf16, bf16>(3, 6, 300, 70, 64, bhtl, true, true);
    bad += !norm_scan_case<bf16, bf16>(2, 4, 200, 66, 32, bthl, false, true);
    bad += !norm_scan_case<bf16, bf16>(2, 4, 200, 13, 32, bthl, false, true);
    bad += !norm_scan_case<bf16, bf16>(2, 2, 77, 20, 1, bhlt, true, true);
    bad += !norm_scan_case<float, float>(2, 2, 150, 40, 64, bhtl, true, false, true);
    bad += !norm_scan_case<float, float>(2, 2, 150, 40, 64, bhtl, true, true, false, false);
    bad += !norm_scan_case<bf16, bf16>(2, 2, 150, 41, 64, bhtl, true, true, false, false);
    bad += !norm_scan_case<bf16, bf16>(1, 2, 20, 600, 16, bhtl, true, true);  // token_sum's full batches
    bad += !norm_scan_case<float, float>(1, 1, 9, 1001, 4, bthl, false, false);
  }
  // the fused token and chunk sums (launch_norm_scan's paired path)
  bad += !norm_sums_case<bf16>(2, 4, 150, 512, 64, 3);             // one full block; tail chunk of 22
  bad += !norm_sums_case<bf16>(1, 2, 70, 8192, 64, 5);             // 16 blocks; tail of 6
  bad += !norm_sums_case<bf16>(2, 4, 100, 256, 32, 3);             // BDH-base's L: one block of 128 threads
  bad += !norm_sums_case<float>(2, 2, 40, 6, 17, 2);               // one warp, 3 pairs; C 17
  bad += !norm_sums_case<float>(1, 3, 77, 1000, 17, 4);            // a partial last block (L not a multiple of 512)
  bad += !norm_sums_case<bf16>(3, 6, 1, 1000, 64, 3);              // T 1
  bad += !norm_sums_case<bf16>(2, 4, 129, 1000, 64, 7, true, 3);   // [B,T,H,L]; tail of 1
  bad += !norm_sums_case<float>(1, 2, 64, 130, 32, 1, false, 2);   // 3 warps, the last one partial; grid 1
  bad += !norm_sums_case<bf16>(1, 1, 33, 64, 64, 2);               // 33 tokens: the second 32-token half holds one
  for (bool rb : {false, true}) {
    if (sums_only) break;
    bad += !bwd_local_case(2, 2, 150, 37, 40, 64, rb);         // two chunks and a tail of 22, L < 64
    bad += !bwd_local_case(1, 1, 64, 16, 32, 64, rb);          // one full chunk
    bad += !bwd_local_case(1, 2, 70, 20, 33, 32, rb);          // C 32, tail 6
    bad += !bwd_local_case(1, 1, 5, 7, 3, 1, rb);              // chunk 1
    bad += !bwd_local_case(2, 2, 190, 130, 9, 64, rb, 5);      // L = 2·64 + 2: a block of 2 latents; tail 62
    bad += !bwd_local_case(1, 1, 63, 9, 5, 64, rb);            // one chunk of 63, L < 16
    bad += !bwd_local_case(1, 2, 51, 70, 17, 17, rb, 4);       // C 17: three chunks (M rows 17 apart)
    bad += !bwd_local_case(2, 6, 65, 64, 8, 64, rb, 7);        // tail of 1, many pairs
    bad += !bwd_local_case(1, 1, 127, 100, 36, 63, rb);        // C 63 (odd M stride), tail 1
    bad += !bwd_local_case(2, 4, 128, 3, 2, 64, rb, 2);        // L 3
  }
  std::printf("%s (%d different)\n", bad ? "DIFFERENT" : "all the same (bitwise, or within the stated bounds)", bad);
  return bad ? 1 : 0;
}
