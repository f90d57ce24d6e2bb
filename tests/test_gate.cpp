// models::gate (models/equivariant/gate.h) against the model's plain operations (narrow, silu,
// sigmoid, products) by autograd: values, first and second derivatives as in a training step
// (the force loss's gradient), with 0, 1 and 2 gated irreps of different sizes, float32 and
// float64; a third derivative and a shape mismatch are errors naming what was expected.
#include "models/equivariant/gate.h"

#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/cuda.h>

#include <optional>
#include <type_traits>

#include "gpu_code_on_the_cpu.h"
#include "models/kernels/device_kernels.h"
#include "test_util.h"

namespace {

template <typename T>
struct GateTest : ::testing::Test {
  static torch::Dtype dtype() { return std::is_same_v<T, float> ? torch::kFloat32 : torch::kFloat64; }
  static double tolerance() { return std::is_same_v<T, float> ? 2e-5 : 1e-12; }
};
using Reals = ::testing::Types<float, double>;
TYPED_TEST_SUITE(GateTest, Reals);

double relative(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>() / b.abs().max().item<double>();
}

void expect_gate_equals_plain_operations(torch::Dtype dtype, double tolerance, torch::Device device);

std::vector<torch::Tensor> plain_gate(const torch::Tensor& g, const std::vector<torch::Tensor>& gated, int64_t f) {
  std::vector<torch::Tensor> out = {g.narrow(2, 0, f) * torch::sigmoid(g.narrow(2, 0, f))};
  for (size_t q = 0; q < gated.size(); ++q) out.push_back(gated[q] * torch::sigmoid(g.narrow(2, f * int64_t(q + 1), f)));
  return out;
}

// The gate's three stages by the host loops, by LibTorch's operations (a GPU's code) and by
// mlip's CUDA kernels' host twin: each against the plain operations.
TYPED_TEST(GateTest, ValuesAndTwoDerivativesEqualThePlainOperations) {
  for (const char* code : {"host loops", "LibTorch operations", "device kernels' twin"}) {
    SCOPED_TRACE(code);
    std::optional<mlip::test::GpuCodeOnTheCpu> gpu_code;
    if (code[0] != 'h') gpu_code.emplace(code[0] == 'd');
    expect_gate_equals_plain_operations(TestFixture::dtype(), TestFixture::tolerance(), torch::kCPU);
  }
}

// On a CUDA device (label gpu): the CUDA kernels, against the plain operations there.
TYPED_TEST(GateTest, CudaKernelsEqualThePlainOperations) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible (or this build has no CUDA)";
  if (!mlip::models::cuda_kernels_compiled()) GTEST_SKIP() << "this build has no CUDA kernels (MLIP_CUDA_KERNELS=OFF)";
  mlip::models::set_device_kernels(true);
  expect_gate_equals_plain_operations(TestFixture::dtype(), TestFixture::tolerance(), torch::kCUDA);
  mlip::models::set_device_kernels(false);
}

void expect_gate_equals_plain_operations(torch::Dtype dtype, double tolerance, torch::Device device) {
  const auto opts = torch::TensorOptions().dtype(dtype).device(device);
  const int64_t n = 6, f = 5;
  for (const std::vector<int64_t>& components : {std::vector<int64_t>{}, {3}, {3, 5}}) {
    SCOPED_TRACE(std::to_string(components.size()) + " gated irreps");
    torch::manual_seed(int64_t(components.size()) + 1);
    const int64_t Q = int64_t(components.size());
    const auto g0 = 2 * torch::randn({n, 1, f * (1 + Q)}, opts);
    std::vector<torch::Tensor> z0, r0, u0;
    for (int64_t m : components) z0.push_back(torch::randn({n, m, f}, opts));
    const auto rs = torch::randn({n, 1, f}, opts), ug = torch::randn({n, 1, f * (1 + Q)}, opts);
    for (int64_t m : components) r0.push_back(torch::randn({n, m, f}, opts)), u0.push_back(torch::randn({n, m, f}, opts));
    // E = Σ r ⊙ gate(sin g, z); its gradient by (g, z) kept as a graph; then a loss of that
    // gradient differentiated by g, z and the r's (as the parameter gradient of a force loss).
    auto run = [&](bool fused) {
      const auto g = g0.clone().requires_grad_(true), s_weight = rs.clone().requires_grad_(true);
      std::vector<torch::Tensor> z, r, inputs = {g, s_weight};
      for (size_t q = 0; q < z0.size(); ++q) {
        z.push_back(z0[q].clone().requires_grad_(true));
        r.push_back(r0[q].clone().requires_grad_(true));
      }
      inputs.insert(inputs.end(), z.begin(), z.end());
      inputs.insert(inputs.end(), r.begin(), r.end());
      const auto out = fused ? mlip::models::gate(g.sin(), z) : plain_gate(g.sin(), z, f);
      auto energy = (out[0] * s_weight).sum();
      for (size_t q = 0; q < z.size(); ++q) energy = energy + (out[q + 1] * r[q]).sum();
      std::vector<torch::Tensor> by = {g};
      by.insert(by.end(), z.begin(), z.end());
      const auto first = torch::autograd::grad({energy}, by, {}, true, true);
      auto loss = (first[0] * ug).sum() + first[0].pow(2).sum();
      for (size_t q = 0; q < z.size(); ++q) loss = loss + (first[q + 1] * u0[q]).sum() + first[q + 1].pow(2).sum();
      auto result = torch::autograd::grad({loss}, inputs);
      for (const auto& x : out) result.push_back(x.detach());
      for (const auto& x : first) result.push_back(x.detach());
      return result;
    };
    const auto fused = run(true), plain = run(false);
    ASSERT_EQ(fused.size(), plain.size());
    for (size_t k = 0; k < fused.size(); ++k) {
      EXPECT_GT(plain[k].abs().max().template item<double>(), 1e-3) << "quantity " << k << " can differ";
      EXPECT_LT(relative(fused[k], plain[k]), tolerance) << "quantity " << k;
    }
  }
}

TEST(Gate, AThirdDerivativeIsRefused) {
  const auto g = torch::randn({2, 1, 6}, torch::kFloat64).requires_grad_(true);
  const auto z = torch::randn({2, 3, 3}, torch::kFloat64).requires_grad_(true);
  const auto out = mlip::models::gate(g, {z});
  const auto first = torch::autograd::grad({out[0].sum() + out[1].sum()}, {g}, {}, true, true)[0];
  // The second derivative with a graph (for a third) is refused; without one, it is given.
  const auto message =
      mlip::test::error_of([&] { torch::autograd::grad({first.pow(2).sum()}, {g}, {}, true, true); });
  EXPECT_TRUE(torch::autograd::grad({first.pow(2).sum()}, {g})[0].defined());
  EXPECT_TRUE(mlip::test::contains(message, "first and second derivatives only")) << message;
}

TEST(Gate, AShapeMismatchNamesTheShapes) {
  auto message = mlip::test::error_of([] { mlip::models::gate(torch::zeros({2, 1, 7}), {torch::zeros({2, 3, 3})}); });
  EXPECT_TRUE(mlip::test::contains(message, "expected g [n, 1, f·(1+1)], got [2, 1, 7]")) << message;
  message = mlip::test::error_of([] { mlip::models::gate(torch::zeros({2, 1, 6}), {torch::zeros({2, 3, 4})}); });
  EXPECT_TRUE(mlip::test::contains(message, "expected each gated irrep [2, 2l+1, 3], got [2, 3, 4]")) << message;
}

}  // namespace
