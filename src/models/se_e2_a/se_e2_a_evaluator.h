#pragma once

#include <torch/script.h>

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "models/charge_coupling.h"
#include "models/se_e2_a/env_matrix.h"
#include "models/se_e2_a/se_e2_a.h"

namespace mlip::data {
template <typename Real>
struct NeighborList;
}  // namespace mlip::data

namespace mlip::models {

/// The real (non-empty) slots of one or more frames' environment matrices, grouped by embedding
/// net and sorted by centre atom: what SeAEvaluator consumes. Empty slots are not stored;
/// their number per (atom, neighbour type) follows from sel and the offsets.
struct PackedEnv {
  /// Pairs of one embedding net: neighbour type t (type_one_side) or centre type ti and
  /// neighbour type t (net ti * ntypes + t).
  struct Group {
    std::vector<int64_t> offsets;   ///< [natoms + 1]: pairs of atom i are [offsets[i], offsets[i+1])
    std::vector<int64_t> neighbor;  ///< [P] neighbour atom index (same numbering as the centres)
    torch::Tensor r;                ///< [P, 4] raw rows R (docs/se_e2_a.md), model dtype
    torch::Tensor dr;               ///< [P, 4, 3] dR/dd_ij
    torch::Tensor vec;              ///< [P, 3] pair vectors d_ij, Å
    /// [P] int64: where each pair sits in the dense environment matrix of the batch, as the
    /// flat index (centre * N_c + slot) into [nframes * natoms * N_c] (the device-generic
    /// path scatters the rows back there).
    torch::Tensor slot;
    /// [P] int64: the neighbour's index within its own frame (0 <= j < natoms).
    torch::Tensor neighbor_in_frame;
  };
  int64_t nframes = 0;
  int64_t natoms = 0;               ///< atoms per frame; centres are numbered frame * natoms + i
  int64_t nslots = 0;               ///< N_c = sum(sel): slots per centre of the dense matrix
  std::vector<Group> groups;

  /// Packs one frame (env from compute_env_matrix, types [N]); `with_slots` also fills each
  /// group's `slot` and `neighbor_in_frame` (16 bytes per pair, for the device-generic path).
  static PackedEnv pack(const EnvMatrix& env, const std::vector<int>& types, const SeAConfig& config,
                        bool with_slots = false);
  /// The packed pairs of one frame straight from a neighbour list, without the dense matrix
  /// (docs/lammps.md "Evaluation"): equal to pack(compute_env_matrix(nl, types, ...)) with the
  /// centres' types (the same pairs, order and values), for the nl.natoms centres. types: the
  /// type of every atom, centres and neighbours. Centres run in parallel (at::parallel_for).
  template <typename Real>
  static PackedEnv from_neighbor_list(const data::NeighborList<Real>& nl, const std::vector<int>& types,
                                     const SeAConfig& config);
  /// Concatenates frames with the same atoms into one batch; `with_slots` also concatenates
  /// `slot` and `neighbor_in_frame` (on the frames' device; the hand-written path needs neither).
  static PackedEnv concat(const std::vector<const PackedEnv*>& frames, bool with_slots = false);
  /// A copy with every tensor on `device` (the host vectors stay).
  PackedEnv to(const torch::Device& device) const;
  /// Memory held by the tensors and host vectors, bytes.
  int64_t bytes() const {
    int64_t b = 0;
    for (const Group& g : groups) {
      b += int64_t((g.offsets.size() + g.neighbor.size()) * sizeof(int64_t));
      for (const torch::Tensor* t : {&g.r, &g.dr, &g.vec, &g.slot, &g.neighbor_in_frame})
        if (t->defined()) b += int64_t(t->nbytes());
    }
    return b;
  }
};

/// se_e2_a's energy, forces and virial, written by hand, for training and for MD. forward() and
/// backward() run on batches and give the gradient of a loss of them with respect to the
/// parameters (`mlip train`); evaluate() runs one frame without a backward pass (an MD step,
/// through se_e2_a_inference.h). Both go through the same stages, written once: the embedding
/// nets ("embed"), the contraction of their outputs into the descriptor ("contract"), the
/// fitting nets ("fit"), and the adjoints of these that give the forces.
///
/// The embedding nets run forward with their derivative dG/ds carried along (one GEMM for
/// value and derivative), and backward() is the exact adjoint of that forward pass and of the
/// force computation (docs/se_e2_a.md "Forces and virial"), so that a force loss needs no double
/// backward through LibTorch's autograd. Only real pairs go through the embedding nets; the
/// empty slots enter in closed form.
///
/// It reads the parameters and buffers of a module made by build_se_e2_a (shared, not copied:
/// an optimiser stepping the module's parameters is seen at the next call) and accumulates the
/// gradients into the parameters' .grad(). It gives the same numbers as the module's
/// energy_force_env and autograd (tests/test_se_e2_a_evaluator.cpp).
class SeAEvaluator {
 public:
  SeAEvaluator(const SeAConfig& config, torch::jit::Module module);
  ~SeAEvaluator();
  SeAEvaluator(SeAEvaluator&&) noexcept;
  SeAEvaluator& operator=(SeAEvaluator&&) noexcept;

