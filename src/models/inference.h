#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "data/neighbor_list.h"

namespace mlip::models {

/// What a model's own inference returns for the atoms of one MD rank (the owned atoms first,
/// then the ghosts). Units: eV, Å.
struct InferenceResult {
  double energy = 0;                ///< eV, the owned atoms' atomic energies summed (float64)
  std::vector<double> forces;       ///< [natoms * 3] eV/Å, -dE/dr of every atom, ghosts included
  std::array<double, 9> virial{};   ///< eV, -sum over pairs of d_ij ⊗ dE/dd_ij, row-major
  std::vector<double> atomic;       ///< [nlocal] eV, when asked
  std::vector<double> atom_virial;  ///< [natoms * 9] eV, each pair's half to i and to j, when asked
};

/// A model's own evaluator for molecular dynamics (docs/models.md "Inference"), beside the
/// TorchScript forward every frozen model has. The MD layer builds the neighbour list (and
/// checks it for overlapping atoms) and calls it; it knows no model type.
class Inference {
 public:
  virtual ~Inference() = default;
  /// One phrase for the MD summary, e.g. "hand-written se_e2_a inference".
  virtual std::string describe() const = 0;
  /// The neighbour list's cutoff, Å.
  virtual double cutoff() const = 0;
  /// Energy, forces and virials of `natoms` atoms from the neighbour list of their positions in
  /// the model's dtype, with the first `nlocal` atoms as its centres. types: [natoms] type ids.
  virtual InferenceResult evaluate(const data::NeighborList<float>& list, const std::vector<int>& types,
                                   int64_t natoms, int64_t nlocal, bool atomic, bool atom_virial) = 0;
  virtual InferenceResult evaluate(const data::NeighborList<double>& list, const std::vector<int>& types,
                                   int64_t natoms, int64_t nlocal, bool atomic, bool atom_virial) = 0;
};

}  // namespace mlip::models
