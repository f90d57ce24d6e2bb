// models::fused_embedding, se_e2_a's embedding net in one pass with its derivative, and its
// adjoint (docs/fused_kernels.md): the host twins of the CUDA kernels against the model's own
// TorchScript net (values), autograd through it (dG/ds) and autograd's double backward (the
// gradients of a loss of G and dG/ds), for nets without skips, with same-width and double-width
// skips, with and without resnet_dt; strided inputs; bad input. The CUDA kernels against the
// host twins where a device is visible (label gpu; skipped with a message elsewhere).
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/cuda.h>
#include <torch/script.h>

#include <algorithm>
#include <string>
#include <vector>

#include "error.h"
#include "models/se_e2_a/fused_embedding.h"
#include "models/se_e2_a/se_e2_a.h"

namespace {

using mlip::models::EmbeddingNetParameters;
using mlip::models::fused_embedding;
using mlip::models::SeAConfig;

template <typename R>
SeAConfig config_of(std::vector<int64_t> neuron, bool resnet_dt) {
  SeAConfig c;
  c.type_map = {"O", "H"};
  c.sel = {4, 8};
  c.axis_neuron = std::min<int64_t>(4, neuron.back());
  c.neuron = std::move(neuron);
  c.resnet_dt = resnet_dt;
  c.fitting_neuron = {8};
  c.precision = std::is_same_v<R, double> ? "float64" : "float32";
  return c;
}

/// The module's parameters moved away from their initial values (idt starts near 0.1, biases
/// near 0), so that every term of the layer rule shows.
void perturb(torch::jit::Module& module) {
  torch::manual_seed(7);
  torch::NoGradGuard no_grad;
  for (const auto& p : module.named_parameters()) p.value.add_(0.3 * torch::randn_like(p.value));
}

/// G from the model's own TorchScript net and dG/ds from autograd through it, column by column
/// (each G[p, k] depends on s[p] only).
std::pair<torch::Tensor, torch::Tensor> reference(torch::jit::Module& module, const std::string& net,
                                                  const torch::Tensor& s) {
  auto input = s.detach().clone().requires_grad_(true);
  auto g = module.get_method(net)({input.unsqueeze(1)}).toTensor();
  std::vector<torch::Tensor> columns;
  for (int64_t k = 0; k < g.size(1); ++k)
    columns.push_back(torch::autograd::grad({g.select(1, k).sum()}, {input}, {}, /*retain_graph=*/true)[0]);
  return {g.detach(), torch::stack(columns, 1)};
}

/// The gradients of loss = sum(a G) + sum(b dG/ds) with respect to s and every parameter of
/// the net, by autograd's double backward through the model's own TorchScript net.
std::vector<torch::Tensor> reference_gradients(torch::jit::Module& module, const SeAConfig& config, int64_t net,
                                               const torch::Tensor& s, const torch::Tensor& a, const torch::Tensor& b) {
  const auto params = EmbeddingNetParameters::of_se_e2_a(module, config, net);
  std::vector<torch::Tensor> wrt{s.detach().clone().requires_grad_(true)};
  for (size_t l = 0; l < params.layers.size(); ++l) {
    for (const auto* t : {&params.weights[l], &params.biases[l], &params.timesteps[l]})
      if (t->defined()) wrt.push_back(*t);
  }
  const auto g = module.get_method(mlip::models::embedding_net_name(config, net))({wrt[0].unsqueeze(1)}).toTensor();
  std::vector<torch::Tensor> columns;
  for (int64_t k = 0; k < g.size(1); ++k)
    columns.push_back(torch::autograd::grad({g.select(1, k).sum()}, {wrt[0]}, {}, true, /*create_graph=*/true)[0]);
  const auto loss = (a * g).sum() + (b * torch::stack(columns, 1)).sum();
  return torch::autograd::grad({loss}, wrt);
}

template <typename R>
double tolerance() {
  return std::is_same_v<R, double> ? 1e-12 : 2e-5;
}

template <typename R>
void expect_near(const torch::Tensor& got, const torch::Tensor& want, const std::string& what, double factor = 1) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  const double scale = std::max(1.0, want.abs().max().item<double>());
  const double error = (got.to(torch::kFloat64) - want.to(torch::kFloat64)).abs().max().item<double>();
  EXPECT_LE(error, factor * tolerance<R>() * scale)
      << what << ": largest difference " << error << " (scale " << scale << ")";
}

