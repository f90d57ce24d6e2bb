#include "models/se_e2_a/se_e2_a_inference.h"

#include <sstream>

#include "error.h"
#include "models/se_e2_a/se_e2_a_model.h"
#include "models/se_e2_a/se_e2_a_evaluator.h"

namespace mlip::models {
namespace {

class SeAInference : public Inference {
 public:
  SeAInference(const SeAConfig& config, torch::jit::Module& module) : config_(config), path_(config_, module) {
    if (module.hasattr("compression_step")) {
      std::ostringstream o;
      o << "hand-written se_e2_a inference, compressed (embedding nets as tables, step "
        << module.attr("compression_step").toDouble() << ")";
      description_ = o.str();
    }
  }

  std::string describe() const override { return description_; }
  double cutoff() const override { return config_.rcut; }

  InferenceResult evaluate(const data::NeighborList<float>& list, const std::vector<int>& types, int64_t natoms,
                           int64_t nlocal, bool atomic, bool atom_virial) override {
    return run(list, types, natoms, nlocal, atomic, atom_virial);
  }
  InferenceResult evaluate(const data::NeighborList<double>& list, const std::vector<int>& types, int64_t natoms,
                           int64_t nlocal, bool atomic, bool atom_virial) override {
    return run(list, types, natoms, nlocal, atomic, atom_virial);
  }

 private:
  template <typename Real>
  InferenceResult run(const data::NeighborList<Real>& list, const std::vector<int>& types, int64_t natoms,
                      int64_t nlocal, bool atomic, bool atom_virial) {
    const PackedEnv packed = PackedEnv::from_neighbor_list<Real>(list, types, config_);
    const std::vector<int> centre_types(types.begin(), types.begin() + nlocal);
    SeAEvaluator::Evaluation e = path_.evaluate(packed, centre_types, natoms, atom_virial);
    InferenceResult out;
    out.energy = e.energy;
    out.forces = std::move(e.forces);
    out.virial = e.virial;
    if (atomic) out.atomic = std::move(e.atomic);
    if (atom_virial) out.atom_virial = std::move(e.atom_virial);
    out.beyond_tables = e.beyond_tables;
    return out;
  }

  SeAConfig config_;
  SeAEvaluator path_;
  std::string description_ = "hand-written se_e2_a inference";
};

}  // namespace

SeAConfig frozen_se_e2_a_config(const ModelSettings& settings, const torch::jit::Module& module) {
  const auto* se = dynamic_cast<const SeASettings*>(&settings);
  if (se == nullptr) throw Error("se_e2_a: the settings are not se_e2_a's (" + settings.type + ")");
  SeAConfig config = se->config;
  const torch::Tensor sel = module.attr("sel").toTensor().to(torch::kCPU).contiguous();
  config.sel.assign(sel.data_ptr<int64_t>(), sel.data_ptr<int64_t>() + sel.numel());
  // The module's own record (models frozen before it existed subtract nothing).
  config.isolated_energy_is_bias =
      module.hasattr("isolated_energy_is_bias") && module.attr("isolated_energy_is_bias").toBool();
  return config;
}

std::unique_ptr<Inference> make_se_e2_a_inference(const ModelSettings& settings, torch::jit::Module& module) {
  return std::make_unique<SeAInference>(frozen_se_e2_a_config(settings, module), module);
}

}  // namespace mlip::models
