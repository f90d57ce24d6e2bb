#include "models/equivariant/radial_mlp.h"

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include "error.h"
#include "models/kernels/host_tensor.h"
#include "models/kernels/scaled_product.h"
#include "models/kernels/fast_tanh.h"
#include "models/kernels/gemm.h"

#include <cmath>
#include <tuple>

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

/// Host float32/float64 tensors (on_host) run the training MLP's products as single BLAS calls and its
/// element-wise steps as single loops (models/kernels/gemm.h), not as LibTorch operations with
/// their temporaries; other devices use LibTorch operations for the same formulas.
/// out = alpha · op(a) op(b) + beta · out (a, b 2-D; op = transpose where asked). With out
/// undefined (beta ignored), a new tensor.
void product_into(torch::Tensor& out, const torch::Tensor& a, bool ta, const torch::Tensor& b, bool tb, double alpha,
                  double beta) {
  const int64_t m = ta ? a.size(1) : a.size(0), k = ta ? a.size(0) : a.size(1), n = tb ? b.size(0) : b.size(1);
  if (!on_host(a)) {
    out = scaled_product(ta ? a.t() : a, tb ? b.t() : b, alpha, out, out.defined() ? beta : 0.0);
    return;
  }
  if (!out.defined()) out = torch::empty({m, n}, a.options()), beta = 0;
  if (k == 0) {  // an empty sum
    if (beta == 0) out.zero_();
    else out.mul_(beta);
    return;
  }
  const auto ac = a.contiguous(), bc = b.contiguous();
  if (a.scalar_type() == torch::kFloat64)
    gemm<double>(ta, tb, m, n, k, alpha, ac.data_ptr<double>(), ac.size(1), bc.data_ptr<double>(), bc.size(1), beta,
                 out.data_ptr<double>(), n);
  else
    gemm<float>(ta, tb, m, n, k, float(alpha), ac.data_ptr<float>(), ac.size(1), bc.data_ptr<float>(), bc.size(1),
                float(beta), out.data_ptr<float>(), n);
}

torch::Tensor product(const torch::Tensor& a, bool ta, const torch::Tensor& b, bool tb, double alpha = 1.0) {
  torch::Tensor out;
  product_into(out, a, ta, b, tb, alpha, 0.0);
  return out;
}

/// f(pointer of every input, output pointers..., element count) on same-shaped host tensors
/// (made contiguous), in their dtype; `outputs` new tensors shaped like inputs[0].
template <typename F>
std::vector<torch::Tensor> host_loop(const std::vector<torch::Tensor>& inputs, size_t outputs, F f) {
  std::vector<torch::Tensor> c, out;
  for (const auto& x : inputs) c.push_back(x.contiguous());
  for (size_t k = 0; k < outputs; ++k) out.push_back(torch::empty_like(c[0]));
  auto run = [&](auto zero) {
    using T = decltype(zero);
    std::vector<const T*> in;
    std::vector<T*> o;
    for (const auto& x : c) in.push_back(x.template data_ptr<T>());
    for (auto& x : out) o.push_back(x.template data_ptr<T>());
    f(in, o, c[0].numel());
  };
  if (c[0].scalar_type() == torch::kFloat64) run(double(0));
  else run(float(0));
  return out;
}

torch::Tensor silu_of(const torch::Tensor& a) {
  if (!on_host(a)) return at::silu(a);
  return host_loop({a}, 1, [](const auto& in, const auto& out, int64_t n) {
    sigmoid_of(in[0], out[0], n);
    for (int64_t i = 0; i < n; ++i) out[0][i] *= in[0][i];
  })[0];
}

/// δ · silu′(a), silu′(a) = σ(1 + a(1 − σ)).
torch::Tensor silu_backward_of(const torch::Tensor& delta, const torch::Tensor& a) {
  if (!on_host(a)) return at::silu_backward(delta, a);
  return host_loop({a, delta}, 1, [](const auto& in, const auto& out, int64_t n) {
    auto* s = out[0];
    sigmoid_of(in[0], s, n);
    for (int64_t i = 0; i < n; ++i) s[i] = in[1][i] * s[i] * (1 + in[0][i] * (1 - s[i]));
  })[0];
}

