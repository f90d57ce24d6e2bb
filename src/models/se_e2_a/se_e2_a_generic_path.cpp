#include "models/se_e2_a/se_e2_a_generic_path.h"

#include <torch/csrc/autograd/autograd.h>

#include "error.h"
#include "models/long_range/long_range.h"
#include "models/long_range/reciprocal_energy.h"
#include "models/model.h"
#include "models/se_e2_a/se_e2_a_fused_path.h"

namespace mlip::models {

SeAGenericPath::SeAGenericPath(const SeAConfig& config, torch::jit::Module module, bool fused_kernels)
    : config_(config), module_(std::move(module)) {
  if (fused_kernels) fused_ = std::make_unique<SeAFusedPath>(config_, module_);
}

SeAGenericPath::~SeAGenericPath() = default;

SeAEvaluator::Output SeAGenericPath::forward(const PackedEnv& batch, const std::vector<int>& types, bool training) {
  // With each type's atoms given, the model reads nothing back from the device (it would
  // otherwise find them, and the slots in use, with nonzero and item(): six stops of the host on
  // a GPU for the water example); the nets then also run on the empty slots, as in the static
  // step.
  return forward_dense(dense_with_types(batch, types), training);
}

std::vector<torch::Tensor> SeAGenericPath::dense(const PackedEnv& batch, const std::vector<int>& types) {
  const int64_t nb = batch.nframes, n = batch.natoms, nc = config_.nslots();
  if (batch.nslots != nc)
    throw Error("SeAGenericPath: the batch has " + std::to_string(batch.nslots) + " slots per atom, the model " +
                std::to_string(nc));
  if (int64_t(types.size()) != n)
    throw Error("SeAGenericPath: " + std::to_string(types.size()) + " types for " + std::to_string(n) + " atoms");
  const torch::Tensor& any_rows = batch.groups.at(0).r;
  const auto options = any_rows.options();
  if (types != types_ || !atype_.defined() || atype_.device() != any_rows.device()) {
    types_ = types;
    atype_ = torch::tensor(std::vector<int64_t>(types.begin(), types.end()), torch::kInt64).to(any_rows.device());
    std::vector<std::vector<int64_t>> atoms(config_.type_map.size());
    for (size_t a = 0; a < types.size(); ++a) atoms.at(size_t(types[a])).push_back(int64_t(a));
    type_atoms_.clear();
    for (const auto& list : atoms) type_atoms_.push_back(torch::tensor(list, torch::kInt64).to(any_rows.device()));
  }
  // The dense matrices of the batch, empty slots zero (nlist -1), the real pairs scattered back.
  const int64_t rows = nb * n * nc;
  auto rij = torch::zeros({rows, 4}, options);
  auto drij = torch::zeros({rows, 4, 3}, options);
  auto vec = torch::zeros({rows, 3}, options);
  auto nlist = torch::full({rows}, -1, options.dtype(torch::kInt64));
  for (const auto& g : batch.groups) {
    if (!g.slot.defined() || !g.neighbor_in_frame.defined())
      throw Error("SeAGenericPath: a batch without slots (made by PackedEnv::concat without with_slots?)");
    rij.index_copy_(0, g.slot, g.r);
    drij.index_copy_(0, g.slot, g.dr);
    vec.index_copy_(0, g.slot, g.vec);
    nlist.index_copy_(0, g.slot, g.neighbor_in_frame);
  }
  return {rij.view({nb, n, nc, 4}), drij.view({nb, n, nc, 4, 3}), vec.view({nb, n, nc, 3}), nlist.view({nb, n, nc}),
          atype_};
}

std::vector<torch::Tensor> SeAGenericPath::dense_with_types(const PackedEnv& batch, const std::vector<int>& types) {
  std::vector<torch::Tensor> out = dense(batch, types);
  out.insert(out.end(), type_atoms_.begin(), type_atoms_.end());
  return out;
}

SeAEvaluator::Output SeAGenericPath::forward_dense(const std::vector<torch::Tensor>& d, bool training) {
  const size_t ntypes = config_.type_map.size();
  if (d.size() != 5 && d.size() != 5 + ntypes)
    throw Error("SeAGenericPath: expected the 5 dense tensors of a batch (and " + std::to_string(ntypes) +
                " of its types' atoms), got " + std::to_string(d.size()));
  if (fused_) {
    if (d.size() > 5) return fused_->forward(d, training);
    std::vector<torch::Tensor> with_types = d;  // the types' atoms of the last dense()
    with_types.insert(with_types.end(), type_atoms_.begin(), type_atoms_.end());
    return fused_->forward(with_types, training);
  }
  std::vector<c10::IValue> args{d[0], d[1], d[2], d[3], d[4], training};
  if (d.size() > 5) args.emplace_back(c10::List<torch::Tensor>(std::vector<torch::Tensor>(d.begin() + 5, d.end())));
  auto out = module_.get_method("energy_force_env")(args).toTuple();
  SeAEvaluator::Output result{out->elements()[0].toTensor(), out->elements()[1].toTensor(),
                              out->elements()[2].toTensor(), out->elements()[3].toTensor(), {}};
  last_ = training ? result : SeAEvaluator::Output{};
  return result;
}

SeAEvaluator::Output SeAGenericPath::forward_long_range(const PackedEnv& batch, const std::vector<int>& types,
                                                       const torch::Tensor& pos, const torch::Tensor& cell,
                                                       const std::vector<bool>& periodic,
                                                       const LongRangeSettings& settings, bool training) {
  if (fused_) throw Error("SeAGenericPath: the long-range term runs without the fused kernels");
  const std::vector<torch::Tensor> d = dense_with_types(batch, types);
  const int64_t nb = batch.nframes, n = batch.natoms;
  std::vector<torch::Tensor> leaves = {d[0].detach().requires_grad_(true),
                                       pos.detach().reshape({nb, n, 3}).requires_grad_(true),
                                       cell.detach().requires_grad_(true)};
  const std::vector<torch::Tensor> type_atoms(d.begin() + 5, d.end());
  // [B, N, 2]: each atom's energy and raw charge.
  const torch::Tensor out =
      module_.get_method("atomic_energy")({leaves[0], d[4], c10::List<torch::Tensor>(type_atoms)}).toTensor();
  const torch::Tensor atomic = out.select(2, 0);
  if (long_range_fused(periodic, pos)) {
    // One fused operation (docs/long_range.md "The k-sum in training"): E_long, the seeds
    // ∂E_long/∂q̃ and the fixed-charge forces and virial; the rows' gradient of E_short + Σ seeds·q̃
    // gives the pairs' forces (the charges' dependence on positions included).
    const torch::Tensor raw = out.select(2, 1);
    const ReciprocalBatchTerms fused =
        reciprocal_batch(settings, raw.to(torch::kFloat64), pos.reshape({nb, n, 3}).to(torch::kFloat64),
                         cell.to(torch::kFloat64));
    const torch::Tensor total_short = atomic.to(torch::kFloat64).sum();
    auto grads = torch::autograd::grad({total_short, raw}, {leaves[0]},
                                       {torch::ones_like(total_short), fused.seeds.to(raw.scalar_type())}, training,
                                       training, true);
    if (!grads[0].defined()) grads[0] = torch::zeros_like(leaves[0]);
    const auto pairs = module_.get_method("pair_forces")({grads[0], d[1], d[2], d[3]}).toTuple();
    SeAEvaluator::Output result{atomic.to(torch::kFloat64).sum(1) + fused.energy, atomic,
                                pairs->elements()[0].toTensor() + fused.forces.to(atomic.scalar_type()),
                                pairs->elements()[1].toTensor() + fused.virial.to(atomic.scalar_type()),
                                fused.charges};
    last_ = training ? result : SeAEvaluator::Output{};
    return result;
  }
  const LongRangeBatch term = long_range_batch(module_, settings, out.select(2, 1), leaves[1], leaves[2], periodic);
  const torch::Tensor energy = atomic.to(torch::kFloat64).sum(1) + term.energy;
  auto grads = torch::autograd::grad({energy.sum()}, leaves, {}, training, training, true);
  if (!grads[0].defined()) grads[0] = torch::zeros_like(leaves[0]);
  const auto pairs = module_.get_method("pair_forces")({grads[0], d[1], d[2], d[3]}).toTuple();
  const auto [direct_forces, direct_virial] =
      long_range_direct_forces(leaves[1], leaves[2], grads[1], grads[2], atomic.scalar_type());
  SeAEvaluator::Output result{energy, atomic, pairs->elements()[0].toTensor() + direct_forces,
                              pairs->elements()[1].toTensor() + direct_virial, term.charges};
  last_ = training ? result : SeAEvaluator::Output{};
  return result;
}

void SeAGenericPath::backward(const torch::Tensor& grad_energy, const torch::Tensor& grad_forces,
                              const torch::Tensor& grad_virial, const torch::Tensor& grad_charges) {
  if (fused_) return fused_->backward(grad_energy, grad_forces, grad_virial);
  // Into the weights only (not the rows', positions' or cells' leaves: nothing reads their grads,
  // and the long-range term's derivatives by positions and cell twice would be the slow ones).
  std::vector<torch::Tensor> weights;
  for (const auto& p : module_.parameters())
    if (p.requires_grad()) weights.push_back(p);
  if (!weights.empty())
    backward_through_graph({last_.energy, last_.forces, last_.virial, last_.charges}, grad_energy, grad_forces,
                           grad_virial, grad_charges, weights);
  last_ = SeAEvaluator::Output{};
}

}  // namespace mlip::models
