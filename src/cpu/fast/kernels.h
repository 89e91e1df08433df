// The intra-chunk loops of the chunked formulation that are not plain matrix products: each
// weighs a pair of tokens (i, j) of one chunk, per latent l, by a decay power from the head's
// table P[k][l] = a_l^k (k = the number of steps between them, always >= 0; SPEC.md forbids
// a^-k). All matrices are row-major and contiguous: token rows of length L (stride ld).
//
// Tables: P [(C+1) × L] with P[k] = a^k; Pd [(C+1) × L] with Pd[k] = k·a^(k-1) (the derivative
// of a^k with respect to a; Pd[0] = 0), both with row stride ld.
#pragma once

#include <cstdint>

namespace rhoscan::detail::cpu_fast {

// Intra-chunk scores, strictly lower triangular:
//   S[i][j] = sum_l X[i][l] · P[i-1-j][l] · Y[j][l]  for j < i, 0 for j >= i.   S is [n × n].
void intra_scores(int64_t n, int64_t L, int64_t ld, const float* X, const float* Y, const float* P, float* S);
void intra_scores(int64_t n, int64_t L, int64_t ld, const double* X, const double* Y, const double* P, double* S);

// The same, only for pairs inside diagonal blocks of `block` tokens (i/block == j/block); the
// other entries of S are set to 0 (the caller fills them with matrix products).
void intra_scores_diagonal(int64_t n, int64_t L, int64_t ld, const float* X, const float* Y, const float* P,
                           float* S, int64_t block);
void intra_scores_diagonal(int64_t n, int64_t L, int64_t ld, const double* X, const double* Y,
                           const double* P, double* S, int64_t block);

// Forward-in-time mixing:  out[i][l] = sum_{j<i} P[i-1-j][l] · Y[j][l] · M[i][j]   (M is [n × n]).
// Only pairs inside diagonal blocks of `block` tokens are summed (block >= n: all pairs).
void mix_earlier(int64_t n, int64_t L, int64_t ld, const float* Y, const float* M, const float* P, float* out,
                 int64_t block);
void mix_earlier(int64_t n, int64_t L, int64_t ld, const double* Y, const double* M, const double* P,
                 double* out, int64_t block);

// Backward-in-time mixing and its decay derivative, for the backward pass:
//   out[i][l] = sum_{u>i} P [u-i-1][l] · X[u][l] · M[u][i]
//   dacc[l]  += sum_i Y[i][l] · sum_{u>i} Pd[u-i-1][l] · X[u][l] · M[u][i]
// Only pairs inside diagonal blocks of `block` tokens are summed (block >= n: all pairs).
void mix_later(int64_t n, int64_t L, int64_t ld, const float* X, const float* Y, const float* M,
               const float* P, const float* Pd, float* out, double* dacc, int64_t block);
void mix_later(int64_t n, int64_t L, int64_t ld, const double* X, const double* Y, const double* M,
               const double* P, const double* Pd, double* out, double* dacc, int64_t block);

}  // namespace rhoscan::detail::cpu_fast
