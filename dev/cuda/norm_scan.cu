// Validation and timing of the chunk-parallel normaliser scan (launch_norm_scan in
// src/cuda/chunk_kernels.cuh: the token sums with norm_chunk_sums or, for latent pairs, fused in
// norm_sums, then norm_carry, norm_apply) against token_sum and the token-by-token kernel it
// replaces (copied below) and a float64 CPU reference. Run it first on the GPU machine:
//
//   nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a -I src -I include dev/cuda/norm_scan.cu -o /tmp/norm_scan && /tmp/norm_scan
//
// (from the repository root; scripts/cuda_next_check.sh does it). Per case it prints the RMS
// relative error ‖x − ref‖/‖ref‖ and the normwise max error max|x − ref| / max|ref| of every
// output (Qp, N at chunk starts, final rho_norm, the bf16 operands Xq and Kq) for the new and the
// old kernel, whether two runs of the new one are bitwise equal, and PASS or FAIL; then the old and
// new times (CUDA events, median of 20) at the benchmark's shapes. Exit status 0 when every case
// passes. Outputs are filled with NaN before each run, so an element left unwritten fails.
// `/tmp/norm_scan --small` runs the edge cases only (no timing): for compute-sanitizer.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda/chunk_kernels.cuh"

namespace rhoscan::cuda_detail {
// The library defines this in workspace.cu; the harness links no library.
void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    std::fprintf(stderr, "CUDA error %s: %s\n", what, cudaGetErrorString(status));
    std::exit(2);
  }
}
// (and this, for launch_kernel's programmatic dependent launch: the harness runs on sm_90 only)
bool programmatic_launch_supported() { return true; }

// ---- the kernel it replaces (main at 905c4ad), renamed: one thread per (bh, l), sequential over t
// Writes Qp[bh][t][l], N at every chunk start Nc[bh][c][l] (c = 0..nC, the last is N_T), and the
// final rho_norm when n_out is given. n0 (float32 state) may alias n_out: each thread reads its
// element before it writes it. With Xq given (the tensor-core path) it also writes the bf16
// operands of the chunk products, rows of d.Lp with zeros past L, for token i of its chunk:
//   Xq[bh][t][l] = Qp_t[l] a^i            (the read of the chunk-start state)
//   Kq[bh][t][l] = q_t[l] a^(Cn-1-i)       (when given: the backward's dv operand)
template <typename T>
__global__ void norm_scan_sequential_kernel(Dims d, Str4 q, const float* a32, Str3 n0, const float* s, float* Qp,
                                 float* Nc, Str3 n_out, __nv_bfloat16* Xq = nullptr, __nv_bfloat16* Kq = nullptr) {
  const int64_t width = Xq ? d.Lp : d.L;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < d.nbh * width; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t bh = i / width, l = i % width, b = d.b_of(bh), h = d.h_of(bh);
    if (l >= d.L) {  // padding latents of the tensor-core operands
      for (int64_t t = 0; t < d.T; ++t) {
        Xq[(bh * d.T + t) * d.Lp + l] = __float2bfloat16_rn(0.0f);
        if (Kq) Kq[(bh * d.T + t) * d.Lp + l] = __float2bfloat16_rn(0.0f);
      }
      continue;
    }
    const float a = a32[h * d.L + l];
    float N = n0.p ? static_cast<const float*>(n0.p)[n0.at(b, h, l)] : 0.0f;
    float apow_i = 1.0f;  // a^i, i = t mod C
    const int64_t qbase = b * q.s[0] + h * q.s[1] + l * q.s[3];
    for (int64_t t0 = 0; t0 < d.T; t0 += 8) {
      // eight independent loads in flight before the dependent chain
      float qv[8], sv[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const bool ok = t0 + k < d.T;
        qv[k] = ok ? load<T>(q.p, qbase + (t0 + k) * q.s[2]) : 0.0f;
        sv[k] = ok ? s[bh * d.T + t0 + k] : 1.0f;
      }
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const int64_t t = t0 + k;
        if (t < d.T) {
          const int ci = static_cast<int>(t % d.C);
          if (ci == 0) Nc[(bh * (d.nC + 1) + t / d.C) * d.L + l] = N;
          const float qp = (qv[k] / sv[k]) / (N + kEpsF);
          Qp[(bh * d.T + t) * d.L + l] = qp;
          if (Xq) {
            apow_i = ci == 0 ? 1.0f : apow_i * a;
            Xq[(bh * d.T + t) * d.Lp + l] = __float2bfloat16_rn(qp * apow_i);
          }
          if (Kq) {
            const int cn = static_cast<int>(d.chunk_len(t / d.C));
            Kq[(bh * d.T + t) * d.Lp + l] = __float2bfloat16_rn(qv[k] * ipow(a, cn - 1 - ci));
          }
          N = a * N + qv[k];
        }
      }
    }
    Nc[(bh * (d.nC + 1) + d.nC) * d.L + l] = N;
    if (n_out.p) const_cast<float*>(static_cast<const float*>(n_out.p))[n_out.at(b, h, l)] = N;
  }
}
}  // namespace rhoscan::cuda_detail

