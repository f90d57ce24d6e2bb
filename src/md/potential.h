#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "md/long_range_solver.h"
#include "md/rank_collectives.h"
#include "models/ghost_exchange.h"
#include "models/inference.h"

namespace mlip::md {

/// The MD code's exchange of per-atom rows between atoms and their ghost copies (a LAMMPS pair
/// style's forward and reverse communication).
using GhostExchange = models::GhostExchange;

/// One MD rank's atoms as an MD code holds them (docs/lammps.md): the owned atoms first, then
/// the ghost atoms (periodic images and other ranks' atoms near the rank's region), every
/// position already imaged, so pair vectors are plain differences (no cell, no shifts).
struct LocalAtoms {
  const double* positions = nullptr;  ///< [natoms, 3] Å, row-major
  const int* types = nullptr;         ///< [natoms] model type ids, 0 <= id < type_names().size()
  int64_t natoms = 0;                 ///< owned + ghost atoms
  int64_t nlocal = 0;                 ///< owned atoms: [0, nlocal)
  /// [natoms] global atom ids (LAMMPS' tags), or null. With ids, ghosts that image an atom already
  /// present are folded onto it (docs/lammps.md "The graph of a rank"): a message-passing model
  /// then evaluates each distinct atom once; without, every ghost is an atom of its own.
  const int64_t* ids = nullptr;
  /// The MD code's ghost exchange, or null. When given and the model exchanges features between
  /// layers (Potential::exchange_width() > 0), the ghosts need reach only Potential::cutoff()
  /// (plus skin) beyond the owned atoms, each ghost is evaluated as an atom of its own, and every
  /// rank must call compute() at the same step (the exchange is collective).
  GhostExchange* exchange = nullptr;
  /// For a model with charges (Potential::long_range(); docs/lammps.md "Long range across ranks"):
  /// [9] Å, row-major, the box's lattice vectors as rows (read when periodic), or null.
  const double* cell = nullptr;
  /// Whether the box is periodic along all three lattice vectors (the reciprocal sum over `cell`)
  /// or along none (the direct sum over every rank's atoms); partly periodic boxes are refused.
  bool periodic = false;
  /// Sums and gathers over the MD ranks for a model with charges, or null on one rank; every rank
  /// must then call compute() at the same step (they are collective).
  RankCollectives* ranks = nullptr;
};

/// What compute() gives, in float64 whatever the model's dtype.
struct Results {
  double energy = 0;                  ///< eV, the owned atoms' energies summed
  std::vector<double> atomic_energy;  ///< [nlocal] eV (when asked)
  std::vector<double> forces;         ///< [natoms * 3] eV/Å, -dE/dr; a ghost's force belongs to its owner
  std::array<double, 9> virial{};     ///< eV, row-major, -sum over pairs of d_ij ⊗ dE/dd_ij
  std::vector<double> atom_virial;    ///< [natoms * 9] eV, each pair's half to each atom (when asked)
  /// [nlocal] e, the owned atoms' charges, shifted to the total (a model with charges only;
  /// docs/long_range.md); empty otherwise.
  std::vector<double> charges;
  /// [Potential::counters().size()]: this call's count of each of the model's counters, to be
  /// reported (docs/lammps.md "Counters"; e.g. a compressed model's pairs beyond its tables).
  std::vector<int64_t> counts;
};

/// Where compute()'s time went, seconds summed over calls.
struct Timings {
  double neighbor_list = 0;  ///< the pairs within the cutoff (and the environment matrix for se_e2_a)
  double model = 0;          ///< the model: energies, forces, virial
  double long_range = 0;     ///< within `model`: a model with charges' long-range term, its sums over the ranks included
  int64_t calls = 0;
  int64_t model_atoms = 0;   ///< atoms given to the model (owned + the ghosts it needs), summed over calls
};

/// How compute() evaluates a model.
enum class Evaluation {
  kAuto,         ///< the fastest exact path: the model's own inference on the CPU (models/inference.h), else kTorchScript
  kTorchScript,  ///< the frozen module's forward(data) with autograd (docs/deploy.md), any model, any device
};

/// Where compute() finds the pairs of a TorchScript evaluation (docs/lammps.md "Pairs on the device").
enum class PairBuilding {
  kAuto,    ///< on the device for a CUDA device with the TorchScript forward, else on the host
  kHost,    ///< the Kokkos neighbour list and the graph on the host, copied to the device
  kDevice,  ///< the graph built with tensor operations on the model's device (any device; one layer's
            ///< exchange between ranks, LocalAtoms::exchange, still builds on the host)
};

/// A model frozen by `mlip freeze`, evaluated on an MD rank's atoms. Loading checks that the file
/// is a frozen mlip model of a recent enough interface and that the device can run it; every
/// problem is an mlip::Error naming the file.
class Potential {
 public:
  /// path: the frozen model (.pt); device: "cpu", "cuda" or "cuda:K"; pairs: where the graph of
  /// the TorchScript forward is built (the model's own inference always takes the host's list).
  Potential(const std::string& path, const std::string& device, Evaluation evaluation = Evaluation::kAuto,
            PairBuilding pairs = PairBuilding::kAuto);
  ~Potential();
  Potential(const Potential&) = delete;
  Potential& operator=(const Potential&) = delete;

  /// The model's type names: type id k is type_names()[k].
  const std::vector<std::string>& type_names() const;
  /// "se_e2_a" or "equivariant".
  const std::string& model_type() const;
  /// "float64" or "float32".
  const std::string& dtype() const;
  /// The pair cutoff r_max, Å.
  double cutoff() const;
  /// Message-passing layers L (1 for se_e2_a).
  int64_t message_layers() const;
  /// The widest row of per-atom values exchanged between layers (LocalAtoms::exchange), 0 when
  /// this model and evaluation exchange nothing (se_e2_a, one layer, the TorchScript forward).
  int64_t exchange_width() const;
  /// How far ghost atoms must reach beyond the owned atoms for exact owned energies, Å: r_max
  /// when compute() is given an exchange (`with_exchange`) and exchange_width() > 0, else L · r_max.
  double ghost_cutoff(bool with_exchange = false) const {
    return with_exchange && exchange_width() > 0 ? cutoff() : double(message_layers()) * cutoff();
  }
  /// Whether compute() builds the graph on the model's device (PairBuilding; without an exchange).
  bool pairs_on_device() const;
  /// One line: model, dtype, device, evaluation path and where the pairs are built.
  std::string describe() const;
  /// Whether the model has charges and a long-range term (model.long_range): compute() then needs
  /// LocalAtoms::cell, periodic and, across ranks, ranks.
  bool long_range() const;
  /// How the periodic long-range sum is computed (kAuto by default; docs/lammps.md "Long range
  /// across ranks"); the choice kAuto makes, once made at the first step.
  void set_long_range_solver(LongRangeSolver solver);
  LongRangeSolver long_range_solver() const;
  /// What the model's evaluation counts and the MD code reports (Results::counts in this order;
  /// docs/lammps.md "Counters"), each with its report interval; empty for most models.
  std::vector<models::Counter> counters() const;

  /// Energy, forces and virial of `atoms` (docs/lammps.md "Per step"): pairs (i, j) within the
  /// cutoff with centre i owned (or, for L > 1, within L - 1 hops of an owned atom); only owned
  /// atoms' energies count. atomic_energy / atom_virial: also fill those.
  void compute(const LocalAtoms& atoms, bool atomic_energy, bool atom_virial, Results& out);
  const Timings& timings() const;
  void reset_timings();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mlip::md