/// SiLU's first and second derivatives at a: σ(1 + a(1 − σ)) and σ(1 − σ)(2 + a(1 − 2σ)).
std::pair<torch::Tensor, torch::Tensor> silu_derivatives(const torch::Tensor& a) {
  if (!on_host(a)) {
    const auto s = torch::sigmoid(a);
    const auto one_minus = 1 - s;
    return {s * (1 + a * one_minus), s * one_minus * (2 + a * (1 - 2 * s))};
  }
  auto both = host_loop({a}, 2, [](const auto& in, const auto& out, int64_t n) {
    auto *first = out[0], *second = out[1];
    sigmoid_of(in[0], first, n);
    for (int64_t i = 0; i < n; ++i) {
      const auto x = in[0][i], s = first[i];
      first[i] = s * (1 + x * (1 - s));
      second[i] = s * (1 - s) * (2 + x * (1 - 2 * s));
    }
  });
  return {both[0], both[1]};
}

/// x ⊙ y ⊙ z (+ u ⊙ v when u is defined).
torch::Tensor product_sum3(const torch::Tensor& x, const torch::Tensor& y, const torch::Tensor& z,
                           const torch::Tensor& u, const torch::Tensor& v) {
  if (!on_host(x)) return u.defined() ? x * y * z + u * v : x * y * z;
  if (!u.defined())
    return host_loop({x, y, z}, 1, [](const auto& in, const auto& out, int64_t n) {
      for (int64_t i = 0; i < n; ++i) out[0][i] = in[0][i] * in[1][i] * in[2][i];
    })[0];
  return host_loop({x, y, z, u, v}, 1, [](const auto& in, const auto& out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) out[0][i] = in[0][i] * in[1][i] * in[2][i] + in[3][i] * in[4][i];
  })[0];
}

torch::Tensor times(const torch::Tensor& x, const torch::Tensor& y) {
  if (!on_host(x)) return x * y;
  return host_loop({x, y}, 1, [](const auto& in, const auto& out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) out[0][i] = in[0][i] * in[1][i];
  })[0];
}

/// The training MLP's forward pass, kept for its derivatives: the weights divided by their
/// divisors, h[k] the input of hidden layer k (h[0] = the basis, h[K] the output layer's input)
/// and a[k] = h[k] · W_k its pre-activation, k < K.
struct MlpPass {
  std::vector<torch::Tensor> weights, h, a;

  MlpPass(const torch::Tensor& basis, at::TensorList raw, const std::vector<double>& divisors) {
    for (size_t k = 0; k < raw.size(); ++k) weights.push_back(raw[k] / divisors[k]);
    h.push_back(basis);
    for (size_t k = 0; k + 1 < weights.size(); ++k) {
      a.push_back(product(h.back(), false, weights[k], false));
      h.push_back(silu_of(a.back()));
    }
  }
  MlpPass(std::vector<torch::Tensor> w, std::vector<torch::Tensor> hs, std::vector<torch::Tensor> as)
      : weights(std::move(w)), h(std::move(hs)), a(std::move(as)) {}
  torch::Tensor output() const { return product(h.back(), false, weights.back(), false); }

  /// Kept in an autograd context's saved data (not as inputs: their derivatives are written out).
  void save(torch::autograd::AutogradContext* ctx) const {
    ctx->saved_data["weights"] = weights, ctx->saved_data["h"] = h, ctx->saved_data["a"] = a;
  }
  static MlpPass saved(torch::autograd::AutogradContext* ctx) {
    return MlpPass(ctx->saved_data["weights"].toTensorVector(), ctx->saved_data["h"].toTensorVector(),
                   ctx->saved_data["a"].toTensorVector());
  }
};

/// The MLP's backward pass for the output gradient g [Q, P·f]: the basis's gradient (if
/// need[0]) and each weight's (need[1 + k]), by the raw (unscaled) weights; others undefined.
std::vector<torch::Tensor> mlp_backward(const torch::Tensor& g, const MlpPass& f, const std::vector<double>& divisors,
                                        const std::vector<bool>& need) {
  const size_t layers = f.weights.size(), hidden = layers - 1;
  std::vector<torch::Tensor> out(1 + layers);
  size_t lowest = layers;  // the lowest layer whose weight's gradient (or the basis's) is needed
  if (need[0]) lowest = 0;
  for (size_t k = 0; k < layers && lowest == layers; ++k)
    if (need[1 + k]) lowest = k;
  if (lowest == layers) return out;
  const auto gc = g.contiguous();
  if (need[layers]) out[layers] = product(f.h[hidden], true, gc, false, 1.0 / divisors[hidden]);
  if (lowest == hidden) return out;
  torch::Tensor delta = product(gc, false, f.weights[hidden], true);  // by h[K]
  for (size_t k = hidden; k-- > lowest;) {
    const auto e = silu_backward_of(delta, f.a[k]);  // by a[k]
    if (need[1 + k]) out[1 + k] = product(f.h[k], true, e, false, 1.0 / divisors[k]);
    if (k > 0 || need[0]) delta = product(e, false, f.weights[k], true);
  }
  if (need[0]) out[0] = delta;
  return out;
}