using namespace rhoscan::cuda_detail;
using bf16 = __nv_bfloat16;

namespace {

#define CK(call) check_cuda((call), #call)

// Host bf16 <-> float by bits (round to nearest even), so that the reference owns no device code.
uint16_t bf16_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  // NaN
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
float bf16_float(uint16_t b) {
  const uint32_t u = uint32_t(b) << 16;
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

struct Case {
  std::string name;
  int64_t B, H, T, L, C;
  bool seq_first;  // q laid out [B,T,H,L] instead of [B,H,T,L]
  bool with_n0, alias_n0;  // an initial rho_norm; rho_norm written in place over it
  bool bf16_q;     // bfloat16 q (the tensor-core path: Xq written) or float32 q (the FFMA path)
  bool with_kq;    // the backward's Kq operand too
  bool time_it;
};

// What one scan writes, copied back to the host.
struct Result {
  std::vector<float> Qp, Nc, nout, Xq, Kq;  // Xq, Kq as floats of their bf16 values
  bool operator==(const Result& o) const {
    auto same = [](const std::vector<float>& x, const std::vector<float>& y) {
      return x.size() == y.size() && std::memcmp(x.data(), y.data(), 4 * x.size()) == 0;
    };
    return same(Qp, o.Qp) && same(Nc, o.Nc) && same(nout, o.nout) && same(Xq, o.Xq) && same(Kq, o.Kq);
  }
};

struct Err {
  double rms = 0, max = 0;
  bool finite = true;
};
Err compare(const std::vector<float>& x, const std::vector<double>& ref) {
  double num = 0, den = 0, maxd = 0, maxr = 0;
  Err e;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!std::isfinite(x[i])) e.finite = false;
    const double dlt = double(x[i]) - ref[i];
    num += dlt * dlt, den += ref[i] * ref[i];
    maxd = std::max(maxd, std::fabs(dlt)), maxr = std::max(maxr, std::fabs(ref[i]));
  }
  e.rms = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  e.max = maxr > 0 ? maxd / maxr : maxd;
  if (!e.finite) e.rms = e.max = INFINITY;
  return e;
}

struct Problem {
  Case k;
  Dims d;
  std::vector<float> qf, a, n0;  // q as floats of the stored values, [B,H,T,L] logical order
  // device
  void* q = nullptr;
  float *a32 = nullptr, *n0d = nullptr, *s = nullptr, *Qp = nullptr, *Nc = nullptr, *nout = nullptr;
  float* s_parts = nullptr;  // norm_sums_kernel's latent blocks' partials of s
  bf16 *Xq = nullptr, *Kq = nullptr;
  Str4 qs;
  Str3 n0s, nouts;

