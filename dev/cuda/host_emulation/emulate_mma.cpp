// Host emulation check of the tensor-core (mma.sync) kernels, for a machine without a GPU.
//
// What it runs: the working tree's pack_bf16_kernel, chunk_scores_mma_kernel,
// chunk_states_mma_kernel and its 64-bit-index fallback chunk_states_mma_wide_kernel (forward with
// bf16 and with float32 stored states, and reverse),
// chunk_output_mma_v2_kernel and its version 1 chunk_output_mma_kernel (forward and dv; the two
// compared bit for bit), chunk_scan_mma_v2_kernel (the fused forward for Lp <= 256: bit for bit
// chunk_states_mma + chunk_output_mma on the same inputs), chunk_readback_mma_kernel (version 2, bitwise against version 1,
// chunk_readback_mma_v1_kernel), the quadratic forward's
// cross_scores_mma_kernel, cross_reduce_kernel, final_state_mma_kernel (and launch_final_state's
// sub-batches), quadratic_output_mma_kernel and quadratic_rows_mma_kernel (its cross scores and
// context in one kernel),
// the quadratic backward's kernels, and bwd_local_kernel's versions 2 and 5 (readback path), cut out
// of src/cuda by extract.py --mma and run on the CPU through shim.h (ldmatrix, mma.sync, cp.async
// emulated with their PTX fragment layouts; see the top of shim.h for what is and is not emulated).
// Each is
// compared with a plain float64 loop of its formula (the comments of chunk_products.cuh and
// backward.cu) on small random problems: odd L and E (padding to the 64 / 128 tiles), a tail
// chunk, chunks of 64, 32, 17 and 1, T = 1 and 0, decay exactly 0 and 1, several (b, h) pairs with a
// batch offset bh0, v with Hv = 1 packed once per batch row (Dims::v_rows; G per pair), both
// token-major and sequence-first layouts, score splits (some empty), grids
// smaller than the work (grid-stride loops). Outputs start as NaN: an element left unwritten, or
// one written that should not be, counts as a failure. Inputs that a kernel must not read (the
// upper triangle of P, the score splits past 0) are NaN too. Tolerance, element by element:
// |x - ref| <= tol · (sum of the absolute values of ref's terms), tol = 1e-2 (a bf16 rounding
// moves a term by at most 2^-8 of it, and no kernel rounds a term more than twice: 7.8e-3), 1e-4
// for the readback (its hi + lo split is meant to keep float32 accuracy), exact for pack_bf16.
// It checks index logic, fragment layouts and synchronisation, not GPU rounding or speed.
//   dev/cuda/host_emulation/run_mma.sh [KERNEL_SUBSTRING]     (about half a minute on 2 cores)
// EMU_VERBOSE=1 prints the worst element of every output; EMU_STOP_AT_FIRST=1 stops at the
// first failing kernel (mutants_mma.sh uses it); EMU_PROBLEMS=SUBSTRING runs only the problems
// whose name contains it.
//
// Adding a kernel (say sequence_scores_mma_kernel, written in chunk_products.cuh between the
// pack_bf16 section and the launchers, so extract.py takes it along): write a function like
// scores_case below: inputs from the Problem (q, a32, Qp and the bf16 operands Xq, Kq, vb, gb
// are ready, with the kernels' layouts and padding), the output as nans<float>(n), one
// emu::launch with the launcher's block size and shared memory (and small_grid(items): fewer
// blocks than work items), a float64 loop that adds each term to an Acc (kUnwritten where
// nothing may be written), and check(...); then add a line to `kernels` in main.
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>

#include "kernels_mma.h"

namespace {

std::mt19937 rng(11);
double U01() { return std::uniform_real_distribution<double>(0.0, 1.0)(rng); }
const float kNaN = std::nanf("");
template <typename T>
std::vector<T> nans(size_t n) {
  return std::vector<T>(n, from_float<T>(kNaN));
}
float rbf(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }  // round to bf16
template <typename T>
std::vector<double> doubles(const std::vector<T>& x) {
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = to_float(x[i]);
  return y;
}

// A float64 reference value and its magnitude: the sum of the absolute values of the terms
// that make it up (a bf16 rounding of each term moves the value by at most 2^-8 of that).
struct Acc {
  double x = 0, m = 0;
  void operator+=(double t) { x += t, m += std::fabs(t); }
  Acc scaled(double f) const { return {x * f, m * std::fabs(f)}; }
};
const Acc kUnwritten{kNaN, kNaN};
std::vector<Acc> exact(const std::vector<double>& x) {
  std::vector<Acc> r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = {x[i], std::fabs(x[i])};
  return r;
}

// Every element: |got - ref| <= tol * magnitude (element-wise, so an error in the small entries
// shows too), and NaN exactly where ref is NaN (ref NaN = must stay unwritten).
bool check(const std::string& what, const std::vector<double>& got, const std::vector<Acc>& ref, double tol) {
  double rel = 0;
  size_t unwritten = 0, stray = 0, worst = 0, first_bad = SIZE_MAX;
  for (size_t i = 0; i < ref.size(); ++i) {
    const bool gn = std::isnan(got[i]), rn = std::isnan(ref[i].x);
    if (gn || rn) {
      if (gn != rn) {
        (gn ? unwritten : stray) += 1;
        if (first_bad == SIZE_MAX) first_bad = i;
      }
      continue;
    }
    const double diff = std::fabs(got[i] - ref[i].x);
    const double r = diff == 0 ? 0 : ref[i].m > 0 ? diff / ref[i].m : INFINITY;
    if (r > rel) rel = r, worst = i;
  }
  const bool ok = unwritten == 0 && stray == 0 && rel <= tol;
  std::printf("    %-10s max err / magnitude %.2e (tol %.0e)", what.c_str(), rel, tol);
  if (unwritten || stray)
    std::printf(", %zu unwritten, %zu written that should not be (first at %zu)", unwritten, stray, first_bad);
  if (rel > tol || std::getenv("EMU_VERBOSE")) std::printf(", worst at %zu: %.6g vs %.6g (magnitude %.3g)", worst, got[worst], ref[worst].x, ref[worst].m);
  // EMU_DIGEST: an FNV-1a hash of the output's bits, so that two source trees' runs can be compared
  // bit for bit (diff their outputs) where a change is meant to keep every output
  if (std::getenv("EMU_DIGEST")) {
    uint64_t hash = 1469598103934665603ull;
    for (const double x : got) {
      uint64_t bits;
      std::memcpy(&bits, &x, sizeof bits);
      for (int k = 0; k < 8; ++k) hash = (hash ^ (bits >> (8 * k) & 0xff)) * 1099511628211ull;
    }
    std::printf(", digest %016llx", static_cast<unsigned long long>(hash));
  }
  std::printf("%s\n", ok ? "" : "  <-- FAIL");
  return ok;
}

// One batch of (b, h) pairs with its inputs and the tensor-core operands, laid out as the
// forward and backward make them (norm_apply_kernel's Xq and Kq, pack_bf16_kernel's vb and gb).
struct Problem {
  std::string name;
  Dims d;
  int64_t B = 0;          // batch rows covered (pairs bh0 .. bh0 + nbh - 1 of B·H)
  bool seq_first = false;  // [B,T,H,x] instead of [B,H,T,x]
  std::vector<bf16> q, v, g;                 // inputs [B,H,T,L] / [B,H,T,E] (or sequence-first)
  std::vector<float> a32, Qp;                // decay [H][L]; read weights [nbh][T][L]
  std::vector<bf16> Xq, Kq, vb, gb;          // operands [nbh][T][Lp] / [nbh][T][Ep] (vb: see vr)
  // split values (float16 inputs): the bf16 remainders of v and G, [nbh][T][Ep]. Here a quarter of
  // the values' size, not the 2^-9 of real remainders, so that a missing lo pass stands out.
  std::vector<bf16> vlo, glo, Kq_lo;  // Kq_lo [nbh][T][Lp]: split keys (the same quarter size)
  std::vector<float> init;                   // an initial state / upstream state gradient [B,H,L,E]
  Str4 qs, vs, gs, init_s;

