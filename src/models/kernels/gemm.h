#pragma once

#include <cstdint>

namespace mlip::models {

/// Row-major C[m, n] = alpha * op(A) op(B) + beta * C, with op(A) [m, k] and op(B) [k, n].
/// A is stored [m, k] (lda >= k), or [k, m] when trans_a (lda >= m); likewise B. Calls the
/// process's Fortran BLAS (dgemm_/sgemm_, which LibTorch loads) directly, without creating
/// tensors, so it is cheap for the small blocks of the training path; falls back to at::mm when
/// no such symbol is loaded. Single-threaded inside a parallel region (OpenBLAS/OpenMP rule).
template <typename Real>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, Real alpha, const Real* a, int64_t lda,
          const Real* b, int64_t ldb, Real beta, Real* c, int64_t ldc);

/// Whether gemm() calls a BLAS found in the process (false: the at::mm fallback).
bool gemm_uses_blas();
/// For tests: force the at::mm fallback even when a BLAS is loaded.
void gemm_force_fallback(bool force);

}  // namespace mlip::models
