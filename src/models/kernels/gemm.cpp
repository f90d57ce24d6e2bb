#include "models/kernels/gemm.h"

#include <ATen/ATen.h>
#include <dlfcn.h>

#include <atomic>

namespace mlip::models {
namespace {

template <typename Real>
using BlasGemm = void (*)(const char*, const char*, const int*, const int*, const int*, const Real*, const Real*,
                          const int*, const Real*, const int*, const Real*, Real*, const int*);

std::atomic<bool> g_force_fallback{false};

template <typename Real>
BlasGemm<Real> blas_gemm() {
  static const BlasGemm<Real> f =
      reinterpret_cast<BlasGemm<Real>>(dlsym(RTLD_DEFAULT, sizeof(Real) == 8 ? "dgemm_" : "sgemm_"));
  return g_force_fallback ? nullptr : f;
}

}  // namespace

bool gemm_uses_blas() { return blas_gemm<double>() != nullptr && blas_gemm<float>() != nullptr; }
void gemm_force_fallback(bool force) { g_force_fallback = force; }

template <typename Real>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, Real alpha, const Real* a, int64_t lda,
          const Real* b, int64_t ldb, Real beta, Real* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == Real(0) ? Real(0) : beta * c[i * ldc + j];
    return;
  }
  if (const auto f = blas_gemm<Real>()) {
    // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T.
    const char ta = trans_b ? 'T' : 'N', tb = trans_a ? 'T' : 'N';
    const int mm = int(n), nn = int(m), kk = int(k), la = int(ldb), lb = int(lda), lc = int(ldc);
    f(&ta, &tb, &mm, &nn, &kk, &alpha, b, &la, a, &lb, &beta, c, &lc);
    return;
  }
  const auto opts = at::TensorOptions().dtype(c10::CppTypeToScalarType<Real>::value);
  auto view = [&](const Real* p, bool t, int64_t rows, int64_t cols, int64_t ld) {
    at::Tensor x = at::from_blob(const_cast<Real*>(p), t ? at::IntArrayRef{cols, rows} : at::IntArrayRef{rows, cols},
                                 {ld, 1}, opts);
    return t ? x.t() : x;
  };
  at::Tensor cv = at::from_blob(c, {m, n}, {ldc, 1}, opts);
  const at::Tensor product = at::mm(view(a, trans_a, m, k, lda), view(b, trans_b, k, n, ldb));
  if (beta == Real(0)) cv.copy_(product.mul_(alpha));
  else cv.mul_(beta).add_(product, alpha);
}

template void gemm<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t,
                          float, float*, int64_t);
template void gemm<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t, const double*,
                           int64_t, double, double*, int64_t);

}  // namespace mlip::models
