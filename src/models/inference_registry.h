#pragma once

#include <torch/script.h>

#include <functional>
#include <map>
#include <memory>
#include <ostream>
#include <string>

#include "models/capabilities.h"
#include "models/compress_options.h"
#include "models/inference.h"
#include "models/settings_record.h"

namespace mlip::models {

/// What the inference side knows of one model type (docs/architecture.md "Adding a model"):
/// how its frozen form is evaluated and compressed, from its settings record alone. The
/// training side (models/registry.h) adds how it is read from a training input and trained.
struct InferenceEntry {
  /// The model type as frozen models name it (their `model_type`), e.g. "se_e2_a".
  std::string type;
  /// The record of a model frozen before records existed (mlip 0.1.0), from the `model` section
  /// of the training input stored in it, flattened: keys are that version's key paths below
  /// `model` ("descriptor.rcut", "l_max"), sequences of scalars their items separated by spaces,
  /// flags "true" / "false". Reads that version's key names, whatever the input reader reads now;
  /// skips the rest. The generic keys (model_type, type_map, precision, cutoff) are filled by
  /// the caller; it fills message_layers and its own.
  std::function<SettingsRecord(const SettingsRecord& stored_input)> legacy_record;
  /// The model's own keys as its reader reads them from a record (those absent at the defaults it
  /// takes, as for a model frozen before the key existed), e.g. through its config and back:
  /// what makes two records comparable key by key (fine-tuning, docs/training.md).
  std::function<SettingsRecord(const SettingsRecord& record, const torch::jit::Module& module)> read_keys;
  /// The model's own inference on the CPU (models/inference.h) from its record and frozen module;
  /// empty when it has none (its TorchScript forward then serves).
  std::function<std::unique_ptr<Inference>(const SettingsRecord& record, torch::jit::Module& module)> inference;
  /// Whether that inference also evaluates models with model.long_range (their charges, through
  /// the request's charge coupling, models/charge_coupling.h); false: such a model has no own
  /// inference (its capabilities list none) and runs through its TorchScript forward.
  bool long_range = false;
  /// A compressed copy of a frozen model for MD (`mlip compress`; se_e2_a: docs/se_e2_a.md
  /// "Compression: the embedding nets as tables"), with a line per table to `log`; empty when
  /// the model has no compressed form.
  std::function<torch::jit::Module(const SettingsRecord& record, const torch::jit::Module& module,
                                   const CompressOptions& options, std::ostream& log)>
      compress;
  /// The name of the module's tensor attribute holding the per-type energy shift, [ntypes] in the
  /// model's dtype, eV per atom of each type, added to every atom's energy after the network (so
  /// forces and virials never see it): se_e2_a "bias", equivariant "shift". `mlip change-bias`
  /// and fine-tuning re-fit it (models/energy_shift.h). Empty: the model has none.
  std::string energy_shift;
};

/// Whether `entry` gives its own inference to a model with (or without) the long-range term.
inline bool has_own_inference(const InferenceEntry* entry, bool long_range) {
  return entry != nullptr && entry->inference && (!long_range || entry->long_range);
}

/// Adds a model type's inference entry (e.g. one defined in a test). Throws mlip::Error when
/// the type is taken.
void register_inference(InferenceEntry entry);

/// The entry of a model type; nullptr when none.
const InferenceEntry* find_inference(const std::string& type);

/// A frozen model's settings record (docs/deploy.md "Inference settings"): its extra file
/// `inference_settings`; for a model frozen before records existed, made from the training input
/// stored in it (`config`) by its entry's legacy_record, and from its metadata (model_type,
/// type_names, model_dtype, r_max). Errors name `source`.
SettingsRecord frozen_settings(const std::map<std::string, std::string>& extra, const std::string& source);

/// `record` with every key its model's reader reads: the absent ones added at the values the
/// reader takes for them (InferenceEntry::read_keys); the record as it is when the entry has none.
SettingsRecord completed_settings(const SettingsRecord& record, const torch::jit::Module& module);

/// The capabilities of a model with this record (models frozen before capabilities were
/// written): its generic keys, and the CPU for its own inference when its entry has one.
Capabilities capabilities_from(const SettingsRecord& record);

}  // namespace mlip::models
