#pragma once

#include <memory>
#include <string>
#include <vector>

#include "models/inference.h"
#include "models/pair_repulsion.h"

namespace mlip::models {

/// What a frozen model's capabilities list for its own inference on `device` ("cpu"): with a
/// pair repulsion "cpu+zbl", so that an mlip that cannot add the repulsion to the model's own
/// inference does not use it (its TorchScript forward, which holds the repulsion, serves).
std::string own_inference_capability(const std::string& device, const PairRepulsionSettings& repulsion);

/// Adds the repulsion of the request's pairs whose centre is owned to `out` (sized for the
/// request: forces [natoms * 3], and atomic, atom_virial, pair_gradient when asked). A pair gives
/// half its energy to its centre: over a full list, each pair's energy counts once.
void add_pair_repulsion(const ZblRepulsion& zbl, const Request& request, InferenceResult& out);

/// A model's own inference (models/inference.h) with the pair repulsion added (docs/repulsion.md
/// "In mlip's own MD inference"): each pair closer than outer whose centre is an owned atom
/// gives half its energy to the centre, forces, virial, per-atom energies and virials, and pair
/// gradients alike. `inner` unchanged when the repulsion is disabled.
std::unique_ptr<Inference> with_pair_repulsion(std::unique_ptr<Inference> inner, const PairRepulsionSettings& repulsion,
                                               const std::vector<std::string>& type_map);

}  // namespace mlip::models
