#pragma once

#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "input/section.h"
#include "models/capabilities.h"
#include "models/memory_estimate.h"
#include "models/model.h"
#include "models/pretrained_weights.h"
#include "models/settings_record.h"

namespace mlip::models {

/// How one model type is read from the input and built (docs/models.md "Adding a model").
struct ModelEntry {
  /// The name that selects it: `model.type: <name>`, or, when `descriptor` is true, DeePMD's
  /// standard model with `model.descriptor.type: <name>`.
  std::string name;
  bool descriptor = false;
  /// Other accepted spellings of the name (DeePMD's "se_a" for "se_e2_a").
  std::vector<std::string> aliases;
  /// The keys of the `model` section it accepts, in the order error messages list them
  /// ("type", "type_map" and "data_stat_nbatch" are read by the input reader; list them too).
  std::vector<std::string> keys;
  /// Reads its settings from the checked `model` section (type_map already read and checked).
  /// Throws mlip::Error naming the key for every problem.
  std::function<std::shared_ptr<ModelSettings>(const input::Section& model, const std::vector<std::string>& type_map)>
      read;
  /// Builds the model, freshly initialised, from settings its `read` made.
  std::function<std::unique_ptr<Model>(const ModelSettings& settings, const ModelContext& context)> create;
  /// The model's own keys of the settings record a frozen model carries (docs/deploy.md
  /// "Inference settings"), from its settings and trained module (what the data decided, such
  /// as se_e2_a's sel, is read from the module). Its inference side (models/inference_registry.h,
  /// an entry of the same type) reads them back.
  std::function<SettingsRecord(const ModelSettings& settings, const torch::jit::Module& module)> record;
  /// At least the memory a training of the model with these settings takes for one batch of
  /// `batch`'s sizes, from the settings alone (nothing allocated; docs/training.md "Memory checked
  /// before the first allocation"). Optional: a model without it is not checked.
  std::function<MemoryEstimate(const ModelSettings& settings, const BatchSizes& batch)> memory;
  /// --finetune (docs/training.md "Fine-tuning"): how each attribute of a module built with
  /// these settings depends on the type map: shared by all elements, one row per type, one per
  /// type named by its ids, or made from the settings. Empty: the type cannot be fine-tuned.
  std::function<AttributeRole(const ModelSettings& settings, const std::string& name)> attribute_role;
  /// Whether the model adds model.long_range's electrostatic energy of learned charges
  /// (docs/long_range.md); the input reader refuses the section for a model that does not.
  bool long_range = false;
};

/// Adds a model type (e.g. one defined in a test). Throws mlip::Error when the name is taken.
void register_model(ModelEntry entry);

/// The entry selected by `name` (or an alias), among those chosen by model.type
/// (`descriptor` false) or by model.descriptor.type (`descriptor` true); nullptr when none.
const ModelEntry* find_model(const std::string& name, bool descriptor);

/// The entry of a model type as settings, checkpoints and frozen models name it (its registry
/// name, whether chosen by model.type or model.descriptor.type); nullptr when none.
const ModelEntry* find_model_type(const std::string& type);

/// The names of the registered entries of one kind, in registration order.
std::vector<std::string> model_names(bool descriptor);

/// The `model` section of a training input, read and checked through the entry it selects
/// (model.type, or model.descriptor.type for DeePMD's standard model): the type map (no name
/// twice), data_stat_nbatch and the entry's own keys. Throws mlip::Error naming the key.
std::shared_ptr<const ModelSettings> read_model_section(const YAML::Node& model);

/// The model section of a training input given as text (e.g. a frozen model's `config`), read
/// as `mlip train` reads it; errors name `source`. The data paths are not looked at.
std::shared_ptr<const ModelSettings> parse_model_settings(const std::string& text, const std::string& source);

/// The settings record of a trained model for its frozen form: the generic keys (model_type,
/// type_map, precision, cutoff, message_layers) and its entry's own. Throws mlip::Error for an
/// unknown type.
SettingsRecord inference_record(const ModelSettings& settings, const torch::jit::Module& module);

/// The settings record of a checkpoint or frozen model read with `extra` from `source`: a frozen
/// model's own (frozen_settings), a checkpoint's made from the training input it stores, as
/// `mlip freeze` makes it.
SettingsRecord stored_settings(const std::map<std::string, std::string>& extra, const torch::jit::Module& module,
                               const std::string& source);

/// The capabilities of a model with these settings (docs/deploy.md "Capabilities"); the
/// inference registry says whether it has its own inference.
Capabilities capabilities_of(const ModelSettings& settings);

/// The entry's memory estimate for `settings` and a batch of `batch`'s sizes (no parts when the
/// entry has none).
MemoryEstimate estimate_training_memory(const ModelSettings& settings, const BatchSizes& batch);

/// Builds the model of `settings` through its entry. Throws mlip::Error for an unknown type.
std::unique_ptr<Model> create_model(const ModelSettings& settings, const ModelContext& context);

}  // namespace mlip::models
