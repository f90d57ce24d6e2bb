#pragma once

#include <torch/script.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace mlip::models {

/// How one attribute of a model's module depends on the type map, for carrying weights from a
/// pretrained model into a model of another type map (docs/training.md "Fine-tuning").
struct AttributeRole {
  enum class Kind {
    kShared,           ///< the same for every element (a layer's weights): taken whole
    kTypeRows,         ///< dim 0 is the type id (an embedding row, a statistic): shared rows taken
    kTypeNamed,        ///< the type ids are in its name (se_e2_a's emb_1_0_w0): taken from the
                       ///< pretrained attribute named with the pretrained ids, when they all exist
    kTypeRowsChecked,  ///< dim 0 is the type id and the rows of shared elements must be equal
                       ///< (se_e2_a's sel): checked, not taken
    kDerived,          ///< made from the settings or the new data (coupling coefficients,
                       ///< tables, the mean neighbour count): the input model's own
    kOptional,         ///< a weight of an optional section (model.long_range's charge readout):
                       ///< taken whole when the pretrained model has it, else kept as built
  };
  Kind kind = Kind::kShared;
  /// kTypeNamed: the type ids in the name, in order.
  std::vector<int64_t> types;
  /// kTypeNamed: the same attribute's name with these type ids instead.
  std::function<std::string(const std::vector<int64_t>&)> renamed;
  /// kTypeRowsChecked: the input key the rows come from, for the message ("model.descriptor.sel").
  std::string setting;
  /// kTypeNamed: a weight of an optional section (se_e2_a's charge outputs fit_<t>_wq): kept as
  /// built when the pretrained model lacks it, instead of an error.
  bool optional = false;
};

/// A model type's roles of its module's attributes, by name (models/registry.h ModelEntry).
using AttributeRoles = std::function<AttributeRole(const std::string& name)>;

/// The input's elements against the pretrained model's, by name.
struct TypeMapping {
  /// [input types] the pretrained type id of each input type, -1 for an element it lacks.
  std::vector<int64_t> source;
  std::vector<std::string> added;    ///< input elements the pretrained model lacks
  std::vector<std::string> dropped;  ///< pretrained elements the input lacks
  /// "H <- H (0), C <- C (1), N new, O <- O (2)"
  std::string text(const std::vector<std::string>& input) const;
};
TypeMapping map_types(const std::vector<std::string>& pretrained, const std::vector<std::string>& input);

/// What take_pretrained_weights did, attribute names in the module's order.
struct TakenWeights {
  std::vector<std::string> whole;       ///< taken as they are (shared, or renamed per element)
  std::vector<std::string> by_element;  ///< per-type rows: the shared elements' rows taken
  std::vector<std::string> fresh;       ///< added elements' rows and added sections' weights: as built
  std::vector<std::string> derived;     ///< made from the settings, the input model's own
  std::vector<std::string> not_taken;   ///< pretrained attributes nothing read (dropped elements)
  std::vector<std::string> numbers;     ///< float attributes taken
  std::string text() const;             ///< counts and names, a few lines
};

/// Copies into `model` (freshly built for the input, its statistics computed on the new data)
/// every weight and statistic of `pretrained` that its attributes share by role and element, in
/// place (the tensors stay the optimiser's). Throws mlip::Error naming the attribute when a shape
/// differs, or a kTypeRowsChecked row differs (naming the setting, the element and both values).
TakenWeights take_pretrained_weights(const torch::jit::Module& pretrained, const TypeMapping& mapping,
                                     const std::vector<std::string>& input_types, const AttributeRoles& roles,
                                     torch::jit::Module& model);

}  // namespace mlip::models
