#pragma once

#include <torch/script.h>

#include <ostream>
#include <string>
#include <vector>

namespace mlip::models {

/// The per-type energy shift of a trained or frozen module of type `model_type` (the attribute
/// its InferenceEntry names: se_e2_a "bias", equivariant "shift"): [ntypes] float64 on the CPU,
/// eV per atom of each type, a copy. Throws mlip::Error when the type has none.
torch::Tensor energy_shift(const torch::jit::Module& module, const std::string& model_type);

/// Sets that attribute to `shift` ([ntypes], any dtype), cast to the attribute's dtype and device.
/// Throws mlip::Error, changing nothing, when the type has none, the length differs, or a value
/// is not finite in the attribute's dtype (finite_cast; `type_names` name the types there).
void set_energy_shift(torch::jit::Module& module, const std::string& model_type, const torch::Tensor& shift,
                      const std::vector<std::string>& type_names);

/// "H -13.58722278, O -2041.9816": the shifts by element name, 10 significant digits.
std::string shifts_text(const torch::Tensor& shift, const std::vector<std::string>& type_names);

/// The change of the per-type energy shifts that best explains the frames' residual energies
/// (docs/training.md "Changing the energy shifts"): the minimum-norm least-squares solution d of
/// counts . d = residual, through the SVD pseudo-inverse. counts: [frames, ntypes] float64, atoms
/// of each type in each frame; residual: [frames] float64, eV, label minus prediction. A type no
/// frame holds gets 0. After the change, sum over frames of count_t * error is 0 for every type,
/// and so the atom-weighted mean error is 0. Prints what it did to `log`, naming the types by
/// `type_names`, with a note when the compositions do not tell the types apart (all frames of one
/// composition: only the sum over a frame's atoms is determined, the split is the minimum-norm one).
torch::Tensor shift_change(const torch::Tensor& counts, const torch::Tensor& residual,
                           const std::vector<std::string>& type_names, std::ostream& log);

}  // namespace mlip::models