  Str4 strided(const void* p, int64_t X) const {
    const int64_t H = d.H, T = d.T;
    Str4 s;
    s.p = p;
    if (seq_first)
      s.s[0] = T * H * X, s.s[1] = X, s.s[2] = H * X, s.s[3] = 1;
    else
      s.s[0] = H * T * X, s.s[1] = T * X, s.s[2] = X, s.s[3] = 1;
    return s;
  }
  int64_t b_of(int64_t bh) const { return (d.bh0 + bh) / d.H; }
  // Hv = 1 (d.v_rows): v is [B,1,T,E] (head stride 0), and vb, vlo hold a row [T][Ep] per batch
  // row of the batch (pack_bf16 with d.v_rows): pair bh's values are row vr(bh) = b - bh0 / H;
  // else row bh. (Written here from b_of, not from Dims::v_row.)
  int64_t vr(int64_t bh) const { return d.v_rows ? b_of(bh) - d.bh0 / d.H : bh; }
  int64_t vrows() const { return d.nbh == 0 ? 0 : d.v_rows ? b_of(d.nbh - 1) - d.bh0 / d.H + 1 : d.nbh; }
  // the offset of v's packed element (pair bh, token t, column e)
  int64_t vo(int64_t bh, int64_t t, int64_t e) const { return (vr(bh) * d.T + t) * d.Ep + e; }
  int64_t h_of(int64_t bh) const { return (d.bh0 + bh) % d.H; }
  int64_t chunk_len(int64_t c) const { return std::min(d.C, d.T - c * d.C); }
  double apow(int64_t h, int64_t l, int64_t n) const { return std::pow(double(a32[h * d.L + l]), double(n)); }
  float qf(int64_t bh, int64_t t, int64_t l) const { return to_float(q[qs.at(b_of(bh), h_of(bh), t, l)]); }
};

// hv1: v with Hv = 1 ([B,1,T,E], read by every head through a zero head stride), packed once per
// batch row (d.v_rows)
Problem make_problem(const char* name, int64_t H, int64_t nbh, int64_t bh0, int64_t T, int64_t L, int64_t E,
                     int64_t C, int64_t nsplit, bool seq_first, bool hv1 = false) {
  Problem p;
  p.name = name;
  Dims& d = p.d;
  d.H = H, d.T = T, d.L = L, d.E = E, d.C = C, d.nC = (T + C - 1) / C, d.bh0 = bh0, d.nbh = nbh, d.nsplit = nsplit;
  d.v_rows = hv1;
  d.Lp = (L + kMmaLT - 1) / kMmaLT * kMmaLT, d.Ep = (E + kMmaET - 1) / kMmaET * kMmaET;
  p.B = (bh0 + nbh + H - 1) / H;
  p.seq_first = seq_first;
  auto fill = [](std::vector<bf16>& x, size_t n, double lo, double hi, double zeros) {
    x.resize(n);
    for (auto& y : x) y = __float2bfloat16_rn(U01() < zeros ? 0.0f : float(lo + (hi - lo) * U01()));
  };
  fill(p.q, p.B * H * T * L, 0, 1, 0.5);
  fill(p.v, p.B * (hv1 ? 1 : H) * T * E, -1, 1, 0);
  fill(p.g, p.B * H * T * E, -1, 1, 0);
  p.a32.resize(H * L);  // of every five latents: decay 0, decay 1, one in [0.3, 0.9), two in [0.9, 1)
  for (int64_t i = 0; i < H * L; ++i)
    p.a32[i] = i % 5 == 0 ? 0.0f : i % 5 == 1 ? 1.0f : i % 5 == 2 ? float(0.3 + 0.6 * U01()) : float(0.9 + 0.1 * U01());
  p.Qp.resize(nbh * T * L);
  for (auto& x : p.Qp) x = float(U01());
  p.init.resize(p.B * H * L * E);
  for (auto& x : p.init) x = float(2 * U01() - 1);
  p.qs = p.strided(p.q.data(), L), p.vs = p.strided(p.v.data(), E), p.gs = p.strided(p.g.data(), E);
  if (hv1) {  // [B,1,T,E] ([B,T,1,E] sequence-first), head stride 0
    p.vs.s[0] = T * E, p.vs.s[1] = 0, p.vs.s[2] = E;
  }
  p.init_s.p = p.init.data();
  p.init_s.s[0] = H * L * E, p.init_s.s[1] = L * E, p.init_s.s[2] = E, p.init_s.s[3] = 1;
  // operands, as norm_apply_kernel and pack_bf16_kernel write them (zeros in the padding)
  const bf16 zero = __float2bfloat16_rn(0.0f);
  p.Xq.assign(nbh * T * d.Lp, zero), p.Kq = p.Xq, p.Kq_lo = p.Xq;
  p.gb.assign(nbh * T * d.Ep, zero), p.glo = p.gb;
  // vb, vlo: the packed rows (zeros in the padding), then NaN rows up to nbh (the per-pair size):
  // a reader that took a pair's row for its batch row would read them (or another row's values)
  p.vb = nans<bf16>(nbh * T * d.Ep);
  std::fill(p.vb.begin(), p.vb.begin() + p.vrows() * T * d.Ep, zero);
  p.vlo = p.vb;
  for (int64_t bh = 0; bh < nbh; ++bh)
    for (int64_t t = 0; t < T; ++t) {
      const int64_t c = t / C, i = t % C, Cn = p.chunk_len(c), b = p.b_of(bh), h = p.h_of(bh);
      for (int64_t l = 0; l < L; ++l) {
        const float a = p.a32[h * L + l];
        p.Xq[(bh * T + t) * d.Lp + l] = __float2bfloat16_rn(p.Qp[(bh * T + t) * L + l] * ipow(a, int(i)));
        p.Kq[(bh * T + t) * d.Lp + l] = __float2bfloat16_rn(p.qf(bh, t, l) * ipow(a, int(Cn - 1 - i)));
        p.Kq_lo[(bh * T + t) * d.Lp + l] = __float2bfloat16_rn(float(0.5 * U01() - 0.25));
      }
      for (int64_t e = 0; e < E; ++e) {  // (with v_rows, a batch row's values written by each of its pairs)
        p.vb[p.vo(bh, t, e)] = p.v[p.vs.at(b, h, t, e)];
        p.gb[(bh * T + t) * d.Ep + e] = p.g[p.gs.at(b, h, t, e)];
        p.vlo[p.vo(bh, t, e)] = __float2bfloat16_rn(float(0.5 * U01() - 0.25));
        p.glo[(bh * T + t) * d.Ep + e] = __float2bfloat16_rn(float(0.5 * U01() - 0.25));
      }
    }
  return p;
}

unsigned small_grid(int64_t items) { return unsigned(std::max<int64_t>(1, std::min<int64_t>(items, 2))); }
double bf(const std::vector<bf16>& x, int64_t i) { return to_float(x[i]); }
// a value operand as the kernel sees it: hi, plus lo when the values are split
double val(const std::vector<bf16>& hi, const std::vector<bf16>& lo, bool split, int64_t i) {
  return bf(hi, i) + (split ? bf(lo, i) : 0.0);
}

// ---- bscan (the normaliser gradient across chunks): Bend_c = B at the end of chunk c, B_start =
//      a^Cn Bend + Bsum, da's share sum_c Bend_c Zs_c, dN_0 = B_0; from the upstream gradient gn
//      (or 0). Inputs positive, so each output's magnitude is its value; float64 loop. Chunks of
//      C / 16 (T = 150: 38 chunks, the last of 2; T = 100 at C = 32: 50): more than one batch of
//      kBscanBatch (32) ----
bool bscan_case(const Problem& p) {
  Dims d = p.d;
  d.C = std::max<int64_t>(1, d.C / 16), d.nC = (d.T + d.C - 1) / d.C;
  auto chunk_len = [&](int64_t c) { return std::min(d.C, d.T - c * d.C); };
  const int64_t L = d.L, nC = d.nC, rows = (p.b_of(d.nbh > 0 ? d.nbh - 1 : 0) + 1) * d.H;
  std::vector<float> Bsum(d.nbh * nC * L), Zs(Bsum.size()), gn(rows * L);
  for (auto& x : Bsum) x = float(U01());
  for (auto& x : Zs) x = float(U01());
  for (auto& x : gn) x = float(U01());
  bool ok = true;
  // both batch sizes (the launcher takes kBscanBatchFew where nC <= 8; here either runs several batches)
  for (auto [with_gn, few] : {std::pair{true, false}, std::pair{false, false}, std::pair{true, true}}) {
    auto Bend = nans<float>(Bsum.size());
    auto daB = nans<float>(d.nbh * L);
    auto dn0 = nans<float>(gn.size());
    Str3 gs{}, ds{};
    if (with_gn) gs.p = gn.data(), gs.s[0] = d.H * L, gs.s[1] = L, gs.s[2] = 1;
    ds.p = dn0.data(), ds.s[0] = d.H * L, ds.s[1] = L, ds.s[2] = 1;
    emu::launch(small_grid((d.nbh * L + 255) / 256), 256, 0,
                [&] {
                  (few ? bscan_kernel<kBscanBatchFew> : bscan_kernel<kBscanBatch>)(d, p.a32.data(), gs, Bsum.data(),
                                                                                   Zs.data(), Bend.data(), daB.data(), ds);
                });
    std::vector<Acc> rBend(Bend.size(), kUnwritten), rda(daB.size(), kUnwritten), rdn0(dn0.size(), kUnwritten);
    for (int64_t bh = 0; bh < d.nbh; ++bh)
      for (int64_t l = 0; l < L; ++l) {
        const int64_t g = (p.b_of(bh) * d.H + p.h_of(bh)) * L + l;
        double B = with_gn ? gn[g] : 0.0, da = 0.0;
        for (int64_t c = nC - 1; c >= 0; --c) {
          const int64_t o = (bh * nC + c) * L + l;
          rBend[o] = {B, B};
          da += B * Zs[o];
          B = p.apow(p.h_of(bh), l, chunk_len(c)) * B + Bsum[o];
        }
        rda[bh * L + l] = {da, da};
        rdn0[g] = {B, B};
      }
    const std::string tag = std::string(with_gn ? "" : ", no upstream gradient") + (few ? ", batches of 8" : "");
    ok &= check("bscan Bend" + tag, doubles(Bend), rBend, 1e-5);
    ok &= check("bscan da share" + tag, doubles(daB), rda, 1e-5);
    ok &= check("bscan dN_0" + tag, doubles(dn0), rdn0, 1e-5);
  }
  return ok;
}

// ---- gc_reduce (gc_t = the sum of bwd_local's latent blocks' partials [bh][t][nlt]): the warp per
//      token everywhere, the thread per token (gc_reduce_few_kernel) where nlt <= kGcFewBlocks (the
//      launcher's rule), each against a float64 sum; signed partials, so a dropped or doubled block
//      shows. L as the problem's and L = 8 kLocalLT + 1 (9 blocks: the warp kernel only) ----
bool gc_reduce_case(const Problem& p) {
  bool ok = true;
  for (int64_t L : {p.d.L, 8 * int64_t{kLocalLT}, 8 * int64_t{kLocalLT} + 1}) {
    Dims d = p.d;
    d.L = L;
    const int64_t nlt = (L + kLocalLT - 1) / kLocalLT, rows = d.nbh * d.T;
    std::vector<float> gcp(rows * nlt);
    for (auto& x : gcp) x = float(2.0 * U01() - 1.0);
    std::vector<Acc> ref(rows);
    for (int64_t x = 0; x < rows; ++x)
      for (int64_t lt = 0; lt < nlt; ++lt) ref[x] += gcp[x * nlt + lt];
    const std::string tag = " (L " + std::to_string(L) + ", " + std::to_string(nlt) + " blocks)";
    auto gc = nans<float>(rows);
    emu::launch(small_grid((rows + 7) / 8), 256, 0, [&] { gc_reduce_kernel(d, gcp.data(), gc.data()); });
    ok &= check("gc_reduce, a warp per token" + tag, doubles(gc), ref, 1e-6);
    if (nlt <= kGcFewBlocks) {
      auto gcf = nans<float>(rows);
      emu::launch(small_grid((rows + 255) / 256), 256, 0, [&] { gc_reduce_few_kernel(d, gcp.data(), gcf.data()); });
      ok &= check("gc_reduce, a thread per token" + tag, doubles(gcf), ref, 1e-6);
    }
  }
  return ok;
}

// ---- pack_bf16: y strided -> [bh][t][Ep] bf16, zero padded (exact); with d.v_rows (Hv = 1)
//      [r][t][Ep] per batch row r of the batch, from v's (b, 0, t); G (d.per_pair()) per pair ----
bool pack_case(const Problem& p) {
  const Dims& d = p.d;
  const size_t n = p.vrows() * d.T * d.Ep;  // (p.vb's packed rows; NaN rows follow where d.v_rows)
  auto out = nans<bf16>(n);
  emu::launch(3, 64, 0, [&] { pack_bf16_kernel<bf16>(d, p.vs, out.data()); });
  const std::vector<bf16> vb(p.vb.begin(), p.vb.begin() + n);
  bool ok = check(d.v_rows ? "vb per row" : "vb", doubles(out), exact(doubles(vb)), 0);
  if (d.v_rows) {  // a warp per row (2 per block): every row a warp's first, from its divisions
    out = nans<bf16>(n);
    emu::launch(unsigned(std::max<int64_t>(1, (p.vrows() * d.T + 1) / 2)), 64, 0,
                [&] { pack_bf16_kernel<bf16>(d, p.vs, out.data()); });
    ok &= check("vb per row, a warp per row", doubles(out), exact(doubles(vb)), 0);
  }
  if (d.v_rows) {  // G per pair, from the same Dims less v_rows
    auto gout = nans<bf16>(p.gb.size());
    emu::launch(2, 96, 0, [&] { pack_bf16_kernel<bf16>(d.per_pair(), p.gs, gout.data()); });
    ok &= check("gb per pair", doubles(gout), exact(doubles(p.gb)), 0);
  }
  // Hv = 1 packed per pair (every head reads head 0's values: h stride 0)
  Str4 v1 = p.vs;
  v1.s[1] = 0;
  const Dims dp = d.per_pair();
  std::vector<double> ref(d.nbh * d.T * d.Ep, 0.0);
  for (int64_t x = 0; x < int64_t(ref.size()); ++x) {
    const int64_t e = x % d.Ep, t = x / d.Ep % d.T, bh = x / (d.Ep * d.T);
    if (e < d.E) ref[x] = to_float(p.v[v1.at(p.b_of(bh), p.h_of(bh), t, e)]);
  }
  out = nans<bf16>(ref.size());
  emu::launch(2, 96, 0, [&] { pack_bf16_kernel<bf16>(dp, v1, out.data()); });
  ok &= check("vb Hv=1 per pair", doubles(out), exact(ref), 0);
  // split values: float inputs with more bits than bf16, hi = bf16(x) and lo = bf16(x - hi)
  // (per batch row where d.v_rows)
  std::vector<float> vf(p.v.size());
  for (auto& x : vf) x = float(2 * U01() - 1);
  Str4 vfs = p.vs;
  vfs.p = vf.data();
  auto hi = nans<bf16>(n), lo = nans<bf16>(n);
  emu::launch(2, 64, 0, [&] { pack_bf16_kernel<float>(d, vfs, hi.data(), lo.data()); });
  std::vector<double> ref_hi(n, 0.0), ref_lo(n, 0.0);
  for (int64_t bh = 0; bh < d.nbh; ++bh)
    for (int64_t t = 0; t < d.T; ++t)
      for (int64_t e = 0; e < d.E; ++e) {
        const float y = vf[vfs.at(p.b_of(bh), p.h_of(bh), t, e)];
        ref_hi[p.vo(bh, t, e)] = rbf(y), ref_lo[p.vo(bh, t, e)] = rbf(y - rbf(y));
      }
  return ok & check("vb hi (split)", doubles(hi), exact(ref_hi), 0) & check("vb lo (split)", doubles(lo), exact(ref_lo), 0);
}

// ---- scores: P[bh][c][sp][i][j] = sum_{l in slice sp} Qp_i a^(i-1-j) q_j, j < i < Cn; else 0 ----
//      Qp float32 (backward) or bf16 (the tensor-core forward)
template <typename QpT>
bool scores_case(const Problem& p) {
  const Dims& d = p.d;
  const int64_t C = d.C, S = d.nsplit, items = d.nbh * d.nC * S;
  auto P = nans<float>(items * C * C);
  std::vector<QpT> Qp(p.Qp.size());
  for (size_t i = 0; i < Qp.size(); ++i) Qp[i] = from_float<QpT>(p.Qp[i]);
  emu::launch(small_grid(items), kMmaThreads, sizeof(ScoreSmem),
              [&] { chunk_scores_mma_kernel<bf16, QpT>(d, p.qs, p.a32.data(), Qp.data(), P.data()); });
  std::vector<Acc> ref(P.size());
  const int64_t lslice = (d.L + S * kMmaLT - 1) / (S * kMmaLT) * kMmaLT;
  for (int64_t bh = 0; bh < d.nbh; ++bh)
    for (int64_t c = 0; c < d.nC; ++c)
      for (int64_t sp = 0; sp < S; ++sp)
        for (int64_t i = 0; i < p.chunk_len(c); ++i)
          for (int64_t j = 0; j < i; ++j) {
            Acc x;
            for (int64_t l = sp * lslice; l < std::min(d.L, (sp + 1) * lslice); ++l)
              x += double(p.Qp[(bh * d.T + c * C + i) * d.L + l]) * p.apow(p.h_of(bh), l, i - 1 - j) *
                   p.qf(bh, c * C + j, l);
            ref[(((bh * d.nC + c) * S + sp) * C + i) * C + j] = x;
          }
  // a bf16 Qp is rounded once more before the kernel's Xs = Qp a^k: three roundings per term, 3 × 2^-8
  return check("P", doubles(P), ref, std::is_same_v<QpT, bf16> ? 1.2e-2 : 1e-2);
}

// ---- cross_scores (quadratic forward): Pcross[bh][I][J][i'][j'] = sum_l Qp_i a^(i-1-j) q_j for
//      blocks J < I (i = I C + i', j = J C + j'); rows past the last chunk's length 0; the blocks
//      J >= I unwritten. Against the formula from Qp and q (not from the operands): this checks the
//      split of the exponent into Xq's a^i', the factor a^((I-J-1) C) and Kq's a^(C-1-j') too.
//      nsplit partials over slices of L (some empty when nsplit > Lp / 64), summed by cross_reduce.
//      Pcross is bf16 (its readers' operand rounding, done once where it is written).
// kWgmma: cross_scores_wgmma_kernel (the factor on Xq instead of the key: the same bound).
template <bool kWgmma = false>
bool cross_case(const Problem& p, int nsplit) {
  const Dims& d = p.d;
  const int64_t C = d.C, nC = d.nC, plane = d.nbh * nC * nC * C * C;
  const int64_t items = d.nbh * cross_items(nC) * nsplit;
  auto P = nans<bf16>(plane);
  auto parts = nans<float>(std::max<int64_t>(1, cross_parts_planes(nsplit) * plane));
  emu::launch(small_grid(items), kCrossThreads, kWgmma ? kCwSmem : kCrossSmem, [&] {
    if constexpr (kWgmma)
      nsplit > 1 ? cross_scores_wgmma_kernel<true>(d, p.Xq.data(), p.Kq.data(), p.a32.data(), P.data(), parts.data(), nsplit)
                 : cross_scores_wgmma_kernel<false>(d, p.Xq.data(), p.Kq.data(), p.a32.data(), P.data(), parts.data(),
                                                    nsplit);
    else
      cross_scores_mma_kernel(d, p.Xq.data(), p.Kq.data(), p.a32.data(), P.data(), parts.data(), nsplit);
  });
  if (nsplit > 1) emu::launch(3, 64, 0, [&] { cross_reduce_kernel(d, parts.data(), P.data(), nsplit); });
  std::vector<Acc> ref(P.size(), kUnwritten);
  for (int64_t bh = 0; bh < d.nbh; ++bh)
    for (int64_t I = 1; I < nC; ++I)
      for (int64_t J = 0; J < I; ++J)
        for (int64_t i = 0; i < C; ++i)
          for (int64_t j = 0; j < C; ++j) {
            Acc x;
            const int64_t ti = I * C + i, tj = J * C + j;
            if (i < p.chunk_len(I))
              for (int64_t l = 0; l < d.L; ++l)
                x += double(p.Qp[(bh * d.T + ti) * d.L + l]) * p.apow(p.h_of(bh), l, ti - 1 - tj) * p.qf(bh, tj, l);
            ref[(((bh * nC + I) * nC + J) * C + i) * C + j] = x;
          }
  // three roundings per term: Xq, Kq, and the scaled key (3 × 2^-8); the sum's to bf16 (2^-9)
  return check("Pcross", doubles(P), ref, 1.4e-2);
}

// The swizzled tiles (kSwizzle: unpadded rows, chunk c of row r at c ^ (r % 8)) hold the same bytes
// in other places: Pcross and every split's partials bitwise the padded kernel's.
template <typename X>
bool same_bits(const char* name, const std::vector<X>& x, const std::vector<X>& y, const char* other = "the padded kernel's") {
  const bool ok = x.size() == y.size() && std::memcmp(x.data(), y.data(), sizeof(X) * x.size()) == 0;
  std::printf("    %-8s %s %s%s\n", name, ok ? "bitwise" : "DIFFERENT from", other, ok ? "" : "  <-- FAIL");
  return ok;
}

// ---- norm_scores_mma (the tensor-core forward's norm_apply and intra-chunk scores in one pass):
//      Xq, Kq and every split's P bitwise those of norm_apply_kernel (bf16 Qp, pairs of latents
//      where launch_norm_scan takes them) followed by chunk_scores_mma_kernel on its Qp (with either
//      fetch: registers, and where q's latents pair up the staged cp.async), from the
//      same token sums s and chunk-start N (random here, a fifth of N 0: the scan that makes them
//      is emulate.cpp's); NaN where neither writes (P's rows past Cn and upper triangles are 0s).
bool norm_scores_case(const Problem& p) {
  const Dims& d = p.d;
  const int64_t C = d.C, items = d.nbh * d.nC * d.nsplit;
  std::vector<float> s(d.nbh * d.T), Nc(d.nbh * (d.nC + 1) * d.L);
  for (auto& x : s) x = float(0.5 + 40 * U01());
  for (auto& x : Nc) x = U01() < 0.2 ? 0.0f : float(3 * U01());
  const bool pairs = norm_pairs_ok<bf16>(d, p.qs) && d.Lp % 2 == 0;
  auto Xq = nans<bf16>(d.nbh * d.T * d.Lp), Kq = Xq;
  auto Qp = nans<bf16>(d.nbh * d.T * d.L);
  auto P = nans<float>(items * C * C);
  emu::launch(5, 256, 0, [&] {
    if (pairs)
      norm_apply_kernel<bf16, bf16, kNormVec, true, true>(d, p.qs, p.a32.data(), s.data(), Nc.data(), Qp.data(),
                                                          Xq.data(), Kq.data());
    else
      norm_apply_kernel<bf16, bf16, 1, true, true>(d, p.qs, p.a32.data(), s.data(), Nc.data(), Qp.data(), Xq.data(),
                                                   Kq.data());
  });
  emu::launch(small_grid(items), kMmaThreads, sizeof(ScoreSmem),
              [&] { chunk_scores_mma_kernel<bf16, bf16>(d, p.qs, p.a32.data(), Qp.data(), P.data()); });
  const char* ref = "norm_apply + chunk_scores_mma's";
  bool ok = true;
  // the register fetch always; the staged one (cp.async into the thread's slots) where the launcher
  // takes it (q's latents pair up)
  for (bool staged : {false, true}) {
    if (staged && !norm_pairs_ok<bf16>(d, p.qs)) continue;
    auto Xq_f = nans<bf16>(Xq.size()), Kq_f = Xq_f;
    auto P_f = nans<float>(P.size());
    emu::launch(small_grid(items), kMmaThreads, sizeof(NormScoreSmem), [&] {
      if (staged)
        norm_scores_mma_kernel<bf16, true>(d, p.qs, p.a32.data(), s.data(), Nc.data(), P_f.data(), Xq_f.data(),
                                           Kq_f.data());
      else
        norm_scores_mma_kernel<bf16, false>(d, p.qs, p.a32.data(), s.data(), Nc.data(), P_f.data(), Xq_f.data(),
                                            Kq_f.data());
    });
    std::printf("    %s fetch:\n", staged ? "staged" : "register");
    ok &= same_bits("Xq", Xq_f, Xq, ref) & same_bits("Kq", Kq_f, Kq, ref) & same_bits("P", P_f, P, ref);
  }
  return ok;
}
bool cross_swizzle_case(const Problem& p, int nsplit) {
  const Dims& d = p.d;
  const int64_t nC = d.nC, plane = d.nbh * nC * nC * d.C * d.C, items = d.nbh * cross_items(nC) * nsplit;
  auto run = [&](auto swizzle) {
    constexpr bool kSw = decltype(swizzle)::value;
    // Pcross (bf16; written with one split) and the partials (with more)
    std::pair<std::vector<bf16>, std::vector<float>> out{nans<bf16>(plane),
                                                         nans<float>(cross_parts_planes(nsplit) * plane)};
    emu::launch(small_grid(items), kCrossThreads, cross_smem<kSw>(), [&] {
      cross_scores_mma_kernel<kSw>(d, p.Xq.data(), p.Kq.data(), p.a32.data(), out.first.data(), out.second.data(),
                                   nsplit);
    });
    return out;
  };
  const auto padded = run(std::false_type{}), swizzled = run(std::true_type{});
  return same_bits("Pcross", padded.first, swizzled.first) & same_bits("partials", padded.second, swizzled.second);
}

// A random float32 state [B][H][L][E] for the batch's pairs (rho0 or GR), rows of RS >= E floats
// (NaN past E), in s: the batch rows' copy and its strides (seq_first: a [B][L][H][RS] layout).
std::vector<float> random_state(const Problem& p, int64_t RS, Str4& s, bool seq_first = false) {
  const Dims& d = p.d;
  const int64_t Bn = (d.bh0 + d.nbh - 1) / d.H + 1;  // the batch rows
  std::vector<float> x(Bn * d.H * d.L * RS, kNaN);
  for (int64_t k = 0; k < int64_t(x.size()); ++k)
    if (k % RS < d.E) x[k] = float(2 * U01() - 1);
  s.p = x.data();  // (the vector's buffer moves with it)
  if (seq_first)
    s.s[0] = d.L * d.H * RS, s.s[1] = RS, s.s[2] = d.H * RS, s.s[3] = 1;
  else
    s.s[0] = d.H * d.L * RS, s.s[1] = d.L * RS, s.s[2] = RS, s.s[3] = 1;
  return x;
}

// ---- a backward from a carried state: state_readback_mma adds the state's shares to
//      W, U and HdH (random values, as the readback leaves them). rho0 and GR float32 [B][H][L][E]
//      (rows padded past E, NaN there; sequence-first problems: rows of a [B,L,H,E] layout, so the
//      strides are exercised); kRho / kGr: which state is given. (Problems past 16 chunks are not
//      taken: the dispatch's bound.) W_t += a^(c C) rho0 G_t, U_t +=
//      a^(T - e_c) GR v_t, HdH[c] += x1 + x2 + x3 (quadratic_backward.cuh), in float64 from the bf16
//      G, v, Xq and Kq and the float32 states.
template <bool kRho, bool kGr>
bool state_readback_case(const Problem& p) {
  const Dims& d = p.d;
  if (d.nC > kStateReadbackMaxChunks) {
    std::printf("    (skipped: %lld chunks)\n", (long long)d.nC);
    return true;
  }
  const int64_t C = d.C, nC = d.nC, L = d.L, E = d.E, T = d.T;
  // (rows of E + 3: the planes' loads a column at a time; both states given and E % 4 == 0: rows of a
  // multiple of 4, 16-byte pieces)
  const int64_t RS = kRho && kGr && E % 4 == 0 ? (E + 3) / 4 * 4 + 4 : E + 3;
  Str4 rs, gs;
  const std::vector<float> rho0 = kRho ? random_state(p, RS, rs, p.seq_first) : std::vector<float>{};
  const std::vector<float> gr = kGr ? random_state(p, RS, gs, p.seq_first) : std::vector<float>{};
  std::vector<float> W(d.nbh * T * L), U(W.size()), HdH(d.nbh * nC * L);
  for (auto* v : {&W, &U, &HdH})
    for (auto& x : *v) x = float(2 * U01() - 1);
  const std::vector<float> W0 = W, U0 = U, H0 = HdH;
  emu::launch(small_grid(d.nbh * (d.Lp / 64)), kSrThreads, state_readback_smem(nC), [&] {
    state_readback_mma_kernel(d, p.gb.data(), p.vb.data(), p.Xq.data(), p.Kq.data(), kRho ? rs : Str4{},
                              kGr ? gs : Str4{}, p.a32.data(), W.data(), U.data(), HdH.data());
  });
  std::vector<Acc> rW(W.size()), rU(U.size()), rH(HdH.size());
  for (int64_t bh = 0; bh < d.nbh; ++bh) {
    const int64_t b = p.b_of(bh), h = p.h_of(bh);
    for (int64_t l = 0; l < L; ++l) {
      std::vector<Acc> Y(T), Z(T);
      Acc dot;
      for (int64_t e = 0; e < E; ++e) {
        const double r = kRho ? rho0[rs.at(b, h, l, e)] : 0.0, g = kGr ? gr[gs.at(b, h, l, e)] : 0.0;
        dot += r * g;
        for (int64_t t = 0; t < T; ++t) {
          Y[t] += r * to_float(p.gb[(bh * T + t) * d.Ep + e]);
          Z[t] += g * to_float(p.vb[p.vo(bh, t, e)]);
        }
      }
      auto plus = [](Acc a, Acc b) { return Acc{a.x + b.x, a.m + b.m}; };
      std::vector<Acc> SY(nC), SZ(nC);
      for (int64_t c = 0; c < nC; ++c) {
        const int64_t s0 = c * C, ec = s0 + p.chunk_len(c);
        for (int64_t t = s0; t < ec; ++t) {
          const int64_t o = (bh * T + t) * L + l;
          rW[o] = plus(exact({double(W0[o])})[0], Y[t].scaled(p.apow(h, l, s0)));
          rU[o] = plus(exact({double(U0[o])})[0], Z[t].scaled(p.apow(h, l, T - ec)));
          SY[c] = plus(SY[c], Y[t].scaled(to_float(p.Xq[(bh * T + t) * d.Lp + l])));
          SZ[c] = plus(SZ[c], Z[t].scaled(to_float(p.Kq[(bh * T + t) * d.Lp + l])));
        }
      }
      for (int64_t c = 0; c < nC; ++c) {
        const int64_t s0 = c * C, ec = s0 + p.chunk_len(c), o = (bh * nC + c) * L + l;
        Acc x = plus(exact({double(H0[o])})[0], dot.scaled(p.apow(h, l, s0 + T - ec)));
        for (int64_t J = c + 1; J < nC; ++J) x = plus(x, SY[J].scaled(p.apow(h, l, (J - 1) * C)));
        for (int64_t J = 0; J < c; ++J) x = plus(x, SZ[J].scaled(p.apow(h, l, T - ec + (c - 1 - J) * C)));
        rH[o] = x;
      }
    }
  }
  return check("W", doubles(W), rW, 1e-4) & check("U", doubles(U), rU, 1e-4) & check("HdH", doubles(HdH), rH, 1e-4);
}

// ---- quadratic output: c_i = sum_{J < I} Pcross_IJ[i'][:] V_J + sum_{j' < i'} P_II[i'][j'] v_j, the
//      context in the layout of v (bf16). P's split 0 holds the diagonal blocks (the upper triangle
//      and the other splits NaN); Pcross's blocks J >= I and its rows past the last chunk's length
//      NaN too: none of them may be read as operands.
// kState: from an initial state rho0 (float32 [B][H][L][E]; rows padded to E + 3, or, without kLo,
// to a multiple of 4 past E: the kernel's float4 loads), c_t also gains sum_l Xq_t[l] a_l^(I C)
// rho0[l][e] (the kernel rounds a^(I C) rho0 to bf16, kLo: hi + lo).
template <bool kLo = false, bool kState = false>
bool quadratic_output_case(const Problem& p) {
  const Dims& d = p.d;
  const int64_t C = d.C, nC = d.nC, items = d.nbh * nC * (d.Ep / kMmaET);
  Str4 rho0s;  // (rows of E + 3 with kLo, else of a multiple of 4 past E)
  const std::vector<float> rho0 =
      kState ? random_state(p, kLo ? d.E + 3 : (d.E + 3) / 4 * 4 + 4, rho0s) : std::vector<float>{};
  std::vector<float> P(d.nbh * nC * d.nsplit * C * C, kNaN);
  auto Pc = nans<bf16>(d.nbh * nC * nC * C * C);
  for (int64_t bh = 0; bh < d.nbh; ++bh)
    for (int64_t I = 0; I < nC; ++I)
      for (int64_t i = 0; i < p.chunk_len(I); ++i) {
        for (int64_t j = 0; j < i; ++j) P[((bh * nC + I) * d.nsplit * C + i) * C + j] = float(U01());
        for (int64_t J = 0; J < I; ++J)
          for (int64_t j = 0; j < C; ++j)
            Pc[(((bh * nC + I) * nC + J) * C + i) * C + j] = __float2bfloat16_rn(float(2 * U01() - 1));
      }
  auto out = nans<bf16>(p.g.size());  // the context [B,H,T,E]: G's layout (v's may have Hv = 1)
  Str4 outs = p.gs;
  outs.p = out.data();
  const bf16* Xq = kState ? p.Xq.data() : nullptr;
  const float* a32 = kState ? p.a32.data() : nullptr;
  const Str4 r0 = kState ? rho0s : Str4{};
  emu::launch(small_grid(items), kMmaThreads, quadratic_output_smem<kLo, kState>(), [&] {
    quadratic_output_mma_kernel<bf16, kLo, kQOutSwizzle, kState>(d, P.data(), Pc.data(), p.vb.data(),
                                                                 kLo ? p.vlo.data() : nullptr, outs, Xq, a32, r0);
  });
  // the other tile layout (padded or swizzled: RHOSCAN_QO_SWIZZLE), bit for bit, on 3 blocks
  auto out_other = nans<bf16>(p.g.size());
  Str4 other_s = p.gs;
  other_s.p = out_other.data();
  emu::launch(3, kMmaThreads, quadratic_output_smem<kLo, kState>(), [&] {
    quadratic_output_mma_kernel<bf16, kLo, !kQOutSwizzle, kState>(d, P.data(), Pc.data(), p.vb.data(),
                                                                  kLo ? p.vlo.data() : nullptr, other_s, Xq, a32, r0);
  });
  const bool same = same_bits("context", out, out_other);
  std::vector<Acc> ref(out.size(), kUnwritten);
  for (int64_t bh = 0; bh < d.nbh; ++bh)
    for (int64_t I = 0; I < nC; ++I)
      for (int64_t i = 0; i < p.chunk_len(I); ++i)
        for (int64_t e = 0; e < d.E; ++e) {
          Acc x;
          for (int64_t J = 0; J <= I; ++J)
            for (int64_t j = 0; j < (J < I ? C : i); ++j) {
              const double pm = J < I ? to_float(Pc[(((bh * nC + I) * nC + J) * C + i) * C + j])
                                      : P[((bh * nC + I) * d.nsplit * C + i) * C + j];
              x += pm * val(p.vb, p.vlo, kLo, p.vo(bh, J * C + j, e));
            }
          if constexpr (kState) {
            const int64_t b = p.b_of(bh), h = p.h_of(bh);
            for (int64_t l = 0; l < d.L; ++l)
              x += double(to_float(p.Xq[(bh * d.T + I * C + i) * d.Lp + l])) * p.apow(h, l, I * C) *
                   rho0[rho0s.at(b, h, l, e)];
          }
          ref[outs.at(p.b_of(bh), p.h_of(bh), I * C + i, e)] = x;
        }
  return check("context", doubles(out), ref, 1e-2) && same;
}

// The diagonal blocks as the quadratic forward makes them: chunk_scores_mma on bf16 Qp, its splits
// summed here, in order, as reduce_splits does (split 0 holds the sum; the others stay as written).
std::vector<float> quadratic_diag_scores(const Problem& p) {
  const Dims& d = p.d;
  const int64_t C = d.C, nC = d.nC, S = d.nsplit;
  auto P = nans<float>(d.nbh * nC * S * C * C);
  std::vector<bf16> Qp(p.Qp.size());
  for (size_t i = 0; i < Qp.size(); ++i) Qp[i] = __float2bfloat16_rn(p.Qp[i]);
  emu::launch(small_grid(d.nbh * nC * S), kMmaThreads, sizeof(ScoreSmem),
              [&] { chunk_scores_mma_kernel<bf16, bf16>(d, p.qs, p.a32.data(), Qp.data(), P.data()); });
  for (int64_t bc = 0; bc < d.nbh * nC; ++bc)
    for (int64_t x = 0; x < C * C; ++x)
      for (int64_t sp = 1; sp < S; ++sp) P[bc * S * C * C + x] += P[(bc * S + sp) * C * C + x];
  return P;
}
// The context c_i = sum_{j<i} (sum_l Qp_i a^(i-1-j) q_j) v_j in float64 from Qp, q and v, at its
// place in the layout `outs` (n elements; the rest must stay unwritten).
std::vector<Acc> quadratic_context_ref(const Problem& p, const Str4& outs, size_t n) {
  const Dims& d = p.d;
  std::vector<Acc> ref(n, kUnwritten);
  for (int64_t bh = 0; bh < d.nbh; ++bh) {
    const int64_t h = p.h_of(bh);
    for (int64_t i = 0; i < d.T; ++i)
      for (int64_t e = 0; e < d.E; ++e) {
        Acc x;
        for (int64_t j = 0; j < i; ++j) {
          const double vj = to_float(p.v[p.vs.at(p.b_of(bh), h, j, e)]);
          for (int64_t l = 0; l < d.L; ++l)
            x += double(p.Qp[(bh * d.T + i) * d.L + l]) * p.apow(h, l, i - 1 - j) * p.qf(bh, j, l) * vj;
        }
        ref[outs.at(p.b_of(bh), h, i, e)] = x;
      }
  }
  return ref;
}

// ---- the quadratic forward's chain: chunk_scores_mma (bf16 Qp; its splits summed here, in order,
//      as reduce_splits does), cross_scores_mma (2 splits) and quadratic_output_mma, against
//      c_i = sum_{j<i} (sum_l Qp_i a^(i-1-j) q_j) v_j in float64 from Qp, q and v.
bool quadratic_chain_case(const Problem& p) {
  const Dims& d = p.d;
  const int64_t C = d.C, nC = d.nC, plane = d.nbh * nC * nC * C * C;
  const std::vector<float> P = quadratic_diag_scores(p);
  auto Pc = nans<bf16>(plane);
  auto parts = nans<float>(cross_parts_planes(2) * plane);
  emu::launch(small_grid(d.nbh * cross_items(nC) * 2), kCrossThreads, kCrossSmem, [&] {
    cross_scores_mma_kernel(d, p.Xq.data(), p.Kq.data(), p.a32.data(), Pc.data(), parts.data(), 2);
  });
  emu::launch(2, 64, 0, [&] { cross_reduce_kernel(d, parts.data(), Pc.data(), 2); });
  auto out = nans<bf16>(p.g.size());  // the context [B,H,T,E]: G's layout (v's may have Hv = 1)
  Str4 outs = p.gs;
  outs.p = out.data();
  emu::launch(small_grid(d.nbh * nC * (d.Ep / kMmaET)), kMmaThreads, quadratic_output_smem<false>(), [&] {
    quadratic_output_mma_kernel<bf16, false>(d, P.data(), Pc.data(), p.vb.data(), nullptr, outs);
  });
  // per term: Qp to bf16, the two operand roundings (Xq and Kq, or Xs and Kd), the scaled key, P to bf16
  return check("context", doubles(out), quadratic_context_ref(p, outs, out.size()), 2e-2);
}

// ---- quadratic_rows_mma (the quadratic forward's cross scores and context in one kernel, Lp <=
//      256): the diagonal blocks from chunk_scores_mma as in the chain above, the context against
//      the chain's float64 formula (the same roundings per term: Qp, Xq and Kq, the scaled key, P),
//      on the small grid, and on 3 blocks bit for bit (an item's sums do not depend on the grid).
//      Where Lp > kRowsMaxLp the launcher's predicate must say no.
bool quadratic_rows_case(const Problem& p) {
  const Dims& d = p.d;
  if (!quadratic_rows_applies(d)) {
    const bool ok = d.Lp > kRowsMaxLp;
    std::printf("    quadratic_rows_applies false at Lp %lld%s\n", static_cast<long long>(d.Lp), ok ? "" : "  <-- FAIL");
    return ok;
  }
  // what the kernel must not read as an operand NaN: the splits past 0, and in split 0 the diagonal,
  // the upper triangle and the rows past the chunk's length
  std::vector<float> P = quadratic_diag_scores(p);
  const int64_t C = d.C;
  for (int64_t bc = 0; bc < d.nbh * d.nC; ++bc)
    for (int64_t sp = 0; sp < d.nsplit; ++sp)
      for (int64_t i = 0; i < C; ++i)
        for (int64_t j = 0; j < C; ++j)
          if (sp > 0 || j >= i || i >= p.chunk_len(bc % d.nC)) P[((bc * d.nsplit + sp) * C + i) * C + j] = kNaN;
  const int64_t items = d.nbh * d.nC * (d.Ep / kMmaET);
  auto run = [&](unsigned grid) {
    auto out = nans<bf16>(p.g.size());  // the context [B,H,T,E]: G's layout (v's may have Hv = 1)
    Str4 outs = p.gs;
    outs.p = out.data();
    emu::launch(grid, kMmaThreads, quadratic_rows_smem(d.Lp), [&] {
      quadratic_rows_mma_kernel<bf16>(d, P.data(), p.Xq.data(), p.Kq.data(), p.vb.data(), p.a32.data(), outs);
    });
    return out;
  };
  const std::vector<bf16> out = run(small_grid(items)), out3 = run(3);
  Str4 outs = p.gs;
  const bool same = same_bits("context", out, out3, "the run on 3 blocks");
  return check("context", doubles(out), quadratic_context_ref(p, outs, out.size()), 2e-2) && same;
}

// ---- key remainders: Kq_lo = bf16(q_t a^(Cn-1-i) - Kq), zero padded (exact) ------------------
bool key_remainder_case(const Problem& p) {
  const Dims& d = p.d;
  auto out = nans<bf16>(d.nbh * d.T * d.Lp);
  emu::launch(small_grid(d.nbh * d.T), 64, 0,
              [&] { key_remainder_kernel<bf16>(d, p.qs, p.a32.data(), p.Kq.data(), out.data()); });
  std::vector<double> ref(out.size(), 0.0);
  for (int64_t bh = 0; bh < d.nbh; ++bh)
    for (int64_t t = 0; t < d.T; ++t)
      for (int64_t l = 0; l < d.L; ++l) {
        const int64_t c = t / d.C, n = p.chunk_len(c) - 1 - t % d.C, x = (bh * d.T + t) * d.Lp + l;
        const float k = p.qf(bh, t, l) * ipow(p.a32[p.h_of(bh) * d.L + l], int(n));
        ref[x] = rbf(k - float(bf(p.Kq, x)));
      }
  return check("Kq_lo", doubles(out), exact(ref), 0);
}

// ---- chunk states: forward S_{c+1} = a^Cn S_c + sum_i q_i a^(Cn-1-i) ⊗ v_i, Hs[c] = S_c;
//      reverse A_start = a^Cn A_end + sum_i Xq_i ⊗ G_i, Hs[c] = A_end of chunk c -------------------
// kSplitStore: S = bf16 hi and lo planes (the backward's): hi within bf16 rounding of the reference,
// hi + lo within 2^-16 of the same kernel's float32 stores.
template <typename S, bool kReverse, bool kLo = false, bool kKeyLo = false, bool kSplitStore = false>
// store_H = false: Hs null (the quadratic forward: only the final state is written).
// The kernel that the launcher selects within the 32-bit limits (chunk_states_mma_kernel, version 2;
// chunk_states_mma_wide_kernel where RHOSCAN_STATES_STAGES != 2) against float64; the wide kernel
// (version 1: the launcher's fallback past states_fit_32bit's limits, which no emulated problem
// reaches, so it is forced here) on the same inputs must write the same bits (Hs, Hs_lo, the final
// state; NaN where unwritten), on small_grid(items) blocks, and the selected one again on 3
// (several items per block, the fetch across items).
bool states_case(const Problem& p, bool with_init, bool store_H = true) {
  const Dims& d = p.d;
  const int64_t L = d.L, E = d.E, items = states_items(d);
  auto Hs = nans<S>(d.nbh * d.nC * d.Lp * d.Ep), Hs_lo = Hs;
  auto out = nans<float>(p.init.size());
  Str4 init = p.init_s, outs = p.init_s;
  outs.p = out.data();
  if (!with_init) init = Str4{};
  // kernel (a function pointer: either kernel) on `grid` blocks into h, h_lo, o
  auto run_states = [&](auto kernel, unsigned grid, std::vector<S>& h, std::vector<S>& h_lo, std::vector<float>& o) {
    Str4 os = outs;
    os.p = o.data();
    emu::launch(grid, kStatesThreads, states_mma_smem<S, kLo, kKeyLo>(), [&] {
      // (as launch_chunk_states: reverse, the values are G, per pair)
      kernel(kReverse ? d.per_pair() : d, kReverse ? p.Xq.data() : p.Kq.data(), kReverse ? p.gb.data() : p.vb.data(), p.a32.data(), init,
             store_H ? h.data() : nullptr, os, kLo ? (kReverse ? p.glo.data() : p.vlo.data()) : nullptr,
             kKeyLo ? p.Kq_lo.data() : nullptr, kSplitStore ? h_lo.data() : nullptr);
    });
  };
  constexpr auto selected = chunk_states_mma_selected<S, kReverse, kLo, kKeyLo, kSplitStore>();
  constexpr auto wide = &chunk_states_mma_wide_kernel<S, kReverse, kLo, kKeyLo, kSplitStore>;
  // version 2 in the other tile layout (padded or swizzled: RHOSCAN_ST_SWIZZLE), where version 2 is selected
  constexpr auto other = kStatesStages == 2
                             ? &chunk_states_mma_kernel<S, kReverse, kLo, kKeyLo, kSplitStore, !kStatesSwizzle>
                             : selected;
  run_states(selected, small_grid(items), Hs, Hs_lo, out);
  bool same = true;
  // the wide kernel, the selected one on 3 blocks, the other layout on small_grid(items) and on 2
  const char* names[] = {"chunk_states_mma_wide_kernel", "3 blocks", "the other tile layout",
                         "the other tile layout on 2 blocks"};
  for (int run = 0; run < 4; ++run) {
    auto H2 = nans<S>(Hs.size()), H2_lo = H2;
    auto out2 = nans<float>(out.size());
    run_states(run == 0 ? wide : run == 1 ? selected : other, run == 1 ? 3u : run == 3 ? 2u : small_grid(items), H2,
               H2_lo, out2);
    auto bits = [](const auto& x, const auto& y) {
      return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(x[0])) == 0;
    };
    const bool ok = bits(Hs, H2) && bits(Hs_lo, H2_lo) && bits(out, out2);
    if (!ok)
      std::printf("  FAIL %s: not bit for bit the first run's (Hs %d, Hs_lo %d, final state %d)\n", names[run],
                  int(bits(Hs, H2)), int(bits(Hs_lo, H2_lo)), int(bits(out, out2)));
    same &= ok;
  }
  std::vector<Acc> ref_H(Hs.size()), ref_out(out.size(), kUnwritten);
  for (int64_t bh = 0; bh < d.nbh; ++bh) {
    const int64_t b = p.b_of(bh), h = p.h_of(bh);
    std::vector<Acc> st(L * E);
    if (with_init)
      for (int64_t l = 0; l < L; ++l)
        for (int64_t e = 0; e < E; ++e) st[l * E + e] += p.init[p.init_s.at(b, h, l, e)];
    for (int64_t step = 0; step < d.nC; ++step) {
      const int64_t c = kReverse ? d.nC - 1 - step : step, Cn = p.chunk_len(c);
      for (int64_t l = 0; l < L; ++l)
        for (int64_t e = 0; e < E; ++e) {
          ref_H[((bh * d.nC + c) * d.Lp + l) * d.Ep + e] = st[l * E + e];
          Acc x = st[l * E + e].scaled(p.apow(h, l, Cn));
          for (int64_t i = 0; i < Cn; ++i) {
            const int64_t t = c * d.C + i;
            const double k = kReverse ? bf(p.Xq, (bh * d.T + t) * d.Lp + l) : p.qf(bh, t, l) * p.apow(h, l, Cn - 1 - i);
            const int64_t y = kReverse ? (bh * d.T + t) * d.Ep + e : p.vo(bh, t, e);
            x += k * val(kReverse ? p.gb : p.vb, kReverse ? p.glo : p.vlo, kLo, y);
            // split keys: K_lo times V's hi (the kernel leaves out K_lo V_lo)
            if (kKeyLo) x += bf(p.Kq_lo, (bh * d.T + t) * d.Lp + l) * bf(p.vb, y);
          }
          st[l * E + e] = x;
        }
    }
    for (int64_t l = 0; l < L; ++l)
      for (int64_t e = 0; e < E; ++e) ref_out[p.init_s.at(b, h, l, e)] = st[l * E + e];
  }
  if (!store_H) std::fill(ref_H.begin(), ref_H.end(), kUnwritten);
  bool ok = same & check("Hs", doubles(Hs), ref_H, 1e-2) & check("final", doubles(out), ref_out, 1e-2);
  if constexpr (kSplitStore) {  // hi + lo against the float32 stores of the same products
    auto Hf = nans<float>(Hs.size());
    auto out2 = nans<float>(out.size());
    Str4 outs2 = outs;
    outs2.p = out2.data();
    emu::launch(small_grid(items), kStatesThreads, states_mma_smem<float, kLo, kKeyLo>(), [&] {
      chunk_states_mma_selected<float, kReverse, kLo, kKeyLo, false>()(
          kReverse ? d.per_pair() : d, kReverse ? p.Xq.data() : p.Kq.data(), kReverse ? p.gb.data() : p.vb.data(), p.a32.data(), init, Hf.data(),
          outs2, kLo ? (kReverse ? p.glo.data() : p.vlo.data()) : nullptr, kKeyLo ? p.Kq_lo.data() : nullptr, nullptr);
    });
    std::vector<double> sum = doubles(Hs);
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += to_float(Hs_lo[i]);
    ok &= check("Hs hi+lo", sum, exact(doubles(Hf)), 2e-5);  // |x - hi - lo| <= 2^-8 2^-8 |x|
  }
  return ok;
}

