// The OpenBLAS kernel repair (docs/device.md "The BLAS kernels on a CPU OpenBLAS does not know"):
// an OpenBLAS running kernels without AVX2 on a CPU with AVX2 is switched, a user's
// OPENBLAS_CORETYPE and kernels that already use AVX2 are kept, and products stay right.
#include <gtest/gtest.h>
#include <torch/script.h>

#include <cstdlib>
#include <string>

#include "compat/blas_kernels.h"
#include "test_util.h"

namespace {

using mlip::compat::blas_kernels;
using mlip::compat::core_lacks_avx2;
using mlip::compat::cpu_blas_core;
using mlip::compat::set_openblas_core;
using mlip::compat::use_the_cpus_blas_kernels;

/// Skips unless this process's OpenBLAS can change its kernels and the CPU has AVX2; puts
/// OPENBLAS_CORETYPE and the kernels in use back when the test ends.
class BlasKernels : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!blas_kernels().switchable) GTEST_SKIP() << "no DYNAMIC_ARCH OpenBLAS in this process (pip's LibTorch: MKL)";
    if (cpu_blas_core().empty()) GTEST_SKIP() << "this CPU has no AVX2: nothing to switch to";
    const char* user = std::getenv("OPENBLAS_CORETYPE");
    had_user_ = user != nullptr;
    if (user) user_ = user;
    ::unsetenv("OPENBLAS_CORETYPE");
    core_ = blas_kernels().core;
  }
  void TearDown() override {
    if (core_.empty()) return;
    set_openblas_core(core_);
    if (had_user_)
      ::setenv("OPENBLAS_CORETYPE", user_.c_str(), 1);
    else
      ::unsetenv("OPENBLAS_CORETYPE");
  }

  std::string core_, user_;
  bool had_user_ = false;
};

/// C = A B through LibTorch (so through OpenBLAS in Debian's build) against a float64 loop.
double product_error(torch::ScalarType dtype) {
  torch::manual_seed(7);
  const auto a = torch::randn({61, 47}, torch::kFloat64), b = torch::randn({47, 53}, torch::kFloat64);
  const auto c = at::mm(a.to(dtype), b.to(dtype)).to(torch::kFloat64);
  auto reference = torch::zeros({61, 53}, torch::kFloat64);
  auto r = reference.accessor<double, 2>();
  const auto x = a.accessor<double, 2>(), y = b.accessor<double, 2>();
  for (int64_t i = 0; i < 61; ++i)
    for (int64_t j = 0; j < 53; ++j)
      for (int64_t k = 0; k < 47; ++k) r[i][j] += x[i][k] * y[k][j];
  return (c - reference).abs().max().item<double>() / reference.abs().max().item<double>();
}

TEST(BlasCoreNames, KernelsWithoutAvx2AreKnownByName) {
  for (const char* core : {"Prescott", "prescott", "Core2", "Nehalem", "Sandybridge", "Barcelona", "Unknown"})
    EXPECT_TRUE(core_lacks_avx2(core)) << core;
  for (const char* core : {"Haswell", "SkylakeX", "Cooperlake", "SapphireRapids", "Zen", "Excavator", ""})
    EXPECT_FALSE(core_lacks_avx2(core)) << core;
}

TEST_F(BlasKernels, PrescottOnACpuWithAvx2IsSwitchedAndProductsStayRight) {
  ASSERT_EQ(set_openblas_core("Prescott"), "Prescott");
  EXPECT_EQ(blas_kernels().core, "Prescott");
  const double before_float = product_error(torch::kFloat32), before_double = product_error(torch::kFloat64);

  const auto choice = use_the_cpus_blas_kernels();
  EXPECT_TRUE(choice.switched) << choice.note;
  EXPECT_EQ(choice.before, "Prescott");
  EXPECT_FALSE(core_lacks_avx2(choice.after)) << choice.after;
  EXPECT_EQ(blas_kernels().core, choice.after);
  EXPECT_TRUE(choice.after == cpu_blas_core() || choice.after == "Haswell") << choice.after;
  EXPECT_TRUE(mlip::test::contains(choice.note, "switched from the Prescott kernels")) << choice.note;
  EXPECT_EQ(std::getenv("OPENBLAS_CORETYPE"), nullptr) << "the environment is put back";

  const double after_float = product_error(torch::kFloat32), after_double = product_error(torch::kFloat64);
  EXPECT_LT(before_float, 1e-5);
  EXPECT_LT(after_float, 1e-5);
  EXPECT_LT(before_double, 1e-13);
  EXPECT_LT(after_double, 1e-13);
}

TEST_F(BlasKernels, TheUsersCoreTypeIsKept) {
  ASSERT_EQ(set_openblas_core("Prescott"), "Prescott");
  ::setenv("OPENBLAS_CORETYPE", "Prescott", 1);
  const auto choice = use_the_cpus_blas_kernels();
  EXPECT_FALSE(choice.switched);
  EXPECT_EQ(choice.after, "Prescott");
  EXPECT_EQ(blas_kernels().core, "Prescott");
  EXPECT_TRUE(mlip::test::contains(choice.note, "OPENBLAS_CORETYPE=Prescott")) << choice.note;
}

TEST_F(BlasKernels, KernelsWithAvx2AreKept) {
  ASSERT_EQ(set_openblas_core("Haswell"), "Haswell");
  const auto choice = use_the_cpus_blas_kernels();
  EXPECT_FALSE(choice.switched);
  EXPECT_EQ(choice.after, "Haswell");
  EXPECT_EQ(blas_kernels().core, "Haswell");
}

/// Through the real program: `mlip --version` names the kernels; the user's choice holds there too.
TEST_F(BlasKernels, TheProgramSaysWhichKernelsItRuns) {
  const auto chosen = mlip::test::run_command(std::string("env -u OPENBLAS_CORETYPE ") + MLIP_EXE + " --version");
  ASSERT_EQ(chosen.exit_code, 0) << chosen.err;
  const std::string prefix = "BLAS: OpenBLAS, ";
  const auto at = chosen.out.find(prefix);
  ASSERT_NE(at, std::string::npos) << chosen.out;
  const auto start = at + prefix.size(), end = chosen.out.find(" kernels", start);
  ASSERT_NE(end, std::string::npos) << chosen.out;
  EXPECT_FALSE(core_lacks_avx2(chosen.out.substr(start, end - start))) << chosen.out;
  const auto kept = mlip::test::run_command(std::string("OPENBLAS_CORETYPE=Prescott ") + MLIP_EXE + " --version");
  ASSERT_EQ(kept.exit_code, 0) << kept.err;
  EXPECT_TRUE(mlip::test::contains(kept.out, "BLAS: OpenBLAS, Prescott kernels (OPENBLAS_CORETYPE=Prescott)"))
      << kept.out;
}

}  // namespace
