#include "models/kernels/gemm.h"

#include <gtest/gtest.h>
#include <torch/script.h>

namespace {

template <typename Real>
class Gemm : public ::testing::Test {};
using Reals = ::testing::Types<float, double>;
TYPED_TEST_SUITE(Gemm, Reals);

/// Every transpose combination, leading dimensions larger than the rows, beta 0 and 1,
/// against at::mm, through BLAS and through the fallback.
TYPED_TEST(Gemm, MatchesAtMmForAllTransposes) {
  using Real = TypeParam;
  const auto opts = torch::TensorOptions().dtype(c10::CppTypeToScalarType<Real>::value);
  const double tol = std::is_same_v<Real, float> ? 1e-5 : 1e-13;
  torch::manual_seed(1);
  const int64_t m = 37, n = 23, k = 19, pad = 5;
  const bool blas = mlip::models::gemm_uses_blas();
  for (bool fallback : {false, true}) {
    mlip::models::gemm_force_fallback(fallback);
    EXPECT_EQ(mlip::models::gemm_uses_blas(), blas && !fallback);
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (double beta : {0.0, 1.0}) {
          SCOPED_TRACE(std::string("fallback ") + (fallback ? "1" : "0") + " ta " + (ta ? "1" : "0") + " tb " +
                       (tb ? "1" : "0") + " beta " + std::to_string(beta));
          // Stored with padding columns: A is [m, k] or [k, m] inside a wider buffer.
          const auto a_store = torch::randn({ta ? k : m, (ta ? m : k) + pad}, opts);
          const auto b_store = torch::randn({tb ? n : k, (tb ? k : n) + pad}, opts);
          auto c_store = torch::randn({m, n + pad}, opts);
          const auto a = a_store.narrow(1, 0, ta ? m : k), b = b_store.narrow(1, 0, tb ? k : n);
          const auto opa = ta ? a.t() : a, opb = tb ? b.t() : b;
          const auto expected = 0.5 * at::mm(opa, opb) + beta * c_store.narrow(1, 0, n);
          const auto untouched = c_store.narrow(1, n, pad).clone();
          mlip::models::gemm<Real>(ta, tb, m, n, k, Real(0.5), a_store.template data_ptr<Real>(), a_store.size(1),
                                   b_store.template data_ptr<Real>(), b_store.size(1), Real(beta),
                                   c_store.template data_ptr<Real>(), c_store.size(1));
          const double err = (c_store.narrow(1, 0, n) - expected).abs().max().template item<double>();
          EXPECT_LT(err, tol * expected.abs().max().template item<double>());
          EXPECT_TRUE(torch::equal(c_store.narrow(1, n, pad), untouched)) << "wrote outside C";
        }
  }
  mlip::models::gemm_force_fallback(false);
}

TEST(GemmBlas, DebianLibTorchLoadsAFortranBlas) {
  // On the supported setup (Debian's LibTorch with OpenBLAS) the fast path is taken.
  EXPECT_TRUE(mlip::models::gemm_uses_blas());
}

}  // namespace
