#include "models/equivariant/training_function.h"

#include <torch/csrc/jit/api/compilation_unit.h>
#include <torch/csrc/jit/frontend/resolver.h>

#include <string>

#include "error.h"
#include "models/equivariant/gate.h"
#include "models/equivariant/linear_map.h"
#include "models/equivariant/message_contraction.h"
#include "models/equivariant/product_basis.h"
#include "models/equivariant/radial_message.h"
#include "models/equivariant/radial_mlp.h"
#include "models/equivariant/row_split.h"

namespace mlip::models {

namespace {

/// Names in the training source: `torch` (LibTorch's operators) and `mlip` (the project's,
/// models/equivariant/message_contraction.h).
struct TrainingResolver : torch::jit::Resolver {
  std::shared_ptr<torch::jit::SugaredValue> resolveValue(const std::string& name, torch::jit::GraphFunction&,
                                                         const torch::jit::SourceRange&) override {
    if (name == "torch") return std::make_shared<torch::jit::BuiltinModule>("aten");
    if (name == "mlip") return std::make_shared<torch::jit::BuiltinModule>("mlip");
    return nullptr;
  }
};

}  // namespace

TrainingFunction::TrainingFunction(const EquivariantConfig& config, bool inference) {
  register_message_contraction();
  register_product_basis();
  register_radial_mlp();
  register_linear_map();
  register_gate();
  register_row_split();
  register_radial_message();
  unit_ = std::make_shared<torch::jit::CompilationUnit>();
  try {
    unit_->define(c10::nullopt, equivariant_training_source(config, inference), std::make_shared<TrainingResolver>(),
                  nullptr);
    if (inference)
      unit_->define(c10::nullopt, equivariant_layer_source(config), std::make_shared<TrainingResolver>(), nullptr);
  } catch (const c10::Error& e) {
    throw Error(std::string("equivariant model: the training function did not compile: ") + e.what_without_backtrace());
  }
  couplings_ = message_couplings(config);
  products_ = product_couplings(config);
}

c10::Dict<std::string, torch::Tensor> TrainingFunction::parameters(const torch::jit::Module& module,
                                                                   bool detach) const {
  c10::Dict<std::string, torch::Tensor> d;
  for (const auto& p : module.named_parameters()) d.insert(p.name, detach ? p.value.detach() : p.value);
  for (const auto& b : module.named_buffers()) d.insert(b.name, b.value);
  d.insert("scale", module.attr("scale").toTensor());
  d.insert("shift", module.attr("shift").toTensor());
  for (size_t k = 0; k < couplings_.size(); ++k) {
    d.insert("l" + std::to_string(k) + "_terms", couplings_[k].terms);
    d.insert("l" + std::to_string(k) + "_coefficients", couplings_[k].coefficients);
  }
  for (const auto& p : products_) {
    d.insert(p.terms_name, p.coupling.terms);
    d.insert(p.coefficients_name, p.coupling.coefficients);
  }
  return d;
}

torch::Tensor TrainingFunction::energy(const c10::Dict<std::string, torch::Tensor>& params, double avg_num_neighbors,
                                       const torch::Tensor& basis, const torch::Tensor& pair, const torch::Tensor& y,
                                       const torch::Tensor& i, const torch::Tensor& j, const torch::Tensor& atype,
                                       const std::vector<torch::Tensor>& edges) const {
  auto& function = unit_->get_function("training_energy");
  return function({params, avg_num_neighbors, basis, pair, y, i, j, atype, edges}).toTensor();
}

std::pair<torch::Tensor, std::vector<torch::Tensor>> TrainingFunction::layer(
    int64_t k, const c10::Dict<std::string, torch::Tensor>& params, double avg_num_neighbors, const torch::Tensor& basis,
    const torch::Tensor& pair, const torch::Tensor& y, const torch::Tensor& atype, const std::vector<torch::Tensor>& edges,
    int64_t nlocal, const std::vector<torch::Tensor>& x) const {
  auto& function = unit_->get_function("layer_" + std::to_string(k));
  const auto out = function({params, avg_num_neighbors, basis, pair, y, atype, edges, nlocal, x}).toTuple();
  return {out->elements()[0].toTensor(), out->elements()[1].toTensorVector()};
}

void TrainingFunction::to(torch::Device device) {
  for (auto& c : couplings_) c.terms = c.terms.to(device), c.coefficients = c.coefficients.to(device);
  for (auto& p : products_)
    p.coupling.terms = p.coupling.terms.to(device), p.coupling.coefficients = p.coupling.coefficients.to(device);
}

std::vector<torch::Tensor> TrainingFunction::edge_tables(const torch::Tensor& i, const torch::Tensor& j,
                                                         int64_t natoms) {
  const auto counts = torch::bincount(i, {}, natoms);
  torch::Tensor by_neighbor, neighbor_offsets;
  ContractionTables::order_by_neighbor(j, natoms, by_neighbor, neighbor_offsets);
  return {i, j, torch::cat({torch::zeros({1}, counts.options()), counts.cumsum(0)}), by_neighbor, neighbor_offsets};
}

}  // namespace mlip::models