/// The training MLP's backward pass as an autograd node (from the output gradient g, the basis
/// and the weights to the gradients `need` asks for, in order), with its own backward written
/// out (docs/equivariant.md "The training path"): for an incoming gradient u of the basis's
/// gradient, ⟨u, Jᵀg⟩ = ⟨J u, g⟩ with J u the MLP's derivative along u (tangents ḣ, ȧ carried
/// through the layers); its gradient by g is J u, by the weights and the basis the reverse pass
/// through both the layers and their tangents. `pass`: the forward pass at these inputs.
class RadialMlpBackward : public torch::autograd::Function<RadialMlpBackward> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& g,
                                                const torch::Tensor& basis, at::TensorList weights,
                                                const std::vector<double>& divisors, const std::vector<bool>& need,
                                                const MlpPass* pass) {
    ctx->save_for_backward({g});
    pass->save(ctx);
    ctx->saved_data["layers"] = int64_t(weights.size());
    ctx->saved_data["divisors"] = divisors;
    ctx->saved_data["need"] = std::vector<int64_t>(need.begin(), need.end());
    (void)basis;  // an input for autograd's sake; its values are pass->h[0]
    const auto all = mlp_backward(g, *pass, divisors, need);
    torch::autograd::variable_list out;
    for (const auto& t : all)
      if (t.defined()) out.push_back(t);
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    if (torch::GradMode::is_enabled())
      throw Error("radial_mlp_training: first and second derivatives only; a third was asked for");
    const auto divisors = ctx->saved_data["divisors"].toDoubleVector();
    const auto need = ctx->saved_data["need"].toIntVector();
    const size_t layers = size_t(ctx->saved_data["layers"].toInt()), hidden = layers - 1;
    // The incoming gradients by output: u for the basis's gradient; the weights' gradients'
    // (a second derivative through them) are not written out.
    torch::Tensor u;
    for (size_t k = 0, out = 0; k < need.size(); ++k) {
      if (!need[k]) continue;
      const auto& incoming = grads[out++];
      if (k == 0) u = incoming;
      else if (incoming.defined())
        throw Error("radial_mlp_training: a second derivative through the weights' gradient is not written out");
    }
    torch::autograd::variable_list result(2 + layers + 3);  // g, basis, the weights, divisors, need, pass
    if (!u.defined()) return result;
    const torch::Tensor g = ctx->get_saved_variables()[0].contiguous();
    const MlpPass f = MlpPass::saved(ctx);
    const auto& w = f.weights;
    // Tangents along u: ḣ[0] = u, ȧ[k] = ḣ[k]·W_k, ḣ[k+1] = silu'(a[k]) ȧ[k].
    std::vector<torch::Tensor> first(hidden), second(hidden), h_dot{u.contiguous()}, a_dot;
    for (size_t k = 0; k < hidden; ++k) {
      std::tie(first[k], second[k]) = silu_derivatives(f.a[k]);
      a_dot.push_back(product(h_dot[k], false, w[k], false));
      h_dot.push_back(times(first[k], a_dot[k]));
    }
    if (ctx->needs_input_grad(0)) result[0] = product(h_dot[hidden], false, w[hidden], false);
    // Reverse pass of ⟨g, ẇ⟩, ẇ = ḣ[K]·W_out: delta by ḣ[k], adjoint by h[k].
    if (ctx->needs_input_grad(2 + hidden))
      result[2 + hidden] = product(h_dot[hidden], true, g, false, 1.0 / divisors[hidden]);
    torch::Tensor delta = product(g, false, w[hidden], true), adjoint;
    for (size_t k = hidden; k-- > 0;) {
      const auto e = times(delta, first[k]);                                     // by ȧ[k]
      const auto by_a = product_sum3(delta, a_dot[k], second[k], adjoint, first[k]);  // by a[k]
      if (ctx->needs_input_grad(2 + k)) {
        torch::Tensor by_weight = product(h_dot[k], true, e, false, 1.0 / divisors[k]);
        product_into(by_weight, f.h[k], true, by_a, false, 1.0 / divisors[k], 1.0);
        result[2 + k] = by_weight;
      }
      if (k == 0 && !ctx->needs_input_grad(1)) break;
      delta = product(e, false, w[k], true);
      adjoint = product(by_a, false, w[k], true);
    }
    if (ctx->needs_input_grad(1)) result[1] = adjoint;
    return result;
  }
};

