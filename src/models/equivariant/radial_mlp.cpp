#include "models/equivariant/radial_mlp.h"

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include "error.h"

namespace mlip::models {
namespace {

torch::Tensor mlp(const torch::Tensor& basis, const std::vector<torch::Tensor>& hidden, const torch::Tensor& output,
                  const std::vector<double>& hidden_divisors, double output_divisor) {
  torch::Tensor h = basis;
  for (size_t k = 0; k < hidden.size(); ++k) {
    h = torch::matmul(h, hidden[k]) / hidden_divisors[k];
    h = h * torch::sigmoid(h);
  }
  return torch::matmul(h, output) / output_divisor;
}

/// The autograd node: its one differentiable input is the basis; the weights travel as saved
/// data (they never need a gradient here, checked in radial_mlp()).
class RadialMlp : public torch::autograd::Function<RadialMlp> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& basis,
                               const std::vector<torch::Tensor>& weights, const std::vector<double>& hidden_divisors,
                               double output_divisor) {
    ctx->save_for_backward({basis});
    ctx->saved_data["weights"] = weights;
    ctx->saved_data["hidden_divisors"] = hidden_divisors;
    ctx->saved_data["output_divisor"] = output_divisor;
    const std::vector<torch::Tensor> hidden(weights.begin(), weights.end() - 1);
    return mlp(basis, hidden, weights.back(), hidden_divisors, output_divisor);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    if (torch::GradMode::is_enabled())
      throw Error("radial_mlp: first derivatives only (it serves MD inference); a second derivative was asked for");
    const auto weights = ctx->saved_data["weights"].toTensorVector();
    const std::vector<torch::Tensor> hidden(weights.begin(), weights.end() - 1);
    // The forward again, with autograd from a leaf standing for the basis.
    const torch::Tensor basis = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    torch::Tensor w;
    {
      torch::AutoGradMode on(true);
      w = mlp(basis, hidden, weights.back(), ctx->saved_data["hidden_divisors"].toDoubleVector(),
              ctx->saved_data["output_divisor"].toDouble());
    }
    const auto g = torch::autograd::grad({w}, {basis}, {grads[0]}, false, false);
    return {g[0], torch::Tensor(), torch::Tensor(), torch::Tensor()};
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
  return RadialMlp::apply(basis, weights, hidden_divisors, output_divisor);
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
