#include "train/finetune.h"

#include <iomanip>
#include <sstream>

#include "archive/model_archive.h"
#include "article.h"
#include "error.h"
#include "models/energy_shift.h"
#include "models/pretrained_weights.h"
#include "models/inference_registry.h"
#include "models/registry.h"

namespace mlip::train {
namespace {

/// The model's energy of every frame (not training), float64 [frames], with each frame's type
/// counts [frames, ntypes] in `counts`.
torch::Tensor predicted_energies(models::Model& model, const std::vector<models::StatisticsFrames>& frames,
                                 int64_t ntypes, torch::Tensor& counts, torch::Tensor& labels) {
  std::vector<double> energies, count_values, label_values;
  for (const models::StatisticsFrames& sample : frames) {
    const data::System& sys = *sample.system;
    models::SystemAtoms atoms;
    atoms.natoms = sys.natoms();
    atoms.types = sys.types;
    atoms.atype =
        torch::tensor(std::vector<int64_t>(sys.types.begin(), sys.types.end()), torch::kInt64).to(model.device());
    std::vector<double> type_count(size_t(ntypes), 0.0);
    for (int t : sys.types) type_count[size_t(t)] += 1;
    for (const data::Frame& frame : sample.frames) {
      if (frame.energy.empty()) throw Error(sys.name + ": fine-tuning's energy shift needs energy labels, found none");
      const auto input = model.prepare_frame(sys, frame);
      const models::Prediction p = model.predict(atoms, {input.get()}, false);
      energies.push_back(p.energy.to(torch::kCPU, torch::kFloat64)[0].item<double>());
      label_values.push_back(frame.energy[0]);
      count_values.insert(count_values.end(), type_count.begin(), type_count.end());
    }
  }
  const int64_t n = int64_t(energies.size());
  counts = torch::tensor(count_values, torch::kFloat64).reshape({n, ntypes});
  labels = torch::tensor(label_values, torch::kFloat64);
  return torch::tensor(energies, torch::kFloat64);
}

}  // namespace

Pretrained read_pretrained(const std::string& given, const std::string& model_type) {
  Pretrained p;
  p.path = archive::resolve_checkpoint(given);
  archive::ExtraFiles extra;
  p.module = archive::load_model(p.path, extra);
  p.extra = extra;
  if (extra["model_type"] != model_type)
    throw Error("--finetune " + p.path + ": " + with_article(extra["model_type"]) + " model, the input asks for " + model_type +
                " (fine-tuning keeps the model type)");
  const models::ModelEntry* entry = models::find_model_type(model_type);
  if (entry == nullptr || !entry->attribute_role)
    throw Error("--finetune " + p.path + ": the " + model_type + " model cannot be fine-tuned");
  // Every key the model's reader reads: one absent from an earlier version's record takes the
  // value that version used, and is compared as such.
  p.record = models::completed_settings(models::stored_settings(extra, p.module, p.path), p.module);
  p.type_map = archive::stored_type_names(extra);
  return p;
}

/// Settings the input may change: the type map and dtype (weights are moved and cast), the
/// pair repulsion, which is no weight (docs/repulsion.md "Fine-tuning"), and the long-range
/// section, whose one weight (the charge readout) starts as built when the pretrained model has
/// none (docs/long_range.md "Fine-tuning").
bool may_differ(const std::string& key) {
  return key == "type_map" || key == "precision" || key.rfind("pair_repulsion", 0) == 0 ||
         key.rfind("long_range", 0) == 0;
}

void check_finetune_settings(const Pretrained& pretrained, const models::SettingsRecord& input) {
  const auto& mine = input.values();
  const auto& theirs = pretrained.record.values();
  for (const auto& [key, value] : mine) {
    if (may_differ(key)) continue;
    const auto it = theirs.find(key);
    const std::string other = it == theirs.end() ? "none" : it->second;
    if (it == theirs.end() || !models::SettingsRecord::same_value(other, value))
      throw Error("--finetune " + pretrained.path + ": the setting '" + key + "' differs: the pretrained model has " +
                  other + ", the input " + value + "; fine-tuning keeps the pretrained model's architecture, so " +
                  "write its value in the input");
  }
  for (const auto& [key, value] : theirs)
    if (!may_differ(key) && mine.count(key) == 0)
      throw Error("--finetune " + pretrained.path + ": the pretrained model has the setting '" + key + "' (" + value +
                  "), the input's model has none");
}

std::string start_from_pretrained(const Pretrained& pretrained, models::Model& model,
                                  const std::vector<models::StatisticsFrames>& frames, bool keep_pretrained_shifts,
                                  std::ostream& log) {
  const models::ModelSettings& settings = model.settings();
  const std::vector<std::string>& names = settings.type_map;
  const models::ModelEntry* entry = models::find_model_type(settings.type);
  torch::jit::Module& module = model.module();
  const torch::Tensor fresh_shift = models::energy_shift(module, settings.type);
  const models::TypeMapping mapping = models::map_types(pretrained.type_map, names);
  const models::TakenWeights taken = models::take_pretrained_weights(
      pretrained.module, mapping, names, [&](const std::string& name) { return entry->attribute_role(settings, name); },
      module);
  const torch::Tensor carried_shift = models::energy_shift(module, settings.type);

  std::ostringstream text;
  text << "pretrained model " << pretrained.path << " (type_map " << pretrained.extra.at("type_names") << ", precision "
       << pretrained.record.text("precision", "?") << ")\nelements: " << mapping.text(names) << "\n"
       << taken.text();
  torch::Tensor counts, labels;
  const torch::Tensor predicted = predicted_energies(model, frames, int64_t(names.size()), counts, labels);
  // The start: the pretrained shifts of the shared elements (e0s: fit; the added elements' from
  // the fresh fit), or the input's E0s (isolated, given); then the least-squares change that
  // explains the residual energies, so that step 1 starts from small energy errors even when the
  // new data's level of theory offsets every element (docs/training.md "Fine-tuning").
  const torch::Tensor start = keep_pretrained_shifts ? carried_shift : fresh_shift;
  const torch::Tensor residual = labels - (predicted + counts.matmul(start - carried_shift));
  std::ostringstream change_log;
  const torch::Tensor change = models::shift_change(counts, residual, names, change_log);
  models::set_energy_shift(module, settings.type, start + change, names);
  text << "energy shifts start from " << (keep_pretrained_shifts ? "the pretrained model's" : "model.e0s")
       << ", changed by the least-squares fit of the residual energies\n"
       << change_log.str();
  text << "energy shifts (eV per atom): " << models::shifts_text(models::energy_shift(module, settings.type), names)
       << "\n";
  std::string out = text.str();
  std::istringstream lines(out);
  std::string line;
  while (std::getline(lines, line)) log << "fine-tune: " << line << "\n";
  return out;
}

}  // namespace mlip::train
