// The fused embedding kernel against LibTorch operations (docs/fused_kernels.md "Measuring it"):
// G and dG/ds of one se_e2_a embedding net (the water example's widths, 25-50-100, resnet_dt
// false) for PAIRS inputs, on DEVICE, per call:
//   fused:        models::fused_embedding (one CUDA launch; on the CPU its host twin);
//   torch_ops:    the same outputs from LibTorch operations, values and derivatives stacked
//                 ([2q, w] rows: a matmul and five element-wise operations a layer);
//   script_vjp:   what the TorchScript model does today: its net's G, then one autograd
//                 backward for a vector-Jacobian product through it (not the same outputs: the
//                 cost of the model's path).
// and what a training step asks of the net, the outputs and the gradients of a loss of them
// with respect to the parameters:
//   fused_train:  fused_embedding, then fused_embedding_adjoint;
//   script_train: the TorchScript net's G, its vector-Jacobian product with create_graph (the
//                 model's forces), then autograd's double backward to the parameters.
// usage: bench_fused_embedding DEVICE [PAIRS] [REPEATS] [float32|float64]
// Prints one line per method: method, dtype, pairs, median_us, ns_per_pair, and for torch_ops
// the largest difference from fused (G and dG/ds).
#include <torch/csrc/autograd/autograd.h>
#include <torch/cuda.h>
#include <torch/script.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "error.h"
#include "models/se_e2_a/fused_embedding.h"
#include "models/se_e2_a/se_e2_a.h"

namespace {

using mlip::models::EmbeddingNetParameters;
using mlip::models::EmbeddingOutputs;

/// G and dG/ds from LibTorch operations: values and derivatives stacked as [2q, w].
EmbeddingOutputs torch_ops(const torch::Tensor& s, const EmbeddingNetParameters& net) {
  const int64_t q = s.size(0);
  torch::Tensor x = torch::cat({s.unsqueeze(1), torch::ones_like(s).unsqueeze(1)}, 0);  // [2q, 1]
  for (size_t l = 0; l < net.layers.size(); ++l) {
    const auto z = torch::matmul(x, net.weights[l]);
    auto y = torch::tanh(z.slice(0, 0, q) + net.biases[l]);
    auto u = (1 - y * y) * z.slice(0, q);
    auto out = torch::cat({y, u}, 0);
    if (net.timesteps[l].defined()) out = out * net.timesteps[l];
    const int copies = mlip::models::skip_copies(net.layers[l]);
    if (copies == 1) out = out + x;
    if (copies == 2) out = out + torch::cat({x, x}, 1);
    x = out;
  }
  return {x.slice(0, 0, q), x.slice(0, q)};
}

double median_us(const std::function<void()>& call, int repeats, bool cuda) {
  std::vector<double> us;
  for (int r = 0; r < repeats + 2; ++r) {  // two untimed calls first
    const auto start = std::chrono::steady_clock::now();
    call();
    if (cuda) torch::cuda::synchronize();
    const double t = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
    if (r >= 2) us.push_back(t);
  }
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

int run(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_fused_embedding DEVICE [PAIRS] [REPEATS] [float32|float64]\n");
    return 2;
  }
  const torch::Device device(argv[1]);
  const int64_t pairs = argc > 2 ? std::atoll(argv[2]) : 35000;
  const int repeats = argc > 3 ? std::atoi(argv[3]) : 20;
  const std::string precision = argc > 4 ? argv[4] : "float32";
  if (pairs <= 0 || repeats <= 0 || (precision != "float32" && precision != "float64"))
    throw mlip::Error("expected PAIRS > 0, REPEATS > 0 and float32 or float64, got " + std::to_string(pairs) + ", " +
                      std::to_string(repeats) + ", " + precision);
  mlip::models::SeAConfig config;
  config.type_map = {"O", "H"};
  config.sel = {46, 92};
  config.neuron = {25, 50, 100};
  config.axis_neuron = 16;
  config.precision = precision;
  auto module = mlip::models::build_se_e2_a(config);
  module.to(device);
  const auto net = EmbeddingNetParameters::of_se_e2_a(module, config, 0);
  const auto s = (3 * torch::rand({pairs}, torch::TensorOptions().dtype(config.dtype())) - 1).to(device);
  const bool cuda = device.is_cuda();

  const auto fused = mlip::models::fused_embedding(s, net);
  const auto reference = torch_ops(s, net);
  const double dg = (fused.value - reference.value).abs().max().item<double>();
  const double dslope = (fused.slope - reference.slope).abs().max().item<double>();

  const auto line = [&](const char* method, double us, const std::string& extra) {
    std::printf("method=%s device=%s dtype=%s pairs=%lld median_us=%.1f ns_per_pair=%.2f%s\n", method,
                device.str().c_str(), precision.c_str(), static_cast<long long>(pairs), us, 1e3 * us / double(pairs),
                extra.c_str());
  };
  torch::NoGradGuard no_grad;
  line("fused", median_us([&] { mlip::models::fused_embedding(s, net); }, repeats, cuda), "");
  char diff[96];
  std::snprintf(diff, sizeof diff, " max_diff_g=%.3g max_diff_slope=%.3g", dg, dslope);
  line("torch_ops", median_us([&] { torch_ops(s, net); }, repeats, cuda), diff);
  const std::string name = mlip::models::embedding_net_name(config, 0);
  const auto upstream = torch::ones({pairs, config.neuron.back()}, s.options());
  line("script_vjp",
       median_us(
           [&] {
             torch::AutoGradMode grad(true);
             const auto input = s.unsqueeze(1).detach().requires_grad_(true);
             const auto g = module.get_method(name)({input}).toTensor();
             torch::autograd::grad({g}, {input}, {upstream});
           },
           repeats, cuda),
       "");
  const auto a = torch::randn_like(upstream), c = torch::randn({pairs}, s.options());
  line("fused_train",
       median_us(
           [&] {
             const auto out = mlip::models::fused_embedding(s, net);
             mlip::models::fused_embedding_adjoint(s, net, a, c.unsqueeze(1) * upstream);
           },
           repeats, cuda),
       "");
  std::vector<torch::Tensor> parameters;
  for (size_t l = 0; l < net.layers.size(); ++l) parameters.insert(parameters.end(), {net.weights[l], net.biases[l]});
  line("script_train",
       median_us(
           [&] {
             torch::AutoGradMode grad(true);
             const auto input = s.unsqueeze(1).detach().requires_grad_(true);
             const auto g = module.get_method(name)({input}).toTensor();
             const auto vjp = torch::autograd::grad({g}, {input}, {upstream}, true, /*create_graph=*/true)[0];
             const auto loss = (a * g).sum() + (c.unsqueeze(1) * vjp).sum();
             torch::autograd::grad({loss}, parameters);
           },
           repeats, cuda),
       "");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_fused_embedding: %s\n", e.what());
    return 1;
  }
}
