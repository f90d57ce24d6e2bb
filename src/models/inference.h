#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "data/neighbor_list.h"
#include "models/charge_coupling.h"
#include "models/ghost_exchange.h"

namespace mlip::models {

/// One MD rank's atoms with the neighbour list of their positions (one cutoff), for models whose
/// energy depends on neighbours within one cutoff (se_e2_a). The atoms are the owned ones first,
/// then the ghosts; the list's centres are the owned atoms. Exactly one of the two lists is set:
/// the one in the model's dtype.
struct NeighborInput {
  const data::NeighborList<float>* list_float = nullptr;
  const data::NeighborList<double>* list_double = nullptr;
  const int* types = nullptr;  ///< [natoms] type ids
  int64_t natoms = 0;          ///< owned + ghost atoms
  int64_t nlocal = 0;          ///< owned atoms, [0, nlocal): only their energies count
};

/// Atoms as a graph (docs/lammps.md "The graph of a rank"), for models whose energy depends on
/// atoms beyond one cutoff (message passing), and for the TorchScript forward of any model:
/// nodes are distinct atoms, the owned ones first; the pairs are directed (i, j), with their
/// vectors d_ij = r_j - r_i + shift (periodic images resolved).
struct AtomGraph {
  int64_t nodes = 0;                   ///< distinct atoms
  int64_t nlocal = 0;                  ///< owned atoms, nodes [0, nlocal): only their energies count
  const int64_t* types = nullptr;      ///< [nodes] type ids
  int64_t npairs = 0;                  ///< directed pairs (i, j)
  const int64_t* centre = nullptr;     ///< [npairs] node i, non-decreasing
  const int64_t* neighbour = nullptr;  ///< [npairs] node j
  const double* vectors = nullptr;     ///< [npairs * 3] Å, d_ij, row-major
  /// For evaluations from positions (the TorchScript forward, docs/deploy.md "Interface"): [nodes
  /// * 3] Å; null when only the vectors are given.
  const double* positions = nullptr;
  /// [9] Å, row-major cell vectors a, b, c (all zero for a frame without a cell); null: the
  /// identity (shifts then in Å).
  const double* cell = nullptr;
  /// [npairs * 3]: the shift of each pair in cell vectors (Å when cell is null), so that
  /// d_ij = positions[j] - positions[i] + shift · cell; null: no shifts. Only with positions.
  const double* shifts = nullptr;
  /// [3] whether the frame is periodic along each cell vector (forward's optional input `pbc`,
  /// which a long-range model reads, docs/long_range.md); null: not said.
  const bool* pbc = nullptr;
};

/// What an evaluation gives besides energy, forces and virial, which it always gives.
struct Outputs {
  bool atomic_energy = false;  ///< each owned atom's energy
  bool atom_virial = false;    ///< each atom's virial (NeighborInput)
  bool pair_gradient = false;  ///< dE/dd_ij of each pair (AtomGraph)
  bool charges = false;        ///< each atom's charge, from a model that has them (model.long_range)
};

/// One evaluation (docs/models.md "Inference"): the atoms as a neighbour list or as a graph,
/// with the graph optionally an exchange of per-atom features between MD ranks, and the outputs
/// wanted. Exactly one of `neighbors` and `graph` is set, the one the inference's inputs() accept.
struct Request {
  const NeighborInput* neighbors = nullptr;
  const AtomGraph* graph = nullptr;
  /// With `graph`: the layers' features of ghost nodes come from their owners through it
  /// (docs/lammps.md "Features exchanged between ranks"), whose rows are the graph's nodes (owned
  /// first); the centres are then the owned nodes only and the pairs those within one cutoff.
  /// Energies, forces and pair gradients are then the total energy's, all ranks together. Only
  /// for an inference whose inputs().exchange_width > 0.
  GhostExchange* exchange = nullptr;
  /// For a model with charges (InferenceInputs::charges): the long-range term computed outside
  /// the inference (models/charge_coupling.h), which gets the owned atoms' raw charges and gives
  /// back the energy's gradient by them. Required for such a model; null for any other.
  ChargeCoupling* charge_coupling = nullptr;
  Outputs outputs;
};

/// What an evaluation returns for the atoms of one request (the owned atoms first, then the
/// others). Units: eV, Å. Reduced in float64 whatever the model's dtype.
struct InferenceResult {
  double energy = 0;                ///< eV, the owned atoms' energies summed
  std::vector<double> forces;       ///< [natoms * 3] eV/Å, -dE/dr of every atom (node), ghosts included
  std::array<double, 9> virial{};   ///< eV, -sum over pairs of d_ij ⊗ dE/dd_ij, row-major
  std::vector<double> atomic;       ///< [nlocal] eV, when asked
  std::vector<double> atom_virial;  ///< [natoms * 9] eV, each pair's half to i and to j, when asked
  std::vector<double> pair_gradient;  ///< [npairs * 3] eV/Å, dE/dd_ij of each pair of a graph, when asked
  /// [natoms] e, each atom's charge, when asked and the model has charges (docs/long_range.md);
  /// empty otherwise. With a charge coupling: [nlocal], the owned atoms' raw charges (before the
  /// shift to the total, which the coupling applies).
  std::vector<double> charges;
  /// [counters().size()]: this evaluation's count of each of the inference's counters.
  std::vector<int64_t> counts;
};

/// Something an inference counts per evaluation and the MD code reports (docs/lammps.md
/// "Counters"): e.g. a compressed model's pairs beyond its tables.
struct Counter {
  std::string name;  ///< short name, e.g. "pairs beyond tables"
  /// Report every this many MD steps (<= 0: at the end of the run only).
  int64_t report_every = 0;
  /// The phrase after the count in a report of some steps, e.g. "pair(s) beyond the compressed
  /// model's tables, closer than any in its training data (evaluated by its exact embedding nets)";
  /// such reports are warnings, made only when the count is not zero.
  std::string interval_phrase;
  /// The phrase after the count in the end-of-run report (always made), e.g. "pair(s) beyond
  /// the compressed model's tables over the run".
  std::string run_phrase;
};

/// The inputs an inference evaluates, declared once and checked when a model is loaded.
struct InferenceInputs {
  bool neighbor_list = false;  ///< Request::neighbors
  bool graph = false;          ///< Request::graph
  /// > 0: it also evaluates a graph with Request::exchange, exchanging rows of at most this many
  /// values per atom between layers; 0: it does not exchange (ghosts then reach
  /// message_layers · cutoff, docs/lammps.md).
  int64_t exchange_width = 0;
  /// The model has a charge head (model.long_range): a request must give a charge coupling
  /// (Request::charge_coupling), and the energy, forces and virial it returns are then E_short's
  /// and those through the charges; E_long's own are the coupling's.
  bool charges = false;
};

/// A frozen model's evaluator (docs/models.md "Inference"): the model's own hand-written
/// inference, or its TorchScript forward (models/torchscript_inference.h). The MD layer and
/// `mlip test` build the input and call evaluate(); they know no model type.
class Inference {
 public:
  virtual ~Inference() = default;
  /// One phrase for summaries, e.g. "hand-written se_e2_a inference".
  virtual std::string describe() const = 0;
  /// The pair cutoff, Å.
  virtual double cutoff() const = 0;
  /// The inputs it accepts.
  virtual InferenceInputs inputs() const = 0;
  /// What it counts (InferenceResult::counts in this order); none by default.
  virtual std::vector<Counter> counters() const { return {}; }
  /// Energy, forces and virial of the request's atoms and the outputs it asks for. Throws
  /// mlip::Error for a request whose input inputs() does not accept.
  virtual InferenceResult evaluate(const Request& request) = 0;

 protected:
  /// The error for a request this inference cannot evaluate.
  [[noreturn]] void refuse(const Request& request) const;
  /// Throws mlip::Error when the request's charge coupling does not match inputs().charges (a
  /// model with charges needs one, a model without refuses one).
  void check_charge_coupling(const Request& request) const;
};

}  // namespace mlip::models
