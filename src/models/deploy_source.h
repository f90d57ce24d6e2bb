#pragma once

#include <string>

namespace mlip::models {

/// TorchScript lines shared by the models' docs/deploy.md `forward(data)`. Statements are indented
/// by 4 spaces; `nested` is the further indentation of a block inside them (the model source's
/// own indentation unit).

/// Reads the input dictionary: defines pos, atype, edge_index, n, shift, d_all [E, 3] (the pair
/// vectors pos[j] - pos[i] + shift·cell, requiring grad) and r_all [E].
std::string deploy_pair_vectors_source(const std::string& nested);

/// From e [N] (atomic energies, a function of d_all) to the output dictionary: forces from
/// the pair gradients, virial = -sum d ⊗ dE/dd, total energy summed in float64.
std::string deploy_outputs_source(const std::string& nested);

}  // namespace mlip::models