// ---- final_state_mma (the quadratic forward's final state): rho_T[l][e] =
//      sum_t q_t[l] a_l^(T-1-t) v_t[e] in float64 from q, v and a (not from the operands: this checks
//      the split of the exponent into Kq's a^(Cn-1-i) and the chunk factors a^Cn too); split values:
//      v's hi plane plus its (quarter-size) lo plane. No initial state (the quadratic path has none).
//      `grid` blocks (fewer than the items: the pipeline across items), the output NaN outside L, E.
//      padded: rho's rows E + 1 or E + 2 floats apart (even: the float2 stores with an odd E, whose
//      last column is stored alone).
// rho's strides (padded: rows E + 1 or E + 2 floats apart) and its size in floats
Str4 final_state_strides(const Problem& p, bool padded, size_t& size) {
  const int64_t L = p.d.L, E = p.d.E;
  Str4 rs = p.init_s;
  size = p.init.size();
  if (padded) {
    const int64_t Es = E + (E % 2 ? 1 : 2), H = p.init_s.s[0] / p.init_s.s[1];
    rs.s[3] = 1, rs.s[2] = Es, rs.s[1] = L * Es, rs.s[0] = H * L * Es;
    size = p.init.size() / static_cast<size_t>(L * E) * static_cast<size_t>(L * Es);
  }
  return rs;
}
// final_state_mma_kernel into a NaN-initialised rho at strides rs, launched as launch_final_state
// does (final_state_batches) with its pair limit `limit` (the launcher's 2^30: one launch; a small
// one: the sub-batches that the launcher takes past 2^30 pairs)
// init: the initial state rho0 (p.init_s), or none
template <bool kLo, bool kSwizzle = kFsSwizzle>
std::vector<float> run_final_state(const Problem& p, unsigned grid, Str4 rs, size_t size, int64_t limit,
                                   Str4 init = Str4{}) {
  auto out = nans<float>(size);
  Str4 outs = rs;
  outs.p = out.data();
  final_state_batches(p.d, p.a32.data(), outs, init, limit, [&](const Dims& s, int64_t first, const float* as, Str4 os,
                                                               Str4 is) {
    const int64_t kv = first * p.d.T, vv = p.vr(first) * p.d.T;  // (as launch_final_state)
    emu::launch(grid, kFsThreads, final_state_smem<kLo, kSwizzle>(), [&] {
      auto kernel = is.p != nullptr ? final_state_mma_kernel<kLo, kSwizzle, true> : final_state_mma_kernel<kLo, kSwizzle, false>;
      kernel(s, p.Kq.data() + kv * p.d.Lp, p.vb.data() + vv * p.d.Ep, kLo ? p.vlo.data() + vv * p.d.Ep : nullptr, as, os, is);
    });
  });
  return out;
}
// final_state_wgmma_kernel, launched as launch_final_state launches it (like run_final_state)
template <bool kLo>
std::vector<float> run_final_state_wgmma(const Problem& p, unsigned grid, Str4 rs, size_t size, int64_t limit,
                                         Str4 init = Str4{}) {
  auto out = nans<float>(size);
  Str4 outs = rs;
  outs.p = out.data();
  final_state_batches(p.d, p.a32.data(), outs, init, limit, [&](const Dims& s, int64_t first, const float* as, Str4 os,
                                                               Str4 is) {
    const int64_t kv = first * p.d.T, vv = p.vr(first) * p.d.T;  // (as launch_final_state)
    emu::launch(grid, kFwThreads, final_state_wgmma_smem<kLo>(), [&] {
      auto kernel = is.p != nullptr ? final_state_wgmma_kernel<kLo, true> : final_state_wgmma_kernel<kLo, false>;
      kernel(s, p.Kq.data() + kv * p.d.Lp, p.vb.data() + vv * p.d.Ep, kLo ? p.vlo.data() + vv * p.d.Ep : nullptr, as, os, is);
    });
  });
  return out;
}
// final_state_wgmma (warpgroup MMA from descriptors) against final_state_mma: the same k steps
// per element in the same order, so rho_T bit for bit (on NaN-initialised rho at strides rs, so
// that a store outside L, E or a missing one shows too).
template <bool kLo>
bool final_state_wgmma_case(const Problem& p, unsigned grid, bool padded, int64_t limit = int64_t{1} << 30,
                            bool from_init = false) {
  size_t size = 0;
  const Str4 rs = final_state_strides(p, padded, size), init = from_init ? p.init_s : Str4{};
  return same_bits("rho_T", run_final_state<kLo>(p, grid, rs, size, limit, init),
                   run_final_state_wgmma<kLo>(p, grid, rs, size, limit, init), "final_state_mma's");
}
template <bool kLo>
bool final_state_swizzle_case(const Problem& p, unsigned grid, bool padded) {
  size_t size = 0;
  const Str4 rs = final_state_strides(p, padded, size);
  return same_bits("rho_T", run_final_state<kLo, false>(p, grid, rs, size, int64_t{1} << 30),
                   run_final_state<kLo, true>(p, grid, rs, size, int64_t{1} << 30));
}
// from_init: from the initial state p.init (rho_T gains a^T ⊙ init)
template <bool kLo>
bool final_state_case(const Problem& p, unsigned grid, bool padded = false, int64_t limit = int64_t{1} << 30,
                      bool from_init = false) {
  const Dims& d = p.d;
  const int64_t L = d.L, E = d.E;
  size_t size = 0;
  const Str4 rs = final_state_strides(p, padded, size);  // rho's strides
  const auto out = run_final_state<kLo>(p, grid, rs, size, limit, from_init ? p.init_s : Str4{});
  std::vector<Acc> ref(out.size(), kUnwritten);
  for (int64_t bh = 0; bh < d.nbh; ++bh) {
    const int64_t b = p.b_of(bh), h = p.h_of(bh);
    for (int64_t l = 0; l < L; ++l)
      for (int64_t e = 0; e < E; ++e) {
        Acc x;
        for (int64_t t = 0; t < d.T; ++t) {
          const double vt = to_float(p.v[p.vs.at(b, h, t, e)]) + (kLo ? bf(p.vlo, p.vo(bh, t, e)) : 0.0);
          x += p.qf(bh, t, l) * p.apow(h, l, d.T - 1 - t) * vt;
        }
        if (from_init) x += p.apow(h, l, d.T) * p.init[p.init_s.at(b, h, l, e)];
        ref[rs.at(b, h, l, e)] = x;
      }
  }
  return check("rho_T", doubles(out), ref, 1e-2);
}

