#include "models/energy_shift.h"

#include <iomanip>
#include <sstream>

#include "article.h"
#include "error.h"
#include "models/finite_cast.h"
#include "models/inference_registry.h"

namespace mlip::models {
namespace {

const std::string& shift_attribute(const torch::jit::Module& module, const std::string& model_type) {
  const InferenceEntry* entry = find_inference(model_type);
  if (entry == nullptr) throw Error("'" + model_type + "': not a model type of this build");
  if (entry->energy_shift.empty() || !module.hasattr(entry->energy_shift))
    throw Error(with_article(model_type) + " model has no per-type energy shift to change");
  return entry->energy_shift;
}

}  // namespace

torch::Tensor energy_shift(const torch::jit::Module& module, const std::string& model_type) {
  const std::string& name = shift_attribute(module, model_type);
  return module.attr(name).toTensor().detach().to(torch::kCPU, torch::kFloat64).clone();
}

void set_energy_shift(torch::jit::Module& module, const std::string& model_type, const torch::Tensor& shift,
                      const std::vector<std::string>& type_names) {
  const std::string& name = shift_attribute(module, model_type);
  const torch::Tensor old = module.attr(name).toTensor();
  if (shift.dim() != 1 || shift.size(0) != old.numel())
    throw Error("energy shift: expected " + std::to_string(old.numel()) + " values (one per type), got " +
                std::to_string(shift.numel()));
  // Checked before anything changes: a shift the model's dtype cannot hold is refused.
  const torch::Tensor cast = finite_cast(shift, old.scalar_type(), "the energy shift (eV per atom)", type_names);
  torch::NoGradGuard no_grad;
  // In place: a buffer stays the module's buffer (and on its device) for whatever holds it.
  old.copy_(cast.to(old.device()));
}

std::string shifts_text(const torch::Tensor& shift, const std::vector<std::string>& type_names) {
  std::ostringstream out;
  out << std::setprecision(10);
  for (size_t t = 0; t < type_names.size(); ++t)
    out << (t ? ", " : "") << type_names[t] << " " << shift[int64_t(t)].item<double>();
  return out.str();
}

torch::Tensor shift_change(const torch::Tensor& counts, const torch::Tensor& residual,
                           const std::vector<std::string>& type_names, std::ostream& log) {
  const int64_t ntypes = counts.size(1);
  if (int64_t(type_names.size()) != ntypes) throw Error("shift_change: type names and counts disagree");
  const torch::Tensor change = torch::linalg_pinv(counts).matmul(residual);
  const torch::Tensor natoms = counts.sum(1);
  const torch::Tensor before = residual / natoms, after = (residual - counts.matmul(change)) / natoms;
  const auto present = (counts.sum(0) > 0).nonzero().flatten();
  const int64_t rank = torch::linalg_matrix_rank(counts.index_select(1, present)).item<int64_t>();
  log << std::setprecision(4) << "energy shift change from " << counts.size(0) << " frame(s): per-atom energy RMSE "
      << before.pow(2).mean().sqrt().item<double>() << " eV/atom before, " << after.pow(2).mean().sqrt().item<double>()
      << " after\n";
  if (rank < present.numel()) {
    log << "note: the frames' compositions determine only " << rank << " combination(s) of the " << present.numel()
        << " elements' shifts (e.g. every frame has the same composition): the minimum-norm split is taken, right "
           "for these compositions, arbitrary between the elements for others\n";
  }
  return change;
}

}  // namespace mlip::models
