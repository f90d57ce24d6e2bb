#include "models/equivariant/radial_mlp.h"

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include "error.h"

namespace mlip::models {
namespace {

/// The weights divided by their layer's divisor once (tiny tensors), instead of dividing every
/// [Q, width] product: the same function, rounded differently in the last bits.
std::vector<torch::Tensor> scaled(const std::vector<torch::Tensor>& weights, const std::vector<double>& divisors) {
  std::vector<torch::Tensor> out;
  for (size_t k = 0; k < weights.size(); ++k) out.push_back(weights[k] / divisors[k]);
  return out;
}

/// The autograd node: its one differentiable input is the basis; the weights travel as saved
/// data (they never need a gradient here, checked in radial_mlp()).
class RadialMlp : public torch::autograd::Function<RadialMlp> {
 public:
  /// weights: the hidden layers' then the output layer's, each already divided by its divisor.
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& basis,
                               const std::vector<torch::Tensor>& weights) {
    ctx->save_for_backward({basis});
    ctx->saved_data["weights"] = weights;
    torch::NoGradGuard no_grad;
    torch::Tensor h = basis;
    for (size_t k = 0; k + 1 < weights.size(); ++k) {
      h = h.matmul(weights[k]);
      at::silu_(h);
    }
    return h.matmul(weights.back());
  }

  /// The hidden layers again, keeping their pre-activations, then the chain rule by hand:
  /// g_h(last) = g_w · W_outᵀ; through each SiLU and linear map back to the basis. The output
  /// layer's product is not recomputed (its input's gradient needs only W_out).
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    if (torch::GradMode::is_enabled())
      throw Error("radial_mlp: first derivatives only (it serves MD inference); a second derivative was asked for");
    const auto weights = ctx->saved_data["weights"].toTensorVector();
    const torch::Tensor basis = ctx->get_saved_variables()[0];
    const size_t hidden = weights.size() - 1;
    std::vector<torch::Tensor> pre(hidden);  // the hidden layers' inputs to SiLU
    torch::Tensor h = basis;
    for (size_t k = 0; k < hidden; ++k) {
      pre[k] = h.matmul(weights[k]);
      if (k + 1 < hidden) h = at::silu(pre[k]);
    }
    torch::Tensor g = grads[0].matmul(weights.back().t());
    for (size_t k = hidden; k-- > 0;) {
      g = at::silu_backward(g, pre[k]).matmul(weights[k].t());
      pre[k] = torch::Tensor();
    }
    return {g, torch::Tensor()};
  }
};

}  // namespace

torch::Tensor radial_mlp(const torch::Tensor& basis, const std::vector<torch::Tensor>& hidden,
                         const torch::Tensor& output, const std::vector<double>& hidden_divisors,
                         double output_divisor) {
  if (hidden.size() != hidden_divisors.size())
    throw Error("radial_mlp: " + std::to_string(hidden.size()) + " hidden layers but " +
                std::to_string(hidden_divisors.size()) + " divisors");
  std::vector<torch::Tensor> weights(hidden.begin(), hidden.end());
  weights.push_back(output);
  for (const auto& w : weights)
    if (w.requires_grad())
      throw Error("radial_mlp: the weights must not require a gradient (it serves MD inference, where they are fixed)");
  std::vector<double> divisors(hidden_divisors.begin(), hidden_divisors.end());
  divisors.push_back(output_divisor);
  return RadialMlp::apply(basis, scaled(weights, divisors));
}

namespace {

torch::Tensor radial_mlp_op(const torch::Tensor& basis, std::vector<torch::Tensor> hidden, const torch::Tensor& output,
                            std::vector<double> hidden_divisors, double output_divisor) {
  return radial_mlp(basis, hidden, output, hidden_divisors, output_divisor);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(mlip, m) {
  m.def("radial_mlp(Tensor basis, Tensor[] hidden, Tensor output, float[] hidden_divisors, float output_divisor) "
        "-> Tensor",
        &radial_mlp_op);
}

void register_radial_mlp() {
  // The TORCH_LIBRARY_FRAGMENT block above registers the operator when this file's object is
  // linked in; calling this function makes sure it is.
}

}  // namespace mlip::models