  explicit Problem(const Case& c, uint32_t seed) : k(c) {
    d.H = c.H, d.T = c.T, d.L = c.L, d.E = 1, d.C = c.C, d.nC = (c.T + c.C - 1) / c.C;
    d.bh0 = 0, d.nbh = c.B * c.H;
    d.Lp = c.bf16_q ? (c.L + 63) / 64 * 64 : c.L, d.Ep = 1;
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> U(0.0f, 1.0f);
    // BDH-like q: non-negative, ~90 % zeros, every 7th token an all-zero row.
    qf.assign(c.B * c.H * c.T * c.L, 0.0f);
    for (int64_t i = 0; i < int64_t(qf.size()); ++i) {
      const int64_t t = (i / c.L) % c.T;
      float x = (t % 7 != 3 && U(rng) < 0.1f) ? 2.0f * U(rng) : 0.0f;
      qf[i] = c.bf16_q ? bf16_float(bf16_bits(x)) : x;
    }
    // Decay: mostly in [0.5, 1), with exact 0, exact 1, tiny and near-1 values mixed in.
    a.resize(c.H * c.L);
    for (int64_t i = 0; i < int64_t(a.size()); ++i) {
      const int m = int(i % 10);
      a[i] = m == 0 ? 0.0f : m == 1 ? 1.0f : m == 2 ? 0.01f : m == 3 ? 0.9999f : 0.5f + 0.5f * U(rng);
    }
    n0.assign(c.B * c.H * c.L, 0.0f);
    if (c.with_n0)
      for (auto& x : n0) x = 5.0f * U(rng);

    // q on the device in its layout
    const int64_t esz = c.bf16_q ? 2 : 4;
    std::vector<uint8_t> qb(qf.size() * esz);
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t h = 0; h < c.H; ++h)
        for (int64_t t = 0; t < c.T; ++t)
          for (int64_t l = 0; l < c.L; ++l) {
            const float x = qf[((b * c.H + h) * c.T + t) * c.L + l];
            const int64_t at = c.seq_first ? ((b * c.T + t) * c.H + h) * c.L + l : ((b * c.H + h) * c.T + t) * c.L + l;
            if (c.bf16_q) {
              const uint16_t v = bf16_bits(x);
              std::memcpy(&qb[at * 2], &v, 2);
            } else {
              std::memcpy(&qb[at * 4], &x, 4);
            }
          }
    const int64_t sq[4] = {c.H * c.T * c.L, c.T * c.L, c.L, 1}, sf[4] = {c.T * c.H * c.L, c.L, c.H * c.L, 1};
    const int64_t sn[3] = {c.H * c.L, c.L, 1};
    CK(cudaMalloc(&q, std::max<size_t>(qb.size(), 4)));
    CK(cudaMemcpy(q, qb.data(), qb.size(), cudaMemcpyHostToDevice));
    qs = str4(q, c.seq_first ? sf : sq);
    a32 = dalloc<float>(a.size());
    CK(cudaMemcpy(a32, a.data(), 4 * a.size(), cudaMemcpyHostToDevice));
    n0d = dalloc<float>(n0.size());
    CK(cudaMemcpy(n0d, n0.data(), 4 * n0.size(), cudaMemcpyHostToDevice));
    nout = c.alias_n0 ? n0d : dalloc<float>(n0.size());
    n0s = c.with_n0 ? str3(n0d, sn) : Str3{};
    nouts = str3(nout, sn);
    s = dalloc<float>(d.nbh * c.T);
    s_parts = dalloc<float>(d.nbh * norm_sums_blocks(c.L) * c.T);
    Qp = dalloc<float>(d.nbh * c.T * c.L);
    Nc = dalloc<float>(d.nbh * (d.nC + 1) * c.L);
    if (c.bf16_q) Xq = dalloc<bf16>(d.nbh * c.T * d.Lp);
    if (c.with_kq) Kq = dalloc<bf16>(d.nbh * c.T * d.Lp);
  }
  ~Problem() {
    for (void* p : {q, (void*)a32, (void*)n0d, (void*)s, (void*)s_parts, (void*)Qp, (void*)Nc, (void*)Xq, (void*)Kq}) cudaFree(p);
    if (!k.alias_n0) cudaFree(nout);
  }
  template <typename X>
  static X* dalloc(int64_t n) {
    void* p = nullptr;
    CK(cudaMalloc(&p, std::max<int64_t>(n, 1) * sizeof(X)));
    return static_cast<X*>(p);
  }

  // Outputs to NaN (and the in-place state back to n0), so that what a kernel skips shows.
  void reset() {
    CK(cudaMemset(Qp, 0xff, 4 * std::max<int64_t>(d.nbh * k.T * k.L, 1)));
    CK(cudaMemset(Nc, 0xff, 4 * d.nbh * (d.nC + 1) * k.L));
    if (k.alias_n0)
      CK(cudaMemcpy(n0d, n0.data(), 4 * n0.size(), cudaMemcpyHostToDevice));
    else
      CK(cudaMemset(nout, 0xff, 4 * n0.size()));
    if (Xq) CK(cudaMemset(Xq, 0xff, 2 * std::max<int64_t>(d.nbh * k.T * d.Lp, 1)));
    if (Kq) CK(cudaMemset(Kq, 0xff, 2 * std::max<int64_t>(d.nbh * k.T * d.Lp, 1)));
  }
  template <typename T>
  void launch(bool chunked) {
    if (chunked) {
      launch_norm_scan<T>(d, qs, a32, n0s, s, s_parts, Qp, Nc, nouts, Xq, Kq, 0);  // s too
    } else {  // the old pair: token_sum, then the token-by-token scan
      token_sum_kernel<T><<<grid_for(d.nbh * k.T, 8), 256>>>(d, qs, s);
      norm_scan_sequential_kernel<T><<<grid_for(d.nbh * (Xq ? d.Lp : d.L), 256), 256>>>(d, qs, a32, n0s, s, Qp, Nc,
                                                                                        nouts, Xq, Kq);
      CK(cudaGetLastError());
    }
  }
  void run(bool chunked) {
    if (k.bf16_q)
      launch<bf16>(chunked);
    else
      launch<float>(chunked);
  }
  Result fetch() {
    Result r;
    auto get = [](std::vector<float>& v, const float* p, int64_t n) {
      v.resize(n);
      if (n) CK(cudaMemcpy(v.data(), p, 4 * n, cudaMemcpyDeviceToHost));
    };
    auto get16 = [](std::vector<float>& v, const bf16* p, int64_t n) {
      std::vector<uint16_t> b(n);
      if (n) CK(cudaMemcpy(b.data(), p, 2 * n, cudaMemcpyDeviceToHost));
      v.resize(n);
      for (int64_t i = 0; i < n; ++i) v[i] = bf16_float(b[i]);
    };
    CK(cudaDeviceSynchronize());
    get(r.Qp, Qp, d.nbh * k.T * k.L);
    get(r.Nc, Nc, d.nbh * (d.nC + 1) * k.L);
    get(r.nout, nout, n0.size());
    if (Xq) get16(r.Xq, Xq, d.nbh * k.T * d.Lp);
    if (Kq) get16(r.Kq, Kq, d.nbh * k.T * d.Lp);
    return r;
  }
  // The float64 evaluation of the formulas (SPEC.md: N_{t+1} = a N_t + q_t, s_t = eps + sum q_t).
  struct Ref {
    std::vector<double> Qp, Nc, nout, Xq, Kq;
  };
  Ref reference() const {
    Ref r;
    const int64_t T = k.T, L = k.L, Lp = d.Lp, nC = d.nC, C = k.C;
    r.Qp.assign(d.nbh * T * L, 0.0);
    r.Nc.assign(d.nbh * (nC + 1) * L, 0.0);
    r.nout.assign(n0.size(), 0.0);
    if (Xq) r.Xq.assign(d.nbh * T * Lp, 0.0);
    if (Kq) r.Kq.assign(d.nbh * T * Lp, 0.0);
    std::vector<double> s(T);
    for (int64_t bh = 0; bh < d.nbh; ++bh) {
      const int64_t h = bh % k.H;
      for (int64_t t = 0; t < T; ++t) {
        double acc = 0;
        for (int64_t l = 0; l < L; ++l) acc += qf[(bh * T + t) * L + l];
        s[t] = acc + 1e-6;
      }
      // token-major, so the reference walks q in memory order
      std::vector<double> N(L), pw(L * (C + 1));  // pw[l (C+1) + n] = a_l^n (0^0 = 1)
      for (int64_t l = 0; l < L; ++l) {
        N[l] = n0[bh * L + l];
        pw[l * (C + 1)] = 1.0;
        for (int64_t n = 1; n <= C; ++n) pw[l * (C + 1) + n] = pw[l * (C + 1) + n - 1] * a[h * L + l];
      }
      for (int64_t t = 0; t < T; ++t) {
        const int64_t c = t / C, i = t % C, Cn = std::min(C, T - c * C);
        for (int64_t l = 0; l < L; ++l) {
          if (i == 0) r.Nc[(bh * (nC + 1) + c) * L + l] = N[l];
          const double qv = qf[(bh * T + t) * L + l], qp = qv / s[t] / (N[l] + 1e-6);
          r.Qp[(bh * T + t) * L + l] = qp;
          if (Xq) r.Xq[(bh * T + t) * Lp + l] = qp * pw[l * (C + 1) + i];
          if (Kq) r.Kq[(bh * T + t) * Lp + l] = qv * pw[l * (C + 1) + Cn - 1 - i];
          N[l] = a[h * L + l] * N[l] + qv;
        }
      }
      for (int64_t l = 0; l < L; ++l) r.Nc[(bh * (nC + 1) + nC) * L + l] = r.nout[bh * L + l] = N[l];
    }
    return r;
  }
};