/// Every gradient of the adjoint, in reference_gradients' order.
std::vector<torch::Tensor> flattened(const mlip::models::EmbeddingGradients& g) {
  std::vector<torch::Tensor> out{g.inputs};
  for (size_t l = 0; l < g.weights.size(); ++l) {
    for (const auto* t : {&g.weights[l], &g.biases[l], &g.timesteps[l]})
      if (t->defined()) out.push_back(*t);
  }
  return out;
}

template <typename R>
class FusedEmbedding : public ::testing::Test {};
using Reals = ::testing::Types<float, double>;
TYPED_TEST_SUITE(FusedEmbedding, Reals);

/// The nets the host twins are checked on: {8, 16, 32}, no skip then two double-width skips;
/// {4, 4, 8, 8}, same-width and double-width; {5, 3}, no skip at all; with and without resnet_dt.
struct NetCase {
  std::vector<int64_t> neuron;
  bool resnet_dt;
  std::string name() const {
    return std::to_string(neuron.size()) + " layers up to " + std::to_string(neuron.back()) + ", resnet_dt " +
           std::to_string(resnet_dt);
  }
};
const std::vector<NetCase> kNetCases = {
    {{8, 16, 32}, true}, {{8, 16, 32}, false}, {{4, 4, 8, 8}, true}, {{5, 3}, false}};

/// A model of each case, its parameters moved off their initial values.
template <typename R>
std::pair<SeAConfig, torch::jit::Module> model_of(const NetCase& c) {
  const SeAConfig config = config_of<R>(c.neuron, c.resnet_dt);
  auto module = mlip::models::build_se_e2_a(config);
  perturb(module);
  return {config, module};
}

TYPED_TEST(FusedEmbedding, HostTwinEqualsTheModelsNetAndAutograd) {
  using R = TypeParam;
  const torch::Dtype dtype = c10::CppTypeToScalarType<R>::value;
  for (const NetCase& c : kNetCases) {
    auto [config, module] = model_of<R>(c);
    const std::string what = c.name();
    for (int64_t net : {0, 3}) {
      const auto params = EmbeddingNetParameters::of_se_e2_a(module, config, net);
      // Normalised rows' first column: a few units either side of zero.
      const auto s = torch::linspace(-3.0, 6.0, 1001, torch::TensorOptions().dtype(dtype));
      const auto got = fused_embedding(s, params);
      const auto [g, slope] = reference(module, mlip::models::embedding_net_name(config, net), s);
      expect_near<R>(got.value, g, what + ", G");
      expect_near<R>(got.slope, slope, what + ", dG/ds");
      EXPECT_EQ(got.value.scalar_type(), dtype);
    }
  }
}

TYPED_TEST(FusedEmbedding, AdjointEqualsAutogradsDoubleBackward) {
  using R = TypeParam;
  const auto options = torch::TensorOptions().dtype(c10::CppTypeToScalarType<R>::value);
  for (const NetCase& c : kNetCases) {
    auto [config, module] = model_of<R>(c);
    const std::string what = c.name();
    const int64_t q = 257, m = c.neuron.back();
    const auto s = 4 * torch::rand({q}, options) - 1.5;
    const auto a = torch::randn({q, m}, options), b = torch::randn({q, m}, options);
    const auto want = reference_gradients(module, config, 1, s, a, b);
    const auto got = flattened(
        mlip::models::fused_embedding_adjoint(s, EmbeddingNetParameters::of_se_e2_a(module, config, 1), a, b));
    ASSERT_EQ(got.size(), want.size()) << what;
    // Sums over 257 pairs: float32 rounding grows with them.
    const double factor = std::is_same_v<R, double> ? 100 : 10;
    expect_near<R>(got[0], want[0], what + ", d loss / ds", factor);
    for (size_t k = 1; k < got.size(); ++k)
      expect_near<R>(got[k], want[k], what + ", parameter gradient " + std::to_string(k), factor);
  }
}

TYPED_TEST(FusedEmbedding, StridedInputsEqualContiguousOnes) {
  using R = TypeParam;
  const SeAConfig config = config_of<R>({6, 12}, true);
  auto module = mlip::models::build_se_e2_a(config);
  perturb(module);
  const auto params = EmbeddingNetParameters::of_se_e2_a(module, config, 1);
  const auto rows = torch::randn({300, 4}, torch::TensorOptions().dtype(c10::CppTypeToScalarType<R>::value));
  const auto strided = fused_embedding(rows.select(1, 0), params);
  const auto contiguous = fused_embedding(rows.select(1, 0).contiguous(), params);
  EXPECT_TRUE(torch::equal(strided.value, contiguous.value));
  EXPECT_TRUE(torch::equal(strided.slope, contiguous.slope));
  const auto none = fused_embedding(rows.select(1, 0).slice(0, 0, 0), params);
  EXPECT_EQ(none.value.sizes(), (std::vector<int64_t>{0, 12}));
}

