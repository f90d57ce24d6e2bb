#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "data/neighbor_list.h"
#include "error.h"
#include "models/ghost_exchange.h"

namespace mlip::models {

/// What a model's own inference returns for the atoms of one MD rank (the owned atoms first,
/// then the ghosts). Units: eV, Å.
struct InferenceResult {
  double energy = 0;                ///< eV, the owned atoms' atomic energies summed (float64)
  std::vector<double> forces;       ///< [natoms * 3] eV/Å, -dE/dr of every atom, ghosts included
  std::array<double, 9> virial{};   ///< eV, -sum over pairs of d_ij ⊗ dE/dd_ij, row-major
  std::vector<double> atomic;       ///< [nlocal] eV, when asked
  std::vector<double> atom_virial;  ///< [natoms * 9] eV, each pair's half to i and to j, when asked
  /// [npairs * 3] eV/Å, dE/dd_ij of each pair of an AtomGraph, when asked (MD makes per-atom
  /// virials of it, as for the TorchScript forward's edge_gradient).
  std::vector<double> pair_gradient;
  /// A compressed model (docs/se_e2_a.md "Compression: the embedding nets as tables"): pairs
  /// whose input lay beyond the tables, evaluated exactly by the nets the model keeps; MD reports
  /// them, as they mean configurations closer than any in the training data.
  int64_t beyond_tables = 0;
};

/// One MD rank's atoms as a graph (docs/lammps.md "The graph of a rank"), for models whose
/// energy depends on atoms beyond one cutoff (message passing): nodes are distinct atoms, the
/// owned ones first; the pairs are those of every centre within message_layers - 1 hops of an
/// owned atom, each with its vector (periodic images already resolved).
struct AtomGraph {
  int64_t nodes = 0;                   ///< distinct atoms
  int64_t nlocal = 0;                  ///< owned atoms, nodes [0, nlocal): only their energies count
  const int64_t* types = nullptr;      ///< [nodes] type ids
  int64_t npairs = 0;                  ///< directed pairs (i, j)
  const int64_t* centre = nullptr;     ///< [npairs] node i, non-decreasing
  const int64_t* neighbour = nullptr;  ///< [npairs] node j
  const double* vectors = nullptr;     ///< [npairs * 3] Å, d_ij = r_j - r_i, row-major
};

/// Which input a model's inference evaluates.
enum class InferenceInput {
  kNeighborList,  ///< evaluate(NeighborList, ...): one cutoff, centres the owned atoms
  kGraph,         ///< evaluate(AtomGraph, ...): message passing over several cutoffs
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
  /// The input this model's inference evaluates (the MD layer builds it).
  virtual InferenceInput input() const { return InferenceInput::kNeighborList; }
  /// Energy (owned nodes), forces on every node ([nodes * 3]), virial, and when asked the owned
  /// nodes' energies and the pairs' gradients, of an AtomGraph. Models whose input() is kGraph
  /// implement it; the default throws.
  virtual InferenceResult evaluate(const AtomGraph& /*graph*/, bool /*atomic*/, bool /*pair_gradient*/) {
    throw Error(describe() + ": evaluates a neighbour list, not a graph of atoms");
  }
  /// Per-atom values this model exchanges between ranks after each message-passing layer: the
  /// widest row of GhostExchange calls made by evaluate(graph, exchange, ...); 0 when it does
  /// not exchange (it then needs ghosts out to message_layers · cutoff, docs/lammps.md).
  virtual int64_t exchange_width() const { return 0; }
  /// As evaluate(graph, ...), with the layers' features of ghost nodes taken from their owners
  /// through `exchange` (docs/lammps.md "Features exchanged between ranks"), whose rows are the
  /// graph's nodes (owned first): here the centres are the owned nodes only and the pairs those
  /// within one cutoff. Energies, forces and pair gradients are the total energy's, all ranks
  /// together. Models whose exchange_width() > 0 implement it.
  virtual InferenceResult evaluate(const AtomGraph& /*graph*/, GhostExchange& /*exchange*/, bool /*atomic*/,
                                   bool /*pair_gradient*/) {
    throw Error(describe() + ": exchanges no features between ranks");
  }
};

}  // namespace mlip::models