// ---- chunk outputs: out_i = sum_l X_i[l] S[l,:] + sum_j Pm[i][j] Y_j, forward (X = Xq, S = H_c
//      in bf16, Pm = P for j < i, Y = v) or dv (X = Kq, S = A_end in float32, Pm = P^T for j > i,
//      Y = G). P's split 0 holds the sum; its upper triangle and the other splits are NaN. ------
template <typename S, typename OutT, bool kDv, bool kLo = false>
bool output_case(const Problem& p) {
  const Dims& d = p.d;
  const int64_t C = d.C, L = d.L, E = d.E, items = d.nbh * d.nC * (d.Ep / kMmaET);
  std::vector<S> Hs(d.nbh * d.nC * d.Lp * d.Ep);
  for (auto& x : Hs) x = from_float<S>(float(2 * U01() - 1));  // padding too: X's zeros must cancel it
  std::vector<float> P(d.nbh * d.nC * d.nsplit * C * C, kNaN);
  for (int64_t bc = 0; bc < d.nbh * d.nC; ++bc)
    for (int64_t i = 0; i < C; ++i)
      for (int64_t j = 0; j < i; ++j) P[(bc * d.nsplit * C + i) * C + j] = float(U01());
  // forward: out Str4 in OutT, same layout as v; dv: out_ws [bh][t][e] float
  std::vector<OutT> out = nans<OutT>(kDv ? d.nbh * d.T * E : p.g.size());
  Str4 outs = p.gs;  // (the context [B,H,T,E]: G's layout; v's may have Hv = 1)
  outs.p = out.data();
  // kernel (either version) on `grid` blocks into o
  auto run_output = [&](auto kernel, unsigned grid, std::vector<OutT>& o) {
    Str4 os = outs;
    os.p = o.data();
    emu::launch(grid, kMmaThreads, kOutMmaSmem, [&] {
      // (as launch_chunk_output: dv, Y is G, per pair)
      kernel(kDv ? d.per_pair() : d, kDv ? p.Kq.data() : p.Xq.data(), Hs.data(), P.data(), kDv ? p.gb.data() : p.vb.data(),
             kDv ? Str4{} : os, kDv ? reinterpret_cast<float*>(o.data()) : nullptr,
             kLo ? (kDv ? p.glo.data() : p.vlo.data()) : nullptr);
    });
  };
  // the selected version (chunk_output_mma_v2_kernel by default) on 3 blocks (several items per
  // block: the running decomposition's carries) against float64, and the other version
  // (chunk_output_mma_kernel, version 1) on small_grid(items) blocks bit for bit (NaN where unwritten)
  constexpr auto selected = chunk_output_mma_selected<S, OutT, kDv, kLo>();
  constexpr auto other = RHOSCAN_OUTPUT_VERSION == 1 ? &chunk_output_mma_v2_kernel<S, OutT, kDv, kLo>
                                                     : &chunk_output_mma_kernel<S, OutT, kDv, kLo>;
  run_output(selected, 3, out);
  auto out2 = nans<OutT>(out.size());
  run_output(other, small_grid(items), out2);
  bool same = std::memcmp(out.data(), out2.data(), out.size() * sizeof(OutT)) == 0;
  if (!same) std::printf("  FAIL the other chunk_output_mma version: not bit for bit the selected one's\n");
  // version 2 in its other tile layout (padded or swizzled: RHOSCAN_OUT_SWIZZLE) on 2 blocks
  auto out3 = nans<OutT>(out.size());
  run_output(&chunk_output_mma_v2_kernel<S, OutT, kDv, kLo, !kOutSwizzle>, 2, out3);
  const bool same3 = std::memcmp(out.data(), out3.data(), out.size() * sizeof(OutT)) == 0;
  if (!same3) std::printf("  FAIL chunk_output_mma_v2 in the other tile layout: not bit for bit the selected one's\n");
  same &= same3;
  std::vector<Acc> ref(out.size(), kUnwritten);
  for (int64_t bh = 0; bh < d.nbh; ++bh)
    for (int64_t c = 0; c < d.nC; ++c) {
      const int64_t Cn = p.chunk_len(c), t0 = c * C;
      for (int64_t i = 0; i < Cn; ++i)
        for (int64_t e = 0; e < E; ++e) {
          Acc x;
          for (int64_t l = 0; l < L; ++l)
            x += bf(kDv ? p.Kq : p.Xq, (bh * d.T + t0 + i) * d.Lp + l) *
                 double(to_float(Hs[((bh * d.nC + c) * d.Lp + l) * d.Ep + e]));
          for (int64_t j = kDv ? i + 1 : 0; j < (kDv ? Cn : i); ++j) {
            const double pm = P[(bh * d.nC + c) * d.nsplit * C * C + (kDv ? j * C + i : i * C + j)];
            x += pm * val(kDv ? p.gb : p.vb, kDv ? p.glo : p.vlo, kLo,
                          kDv ? (bh * d.T + t0 + j) * d.Ep + e : p.vo(bh, t0 + j, e));
          }
          ref[kDv ? (bh * d.T + t0 + i) * E + e : outs.at(p.b_of(bh), p.h_of(bh), t0 + i, e)] = x;
        }
    }
  return check(kDv ? "dv" : "context", doubles(out), ref, 1e-2) && same;
}