/// The training MLP: the forward pass keeps its activations; its backward is RadialMlpBackward
/// when a graph is asked for (the forces' graph), plain operations otherwise.
class RadialMlpTraining : public torch::autograd::Function<RadialMlpTraining> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& basis,
                               at::TensorList weights, const std::vector<double>& divisors) {
    const MlpPass pass(basis, weights, divisors);
    std::vector<torch::Tensor> inputs = {basis};
    inputs.insert(inputs.end(), weights.begin(), weights.end());
    ctx->save_for_backward(inputs);
    pass.save(ctx);
    ctx->saved_data["divisors"] = divisors;
    return pass.output();
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto inputs = ctx->get_saved_variables();
    const auto divisors = ctx->saved_data["divisors"].toDoubleVector();
    const size_t layers = inputs.size() - 1;
    torch::autograd::variable_list result(1 + layers + 1);  // basis, the weights, divisors
    if (!grads[0].defined()) return result;
    std::vector<bool> need(1 + layers);
    for (size_t k = 0; k < need.size(); ++k) need[k] = ctx->needs_input_grad(k);
    const MlpPass pass = MlpPass::saved(ctx);
    if (torch::GradMode::is_enabled()) {
      const std::vector<torch::Tensor> raw(inputs.begin() + 1, inputs.end());
      const auto out = RadialMlpBackward::apply(grads[0], inputs[0], at::TensorList(raw), divisors, need, &pass);
      for (size_t k = 0, n = 0; k < need.size(); ++k)
        if (need[k]) result[k] = out[n++];
    } else {
      const auto out = mlp_backward(grads[0], pass, divisors, need);
      for (size_t k = 0; k < need.size(); ++k) result[k] = out[k];
    }
    return result;
  }
};

}  // namespace

namespace {

/// The hidden layers' and the output layer's weights and divisors in one list each, checked.
std::pair<std::vector<torch::Tensor>, std::vector<double>> layers_of(const char* who,
                                                                     const std::vector<torch::Tensor>& hidden,
                                                                     const torch::Tensor& output,
                                                                     const std::vector<double>& hidden_divisors,
                                                                     double output_divisor) {
  if (hidden.size() != hidden_divisors.size())
    throw Error(std::string(who) + ": " + std::to_string(hidden.size()) + " hidden layers but " +
                std::to_string(hidden_divisors.size()) + " divisors");
  std::vector<torch::Tensor> weights(hidden.begin(), hidden.end());
  weights.push_back(output);
  std::vector<double> divisors(hidden_divisors.begin(), hidden_divisors.end());
  divisors.push_back(output_divisor);
  return {weights, divisors};
}

}  // namespace

torch::Tensor radial_mlp(const torch::Tensor& basis, const std::vector<torch::Tensor>& hidden,
                         const torch::Tensor& output, const std::vector<double>& hidden_divisors,
                         double output_divisor) {
  const auto [weights, divisors] = layers_of("radial_mlp", hidden, output, hidden_divisors, output_divisor);
  for (const auto& w : weights)
    if (w.requires_grad())
      throw Error("radial_mlp: the weights must not require a gradient (it serves MD inference, where they are fixed)");
  return RadialMlp::apply(basis, scaled(weights, divisors));
}

torch::Tensor radial_mlp_training(const torch::Tensor& basis, const std::vector<torch::Tensor>& hidden,
                                  const torch::Tensor& output, const std::vector<double>& hidden_divisors,
                                  double output_divisor) {
  const auto [weights, divisors] = layers_of("radial_mlp_training", hidden, output, hidden_divisors, output_divisor);
  return RadialMlpTraining::apply(basis, at::TensorList(weights), divisors);
}

namespace {

torch::Tensor radial_mlp_training_op(const torch::Tensor& basis, std::vector<torch::Tensor> hidden,
                                     const torch::Tensor& output, std::vector<double> hidden_divisors,
                                     double output_divisor) {
  return radial_mlp_training(basis, hidden, output, hidden_divisors, output_divisor);
}

torch::Tensor radial_mlp_op(const torch::Tensor& basis, std::vector<torch::Tensor> hidden, const torch::Tensor& output,
                            std::vector<double> hidden_divisors, double output_divisor) {
  return radial_mlp(basis, hidden, output, hidden_divisors, output_divisor);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(mlip, m) {
  m.def("radial_mlp(Tensor basis, Tensor[] hidden, Tensor output, float[] hidden_divisors, float output_divisor) "
        "-> Tensor",
        &radial_mlp_op);
  m.def("radial_mlp_training(Tensor basis, Tensor[] hidden, Tensor output, float[] hidden_divisors, "
        "float output_divisor) -> Tensor",
        &radial_mlp_training_op);
}

void register_radial_mlp() {
  // The TORCH_LIBRARY_FRAGMENT block above registers the operator when this file's object is
  // linked in; calling this function makes sure it is.
}

}  // namespace mlip::models
