#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "input/section.h"
#include "models/model.h"

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
};

/// Adds a model type (e.g. one defined in a test). Throws mlip::Error when the name is taken.
void register_model(ModelEntry entry);

/// The entry selected by `name` (or an alias), among those chosen by model.type
/// (`descriptor` false) or by model.descriptor.type (`descriptor` true); nullptr when none.
const ModelEntry* find_model(const std::string& name, bool descriptor);

/// The names of the registered entries of one kind, in registration order.
std::vector<std::string> model_names(bool descriptor);

/// Builds the model of `settings` through its entry. Throws mlip::Error for an unknown type.
std::unique_ptr<Model> create_model(const ModelSettings& settings, const ModelContext& context);

}  // namespace mlip::models