// ---- chunk_scan_mma (the fused forward, Lp <= 256, C % 4 == 0; chunk_scan_mma_v2_kernel, the state
//      transposed): ctx_c = Xq_c · bf16(S_c) + Pm_c · v_c and S_{c+1} = a^Cn S_c + sum_i q_i a^(Cn-1-i)
//      ⊗ v_i, S_0 = init (or 0), the final state to rho. Bit for bit the two kernels it replaces
//      (chunk_states_mma with bf16 states, then chunk_output_mma, the launcher's selections) on the
//      same inputs, on small_grid(items) and on 3 blocks (several items per block: the pipeline and
//      the decay slots across items, the running decomposition); and against float64 (S from q and
//      v, as states_case; the context from Xq's bf16 values and P, as output_case). P's upper
//      triangle and its other splits NaN.
template <typename F>
void with_scan_lp(int64_t Lp, F f) {
  switch (Lp) {
    case 64: f(std::integral_constant<int, 64>{}); break;
    case 128: f(std::integral_constant<int, 128>{}); break;
    case 192: f(std::integral_constant<int, 192>{}); break;
    case 256: f(std::integral_constant<int, 256>{}); break;
    default: std::abort();
  }
}
// kWgmma: version 3 (chunk_scan_wgmma_kernel, the products on warpgroup MMA) in place of version 2,
// held to the same bits (its fetch's addresses stepped, version 2's indexed: the same copies).
template <bool kWgmma = false>
bool scan_case(const Problem& p, bool with_init) {
  const Dims& d = p.d;
  if (d.Lp > kScanMaxLp || d.C % 4 != 0) {
    std::printf("    (does not apply: Lp %lld, C %lld; the forward runs the two kernels)\n", (long long)d.Lp,
                (long long)d.C);
    return true;
  }
  const int64_t C = d.C, L = d.L, E = d.E;
  std::vector<float> P(d.nbh * d.nC * d.nsplit * C * C, kNaN);
  for (int64_t bc = 0; bc < d.nbh * d.nC; ++bc)
    for (int64_t i = 0; i < C; ++i)
      for (int64_t j = 0; j < i; ++j) P[(bc * d.nsplit * C + i) * C + j] = float(U01());
  Str4 init = with_init ? p.init_s : Str4{};
  // the two kernels
  auto Hs = nans<bf16>(d.nbh * d.nC * d.Lp * d.Ep);
  auto rho2 = nans<float>(p.init.size());
  auto ctx2 = nans<bf16>(p.g.size());
  Str4 rho2s = p.init_s, ctx2s = p.gs;
  rho2s.p = rho2.data(), ctx2s.p = ctx2.data();
  emu::launch(small_grid(states_items(d)), kStatesThreads, states_mma_smem<bf16>(), [&] {
    chunk_states_mma_selected<bf16, false, false, false, false>()(d, p.Kq.data(), p.vb.data(), p.a32.data(), init,
                                                                  Hs.data(), rho2s, nullptr, nullptr, nullptr);
  });
  emu::launch(small_grid(d.nbh * d.nC * (d.Ep / kMmaET)), kMmaThreads, kOutMmaSmem, [&] {
    chunk_output_mma_selected<bf16, bf16, false, false>()(d, p.Xq.data(), Hs.data(), P.data(), p.vb.data(), ctx2s,
                                                          nullptr, nullptr);
  });
  // the fused kernel on `grid` blocks
  const int64_t items = d.nbh * ((E + kScan2ET - 1) / kScan2ET);
  auto run_scan = [&](unsigned grid, std::vector<bf16>& ctx, std::vector<float>& rho) {
    Str4 rs = p.init_s, cs = p.gs;
    rs.p = rho.data(), cs.p = ctx.data();
    with_scan_lp(d.Lp, [&](auto lp) {
      constexpr int kLp = decltype(lp)::value;
      if constexpr (kWgmma) {
        emu::launch(grid, kScanThreads, Scan3Layout<kLp>::bytes, [&] {
          chunk_scan_wgmma_kernel<kLp, bf16>(d, p.Xq.data(), p.Kq.data(), p.vb.data(), P.data(), p.a32.data(), init,
                                             cs, rs);
        });
      } else {
        emu::launch(grid, kScanThreads, Scan2Layout<kLp>::bytes, [&] {
          chunk_scan_mma_v2_kernel<kLp, bf16>(d, p.Xq.data(), p.Kq.data(), p.vb.data(), P.data(), p.a32.data(), init,
                                              cs, rs);
        });
      }
    });
  };
  auto bits = [](const auto& x, const auto& y) {
    return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(x[0])) == 0;
  };
  auto ctx = nans<bf16>(p.g.size());
  auto rho = nans<float>(p.init.size());
  run_scan(small_grid(items), ctx, rho);
  bool same = true;
  // 0: the two kernels; 3: the fused kernel again on 3 blocks
  for (unsigned run : {0u, 3u}) {
    auto c3 = nans<bf16>(ctx.size());
    auto r3 = nans<float>(rho.size());
    if (run == 3u) run_scan(3u, c3, r3);
    const auto& cx = run == 0u ? ctx2 : c3;
    const auto& rx = run == 0u ? rho2 : r3;
    const bool ok = bits(ctx, cx) && bits(rho, rx);
    const char* what = run == 0u ? "against chunk_states_mma + chunk_output_mma" : "on 3 blocks";
    std::printf("    %s: ctx %s, rho %s\n", what, bits(ctx, cx) ? "bitwise" : "DIFFERENT", bits(rho, rx) ? "bitwise" : "DIFFERENT");
    if (!ok) std::printf("  FAIL not bit for bit\n");
    same &= ok;
  }
  std::vector<Acc> ref_ctx(ctx.size(), kUnwritten), ref_rho(rho.size(), kUnwritten);
  for (int64_t bh = 0; bh < d.nbh; ++bh) {
    const int64_t b = p.b_of(bh), h = p.h_of(bh);
    std::vector<Acc> st(L * E);
    if (with_init)
      for (int64_t l = 0; l < L; ++l)
        for (int64_t e = 0; e < E; ++e) st[l * E + e] += p.init[p.init_s.at(b, h, l, e)];
    for (int64_t c = 0; c < d.nC; ++c) {
      const int64_t Cn = p.chunk_len(c), t0 = c * C;
      for (int64_t i = 0; i < Cn; ++i)
        for (int64_t e = 0; e < E; ++e) {
          Acc x;
          for (int64_t l = 0; l < L; ++l) {
            const double xq = bf(p.Xq, (bh * d.T + t0 + i) * d.Lp + l);
            x.x += xq * st[l * E + e].x, x.m += std::fabs(xq) * st[l * E + e].m;
          }
          for (int64_t j = 0; j < i; ++j)
            x += double(P[(bh * d.nC + c) * d.nsplit * C * C + i * C + j]) * bf(p.vb, p.vo(bh, t0 + j, e));
          ref_ctx[p.gs.at(b, h, t0 + i, e)] = x;
        }
      for (int64_t l = 0; l < L; ++l)
        for (int64_t e = 0; e < E; ++e) {
          Acc x = st[l * E + e].scaled(p.apow(h, l, Cn));
          for (int64_t i = 0; i < Cn; ++i)
            x += p.qf(bh, t0 + i, l) * p.apow(h, l, Cn - 1 - i) * bf(p.vb, p.vo(bh, t0 + i, e));
          st[l * E + e] = x;
        }
    }
    for (int64_t l = 0; l < L; ++l)
      for (int64_t e = 0; e < E; ++e) ref_rho[p.init_s.at(b, h, l, e)] = st[l * E + e];
  }
  return check("context", doubles(ctx), ref_ctx, 1e-2) & check("rho", doubles(rho), ref_rho, 1e-2) && same;
}

// ---- readback: W[t][l] = H_c[l,:]·G_t, U[t][l] = A_end[l,:]·v_t, HdH[c][l] = <H_c[l,:], A_end[l,:]>
template <bool kLo = false>
bool readback_case(const Problem& p) {
  const Dims& d = p.d;
  const int64_t L = d.L, E = d.E, items = d.nbh * d.nC * (d.Lp / kMmaLT);
  // the states as bf16 hi and lo planes, as chunk_states_mma_kernel's split stores write them (zero
  // padding); Hs, As: the values hi + lo they stand for
  const size_t plane = d.nbh * d.nC * d.Lp * d.Ep;
  std::vector<float> Hs(plane, 0.0f), As = Hs;
  std::vector<bf16> Hh(plane, __float2bfloat16_rn(0.0f)), Hl = Hh, Ah = Hh, Al = Hh;
  for (int64_t x = 0; x < int64_t(plane); ++x)
    if (x / d.Ep % d.Lp < L && x % d.Ep < E) {
      const float h = float(2 * U01() - 1), a = float(2 * U01() - 1);
      Hh[x] = __float2bfloat16_rn(h), Hl[x] = __float2bfloat16_rn(h - rbf(h));
      Ah[x] = __float2bfloat16_rn(a), Al[x] = __float2bfloat16_rn(a - rbf(a));
      Hs[x] = to_float(Hh[x]) + to_float(Hl[x]), As[x] = to_float(Ah[x]) + to_float(Al[x]);
    }
  auto W = nans<float>(d.nbh * d.T * L), U = W, HdH = nans<float>(d.nbh * d.nC * L);
  // kernel (version 1 or 2) on `grid` blocks into w, u, hdh
  // (the padded layout's shared memory: the swizzled kernel's is smaller)
  auto run = [&](auto kernel, unsigned grid, std::vector<float>& w, std::vector<float>& u, std::vector<float>& hdh) {
    emu::launch(grid, kMmaThreads, readback_smem<kLo>(), [&] {
      kernel(d, Hh.data(), Hl.data(), Ah.data(), Al.data(), p.gb.data(), p.vb.data(), w.data(), u.data(), hdh.data(),
             kLo ? p.glo.data() : nullptr, kLo ? p.vlo.data() : nullptr);
    });
  };
  // version 2 (the launcher's within readback_fit_32bit, which every emulated problem meets) in
  // the launcher's tile layout (RHOSCAN_RB_SWIZZLE) against float64 on small_grid(items) blocks;
  // version 1 on the same blocks, version 2 on 3 and 5 (its running item decomposition wrapping
  // with other steps), and version 2 in the other layout (padded or swizzled) on small_grid(items)
  // and on 3 blocks, must write the same bits (W, U, HdH; NaN where unwritten)
  run(&chunk_readback_mma_kernel<kLo, kRbSwizzle>, small_grid(items), W, U, HdH);
  bool same = readback_fit_32bit(d);
  if (!same) std::printf("  FAIL readback_fit_32bit false\n");
  for (unsigned grid : {0u, 3u, 5u, 1u, 2u}) {  // 0: version 1 on small_grid(items); 1, 2: the other layout
    auto W2 = nans<float>(W.size()), U2 = nans<float>(U.size()), H2 = nans<float>(HdH.size());
    if (grid == 0)
      run(&chunk_readback_mma_v1_kernel<kLo>, small_grid(items), W2, U2, H2);
    else if (grid == 1)
      run(&chunk_readback_mma_kernel<kLo, !kRbSwizzle>, small_grid(items), W2, U2, H2);
    else if (grid == 2)
      run(&chunk_readback_mma_kernel<kLo, !kRbSwizzle>, 3, W2, U2, H2);
    else
      run(&chunk_readback_mma_kernel<kLo, kRbSwizzle>, grid, W2, U2, H2);
    auto bits = [](const auto& x, const auto& y) {
      return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(x[0])) == 0;
    };
    const bool ok = bits(W, W2) && bits(U, U2) && bits(HdH, H2);
    if (!ok)
      std::printf("  FAIL %s: not bit for bit version 2's first run (W %d, U %d, HdH %d)\n",
                  grid == 0   ? "chunk_readback_mma_v1_kernel"
                  : grid == 1 ? "version 2, the other tile layout"
                  : grid == 2 ? "version 2, the other tile layout, on 3 blocks"
                  : grid == 3 ? "version 2 on 3 blocks"
                              : "version 2 on 5 blocks",
                  int(bits(W, W2)), int(bits(U, U2)), int(bits(HdH, H2)));
    same &= ok;
  }
  std::vector<Acc> rW(W.size()), rU(U.size()), rH(HdH.size());
  for (int64_t bh = 0; bh < d.nbh; ++bh)
    for (int64_t t = 0; t < d.T; ++t)
      for (int64_t l = 0; l < L; ++l) {
        const int64_t c = t / d.C;
        const float *h = &Hs[((bh * d.nC + c) * d.Lp + l) * d.Ep], *a = &As[((bh * d.nC + c) * d.Lp + l) * d.Ep];
        Acc w, u, hh;
        for (int64_t e = 0; e < E; ++e) {
          // split values: S (hi + lo) times Y's hi, plus S's bf16 hi times Y's lo (the kernel's three
          // products; S_lo·Y_lo is left out, below float32 resolution with real float16 remainders)
          // (S's hi plane itself: bf16(hi + lo) is another value where lo is a rounding tie)
          const int64_t y = (bh * d.T + t) * d.Ep + e, s = ((bh * d.nC + c) * d.Lp + l) * d.Ep + e, yv = p.vo(bh, t, e);
          w += double(h[e]) * bf(p.gb, y) + (kLo ? double(to_float(Hh[s])) * bf(p.glo, y) : 0.0);
          u += double(a[e]) * bf(p.vb, yv) + (kLo ? double(to_float(Ah[s])) * bf(p.vlo, yv) : 0.0);
          hh += double(h[e]) * a[e];
        }
        rW[(bh * d.T + t) * L + l] = w, rU[(bh * d.T + t) * L + l] = u;
        rH[(bh * d.nC + c) * L + l] = hh;
      }
  return check("W", doubles(W), rW, 1e-4) & check("U", doubles(U), rU, 1e-4) & check("HdH", doubles(HdH), rH, 1e-4) &
         same;
}

// ---- quadratic backward (quadratic_backward.cuh) ------------------------------------------------
// cross_values: M_IJ = G_I v_J^T (J < I) as bf16 hi + lo planes of 64×64 blocks, zeros in the
// padding; hi + lo to float32 accuracy (1e-4 of the terms' magnitude), hi within bf16 rounding.
// Its diagonal items: M_II in float32 into split 0 of bwd_local's [bh][nC][nsplit][C][C] slots
// (1e-4; zeros past Cn; the other splits' slots untouched: left NaN).
struct CrossM {
  std::vector<bf16> hi, lo;
  std::vector<float> diag;
};
// kLo (split values): M = G v^T + G v_lo^T + G_lo v^T (G_lo v_lo^T left out).
template <bool kLo = false>
CrossM run_cross_values(const Problem& p) {
  const Dims& d = p.d;
  const int64_t items = d.nbh * cross_pairs(d.nC);
  CrossM m{nans<bf16>(items * kQB * kQB), nans<bf16>(items * kQB * kQB), nans<float>(d.nbh * d.nC * d.nsplit * d.C * d.C)};
  emu::launch(small_grid(items + d.nbh * d.nC), kCvThreads, cross_values_smem<kLo>(), [&] {
    cross_values_mma_kernel<kLo>(d, p.gb.data(), p.vb.data(), m.hi.data(), m.lo.data(), kLo ? p.glo.data() : nullptr,
                                 kLo ? p.vlo.data() : nullptr, m.diag.data());
  });
  return m;
}
template <bool kLo = false>
bool cross_values_case(const Problem& p) {
  const Dims& d = p.d;
  const CrossM m = run_cross_values<kLo>(p);
  std::vector<Acc> ref(m.hi.size());
  for (int64_t bh = 0; bh < d.nbh; ++bh)
    for (int64_t I = 1; I < d.nC; ++I)
      for (int64_t J = 0; J < I; ++J)
        for (int64_t i = 0; i < kQB; ++i)
          for (int64_t j = 0; j < kQB; ++j) {
            Acc x;
            if (i < p.chunk_len(I) && j < p.chunk_len(J))
              for (int64_t e = 0; e < d.E; ++e) {
                const int64_t gi = (bh * d.T + I * d.C + i) * d.Ep + e, vj = p.vo(bh, J * d.C + j, e);
                x += bf(p.gb, gi) * bf(p.vb, vj);
                if (kLo) x += bf(p.gb, gi) * bf(p.vlo, vj), x += bf(p.glo, gi) * bf(p.vb, vj);
              }
            ref[cross_block(bh, d.nC, I, J) + i * kQB + j] = x;
          }
  std::vector<double> sum = doubles(m.hi);
  for (size_t i = 0; i < sum.size(); ++i) sum[i] += to_float(m.lo[i]);
  const int64_t C = d.C;
  std::vector<Acc> rdiag(m.diag.size());  // NaN (untouched) but in split 0
  for (int64_t bh = 0; bh < d.nbh; ++bh)
    for (int64_t c = 0; c < d.nC; ++c)
      for (int64_t i = 0; i < C; ++i)
        for (int64_t j = 0; j < C; ++j) {
          Acc x;
          if (i < p.chunk_len(c) && j < p.chunk_len(c))
            for (int64_t e = 0; e < d.E; ++e) {
              const int64_t gi = (bh * d.T + c * C + i) * d.Ep + e, vj = p.vo(bh, c * C + j, e);
              x += bf(p.gb, gi) * bf(p.vb, vj);
              if (kLo) x += bf(p.gb, gi) * bf(p.vlo, vj), x += bf(p.glo, gi) * bf(p.vb, vj);
            }
          rdiag[(bh * d.nC + c) * d.nsplit * C * C + i * C + j] = x;
        }
  for (size_t i = 0; i < rdiag.size(); ++i)
    if (i % (d.nsplit * C * C) >= static_cast<size_t>(C * C)) rdiag[i] = kUnwritten;
  return check("M hi", doubles(m.hi), ref, 1e-2) & check("M hi+lo", sum, ref, 1e-4) &
         check("M diagonal (float32)", doubles(m.diag), rdiag, 1e-4);
}


// quad_readback_mma_kernel (or, kWgmma, quad_readback_wgmma_kernel), with
// launch_quadratic_backward's block size and shared memory
// (kWgmma: its stage count, 2 or 3; kRegA: the operand as A from registers, else from shared memory;
// kGrid: blocks, 0 for small_grid, -1 for one more block than items; kChunksInner: the wgmma
// kernel's other item order, the chunks K inner)
template <bool kKeyLo, bool kSwizzle = RHOSCAN_QR_SWIZZLE != 0, int kWgmma = 0, bool kRegA = true, int kGrid = 0,
          bool kChunksInner = false>
