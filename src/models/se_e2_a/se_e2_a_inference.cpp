#include "models/se_e2_a/se_e2_a_inference.h"

#include <sstream>

#include "error.h"
#include "models/se_e2_a/compress.h"
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
      // docs/lammps.md "Compressed models": pairs closer than any in the training data.
      Counter beyond;
      beyond.name = "pairs beyond tables";
      beyond.report_every =
          module.hasattr("compression_check_frequency") ? module.attr("compression_check_frequency").toInt() : -1;
      beyond.interval_phrase =
          "pair(s) beyond the compressed model's tables, closer than any in its training data (evaluated by its "
          "exact embedding nets)";
      beyond.run_phrase = "pair(s) beyond the compressed model's tables over the run";
      counters_.push_back(beyond);
    }
  }

  std::string describe() const override { return description_; }
  double cutoff() const override { return config_.rcut; }
  InferenceInputs inputs() const override {
    InferenceInputs in;
    in.neighbor_list = true;
    in.charges = config_.long_range.enabled;
    return in;
  }
  std::vector<Counter> counters() const override { return counters_; }

  InferenceResult evaluate(const Request& request) override {
    const NeighborInput* atoms = request.neighbors;
    if (atoms == nullptr || request.exchange != nullptr) refuse(request);
    check_charge_coupling(request);
    if (atoms->list_float != nullptr) return run(*atoms->list_float, *atoms, request.outputs, request.charge_coupling);
    if (atoms->list_double != nullptr) return run(*atoms->list_double, *atoms, request.outputs, request.charge_coupling);
    throw Error(describe() + ": the request's neighbour input has no list");
  }

 private:
  template <typename Real>
  InferenceResult run(const data::NeighborList<Real>& list, const NeighborInput& atoms, const Outputs& outputs,
                      ChargeCoupling* coupling) {
    const std::vector<int> types(atoms.types, atoms.types + atoms.natoms);
    const PackedEnv packed = PackedEnv::from_neighbor_list<Real>(list, types, config_);
    const std::vector<int> centre_types(types.begin(), types.begin() + atoms.nlocal);
    SeAEvaluator::Evaluation e = path_.evaluate(packed, centre_types, atoms.natoms, outputs.atom_virial, coupling);
    InferenceResult out;
    out.energy = e.energy;
    out.forces = std::move(e.forces);
    out.virial = e.virial;
    if (outputs.atomic_energy) out.atomic = std::move(e.atomic);
    if (outputs.atom_virial) out.atom_virial = std::move(e.atom_virial);
    if (!counters_.empty()) out.counts = {e.beyond_tables};
    if (outputs.charges) out.charges = std::move(e.charges);
    return out;
  }

  SeAConfig config_;
  SeAEvaluator path_;
  std::string description_ = "hand-written se_e2_a inference";
  std::vector<Counter> counters_;
};

/// The record of an se_e2_a model frozen by mlip 0.1.0: its stored training input's values under
/// that version's key paths (model.descriptor.*, model.fitting_net.*), renamed into the record's
/// keys; absent keys take, when read, DeePMD's defaults, the ones that version applied.
SettingsRecord legacy_se_e2_a_record(const SettingsRecord& input) {
  SettingsRecord record;
  input.copy_renamed(record, {{"descriptor.rcut", "rcut"},
                              {"descriptor.rcut_smth", "rcut_smth"},
                              {"descriptor.neuron", "neuron"},
                              {"descriptor.axis_neuron", "axis_neuron"},
                              {"descriptor.type_one_side", "type_one_side"},
                              {"descriptor.resnet_dt", "resnet_dt"},
                              {"fitting_net.neuron", "fitting_neuron"},
                              {"fitting_net.resnet_dt", "fitting_resnet_dt"}});
  record.set_integer("message_layers", 1);
  return record;
}

}  // namespace

SettingsRecord se_e2_a_record(const SeAConfig& config) {
  SettingsRecord record;
  record.set_number("rcut", config.rcut);
  record.set_number("rcut_smth", config.rcut_smth);
  record.set_integers("neuron", config.neuron);
  record.set_integer("axis_neuron", config.axis_neuron);
  record.set_flag("type_one_side", config.type_one_side);
  record.set_flag("resnet_dt", config.resnet_dt);
  record.set_integers("fitting_neuron", config.fitting_neuron);
  record.set_flag("fitting_resnet_dt", config.fitting_resnet_dt);
  return record;
}

SeAConfig se_e2_a_config(const SettingsRecord& record, const torch::jit::Module& module) {
  const SeAConfig defaults;
  SeAConfig c;
  c.type_map = record.words("type_map", {});
  c.precision = record.text("precision", defaults.precision);
  c.rcut = record.number("rcut", defaults.rcut);
  c.rcut_smth = record.number("rcut_smth", defaults.rcut_smth);
  c.neuron = record.integers("neuron", defaults.neuron);
  c.axis_neuron = record.integer("axis_neuron", defaults.axis_neuron);
  c.type_one_side = record.flag("type_one_side", defaults.type_one_side);
  c.resnet_dt = record.flag("resnet_dt", defaults.resnet_dt);
  c.fitting_neuron = record.integers("fitting_neuron", defaults.fitting_neuron);
  c.fitting_resnet_dt = record.flag("fitting_resnet_dt", defaults.fitting_resnet_dt);
  c.pair_repulsion = pair_repulsion_from(record);
  c.long_range = long_range_from(record);
  if (!module.hasattr("sel")) throw Error(record.source() + ": the se_e2_a module has no 'sel' attribute");
  const torch::Tensor sel = module.attr("sel").toTensor().to(torch::kCPU).contiguous();
  c.sel.assign(sel.data_ptr<int64_t>(), sel.data_ptr<int64_t>() + sel.numel());
  c.isolated_energy_is_bias =
      module.hasattr("isolated_energy_is_bias") && module.attr("isolated_energy_is_bias").toBool();
  try {
    c.validate();
  } catch (const Error& e) {
    throw Error(record.source() + ": " + e.what());
  }
  return c;
}

InferenceEntry se_e2_a_inference_entry() {
  InferenceEntry e;
  e.type = "se_e2_a";
  e.legacy_record = legacy_se_e2_a_record;
  e.read_keys = [](const SettingsRecord& record, const torch::jit::Module& module) {
    return se_e2_a_record(se_e2_a_config(record, module));
  };
  e.energy_shift = "bias";
  e.long_range = true;  // charges through the request's coupling (SeAEvaluator::evaluate)
  e.inference = [](const SettingsRecord& record, torch::jit::Module& module) -> std::unique_ptr<Inference> {
    return std::make_unique<SeAInference>(se_e2_a_config(record, module), module);
  };
  e.compress = [](const SettingsRecord& record, const torch::jit::Module& module, const CompressOptions& options,
                  std::ostream& log) { return compress_se_e2_a(se_e2_a_config(record, module), module, options, log); };
  return e;
}

}  // namespace mlip::models