// Median milliseconds of `reps` runs, each timed by its own pair of events.
template <typename F>
double time_ms(F f, int reps = 20) {
  for (int i = 0; i < 3; ++i) f();
  std::vector<float> ms(reps);
  cudaEvent_t ev[2];
  for (auto& e : ev) CK(cudaEventCreate(&e));
  for (int i = 0; i < reps; ++i) {
    CK(cudaEventRecord(ev[0]));
    f();
    CK(cudaEventRecord(ev[1]));
    CK(cudaEventSynchronize(ev[1]));
    CK(cudaEventElapsedTime(&ms[i], ev[0], ev[1]));
  }
  for (auto& e : ev) CK(cudaEventDestroy(e));
  std::sort(ms.begin(), ms.end());
  return ms[reps / 2];
}

// Tolerances: SPEC.md's float32 bar (1e-5 RMS relative) for the float32 outputs, except on the
// 65536-token case, where float32 summation of N itself drifts (the old kernel's error is printed
// beside); the bf16 operands carry one bf16 rounding (half an ulp: 2^-8 relative at most).
bool check(const char* what, const Err& e, double rms_tol, double max_tol) {
  const bool ok = e.finite && e.rms <= rms_tol && e.max <= max_tol;
  std::printf("    %-4s rms %.2e max %.2e%s", what, e.rms, e.max, ok ? "" : " <-- FAIL");
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  const bool small = argc > 1 && std::strcmp(argv[1], "--small") == 0;
  int dev = 0;
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
    std::printf("no CUDA device: nothing run\n");
    return 3;
  }
  std::printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  // name, B, H, T, L, C, seq_first, with_n0, alias_n0, bf16_q, with_kq, time_it
  const std::vector<Case> cases = {
      {"tail T300 L700 n0 in place, Xq+Kq", 2, 3, 300, 700, 64, false, true, true, true, true, false},
      {"[B,T,H,L] chunk 32 T200 L130, Xq", 2, 2, 200, 130, 32, true, false, false, true, false, false},
      {"float32 q T129 L33 n0", 1, 2, 129, 33, 64, false, true, false, false, false, false},
      {"T1 L64", 1, 1, 1, 64, 64, false, true, false, true, true, false},
      {"T0 n0", 1, 2, 0, 100, 64, false, true, false, true, true, false},
      {"chunk 1 T50 L40, Xq+Kq", 1, 2, 50, 40, 1, false, true, false, true, true, false},
      {"chunk 64 T64 (no tail) L7", 2, 1, 64, 7, 64, false, false, false, true, true, false},
      {"long T65536 L256", 1, 1, 65536, 256, 64, false, true, false, true, false, false},
      // The benchmark's shapes (scripts: rhoscan bench): forward batches and one backward batch.
      {"BDH-8k forward: 32 pairs T512 L8192, Xq", 8, 4, 512, 8192, 64, false, false, false, true, false, true},
      {"BDH-8k backward batch: 8 pairs, Xq+Kq", 2, 4, 512, 8192, 64, false, false, false, true, true, true},
      {"BDH-base forward: 96 pairs T512 L256", 24, 4, 512, 256, 64, false, false, false, true, false, true},
      {"long forward: 4 pairs T8192 L2048", 1, 4, 8192, 2048, 64, false, false, false, true, false, true},
      {"BDH-8k float32 forward: 32 pairs", 8, 4, 512, 8192, 64, false, false, false, false, false, true},
  };
  int failures = 0;
  std::vector<std::string> timings;
  uint32_t seed = 1;
  int ran = 0;
  for (const Case& c : cases) {
    if (small && (c.time_it || c.T > 4096)) continue;
    ++ran;
    Problem p(c, seed++);
    std::printf("%s (B%lld H%lld T%lld L%lld C%lld)\n", c.name.c_str(), (long long)c.B, (long long)c.H,
                (long long)c.T, (long long)c.L, (long long)c.C);
    const auto ref = p.reference();
    bool ok = true;
    Result res[2];
    for (int chunked = 1; chunked >= 0; --chunked) {
      p.reset();
      p.run(chunked);
      res[chunked] = p.fetch();
      const Result& r = res[chunked];
      const bool strict = chunked;  // the old kernel is printed for comparison, not judged
      const double ftol = c.T > 4096 ? 1e-4 : 1e-5;
      std::printf("  %s\n", chunked ? "chunked (new)" : "sequential (old)");
      bool good = check("Qp", compare(r.Qp, ref.Qp), ftol, 10 * ftol);
      good &= check("N", compare(r.Nc, ref.Nc), ftol, 10 * ftol);
      good &= check("nout", compare(r.nout, ref.nout), ftol, 10 * ftol);
      if (p.Xq) good &= check("Xq", compare(r.Xq, ref.Xq), 5e-3, 4e-3);
      if (p.Kq) good &= check("Kq", compare(r.Kq, ref.Kq), 5e-3, 4e-3);
      std::printf("\n");
      if (strict) ok &= good;
    }
    // Determinism: a second run of the new scan is bitwise equal to the first.
    p.reset();
    p.run(true);
    const bool same = p.fetch() == res[1];
    std::printf("  new run twice bitwise equal: %s\n", same ? "yes" : "NO <-- FAIL");
    ok &= same;
    if (c.time_it) {
      const double t_old = time_ms([&] { p.run(false); });
      const double t_new = time_ms([&] { p.run(true); });
      // The minimum traffic: q once, s, Qp, Xq/Kq written, N at chunk starts.
      const double bytes = double(p.d.nbh) * c.T * (c.L * ((c.bf16_q ? 2 : 4) + 4) + (p.Xq ? 2 : 0) * p.d.Lp +
                                                    (p.Kq ? 2 : 0) * p.d.Lp + 4);
      char line[256];
      std::snprintf(line, sizeof line, "%-44s old %8.3f ms  new %8.3f ms  (%.1fx; new at %.0f GB/s of the minimum traffic)",
                    c.name.c_str(), t_old, t_new, t_old / t_new, bytes / (t_new * 1e6));
      timings.push_back(line);
    }
    std::printf("  %s\n", ok ? "PASS" : "FAIL");
    failures += !ok;
  }
  std::printf("\ntimings (median of 20, CUDA events):\n");
  for (const auto& t : timings) std::printf("  %s\n", t.c_str());
  std::printf("\n%s: %d of %d cases failed\n", failures ? "FAIL" : "ALL PASS", failures, ran);
  return failures ? 1 : 0;
}