void run_quad_readback(const Problem& p, const CrossM& m, std::vector<float>& W, std::vector<float>& U,
                       std::vector<float>& HdH) {
  const Dims& d = p.d;
  const int64_t items = d.nbh * d.nC * ((d.Lp + kQrLT - 1) / kQrLT);
  if constexpr (kWgmma > 0) {
    const unsigned grid = kGrid == 0 ? small_grid(items) : kGrid < 0 ? unsigned(items + 1) : unsigned(kGrid);
    emu::launch(grid, kQrThreads, quad_readback_wgmma_smem<kKeyLo, kWgmma>(), [&] {
      quad_readback_wgmma_kernel<kKeyLo, kWgmma, kRegA>(d, m.hi.data(), m.lo.data(), p.Kq.data(), p.Xq.data(), p.a32.data(),
                                         W.data(), U.data(), HdH.data(), kKeyLo ? p.Kq_lo.data() : nullptr,
                                         kChunksInner);
    });
  } else {
    emu::launch(small_grid(items), kQrThreads, quad_readback_smem<kKeyLo, kSwizzle>(), [&] {
      quad_readback_mma_kernel<kKeyLo, kSwizzle>(d, m.hi.data(), m.lo.data(), p.Kq.data(), p.Xq.data(), p.a32.data(),
                                                 W.data(), U.data(), HdH.data(), kKeyLo ? p.Kq_lo.data() : nullptr);
    });
  }
}
// quad_readback_wgmma_kernel (warpgroup MMA from descriptors) against version 3 (mma.sync, its
// default swizzled tiles): the same k steps in the same order, so W, U and HdH' bit for bit, with
// the operand as A from registers (kRegA, the default) or from shared memory.
// kGrid as run_quad_readback's: its blocks walk their items with a fetch cursor that runs across
// them (a persistent grid), so the grid's stride and idle blocks are cases of their own, and so is
// the other item order (kChunksInner: the blocks' items, their fetch cursor and a's loads an item
// ahead all walk it).
template <bool kKeyLo, int kStages = 3, bool kRegA = true, int kGrid = 0, bool kChunksInner = false>
bool quad_readback_wgmma_case(const Problem& p) {
  const Dims& d = p.d;
  const CrossM m = run_cross_values<kKeyLo>(p);
  auto W = nans<float>(d.nbh * d.T * d.L), U = W, HdH = nans<float>(d.nbh * d.nC * d.L);
  auto Ww = W, Uw = W, HdHw = HdH;
  run_quad_readback<kKeyLo>(p, m, W, U, HdH);
  run_quad_readback<kKeyLo, true, kStages, kRegA, kGrid, kChunksInner>(p, m, Ww, Uw, HdHw);
  constexpr const char* v3 = "version 3's (mma.sync)";
  return same_bits("W", W, Ww, v3) & same_bits("U", U, Uw, v3) & same_bits("HdH", HdH, HdHw, v3);
}
// The swizzled tiles (quadratic_backward.cuh, kSwizzle: unpadded rows, chunk c of row r at
// c ^ (r % 8)) hold the same bytes in other places: W, U and HdH' bitwise the padded kernel's.
template <bool kKeyLo>
bool quad_readback_swizzle_case(const Problem& p) {
  const Dims& d = p.d;
  const CrossM m = run_cross_values<kKeyLo>(p);
  auto W = nans<float>(d.nbh * d.T * d.L), U = W, HdH = nans<float>(d.nbh * d.nC * d.L);
  auto Ws = W, Us = W, HdHs = HdH;
  run_quad_readback<kKeyLo, false>(p, m, W, U, HdH);
  run_quad_readback<kKeyLo, true>(p, m, Ws, Us, HdHs);
  return same_bits("W", W, Ws) & same_bits("U", U, Us) & same_bits("HdH", HdH, HdHs);
}

// quad_readback: W, U and HdH' against float64 loops over explicit chunk states built from the
// same bf16 operands, H_c = sum_{J<c} a^((c-1-J)C) Kq_J^T v_J and A_end_c = sum_{I>c} a^((I-c-1)C)
// Xq_I^T G_I: W_t = H_c[l,:]·G_t, U_t = A_end_c[l,:]·v_t (1e-4: M's hi + lo keep float32
// accuracy), and per (bh, l) the weighted sum that bwd_local takes, sum_c f(Cn_c) HdH[c] against
// sum_c f(Cn_c) <H_c, A_end_c>, f(n) = n a^(n-1); slot nC-1 must hold 0. M from cross_values.
// Magnitudes: the sums of |terms| down to single products of q-, v-, G-derived operands.
template <bool kWgmma = false>
bool quad_readback_case(const Problem& p) {
  const Dims& d = p.d;
  const int64_t L = d.L, E = d.E, C = d.C, nC = d.nC;
  const CrossM m = run_cross_values(p);
  auto W = nans<float>(d.nbh * d.T * L), U = W, HdH = nans<float>(d.nbh * nC * L);
  run_quad_readback<false, RHOSCAN_QR_SWIZZLE != 0, kWgmma ? 3 : 0>(p, m, W, U, HdH);
  std::vector<Acc> rW(W.size()), rU(U.size());
  std::vector<Acc> rH(d.nbh * L);  // sum_c f(Cn_c) <H_c, A_end_c>
  bool last_zero = true;
  for (int64_t bh = 0; bh < d.nbh; ++bh) {
    const int64_t h = p.h_of(bh);
    for (int64_t l = 0; l < L; ++l) {
      // states (value, |value| bound) per chunk: [c][e]
      std::vector<double> Hv(nC * E, 0), Hm(nC * E, 0), Av(nC * E, 0), Am(nC * E, 0);
      for (int64_t c = 0; c < nC; ++c)
        for (int64_t e = 0; e < E; ++e) {
          for (int64_t J = 0; J < c; ++J)
            for (int64_t j = 0; j < p.chunk_len(J); ++j) {
              const double t = p.apow(h, l, (c - 1 - J) * C) * bf(p.Kq, (bh * d.T + J * C + j) * d.Lp + l) *
                               bf(p.vb, p.vo(bh, J * C + j, e));
              Hv[c * E + e] += t, Hm[c * E + e] += std::fabs(t);
            }
          for (int64_t I = c + 1; I < nC; ++I)
            for (int64_t i = 0; i < p.chunk_len(I); ++i) {
              const double t = p.apow(h, l, (I - c - 1) * C) * bf(p.Xq, (bh * d.T + I * C + i) * d.Lp + l) *
                               bf(p.gb, (bh * d.T + I * C + i) * d.Ep + e);
              Av[c * E + e] += t, Am[c * E + e] += std::fabs(t);
            }
        }
      Acc hd;
      for (int64_t c = 0; c < nC; ++c) {
        const int64_t Cn = p.chunk_len(c);
        for (int64_t i = 0; i < Cn; ++i) {
          const int64_t t = c * C + i;
          Acc w, u;
          for (int64_t e = 0; e < E; ++e) {
            const double g = bf(p.gb, (bh * d.T + t) * d.Ep + e), v = bf(p.vb, p.vo(bh, t, e));
            w.x += Hv[c * E + e] * g, w.m += Hm[c * E + e] * std::fabs(g);
            u.x += Av[c * E + e] * v, u.m += Am[c * E + e] * std::fabs(v);
          }
          rW[(bh * d.T + t) * L + l] = w, rU[(bh * d.T + t) * L + l] = u;
        }
        const double a = p.a32[h * L + l], f = Cn == 0 ? 0 : Cn * std::pow(a, double(Cn - 1));
        for (int64_t e = 0; e < E; ++e)
          hd.x += f * Hv[c * E + e] * Av[c * E + e], hd.m += std::fabs(f) * Hm[c * E + e] * Am[c * E + e];
      }
      rH[bh * L + l] = hd;
    }
  }
  // the kernel's slots weighted as bwd_local weighs them (dpow(a, Cn_c), float32 as there)
  std::vector<double> gotH(d.nbh * L, 0.0);
  for (int64_t bh = 0; bh < d.nbh; ++bh)
    for (int64_t l = 0; l < L; ++l)
      for (int64_t c = 0; c < nC; ++c) {
        const float x = HdH[(bh * nC + c) * L + l];
        if (c == nC - 1 && x != 0.0f) last_zero = false;  // NaN too
        {
          const int n = int(p.chunk_len(c));  // dpow: n a^(n-1), 0 at n = 0
          const float f = n == 0 ? 0.0f : n * ipow(p.a32[p.h_of(bh) * L + l], n - 1);
          gotH[bh * L + l] += double(f) * x;
        }
      }
  bool ok = check("W", doubles(W), rW, 1e-4) & check("U", doubles(U), rU, 1e-4) &
            check("sum f HdH", gotH, rH, 1e-4);
  if (!last_zero) std::printf("    HdH's last slot not 0  <-- FAIL\n");
  return ok && last_zero;
}

// quad_readback as a function of its inputs, slot by slot: with M = hi + lo (cross_values' output)
// and, for split keys, the third pass M_hi Kq_lo,
//   W_K = sum_{J<K} a^((K-1-J)C) (M_KJ Kq_J [+ M_hi,KJ Kq_lo,J]),  U_K = sum_{I>K} a^((I-K-1)C) M_IK^T Xq_I,
//   HdH[K-1] = sum_{J<=K-2} (K-J-1) a^((K-J-2)C) sum_i Xq_K[i] (M_KJ Kq_J [+ ...])[i],  HdH[nC-1] = 0.
template <bool kKeyLo, bool kWgmma = false>
bool quad_readback_slots_case(const Problem& p) {
  const Dims& d = p.d;
  const int64_t L = d.L, C = d.C, nC = d.nC;
  const CrossM m = run_cross_values<kKeyLo>(p);
  auto W = nans<float>(d.nbh * d.T * L), U = W, HdH = nans<float>(d.nbh * nC * L);
  run_quad_readback<kKeyLo, RHOSCAN_QR_SWIZZLE != 0, kWgmma ? 3 : 0>(p, m, W, U, HdH);
  std::vector<Acc> rW(W.size()), rU(U.size()), rH(HdH.size());
  for (int64_t bh = 0; bh < d.nbh; ++bh) {
    const int64_t h = p.h_of(bh);
    for (int64_t l = 0; l < L; ++l)
      for (int64_t K = 0; K < nC; ++K) {
        const int64_t CnK = p.chunk_len(K);
        std::vector<Acc> w(CnK);
        Acc hdh;
        for (int64_t J = 0; J < K; ++J) {
          const double f = p.apow(h, l, (K - 1 - J) * C);
          for (int64_t i = 0; i < CnK; ++i) {
            Acc x;  // (M_KJ Kq_J)[i, l]
            for (int64_t j = 0; j < C; ++j) {
              const int64_t o = cross_block(bh, nC, K, J) + i * kQB + j, kj = (bh * d.T + J * C + j) * d.Lp + l;
              x += (bf(m.hi, o) + bf(m.lo, o)) * bf(p.Kq, kj);
              if (kKeyLo) x += bf(m.hi, o) * bf(p.Kq_lo, kj);
            }
            w[i].x += x.x * f, w[i].m += x.m * f;  // f >= 0; the terms' magnitude, not |sum|
            if (J <= K - 2) {
              const double c = double(K - J - 1) * p.apow(h, l, (K - J - 2) * C) *
                               bf(p.Xq, (bh * d.T + K * C + i) * d.Lp + l);
              hdh.x += c * x.x, hdh.m += std::fabs(c) * x.m;
            }
          }
        }
        for (int64_t i = 0; i < CnK; ++i) rW[(bh * d.T + K * C + i) * L + l] = w[i];
        if (K >= 1) rH[(bh * nC + K - 1) * L + l] = hdh;
        else rH[(bh * nC + nC - 1) * L + l] = Acc{};
        for (int64_t j = 0; j < CnK; ++j) {
          Acc u;
          for (int64_t I = K + 1; I < nC; ++I)
            for (int64_t i = 0; i < p.chunk_len(I); ++i) {
              const int64_t o = cross_block(bh, nC, I, K) + i * kQB + j;
              u += p.apow(h, l, (I - K - 1) * C) * (bf(m.hi, o) + bf(m.lo, o)) * bf(p.Xq, (bh * d.T + I * C + i) * d.Lp + l);
            }
          rU[(bh * d.T + K * C + j) * L + l] = u;
        }
      }
  }
  return check("W", doubles(W), rW, 1e-4) & check("U", doubles(U), rU, 1e-4) & check("HdH slots", doubles(HdH), rH, 1e-4);
}

// quad_dv: dv_J = sum_{I>J} Pcross_IJ^T G_I + sum_{k>j} P[k][j] G_k. Pcross's blocks J >= I, and
// its rows past Cn_I, are NaN (must not be read), as are P's upper triangle and splits past 0.
// kState: from an upstream final-state gradient GR (float32 [B][H][L][E], rows padded to a
// multiple of 4 past E, NaN there), dv_j also gains sum_l Kq_j[l] a_l^(T - e_J) GR[l][e] (the kernel
// rounds a^(T - e_J) GR to bf16).
template <bool kLo = false, bool kState = false>
bool quad_dv_case(const Problem& p) {
  const Dims& d = p.d;
  const int64_t C = d.C, nC = d.nC, E = d.E, items = d.nbh * nC * (d.Ep / kMmaET);
  Str4 grs;  // (rows of a multiple of 4 past E: the staged loads)
  const std::vector<float> gr = kState ? random_state(p, (d.E + 3) / 4 * 4 + 4, grs) : std::vector<float>{};
  const bf16* Kq = kState ? p.Kq.data() : nullptr;
  const float* a32 = kState ? p.a32.data() : nullptr;
  const Str4 g0 = kState ? grs : Str4{};
  const int smem = quad_dv_smem<kLo>() + (kState ? state_readout_extra_smem() : 0);
  auto Pc = nans<bf16>(d.nbh * nC * nC * C * C);  // (bf16: cross_scores' output)
  std::vector<float> P(d.nbh * nC * d.nsplit * C * C, kNaN);
  for (int64_t bh = 0; bh < d.nbh; ++bh)
    for (int64_t I = 0; I < nC; ++I) {
      for (int64_t J = 0; J < I; ++J)
        for (int64_t i = 0; i < p.chunk_len(I); ++i)
          for (int64_t j = 0; j < C; ++j)
            Pc[(((bh * nC + I) * nC + J) * C + i) * C + j] = __float2bfloat16_rn(float(U01()));
      for (int64_t i = 0; i < C; ++i)
        for (int64_t j = 0; j < i; ++j) P[((bh * nC + I) * d.nsplit * C + i) * C + j] = float(U01());
    }
  auto dv = nans<float>(d.nbh * d.T * E);
  emu::launch(small_grid(items), kQdThreads, smem, [&] {
    quad_dv_mma_kernel<kLo, kQdSwizzle, float, false, kState>(d, Pc.data(), P.data(), p.gb.data(), dv.data(),
                                                              kLo ? p.glo.data() : nullptr, Str4{}, Kq, a32, g0);
  });
  // the other tile layout (padded or swizzled: RHOSCAN_QD_SWIZZLE), bit for bit, on 3 blocks
  auto dv_other = nans<float>(dv.size());
  emu::launch(3, kQdThreads, smem, [&] {
    quad_dv_mma_kernel<kLo, !kQdSwizzle, float, false, kState>(d, Pc.data(), P.data(), p.gb.data(), dv_other.data(),
                                                               kLo ? p.glo.data() : nullptr, Str4{}, Kq, a32, g0);
  });
  const bool same = same_bits("dv", dv, dv_other);
  std::vector<Acc> ref(dv.size());
  for (int64_t bh = 0; bh < d.nbh; ++bh)
    for (int64_t J = 0; J < nC; ++J)
      for (int64_t j = 0; j < p.chunk_len(J); ++j)
        for (int64_t e = 0; e < E; ++e) {
          Acc x;
          for (int64_t k = j + 1; k < p.chunk_len(J); ++k)
            x += double(P[((bh * nC + J) * d.nsplit * C + k) * C + j]) *
                 val(p.gb, p.glo, kLo, (bh * d.T + J * C + k) * d.Ep + e);
          for (int64_t I = J + 1; I < nC; ++I)
            for (int64_t i = 0; i < p.chunk_len(I); ++i)
              x += double(to_float(Pc[(((bh * nC + I) * nC + J) * C + i) * C + j])) *
                   val(p.gb, p.glo, kLo, (bh * d.T + I * C + i) * d.Ep + e);
          if constexpr (kState) {
            const int64_t b = p.b_of(bh), h = p.h_of(bh), eJ = J * C + p.chunk_len(J);
            for (int64_t l = 0; l < d.L; ++l)
              x += double(to_float(p.Kq[(bh * d.T + J * C + j) * d.Lp + l])) * p.apow(h, l, d.T - eJ) *
                   gr[grs.at(b, h, l, e)];
          }
          ref[(bh * d.T + J * C + j) * E + e] = x;
        }
  // kHeadSum (bf16, whole batch rows from pair 0): grad_v of each batch row, bit for bit the pairs' dv
  // added in increasing h from 0.0f and rounded to bf16 (dv_accumulate_kernel's kStore), on 3 blocks
  bool head_sum = true;
  if constexpr (!kLo && !kState) {
    if (d.bh0 == 0 && d.nbh % d.H == 0 && d.Ep % kMmaET == 0) {
      const int64_t B = d.nbh / d.H;
      auto gv = nans<bf16>(B * d.T * E);
      Str4 gs;
      gs.p = gv.data(), gs.s[0] = d.T * E, gs.s[1] = d.T * E, gs.s[2] = E, gs.s[3] = 1;
      emu::launch(3, kQdThreads, quad_dv_smem<kLo>(), [&] {
        quad_dv_mma_kernel<false, kQdSwizzle, bf16, true>(d, Pc.data(), P.data(), p.gb.data(), nullptr, nullptr, gs);
      });
      for (int64_t b = 0; b < B && head_sum; ++b)
        for (int64_t t = 0; t < d.T && head_sum; ++t)
          for (int64_t e = 0; e < E; ++e) {
            float x = 0.0f;
            for (int64_t h = 0; h < d.H; ++h) x += dv[((b * d.H + h) * d.T + t) * E + e];
            const bf16 want = __float2bfloat16_rn(x), got = gv[(b * d.T + t) * E + e];
            if (std::memcmp(&want, &got, sizeof want) != 0) {
              std::printf("  FAIL head sum: grad_v[%lld][%lld][%lld] differs from the pairs' sum\n", (long long)b,
                          (long long)t, (long long)e);
              head_sum = false;
              break;
            }
          }
      std::printf("    head sum (grad_v of %lld batch rows): %s\n", (long long)B, head_sum ? "bitwise" : "DIFFERENT");
    }
  }
  return check("dv", doubles(dv), ref, 1e-2) && same && head_sum;
}

