#pragma once

#include <string>

namespace mlip::models {

/// TorchScript lines shared by the models' docs/deploy.md `forward(data)`. Statements are indented
/// by 4 spaces; `nested` is the further indentation of a block inside them (the model source's
/// own indentation unit).

/// A float as TorchScript source reads it back: 17 significant digits, always with a decimal point
/// or exponent (so that it is a float, not an int).
std::string torchscript_number(double v);

/// Reads the input dictionary: defines pos, atype, edge_index, n, shift, d_all [E, 3] (the pair
/// vectors pos[j] - pos[i] + shift·cell, requiring grad) and r_all [E].
std::string deploy_pair_vectors_source(const std::string& nested);

/// The version of the forward(data) contract the models' source implements: 2 adds the optional
/// input `nlocal` and the output `edge_gradient` (docs/deploy.md). A frozen model says it through
/// its method `deploy_interface()`; an MD code refuses a model without it.
constexpr int kDeployInterface = 2;

/// The method `deploy_interface(self) -> int`, its `def` indented by `def_indent` (the body by 4).
std::string deploy_interface_source(const std::string& def_indent);

/// From e [N] (atomic energies, a function of d_all) to the output dictionary: forces from
/// the pair gradients, virial = -sum d ⊗ dE/dd, total energy summed in float64. With the
/// input `nlocal`, only atoms [0, nlocal) count (energy, forces, virial, edge_gradient).
/// pair_repulsion: first adds the module's pair_repulsion_energy (models/pair_repulsion.h) to e.
/// long_range: also reads q_raw [N] (the raw charges, a function of d_all) and adds the
/// long-range energy of the module's long_range_* methods (models/long_range/long_range.h):
/// forces and virial include its direct dependence on positions and cell, the output `charges`
/// [N, 1] e; the input `nlocal` is refused (docs/long_range.md "In the frozen model").
std::string deploy_outputs_source(const std::string& nested, bool pair_repulsion = false, bool long_range = false);

}  // namespace mlip::models