TEST(FusedEmbeddingInput, ErrorsNameWhatDisagrees) {
  const SeAConfig config = config_of<double>({4, 8}, false);
  auto module = mlip::models::build_se_e2_a(config);
  const auto params = EmbeddingNetParameters::of_se_e2_a(module, config, 0);
  auto message_of = [&](const torch::Tensor& s, const EmbeddingNetParameters& p) {
    try {
      fused_embedding(s, p);
    } catch (const mlip::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const auto s = torch::zeros({5}, torch::kFloat64);
  EXPECT_NE(message_of(s.to(torch::kFloat32), params).find("layer 0's weights: expected [1, 4] Float on cpu"),
            std::string::npos)
      << message_of(s.to(torch::kFloat32), params);
  EXPECT_NE(message_of(s.view({5, 1}), params).find("expected the inputs s as a 1-D tensor"), std::string::npos);
  EXPECT_NE(message_of(s.to(torch::kInt64), params).find("expected float32 or float64 inputs"), std::string::npos);
  auto broken = params;
  broken.layers[1].in = 5;
  EXPECT_NE(message_of(s, broken).find("layer 1 takes rows of 5, the layer before gives 4"), std::string::npos)
      << message_of(s, broken);
  auto missing = params;
  missing.biases.pop_back();
  EXPECT_NE(message_of(s, missing).find("2 layers but 2 weights, 1 biases"), std::string::npos);
  EXPECT_THROW(EmbeddingNetParameters::of_se_e2_a(module, config, 4), mlip::Error);
  std::string adjoint_message = "no error";
  try {
    mlip::models::fused_embedding_adjoint(s, params, torch::zeros({5, 7}, torch::kFloat64),
                                          torch::zeros({5, 8}, torch::kFloat64));
  } catch (const mlip::Error& e) {
    adjoint_message = e.what();
  }
  EXPECT_NE(adjoint_message.find("d loss / dG: expected [5, 8] Double on cpu"), std::string::npos) << adjoint_message;
}

TYPED_TEST(FusedEmbedding, CudaKernelEqualsTheHostTwin) {
  using R = TypeParam;
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible (or this build has no CUDA)";
  if (!mlip::models::fused_kernels_compiled()) GTEST_SKIP() << "this build has no CUDA kernels (MLIP_CUDA_KERNELS=OFF)";
  const SeAConfig config = config_of<R>({25, 50, 100}, true);  // DeePMD-kit's water widths
  auto module = mlip::models::build_se_e2_a(config);
  perturb(module);
  const auto cpu = EmbeddingNetParameters::of_se_e2_a(module, config, 2);
  module.to(torch::Device(torch::kCUDA, 0));
  const auto cuda = EmbeddingNetParameters::of_se_e2_a(module, config, 2);
  // A count that no tile size divides, and a strided column.
  const auto rows = 3 * torch::randn({10007, 4}, torch::TensorOptions().dtype(c10::CppTypeToScalarType<R>::value));
  const auto want = fused_embedding(rows.select(1, 0), cpu);
  const auto got = fused_embedding(rows.to(torch::kCUDA).select(1, 0), cuda);
  EXPECT_TRUE(got.value.is_cuda());
  expect_near<R>(got.value.cpu(), want.value, "G on the GPU");
  expect_near<R>(got.slope.cpu(), want.slope, "dG/ds on the GPU");
  EXPECT_THROW(fused_embedding(rows.select(1, 0), cuda), mlip::Error) << "CPU inputs, CUDA parameters";

  const auto a = torch::randn_like(want.value), b = torch::randn_like(want.value);
  const auto host = flattened(mlip::models::fused_embedding_adjoint(rows.select(1, 0), cpu, a, b));
  const auto device = flattened(mlip::models::fused_embedding_adjoint(rows.to(torch::kCUDA).select(1, 0), cuda,
                                                                      a.to(torch::kCUDA), b.to(torch::kCUDA)));
  ASSERT_EQ(host.size(), device.size());
  for (size_t k = 0; k < host.size(); ++k)
    expect_near<R>(device[k].cpu(), host[k], "adjoint on the GPU, gradient " + std::to_string(k), 100);
}

}  // namespace