  struct Output {
    torch::Tensor energy;  ///< [B] float64, eV
    torch::Tensor atomic;  ///< [B, N] model dtype, eV
    torch::Tensor forces;  ///< [B, N, 3] model dtype, eV/Å
    torch::Tensor virial;  ///< [B, 3, 3] model dtype, eV
    /// [B, N] float64, e: with model.long_range (the generic path), the charges; else undefined.
    torch::Tensor charges;
  };

  /// Energies, forces and virials of a batch (frames of one system: types [N] per frame).
  /// Keeps what backward() needs.
  Output forward(const PackedEnv& batch, const std::vector<int>& types);

  /// After forward(): adds d loss / d parameter to every parameter's grad, given
  /// d loss / d energy [B] (float64), d loss / d forces [B, N, 3] and d loss / d virial
  /// [B, 3, 3] (any floating dtype; an undefined tensor counts as zero).
  void backward(const torch::Tensor& grad_energy, const torch::Tensor& grad_forces, const torch::Tensor& grad_virial);

  /// What evaluate() gives: float64 sums of the model-dtype arithmetic.
  struct Evaluation {
    double energy = 0;                    ///< eV, the centres' atomic energies summed
    std::vector<double> atomic;           ///< [centres] eV
    std::vector<double> forces;           ///< [natoms_total * 3] eV/Å, -dE/dr of every atom
    std::array<double, 9> virial{};       ///< eV, -sum over pairs of d_ij ⊗ dE/dd_ij (row-major)
    std::vector<double> atom_virial;      ///< [natoms_total * 9] eV, each pair's half to i and to j (if asked)
    /// [centres] e: each centre's raw charge (before the shift to the total), with a coupling only.
    std::vector<double> charges;
    /// A compressed model (docs/se_e2_a.md "Compression: the embedding nets as tables"): the
    /// pairs whose input lay beyond their net's table, evaluated by the net itself.
    int64_t beyond_tables = 0;
  };
  /// Inference without a backward pass (an MD step): one frame whose centres are the frame's
  /// natoms atoms, with neighbours among `natoms_total` atoms (the centres first, then atoms that
  /// are only neighbours: an MD rank's ghosts). types: [centres]. Works through the centres in
  /// cache-sized blocks, so its cost grows linearly with the atoms; the same numbers as forward().
  ///
  /// With `coupling` (a model with model.long_range, docs/long_range.md "In MD"): a first pass
  /// through the blocks gives every centre's raw charge, the coupling turns them into ∂E_long/∂q̃,
  /// and the second pass, as without, differentiates E_short + Σ ∂E_long/∂q̃_i q̃_i (the charges'
  /// seeds fixed): the forces and virial through the charges' dependence on positions. The energy
  /// and atomic energies are the short-range ones (the coupling's owner adds E_long).
  Evaluation evaluate(const PackedEnv& frame, const std::vector<int>& types, int64_t natoms_total,
                      bool atom_virial = false, ChargeCoupling* coupling = nullptr);

  /// evaluate() with a coupling keeps the first pass's embedding outputs for the second while they
  /// take at most this many bytes (default 512 MiB; pairs × M × 2 numbers), else makes them again:
  /// the same numbers either way.
  void set_kept_embedding_bytes(double bytes);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace mlip::models
