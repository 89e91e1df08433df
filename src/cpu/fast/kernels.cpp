// Compiled with reassociation allowed (CMakeLists.txt) so that the l-reductions vectorise, and
// cloned per instruction set (AVX-512, AVX2+FMA, baseline) with a run-time choice. Results are
// deterministic for a given machine: loop order never depends on the thread count.
#include "cpu/fast/kernels.h"

#include <algorithm>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define RHOSCAN_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define RHOSCAN_CLONES
#endif

namespace rhoscan::detail::cpu_fast {
namespace {

// Latent tiles keep the rows of one chunk that a tile touches in L1/L2.
constexpr int64_t kTile = 512;

template <class T>
inline void intra_scores_impl(int64_t n, int64_t L, int64_t ld, const T* X, const T* Y, const T* P, T* S,
                              int64_t block) {
  std::fill(S, S + n * n, T(0));
  for (int64_t l0 = 0; l0 < L; l0 += kTile) {
    const int64_t len = std::min(kTile, L - l0);
    for (int64_t i = 1; i < n; ++i) {
      const T* x = X + i * ld + l0;
      for (int64_t j = i / block * block; j < i; ++j) {
        const T* p = P + (i - 1 - j) * ld + l0;
        const T* y = Y + j * ld + l0;
        T acc = 0;
        for (int64_t l = 0; l < len; ++l) acc += x[l] * p[l] * y[l];
        S[i * n + j] += acc;
      }
    }
  }
}

template <class T>
inline void mix_earlier_impl(int64_t n, int64_t L, int64_t ld, const T* Y, const T* M, const T* P, T* out,
                             int64_t block) {
  for (int64_t l0 = 0; l0 < L; l0 += kTile) {
    const int64_t len = std::min(kTile, L - l0);
    for (int64_t i = 0; i < n; ++i) {
      T* o = out + i * ld + l0;
      for (int64_t l = 0; l < len; ++l) o[l] = 0;
      for (int64_t j = i / block * block; j < i; ++j) {
        const T m = M[i * n + j];
        if (m == T(0)) continue;
        const T* p = P + (i - 1 - j) * ld + l0;
        const T* y = Y + j * ld + l0;
        for (int64_t l = 0; l < len; ++l) o[l] += m * p[l] * y[l];
      }
    }
  }
}

template <class T>
inline void mix_later_impl(int64_t n, int64_t L, int64_t ld, const T* X, const T* Y, const T* M,
                           const T* P, const T* Pd, T* out, double* dacc, int64_t block) {
  T deriv[kTile], dsum[kTile];
  for (int64_t l0 = 0; l0 < L; l0 += kTile) {
    const int64_t len = std::min(kTile, L - l0);
    for (int64_t l = 0; l < len; ++l) dsum[l] = 0;
    for (int64_t i = 0; i < n; ++i) {
      T* o = out + i * ld + l0;
      for (int64_t l = 0; l < len; ++l) o[l] = 0, deriv[l] = 0;
      const int64_t u_end = std::min(n, (i / block + 1) * block);
      for (int64_t u = i + 1; u < u_end; ++u) {
        const T m = M[u * n + i];
        if (m == T(0)) continue;
        const T* p = P + (u - i - 1) * ld + l0;
        const T* pd = Pd + (u - i - 1) * ld + l0;
        const T* x = X + u * ld + l0;
        for (int64_t l = 0; l < len; ++l) {
          const T xm = x[l] * m;
          o[l] += p[l] * xm;
          deriv[l] += pd[l] * xm;
        }
      }
      const T* y = Y + i * ld + l0;
      for (int64_t l = 0; l < len; ++l) dsum[l] += y[l] * deriv[l];
    }
    for (int64_t l = 0; l < len; ++l) dacc[l0 + l] += dsum[l];
  }
}

}  // namespace

RHOSCAN_CLONES void intra_scores(int64_t n, int64_t L, int64_t ld, const float* X, const float* Y, const float* P, float* S) {
  intra_scores_impl(n, L, ld, X, Y, P, S, n);
}
RHOSCAN_CLONES void intra_scores(int64_t n, int64_t L, int64_t ld, const double* X, const double* Y, const double* P, double* S) {
  intra_scores_impl(n, L, ld, X, Y, P, S, n);
}
RHOSCAN_CLONES void intra_scores_diagonal(int64_t n, int64_t L, int64_t ld, const float* X, const float* Y,
                                          const float* P, float* S, int64_t block) {
  intra_scores_impl(n, L, ld, X, Y, P, S, block);
}
RHOSCAN_CLONES void intra_scores_diagonal(int64_t n, int64_t L, int64_t ld, const double* X, const double* Y,
                                          const double* P, double* S, int64_t block) {
  intra_scores_impl(n, L, ld, X, Y, P, S, block);
}
RHOSCAN_CLONES void mix_earlier(int64_t n, int64_t L, int64_t ld, const float* Y, const float* M, const float* P,
                                float* out, int64_t block) {
  mix_earlier_impl(n, L, ld, Y, M, P, out, block);
}
RHOSCAN_CLONES void mix_earlier(int64_t n, int64_t L, int64_t ld, const double* Y, const double* M, const double* P,
                                double* out, int64_t block) {
  mix_earlier_impl(n, L, ld, Y, M, P, out, block);
}
RHOSCAN_CLONES void mix_later(int64_t n, int64_t L, int64_t ld, const float* X, const float* Y, const float* M,
                              const float* P, const float* Pd, float* out, double* dacc, int64_t block) {
  mix_later_impl(n, L, ld, X, Y, M, P, Pd, out, dacc, block);
}
RHOSCAN_CLONES void mix_later(int64_t n, int64_t L, int64_t ld, const double* X, const double* Y, const double* M,
                              const double* P, const double* Pd, double* out, double* dacc, int64_t block) {
  mix_later_impl(n, L, ld, X, Y, M, P, Pd, out, dacc, block);
}

}  // namespace rhoscan::detail::cpu_fast