// ---- bwd_local version 5 (the products between 16-row sub-blocks on tensor cores, bf16 hi + lo
//      in three passes, and the scans split over the warps, see backward.cu; until version 4 was
//      removed after the H200's A/B, also compared with it bit for bit) and version 2
//      (every pair by FFMA in float32), readback instantiation with
//      bf16 q, against a float64 loop of bwd_local's formulas (the comments of backward.cu): every
//      output (gcp, dqp, dap, Bsum, Zs), element by element, |x - ref| <= tol · (sum of the
//      absolute values of ref's terms), tol = 5e-5 for both. Version 5's split operands x = hi + lo
//      are within 2^-16 of x (lo is x - hi rounded to bf16: 8 significant bits of a remainder below
//      2^-8 |x|), and the three passes drop lo·lo (2^-16 of the term), so a cross term errs by at
//      most ~3 · 2^-16 = 4.6e-5 of it (seen: up to 1.3e-5); version 2 by a few 2^-24 (seen: up to
//      6e-7, which checks the reference too). A lo pass left out errs by up to 2^-8 of the cross
//      terms, a wrong power or row by far more. M's score split 1 is NaN (must not be read); q has
//      60 % zeros and an all-zero row (t = 3).
struct LocalShape {
  const char* name;
  int64_t H, nbh, T, L, C;
  unsigned grid;
  int64_t bh0 = 0;  // the batch's first (b, h) pair: q and the decay rows from pair bh0 + bh
};
bool bwd_local_case(const LocalShape& c, bool v2 = true) {
  Dims d;
  d.H = c.H, d.T = c.T, d.L = c.L, d.E = 8, d.C = c.C, d.nC = (c.T + c.C - 1) / c.C, d.bh0 = c.bh0, d.nbh = c.nbh;
  d.nsplit = 2, d.Lp = c.L, d.Ep = 8;
  const int64_t T = c.T, L = c.L, C = c.C, nC = d.nC, nbh = c.nbh, nlt = (L + kLocalLT - 1) / kLocalLT;
  auto uni = [](size_t n, double lo, double hi) {
    std::vector<float> x(n);
    for (auto& y : x) y = float(lo + (hi - lo) * U01());
    return x;
  };
  std::vector<bf16> q((c.bh0 + nbh) * T * L);  // [b][h][t][l] of the pairs 0 .. bh0 + nbh - 1
  for (int64_t x = 0; x < int64_t(q.size()); ++x)
    q[x] = __float2bfloat16_rn(x / L % T == 3 || U01() < 0.6 ? 0.0f : float(U01()));
  Str4 qs;
  qs.p = q.data(), qs.s[0] = c.H * T * L, qs.s[1] = T * L, qs.s[2] = L, qs.s[3] = 1;
  std::vector<float> a32(c.H * L);  // of every five latents: 0, 1, one in (0, 1), two in [0.9, 1)
  for (int64_t i = 0; i < c.H * L; ++i)
    a32[i] = i % 5 == 0 ? 0.0f : i % 5 == 1 ? 1.0f : i % 5 == 2 ? float(U01()) : float(0.9 + 0.1 * U01());
  const auto sn = uni(nbh * T, 1, 2), Nc = uni(nbh * (nC + 1) * L, 0, 3);
  // Qp_t = q_t / (s_t (N_t + eps)) from the chunk's N_0 in Nc (version 5 forms it itself from q, s
  // and Nc since the eleventh round; version 2 reads it), N walked in float64
  std::vector<float> Qp(nbh * T * L);
  for (int64_t bh = 0; bh < nbh; ++bh)
    for (int64_t cc = 0; cc < nC; ++cc)
      for (int64_t l = 0; l < L; ++l) {
        const int64_t h = (c.bh0 + bh) % c.H, t0 = cc * C;
        double N = Nc[(bh * (nC + 1) + cc) * L + l];
        for (int64_t i = 0; i < std::min(C, T - t0); ++i) {
          const double qv = __bfloat162float(q[qs.at((c.bh0 + bh) / c.H, h, t0 + i, l)]);
          Qp[(bh * T + t0 + i) * L + l] = float(qv == 0.0 ? 0.0 : qv / (sn[bh * T + t0 + i] * (N + kEpsF)));
          N = a32[h * L + l] * N + qv;
        }
      }
  const auto W = uni(nbh * T * L, -1, 1), U = uni(nbh * T * L, -1, 1), HdH = uni(nbh * nC * L, -1, 1);
  auto M = uni(nbh * nC * 2 * C * C, -1, 1);
  for (int64_t bc = 0; bc < nbh * nC; ++bc)
    std::fill(M.begin() + (2 * bc + 1) * C * C, M.begin() + (2 * bc + 2) * C * C, kNaN);
  // the reference
  std::vector<Acc> rg(nbh * T * nlt), rq(nbh * T * L), rd(nbh * nC * L), rb(nbh * nC * L), rz(nbh * nC * L);
  auto f = [](double a, int64_t n) { return n == 0 ? 0.0 : n * std::pow(a, double(n - 1)); };
  for (int64_t bh = 0; bh < nbh; ++bh)
    for (int64_t cc = 0; cc < nC; ++cc) {
      const int64_t Cn = std::min(C, T - cc * C), t0 = cc * C, h = (c.bh0 + bh) % c.H;
      for (int64_t l = 0; l < L; ++l) {
        const double a = a32[h * L + l];
        auto at = [&](int64_t i) { return (bh * T + t0 + i) * L + l; };
        auto qv = [&](int64_t i) { return double(__bfloat162float(q[qs.at((c.bh0 + bh) / c.H, h, t0 + i, l)])); };
        auto m = [&](int64_t i, int64_t j) { return double(M[(bh * nC + cc) * 2 * C * C + i * C + j]); };
        std::vector<double> N(Cn);
        double Nx = Nc[(bh * (nC + 1) + cc) * L + l];
        Acc zs, da = Acc{f(a, Cn) * HdH[(bh * nC + cc) * L + l], std::fabs(f(a, Cn) * HdH[(bh * nC + cc) * L + l])};
        for (int64_t i = 0; i < Cn; ++i) N[i] = Nx, zs += std::pow(a, double(Cn - 1 - i)) * Nx, Nx = a * Nx + qv(i);
        std::vector<Acc> gw(Cn), dn(Cn), part(Cn);
        for (int64_t i = 0; i < Cn; ++i) {
          Acc p{std::pow(a, double(i)) * W[at(i)], 0}, av{std::pow(a, double(Cn - 1 - i)) * U[at(i)], 0};
          p.m = std::fabs(p.x), av.m = std::fabs(av.x);
          for (int64_t j = 0; j < i; ++j) {
            p += std::pow(a, double(i - 1 - j)) * qv(j) * m(i, j);
            da += Qp[at(i)] * f(a, i - 1 - j) * qv(j) * m(i, j);
          }
          for (int64_t k = i + 1; k < Cn; ++k) av += std::pow(a, double(k - i - 1)) * Qp[at(k)] * m(k, i);
          da += qv(i) * U[at(i)] * f(a, Cn - 1 - i);
          da += Qp[at(i)] * W[at(i)] * f(a, i);
          const double rs = 1.0 / sn[bh * T + t0 + i];
          gw[i] = p.scaled(1.0 / (N[i] + kEpsF));
          dn[i] = gw[i].scaled(-Qp[at(i)]);
          part[i] = {gw[i].x * rs + av.x, gw[i].m * rs + av.m};
          Acc& g = rg[(bh * T + t0 + i) * nlt + l / kLocalLT];
          g.x += gw[i].x * qv(i) * rs, g.m += gw[i].m * qv(i) * rs;
        }
        Acc ib, ibn;  // ib_i = sum_{k>i} a^(k-i-1) dn_k; then B's share a^i dn_i
        for (int64_t i = Cn - 1; i >= 0; --i) {
          rq[at(i)] = {part[i].x + ib.x, part[i].m + ib.m};
          ibn.x += ib.x * N[i], ibn.m += ib.m * N[i];
          ib = {dn[i].x + a * ib.x, dn[i].m + a * ib.m};
        }
        const int64_t o = (bh * nC + cc) * L + l;
        rd[o] = {da.x + ibn.x, da.m + ibn.m}, rb[o] = ib, rz[o] = zs;
      }
    }
  bool ok = true;
  struct Outputs {
    std::vector<float> gcp, dqp, dap, Bsum, Zs;
  };
  for (int v : {2, 5}) {
    if (v == 2 && !v2) continue;
    Outputs o = {nans<float>(nbh * T * nlt), nans<float>(nbh * T * L), nans<float>(nbh * nC * L),
                 nans<float>(nbh * nC * L), nans<float>(nbh * nC * L)};
    auto go = [&](auto kernel, size_t smem) {
      emu::launch(c.grid, kLocalThreads, smem, [&] {
        kernel(d, qs, Str4{}, Str4{}, a32.data(), Qp.data(), sn.data(), Nc.data(), nullptr, nullptr, M.data(), W.data(),
               U.data(), HdH.data(), o.gcp.data(), o.dqp.data(), o.dap.data(), o.Bsum.data(), o.Zs.data());
      });
    };
    if (v == 2)
      go(bwd_local_kernel<bf16, true, 2>, sizeof(LocalSmemOf<2>));
    else
      go(bwd_local_kernel<bf16, true, 5>, sizeof(LocalSmemOf<5>));
    const std::string n = " v" + std::to_string(v);
    constexpr double tol = 5e-5;
    ok &= check("gcp" + n, doubles(o.gcp), rg, tol) & check("dqp" + n, doubles(o.dqp), rq, tol) &
          check("dap" + n, doubles(o.dap), rd, tol) & check("Bsum" + n, doubles(o.Bsum), rb, tol) &
          check("Zs" + n, doubles(o.Zs), rz, tol);
  }
  return ok;
}

int failures = 0;
void run(const Problem& p, const char* kernel, const std::function<bool()>& f) {
  std::printf("%s  [%s]\n", kernel, p.name.c_str());
  std::fflush(stdout);
  if (!f()) {
    ++failures;
    if (std::getenv("EMU_STOP_AT_FIRST")) std::exit(1);
  }
}

}  // namespace

// A launcher's 32-bit limits at each boundary: those both kernels share (Lp, Ep < 2^24,
// bh0 + nbh < 2^30, nbh T < 2^31), then the kernel's own (`own`).
struct LimitCase {
  int64_t Lp, Ep, bh0, nbh, T, nC;
  bool want;
  const char* what;
};
void check_limits(const std::string& only, int& failures, const char* name, const char* fn,
                  bool (*fit)(const Dims&), const std::vector<LimitCase>& own) {
  if (!only.empty() && std::string(name).find(only) == std::string::npos) return;
  std::printf("%s\n", name);
  constexpr int64_t k24 = int64_t{1} << 24, k30 = int64_t{1} << 30;
  std::vector<LimitCase> cases = {
      {8192, 256, 0, 32, 512, 8, true, "BDH-8k"},
      {k24 - 64, 256, 0, 1, 64, 1, true, "Lp = 2^24 - 64"},
      {k24, 256, 0, 1, 64, 1, false, "Lp = 2^24"},
      {64, k24 - 128, 0, 1, 64, 1, true, "Ep = 2^24 - 128"},
      {64, k24, 0, 1, 64, 1, false, "Ep = 2^24"},
      {64, 128, k30 - 2, 1, 64, 1, true, "bh0 + nbh = 2^30 - 1"},
      {64, 128, k30 - 2, 2, 64, 1, false, "bh0 + nbh = 2^30"},
      {64, 128, 0, 1 << 16, (1 << 15) - 1, 1, true, "nbh T = 2^31 - 2^16"},
      {64, 128, 0, 1 << 16, 1 << 15, 1, false, "nbh T = 2^31"},
  };
  cases.insert(cases.end(), own.begin(), own.end());
  bool ok = true;
  for (const auto& x : cases) {
    Dims d;
    d.Lp = x.Lp, d.Ep = x.Ep, d.bh0 = x.bh0, d.nbh = x.nbh, d.T = x.T, d.nC = x.nC;
    const bool got = fit(d);
    if (got != x.want) std::printf("  FAIL %s: %s %d, expected %d\n", x.what, fn, got, x.want), ok = false;
  }
  if (ok) std::printf("  %zu boundaries as expected\n", cases.size());
  if (!ok) {
    ++failures;
    if (std::getenv("EMU_STOP_AT_FIRST")) std::exit(1);
  }
}

