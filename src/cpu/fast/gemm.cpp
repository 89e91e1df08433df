#include "cpu/fast/gemm.h"

#include <algorithm>
#include <vector>

#ifdef RHOSCAN_CPU_FAST_BLAS
#include <cblas.h>
#endif

namespace rhoscan::detail::cpu_fast {
namespace {

#ifndef RHOSCAN_CPU_FAST_BLAS
// Portable fallback: C = beta·C, then C += alpha·op(A)·op(B), with op(B) packed row-major so
// that the inner loop is a contiguous axpy the compiler vectorises.
template <class T>
void gemm_builtin(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
                  const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == T(0) ? T(0) : beta * C[i * ldc + j];
  if (M == 0 || N == 0 || K == 0) return;
  thread_local std::vector<T> packed;
  const T* Bp = B;
  int64_t ldbp = ldb;
  if (tb) {
    packed.resize(static_cast<size_t>(K * N));
    for (int64_t k = 0; k < K; ++k)
      for (int64_t j = 0; j < N; ++j) packed[k * N + j] = B[j * ldb + k];
    Bp = packed.data();
    ldbp = N;
  }
  constexpr int64_t kBlock = 256;
  for (int64_t k0 = 0; k0 < K; k0 += kBlock) {
    const int64_t k1 = std::min(K, k0 + kBlock);
    for (int64_t i = 0; i < M; ++i) {
      T* c = C + i * ldc;
      for (int64_t k = k0; k < k1; ++k) {
        const T a = alpha * (ta ? A[k * lda + i] : A[i * lda + k]);
        if (a == T(0)) continue;
        const T* b = Bp + k * ldbp;
        for (int64_t j = 0; j < N; ++j) c[j] += a * b[j];
      }
    }
  }
}
#endif

}  // namespace

void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
#ifdef RHOSCAN_CPU_FAST_BLAS
  if (K == 0) {
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
    return;
  }
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(M), static_cast<blasint>(N), static_cast<blasint>(K), alpha, A,
              static_cast<blasint>(lda), B, static_cast<blasint>(ldb), beta, C, static_cast<blasint>(ldc));
#else
  gemm_builtin(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#endif
}

void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const double* A, int64_t lda,
          const double* B, int64_t ldb, double beta, double* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
#ifdef RHOSCAN_CPU_FAST_BLAS
  if (K == 0) {
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.0 ? 0.0 : beta * C[i * ldc + j];
    return;
  }
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(M), static_cast<blasint>(N), static_cast<blasint>(K), alpha, A,
              static_cast<blasint>(lda), B, static_cast<blasint>(ldb), beta, C, static_cast<blasint>(ldc));
#else
  gemm_builtin(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#endif
}

#ifdef RHOSCAN_CPU_FAST_BLAS
BlasSingleThreaded::BlasSingleThreaded() : previous_(openblas_get_num_threads()) {
  if (previous_ != 1) openblas_set_num_threads(1);
}
BlasSingleThreaded::~BlasSingleThreaded() {
  if (previous_ != 1) openblas_set_num_threads(previous_);
}
const char* gemm_implementation() { return "openblas"; }
#else
BlasSingleThreaded::BlasSingleThreaded() {}
BlasSingleThreaded::~BlasSingleThreaded() {}
const char* gemm_implementation() { return "builtin"; }
#endif

}  // namespace rhoscan::detail::cpu_fast
