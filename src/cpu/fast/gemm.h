// Row-major matrix products for the CPU backend: OpenBLAS when the build found it
// (RHOSCAN_CPU_FAST_BLAS), otherwise a portable blocked loop.
//
//   C[M×N] = alpha · op(A) · op(B) + beta · C,   op(X) = X or Xᵀ,  leading dimensions in elements.
#pragma once

#include <cstdint>

namespace rhoscan::detail::cpu_fast {

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha, const double* A,
          int64_t lda, const double* B, int64_t ldb, double beta, double* C, int64_t ldc);

// Makes the BLAS run on the calling thread only while alive (our own threads split the work;
// a multi-threaded BLAS inside them would oversubscribe the cores). Restores the previous
// setting on destruction.
class BlasSingleThreaded {
 public:
  BlasSingleThreaded();
  ~BlasSingleThreaded();
  BlasSingleThreaded(const BlasSingleThreaded&) = delete;
  BlasSingleThreaded& operator=(const BlasSingleThreaded&) = delete;

 private:
  int previous_ = 0;
};

// "openblas" or "builtin": what gemm() above uses.
const char* gemm_implementation();

}  // namespace rhoscan::detail::cpu_fast