int main(int argc, char** argv) {
  const std::string only = argc > 1 ? argv[1] : "";  // a substring of the kernel names to run
  std::vector<Problem> problems;
  //                                  H  pairs bh0   T    L    E   C  nsplit seq_first
  problems.push_back(make_problem("H2 pairs3@1 T150 L70 E130 C64 splits2", 2, 3, 1, 150, 70, 130, 64, 2, false));
  problems.push_back(make_problem("H1 pairs2 T40 L13 E20 C17 [B,T,H,x]", 1, 2, 0, 40, 13, 20, 17, 1, true));
  problems.push_back(make_problem("H3 pairs2@4 T64 L64 E128 C64 splits3", 3, 2, 4, 64, 64, 128, 64, 3, false));
  problems.push_back(make_problem("H2 pairs2 T33 L100 E7 C32 [B,T,H,x]", 2, 2, 0, 33, 100, 7, 32, 2, true));
  problems.push_back(make_problem("H1 pairs1 T1 L5 E3 C64", 1, 1, 0, 1, 5, 3, 64, 1, false));
  problems.push_back(make_problem("H1 pairs1 T5 L9 E9 C1", 1, 1, 0, 5, 9, 9, 1, 1, false));
  problems.push_back(make_problem("H2 pairs2 T0 L20 E20 C64", 2, 2, 0, 0, 20, 20, 64, 1, false));
  // L over an odd number of 64-latent tiles (Lp 192: a 128-latent state tile and one whose upper half
  // is past Lp), several items per block (the states' cp.async pipeline across items), a tail chunk
  problems.push_back(make_problem("H2 pairs2@1 T100 L150 E130 C32", 2, 2, 1, 100, 150, 130, 32, 2, false));
  // one chunk per item (the fetch cursor moves to the next item at every step)
  problems.push_back(make_problem("H1 pairs3 T20 L130 E9 C64 [B,T,H,x]", 1, 3, 0, 20, 130, 9, 64, 1, true));
  // the quadratic forward's kernels only (`quadratic` below): five chunks of 64 (row blocks with
  // one and two column blocks per group, the factor a^(d C) up to d = 3), a tail chunk, odd L and E
  problems.push_back(make_problem("H2 pairs3@3 T300 L70 E136 C64 [B,T,H,x]", 2, 3, 3, 300, 70, 136, 64, 2, true));
  // the quadratic kernels over a slice of six 64-latent tiles (L 330): cross_scores' cp.async stages
  // wrap around (four stages: a stage refilled after it was read), the factor up to d = 2, a tail chunk
  problems.push_back(make_problem("H2 pairs2@1 T200 L330 E40 C64", 2, 2, 1, 200, 330, 40, 64, 1, false));
  // eight chunks (the last of 2 tokens), as at BDH-8k: cross_scores version 3's rectangles up to
  // rows 6, 7 and both of its diagonal items (the second's row 7 short), the factor up to d = 6
  problems.push_back(make_problem("H1 pairs1 T450 L70 E20 C64", 1, 1, 0, 450, 70, 20, 64, 1, false));
  // chunk_scan_mma only (`scan_only` below): Lp = 256 (the largest state) with a tail chunk of 12
  // and a column tile straddling E; Lp = 64 with chunks of 48 (tail 4), four column tiles (the last
  // of 8 columns), pairs carrying h into b
  problems.push_back(make_problem("H2 pairs3@1 T140 L230 E70 C64", 2, 3, 1, 140, 230, 70, 64, 1, false));
  problems.push_back(make_problem("H3 pairs4@2 T100 L40 E200 C48 [B,T,H,x]", 3, 4, 2, 100, 40, 200, 48, 2, true));
  // Hv = 1: v [B,1,T,E], packed once per batch row (d.v_rows), batches that start and end inside a
  // batch row: pairs 1..3 of H = 2 (rows 0, 1, 1), 4..5 of H = 3 (one row), 3..5 of H = 2 (the
  // quadratic kernels), 2..6 of H = 3 (rows 0, 1, 1, 1, 2; every kernel, split values too)
  problems.push_back(make_problem("H2 pairs3@1 T150 L70 E130 C64 splits2 Hv1", 2, 3, 1, 150, 70, 130, 64, 2, false, true));
  problems.push_back(make_problem("H3 pairs2@4 T64 L64 E128 C64 splits3 Hv1", 3, 2, 4, 64, 64, 128, 64, 3, false, true));
  problems.push_back(make_problem("H2 pairs3@3 T300 L70 E136 C64 [B,T,H,x] Hv1", 2, 3, 3, 300, 70, 136, 64, 2, true, true));
  problems.push_back(make_problem("H3 pairs5@2 T40 L13 E20 C17 [B,T,H,x] Hv1", 3, 5, 2, 40, 13, 20, 17, 1, true, true));
  // the quadratic kernels with E past 256 (Ep 384): state_readback_mma's two slabs of columns (256,
  // then 128), the quadratic backward's column tiles; a tail chunk
  problems.push_back(make_problem("H2 pairs2@1 T130 L70 E300 C64", 2, 2, 1, 130, 70, 300, 64, 1, false));
  // EMU_QUICK=1 (ctest's default set): on the large problems (`big`) only the bfloat16 path's
  // kernels (`core`); the float32-state and split-value variants, and the second checks of the
  // quadratic kernels (three splits, slot by slot, the states without stores), on the others.
  // The full run (ctest label long, or without EMU_QUICK) takes every kernel on every problem.
  const bool quick = std::getenv("EMU_QUICK") != nullptr;
  const std::vector<bool> big = {true, false, true, false, false, false, false, true, false,
                                 true, true,  true, true, true,  true,  true, true,  false, true};
  const std::vector<bool> quadratic_only = {false, false, false, false, false, false, false, false, false,
                                            true,  true,  true,  false, false, false, false, true,  false, true};
  const std::vector<bool> scan_only = {false, false, false, false, false, false, false, false, false,
                                       false, false, false, true,  true,  false, false, false, false, false};
  struct K {
    const char* name;
    std::function<bool(const Problem&)> f;
    bool core = false;
    bool quadratic = false;  // a kernel of the quadratic forward or backward (the only ones on quadratic_only problems)
  };
  const std::vector<K> kernels = {
      {"pack_bf16", pack_case, true},
      {"bscan", bscan_case, true},
      {"gc_reduce", gc_reduce_case, true},
      {"chunk_scores_mma", scores_case<float>, true},
      {"chunk_scores_mma (bf16 Qp)", scores_case<bf16>, true},
      {"norm_scores_mma, bitwise norm_apply + chunk_scores_mma", norm_scores_case, true},
      {"chunk_states_mma forward, bf16 states", [](const Problem& p) { return states_case<bf16, false>(p, true); },
       true},
      {"chunk_states_mma forward, float32 states, no init",
       [](const Problem& p) { return states_case<float, false>(p, false); }},
      {"chunk_states_mma reverse", [](const Problem& p) { return states_case<float, true>(p, true); }},
      {"chunk_states_mma forward, bf16 hi + lo planes",
       [](const Problem& p) { return states_case<bf16, false, false, false, true>(p, true); }, true},
      {"chunk_states_mma reverse, bf16 hi + lo planes",
       [](const Problem& p) { return states_case<bf16, true, false, false, true>(p, true); }, true},
      {"chunk_output_mma forward", output_case<bf16, bf16, false>, true},
      {"chunk_output_mma dv", output_case<float, float, true>},
      {"chunk_output_mma dv, bf16 states", output_case<bf16, float, true>, true},
      {"chunk_scan_mma forward", [](const Problem& p) { return scan_case(p, true); }, true},
      {"chunk_scan_mma forward, no initial state", [](const Problem& p) { return scan_case(p, false); }},
      {"chunk_scan_mma v3 (wgmma) forward", [](const Problem& p) { return scan_case<true>(p, true); }, true},
      {"chunk_scan_mma v3 (wgmma) forward, no initial state", [](const Problem& p) { return scan_case<true>(p, false); }},
      {"chunk_readback_mma", readback_case<false>, true},
      // the quadratic forward
      {"cross_scores_mma", [](const Problem& p) { return cross_case(p, 1); }, true, true},
      {"cross_scores_mma, 3 splits", [](const Problem& p) { return cross_case(p, 3); }, false, true},
      {"cross_scores_mma, swizzled tiles", [](const Problem& p) { return cross_swizzle_case(p, 1); }, true, true},
      {"cross_scores_wgmma", [](const Problem& p) { return cross_case<true>(p, 1); }, true, true},
      {"cross_scores_wgmma, 3 splits", [](const Problem& p) { return cross_case<true>(p, 3); }, false, true},
      {"cross_scores_mma, swizzled tiles, 3 splits", [](const Problem& p) { return cross_swizzle_case(p, 3); }, false, true},
      {"chunk_states_mma forward, bf16, no chunk states stored",
       [](const Problem& p) { return states_case<bf16, false>(p, false, false); }, false, true},
      {"chunk_states_mma forward, bf16, split values, no chunk states stored",
       [](const Problem& p) { return states_case<bf16, false, true>(p, false, false); }, false, true},
      {"final_state_mma (quadratic forward's final state), 2 blocks",
       [](const Problem& p) { return final_state_case<false>(p, small_grid(final_state_items(p.d))); }, true, true},
      {"final_state_mma, split values, 1 block",
       [](const Problem& p) { return final_state_case<true>(p, 1); }, false, true},
      {"final_state_mma, swizzled tiles, 2 blocks",
       [](const Problem& p) { return final_state_swizzle_case<false>(p, small_grid(final_state_items(p.d)), false); }, true, true},
      {"final_state_mma, swizzled tiles, split values, rho rows padded, 3 blocks",
       [](const Problem& p) { return final_state_swizzle_case<true>(p, 3, true); }, false, true},
      {"final_state_mma, rho rows padded to an even stride, 3 blocks",
       [](const Problem& p) { return final_state_case<false>(p, 3, true); }, false, true},
      {"final_state_mma, split values, rho rows padded to an even stride, 5 blocks",
       [](const Problem& p) { return final_state_case<true>(p, 5, true); }, false, true},
      // the launcher's sub-batches (past 2^30 pairs) at a limit of 3: at most 2 pairs a launch,
      // rebased to the first pair's b and h (bh0 > 0 and H > 1 in several problems)
      {"final_state_mma, sub-batches of at most 2 pairs, 2 blocks",
       [](const Problem& p) { return final_state_case<false>(p, 2, false, 3); }, false, true},
      {"final_state_mma, sub-batches of at most 2 pairs, split values, rho rows padded, 3 blocks",
       [](const Problem& p) { return final_state_case<true>(p, 3, true, 3); }, false, true},
      {"final_state_wgmma, bitwise final_state_mma, 2 blocks",
       [](const Problem& p) { return final_state_wgmma_case<false>(p, small_grid(final_state_items(p.d)), false); }, true, true},
      {"final_state_wgmma, bitwise final_state_mma, rho rows padded, 3 blocks",
       [](const Problem& p) { return final_state_wgmma_case<false>(p, 3, true); }, false, true},
      {"final_state_wgmma, split values, bitwise final_state_mma, rho rows padded, 3 blocks",
       [](const Problem& p) { return final_state_wgmma_case<true>(p, 3, true); }, false, true},
      {"final_state_wgmma, split values, bitwise final_state_mma, 1 block",
       [](const Problem& p) { return final_state_wgmma_case<true>(p, 1, false); }, false, true},
      {"final_state_mma from an initial state, sub-batches of at most 2 pairs, rho rows padded",
       [](const Problem& p) { return final_state_case<false>(p, 3, true, 3, true); }, true, true},
      {"final_state_mma from an initial state, split values",
       [](const Problem& p) { return final_state_case<true>(p, 2, false, int64_t{1} << 30, true); }, false, true},
      {"final_state_wgmma from an initial state, sub-batches of at most 2 pairs, bitwise final_state_mma",
       [](const Problem& p) { return final_state_wgmma_case<false>(p, 2, true, 3, true); }, true, true},
      {"final_state_wgmma, sub-batches of at most 2 pairs, bitwise final_state_mma, 2 blocks",
       [](const Problem& p) { return final_state_wgmma_case<false>(p, 2, false, 3); }, false, true},
      {"quadratic_output_mma", quadratic_output_case<false>, true, true},
      {"quadratic_output_mma, split values", quadratic_output_case<true>, false, true},
      {"quadratic_output_mma from an initial state", quadratic_output_case<false, true>, true, true},
      {"quadratic_output_mma from an initial state, split values", quadratic_output_case<true, true>, false, true},
      {"quadratic forward chain (chunk_scores, cross_scores, quadratic_output)", quadratic_chain_case, true, true},
      {"quadratic_rows_mma (chunk_scores, then the cross scores and context in one kernel)", quadratic_rows_case, true,
       true},
      // the quadratic backward
      {"cross_values_mma", cross_values_case<false>, true, true},
      {"quad_readback_mma", quad_readback_case<false>, true, true},
      {"quad_readback_wgmma", quad_readback_case<true>, true, true},
      {"quad_readback_wgmma slot by slot", quad_readback_slots_case<false, true>, false, true},
      {"quad_readback_wgmma, bitwise version 3", quad_readback_wgmma_case<false>, true, true},
      {"quad_readback_wgmma, 2 stages, bitwise version 3", quad_readback_wgmma_case<false, 2>, false, true},
      {"quad_readback_wgmma, 3 blocks, bitwise version 3", quad_readback_wgmma_case<false, 3, true, 3>, false, true},
      {"quad_readback_wgmma, a block per item and one idle, bitwise version 3",
       quad_readback_wgmma_case<false, 3, true, -1>, false, true},
      {"quad_readback_wgmma, operand from shared memory, bitwise version 3", quad_readback_wgmma_case<false, 3, false>,
       false, true},
      {"quad_readback_wgmma, chunks inner, bitwise version 3", quad_readback_wgmma_case<false, 3, true, 0, true>, false,
       true},
      // (core: the quick run's only problems with several chunks and latent tiles, whose carries
      // the chunks-inner order walks, are large ones)
      {"quad_readback_wgmma, chunks inner, 3 blocks, bitwise version 3",
       quad_readback_wgmma_case<false, 3, true, 3, true>, true, true},
      {"quad_readback_wgmma, chunks inner, 7 blocks, bitwise version 3",
       quad_readback_wgmma_case<false, 3, true, 7, true>, false, true},
      {"quad_readback_mma slot by slot", quad_readback_slots_case<false>, false, true},
      {"quad_readback_mma, swizzled tiles", quad_readback_swizzle_case<false>, true, true},
      {"quad_dv_mma", quad_dv_case<false>, true, true},
      {"quad_dv_mma from grad_rho_out", quad_dv_case<false, true>, true, true},
      {"state_readback_mma, rho0 and grad_rho_out", state_readback_case<true, true>, true, true},
      {"state_readback_mma, rho0 alone", state_readback_case<true, false>, false, true},
      {"state_readback_mma, grad_rho_out alone", state_readback_case<false, true>, false, true},
      // the quadratic backward, float16 (split values and keys)
      {"cross_values_mma, split values", cross_values_case<true>, false, true},
      {"quad_readback_mma slot by slot, split keys", quad_readback_slots_case<true>, false, true},
      {"quad_readback_mma, swizzled tiles, split keys", quad_readback_swizzle_case<true>, false, true},
      {"quad_readback_wgmma slot by slot, split keys", quad_readback_slots_case<true, true>, false, true},
      {"quad_readback_wgmma, split keys, bitwise version 3", quad_readback_wgmma_case<true>, false, true},
      {"quad_readback_wgmma, split keys, operand from shared memory, bitwise version 3",
       quad_readback_wgmma_case<true, 3, false>, false, true},
      {"quad_dv_mma, split values", quad_dv_case<true>, false, true},
      {"chunk_states_mma reverse, bf16, no chunk states stored (quadratic backward's dR_0)",
       [](const Problem& p) { return states_case<bf16, true>(p, false, false); }, false, true},
      {"chunk_states_mma reverse, bf16, split values, no chunk states stored (quadratic backward's dR_0)",
       [](const Problem& p) { return states_case<bf16, true, true>(p, false, false); }, false, true},
      // split values (float16 inputs): the lo passes
      {"chunk_states_mma forward, bf16 states, split values",
       [](const Problem& p) { return states_case<bf16, false, true>(p, true); }},
      {"chunk_states_mma forward, float32 states, split values",
       [](const Problem& p) { return states_case<float, false, true>(p, false); }},
      {"chunk_states_mma reverse, split values", [](const Problem& p) { return states_case<float, true, true>(p, true); }},
      {"key_remainder, split keys", key_remainder_case},
      {"chunk_states_mma forward, float32 states, split values and keys",
       [](const Problem& p) { return states_case<float, false, true, true>(p, true); }},
      {"chunk_output_mma forward, split values", output_case<bf16, bf16, false, true>},
      {"chunk_output_mma dv, split values", output_case<float, float, true, true>},
      {"chunk_readback_mma, split values", readback_case<true>},
  };
  // The launchers' choices between a 32-bit-index kernel and its 64-bit fallback (compared with it
  // above on every case): chunk_states_mma (the wide kernel) and chunk_output_mma (version 1).
  check_limits(only, failures, "chunk_states_mma launcher's 32-bit limits (states_fit_32bit)", "states_fit_32bit",
               states_fit_32bit,
               {{63, 128, 0, 1 << 10, 1, 1 << 15, true, "nbh nC Lp = 2^31 - 2^25"},
                {64, 128, 0, 1 << 10, 1, 1 << 15, false, "nbh nC Lp = 2^31"}});
  check_limits(only, failures, "chunk_output_mma launcher's 32-bit limits (output_fit_32bit)", "output_fit_32bit",
               output_fit_32bit,
               {{64, 128 * 64, 0, 1 << 10, 1 << 14, (1 << 15) - 1, true, "items = 2^31 - 2^16"},
                {64, 128 * 64, 0, 1 << 10, 1 << 15, 1 << 15, false, "items = 2^31"}});
  check_limits(only, failures, "chunk_scan_mma launcher's 32-bit limits (scan_fit_32bit)", "scan_fit_32bit",
               scan_fit_32bit, {});
  // bwd_local's versions 2 and 5 against float64, on their own shapes: full chunks of 64 and tails of 17,
  // 33, 50, 48 and 1 rows, chunks of 48, 32, 17 and 1, L past a 64-latent tile (70, 130), several
  // pairs, grids smaller than the work. EMU_QUICK: the first four.
  const std::vector<LocalShape> local_shapes = {
      {"H2 pairs2 T145 L70 C64 (64, 64, tail 17)", 2, 2, 145, 70, 64, 3},
      {"H1 pairs1 T97 L130 C64 (64, tail 33)", 1, 1, 97, 130, 64, 2},
      {"H2 pairs2 T70 L40 C32 (32, 32, tail 6)", 2, 2, 70, 40, 32, 3},
      {"H1 pairs2 T51 L33 C17", 1, 2, 51, 33, 17, 2},
      {"H1 pairs1 T50 L64 C64 (one chunk of 50)", 1, 1, 50, 64, 64, 1},
      {"H1 pairs2 T65 L20 C64 (64, tail 1)", 1, 2, 65, 20, 64, 2},
      {"H1 pairs1 T5 L9 C1", 1, 1, 5, 9, 1, 2},
      {"H3 pairs3 T128 L64 C64", 3, 3, 128, 64, 64, 4},
      {"H2 pairs2 T112 L130 C64 (64, tail 48: the last sub-block full)", 2, 2, 112, 130, 64, 3},
      {"H1 pairs2 T100 L70 C48 (48, 48, tail 4)", 1, 2, 100, 70, 48, 3},
      // version 5's running item decomposition and 16-byte pieces: L % 4 == 0 over three latent tiles
      // (the last of 4 latents), carries in lt and c at every step; then more pairs than heads from
      // an offset bh0 (h and b carried), a grid past one pair's items
      {"H2 pairs3 T150 L132 C64 (64, 64, tail 22) grid 5", 2, 3, 150, 132, 64, 5},
      {"H3 pairs5@4 T40 L68 C32 (32, tail 8) grid 5", 3, 5, 40, 68, 32, 5, 4},
      {"H2 pairs4@1 T64 L128 C64 grid 7", 2, 4, 64, 128, 64, 7, 1},
  };
  // "bwd_local v5" alone (its mutants): version 5 only, its own shapes first
  const bool only_v5 = !only.empty() && std::string("bwd_local v5").find(only) != std::string::npos &&
                       std::string("bwd_local v2").find(only) == std::string::npos;
  for (size_t n = 0; n < local_shapes.size(); ++n) {
    const size_t i = only_v5 ? local_shapes.size() - 1 - n : n;
    if ((only.empty() || std::string("bwd_local v2").find(only) != std::string::npos ||
         std::string("bwd_local v5").find(only) != std::string::npos) &&
        !(quick && i >= 4)) {
      std::printf("bwd_local v2 and v5  [%s]\n", local_shapes[i].name);
      std::fflush(stdout);
      if (!bwd_local_case(local_shapes[i], !only_v5)) {
        ++failures;
        if (std::getenv("EMU_STOP_AT_FIRST")) std::exit(1);
      }
    }
  }
  // EMU_PROBLEMS=SUBSTRING: only the problems whose name contains it (e.g. Hv1, for the hv1 mutants)
  const char* only_problems = std::getenv("EMU_PROBLEMS");
  // EMU_QUICK on the Hv = 1 problems (d.v_rows): only the kernels that read the packed values,
  // what those problems are for (the others took half of the quick run's 9 minutes on two cores);
  // the full run takes every kernel there too
  auto reads_no_values = [](const std::string& n) {
    for (const char* s : {"chunk_scores_mma", "reverse", " dv", "cross_scores_mma", "quad_readback", "quad_dv",
                          "key_remainder"})
      if (n.find(s) != std::string::npos) return true;
    return false;
  };
  for (size_t i = 0; i < problems.size(); ++i) {
    if (only_problems && problems[i].name.find(only_problems) == std::string::npos) continue;
    for (const auto& k : kernels)
      if ((only.empty() || std::string(k.name).find(only) != std::string::npos) && !(quick && big[i] && !k.core) &&
          !(quick && problems[i].d.v_rows && reads_no_values(k.name)) &&
          (k.quadratic || !quadratic_only[i]) &&
          (!scan_only[i] || std::string(k.name).find("chunk_scan_mma") != std::string::npos))
        run(problems[i], k.name, [&] { return k.f(problems[i]); });
  }
  if (emu::errors) std::printf("%d emulation errors (see stderr)\n", int(emu::errors));
  std::printf("%s (%d failed)\n", failures || emu::errors ? "FAILED" : "all tensor-core kernels match", failures);
  return failures || emu::errors ? 1 : 0;
}
