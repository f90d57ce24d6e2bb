#include "models/se_e2_a/se_e2_a_fused_path.h"

#include <torch/csrc/autograd/autograd.h>

#include <string>

#include "error.h"
#include "models/model.h"

namespace mlip::models {

namespace {

int64_t net_of(const SeAConfig& c, int64_t centre_type, int64_t neighbour_type) {
  return c.type_one_side ? neighbour_type : centre_type * int64_t(c.type_map.size()) + neighbour_type;
}

/// Adds `value` to the parameter's gradient (made zero first when it has none).
void accumulate_gradient(const torch::Tensor& parameter, const torch::Tensor& value) {
  if (!value.defined()) return;
  torch::Tensor& grad = const_cast<torch::Tensor&>(parameter).mutable_grad();
  if (!grad.defined()) grad = torch::zeros_like(parameter);
  grad.add_(value.detach());
}

/// The slots of one centre type: its atoms and, per neighbour type with slots, the net call.
struct TypeBlock {
  int64_t type = 0;
  torch::Tensor atoms;        // [n] int64
  std::vector<size_t> calls;  // indices into the calls, one per neighbour type with sel > 0
};

}  // namespace

SeAFusedPath::SeAFusedPath(const SeAConfig& config, torch::jit::Module module)
    : config_(config), module_(std::move(module)) {
  for (const auto& p : module_.named_parameters())
    if (p.name.rfind("fit_", 0) == 0) fitting_parameters_.push_back(p.value);
}

SeAFusedPath::NetCall SeAFusedPath::call_net(int64_t net, const torch::Tensor& inputs, std::vector<int64_t> shape,
                                             bool training) {
  EmbeddingNetParameters parameters = EmbeddingNetParameters::of_se_e2_a(module_, config_, net);
  const EmbeddingOutputs out = fused_embedding(inputs, parameters);
  shape.push_back(config_.neuron.back());
  NetCall call{std::move(parameters), inputs, out.value.view(shape).detach().requires_grad_(true),
               out.slope.view(shape).detach().requires_grad_(training)};
  calls_.push_back(call);
  return call;
}

SeAEvaluator::Output SeAFusedPath::forward(const std::vector<torch::Tensor>& dense, bool training) {
  const int64_t ntypes = int64_t(config_.type_map.size());
  if (int64_t(dense.size()) != 5 + ntypes)
    throw Error("SeAFusedPath: expected the 5 dense tensors of a batch and " + std::to_string(ntypes) +
                " of its types' atoms, got " + std::to_string(dense.size()) + " tensors");
  calls_.clear();
  last_ = SeAEvaluator::Output{};
  const torch::AutoGradMode grad_mode(true);
  const torch::Tensor rij = dense[0].detach().requires_grad_(true);
  const torch::Tensor &drij = dense[1], &vec = dense[2], &nlist = dense[3], &atype = dense[4];
  const int64_t nb = rij.size(0), n = rij.size(1), nc = config_.nslots();
  const int64_t m = config_.neuron.back(), msub = config_.axis_neuron;
  const torch::Tensor davg = module_.attr("davg").toTensor(), dstd = module_.attr("dstd").toTensor();
  const torch::Tensor bias = module_.attr("bias").toTensor();
  const auto options = rij.options();
  // R̂ = (R - davg_t) / dstd_t of each centre's type t (docs/se_e2_a.md).
  const torch::Tensor rhat =
      (rij - davg.index_select(0, atype).unsqueeze(1)) / dstd.index_select(0, atype).unsqueeze(1);

  torch::Tensor atomic = torch::zeros({nb, n}, options);
  std::vector<TypeBlock> blocks;
  for (int64_t ti = 0; ti < ntypes; ++ti) {
    const torch::Tensor& atoms = dense[size_t(5 + ti)];
    if (atoms.numel() == 0) continue;
    TypeBlock block{ti, atoms, {}};
    const int64_t count = atoms.numel();
    const torch::Tensor rows = rhat.index_select(1, atoms);  // [B, n_t, C, 4]
    // T = R̂ᵀ G / N_c, every slot through its net (docs/fused_kernels.md "The training path").
    torch::Tensor t_rows = torch::zeros({nb, count, 4, m}, options);
    int64_t offset = 0;
    for (int64_t t = 0; t < ntypes; ++t) {
      const int64_t sel = config_.sel[size_t(t)];
      if (sel == 0) continue;
      const torch::Tensor block_rows = rows.slice(2, offset, offset + sel);
      const torch::Tensor inputs = block_rows.select(3, 0).detach().reshape({-1});
      const NetCall call = call_net(net_of(config_, ti, t), inputs, {nb, count, sel}, training);
      block.calls.push_back(calls_.size() - 1);
      t_rows = t_rows + torch::matmul(block_rows.transpose(2, 3), call.value);
      offset += sel;
    }
    t_rows = t_rows / double(nc);
    const torch::Tensor descriptor =
        torch::matmul(t_rows.transpose(2, 3), t_rows.slice(3, 0, msub)).reshape({nb, count, m * msub});
    auto fitting = module_.get_method("fit_" + std::to_string(ti));
    torch::Tensor energies = fitting({descriptor}).toTensor().squeeze(2);
    if (config_.isolated_energy_is_bias) {
      // An atom whose slots are all empty: each slot's row is (e0, 0, 0, 0), e0 = -davg_0 / dstd_0.
      const torch::Tensor e0 = -(davg[ti][0] / dstd[ti][0]).reshape({1});
      torch::Tensor isolated = torch::zeros({1, m}, options);
      for (int64_t t = 0; t < ntypes; ++t) {
        const int64_t sel = config_.sel[size_t(t)];
        if (sel == 0) continue;
        const NetCall call = call_net(net_of(config_, ti, t), e0, {1}, training);
        isolated = isolated + double(sel) * e0 * call.value;
      }
      isolated = torch::cat({isolated, torch::zeros({3, m}, options)}, 0) / double(nc);
      const torch::Tensor d0 = torch::matmul(isolated.t(), isolated.slice(1, 0, msub)).reshape({1, m * msub});
      energies = energies - fitting({d0}).toTensor().reshape({1, 1});
    }
    atomic = atomic.index_copy(1, atoms, energies + bias[ti]);
    blocks.push_back(std::move(block));
  }
  const torch::Tensor energy = atomic.to(torch::kFloat64).sum(1);

  // dE/dR: autograd through the normalisation and the contraction, and through each net's input
  // s explicitly: dE/ds = Σ_k dE/dG_k dG_k/ds, at column 0 of the slot, over dstd_0 of the centre.
  std::vector<torch::Tensor> wrt{rij};
  for (const TypeBlock& block : blocks)
    for (size_t c : block.calls) wrt.push_back(calls_[c].value);
  const auto grads = torch::autograd::grad({atomic.sum()}, wrt, {}, /*retain_graph=*/true, /*create_graph=*/training,
                                           /*allow_unused=*/true);
  torch::Tensor g = grads[0].defined() ? grads[0] : torch::zeros_like(rij);
  torch::Tensor through_inputs = torch::zeros({nb, n, nc}, options);
  size_t k = 1;
  for (const TypeBlock& block : blocks) {
    std::vector<torch::Tensor> parts;
    for (size_t c : block.calls) {
      const torch::Tensor& d_value = grads[k++];
      const NetCall& call = calls_[c];
      parts.push_back(d_value.defined() ? (d_value * call.slope).sum(3) : torch::zeros_like(call.slope.select(3, 0)));
    }
    through_inputs = through_inputs.index_add(1, block.atoms, torch::cat(parts, 2) / dstd[block.type][0]);
  }
  g = g + torch::constant_pad_nd(through_inputs.unsqueeze(3), {0, 3});
  const torch::Tensor gd = torch::matmul(g.unsqueeze(3), drij).squeeze(3);  // dE/dd [B, N, C, 3]
  const torch::Tensor j = nlist.clamp_min(0) + torch::arange(nb, nlist.options()).view({nb, 1, 1}) * n;
  const torch::Tensor forces =
      gd.sum(2).reshape({nb * n, 3}).index_add(0, j.reshape({-1}), -gd.reshape({-1, 3})).reshape({nb, n, 3});
  const torch::Tensor virial = -torch::matmul(vec.reshape({nb, -1, 3}).transpose(1, 2), gd.reshape({nb, -1, 3}));
  SeAEvaluator::Output out{energy, atomic, forces, virial, {}};
  if (training) {
    last_ = out;
  } else {
    calls_.clear();
    out = SeAEvaluator::Output{energy.detach(), atomic.detach(), forces.detach(), virial.detach(), {}};
  }
  return out;
}

void SeAFusedPath::backward(const torch::Tensor& grad_energy, const torch::Tensor& grad_forces,
                            const torch::Tensor& grad_virial) {
  if (!last_.energy.defined()) throw Error("SeAFusedPath::backward: no training forward to go back through");
  // The graph's leaves: the fitting nets' parameters and the nets' outputs.
  std::vector<torch::Tensor> inputs = fitting_parameters_;
  for (const NetCall& call : calls_) {
    inputs.push_back(call.value);
    if (call.slope.requires_grad()) inputs.push_back(call.slope);
  }
  backward_through_graph({last_.energy, last_.forces, last_.virial, {}}, grad_energy, grad_forces, grad_virial, {},
                         inputs);
  // The nets' parameters from d loss / dG and d loss / d(dG/ds), by the fused adjoint.
  const int64_t m = config_.neuron.back();
  for (const NetCall& call : calls_) {
    const torch::Tensor value_bar = call.value.grad(), slope_bar = call.slope.grad();
    if (!value_bar.defined() && !slope_bar.defined()) continue;
    const auto zeros = torch::zeros({call.inputs.size(0), m}, call.inputs.options());
    const EmbeddingNetParameters& params = call.parameters;
    const EmbeddingGradients grads =
        fused_embedding_adjoint(call.inputs, params, value_bar.defined() ? value_bar.reshape({-1, m}) : zeros,
                                slope_bar.defined() ? slope_bar.reshape({-1, m}) : zeros);
    for (size_t l = 0; l < params.layers.size(); ++l) {
      accumulate_gradient(params.weights[l], grads.weights[l]);
      accumulate_gradient(params.biases[l], grads.biases[l]);
      if (params.timesteps[l].defined()) accumulate_gradient(params.timesteps[l], grads.timesteps[l]);
    }
  }
  calls_.clear();
  last_ = SeAEvaluator::Output{};
}

}  // namespace mlip::models
