#pragma once

#include <torch/script.h>

#include <cstdint>
#include <vector>

#include "data/neighbor_list.h"

namespace mlip::models {

/// Cutoff and slot layout of the se_e2_a environment matrix (docs/se_e2_a.md).
struct EnvMatrixParams {
  double rcut = 6.0;       ///< Å
  double rcut_smth = 0.5;  ///< Å, w(r) = 1 below it
  /// Slots per neighbour type; N_c = sum(sel). Type t owns slots [sum(sel[<t]), sum(sel[<=t])).
  std::vector<int64_t> sel;

  int64_t nslots() const;
  /// Throws mlip::Error naming the key (descriptor.rcut, .rcut_smth, .sel) that is invalid.
  void validate() const;
};

/// The environment matrix of one frame. Tensors live on the CPU, dtype of the neighbour list
/// (float32 or float64); empty slots hold zeros (and -1 in nlist).
struct EnvMatrix {
  /// [N, N_c, 4] raw rows R = (s, s x/r, s y/r, s z/r), s = w(r)/r, not normalised.
  torch::Tensor rij;
  /// [N, N_c, 4, 3] dR/dd, the derivative of each row with respect to the pair vector d_ij.
  torch::Tensor drij;
  /// [N, N_c, 3] pair vectors d_ij = r_j - r_i + shift * cell, Å.
  torch::Tensor vec;
  /// [N, N_c] int64 index j of the neighbour in each slot, -1 for an empty slot.
  torch::Tensor nlist;
  /// Number of (centre, neighbour type) blocks that had more neighbours than sel.
  int64_t truncated_blocks = 0;
  /// Number of neighbours dropped by those truncations.
  int64_t dropped_neighbors = 0;
};

/// Fills the environment matrix from a full neighbour list (with a cutoff >= params.rcut; pairs
/// beyond rcut are ignored). Within each type block the nearest neighbours come first (ties
/// broken by neighbour index and shift, so the result does not depend on the list's order) and
/// at most sel[t] are kept. types: the type id of each atom, 0 <= id < sel.size(), for the
/// nl.natoms centres and every atom that is only a neighbour (a list built with `centres`).
/// Runs as Kokkos kernels writing straight into the tensors' memory.
template <typename Real>
EnvMatrix compute_env_matrix(const data::NeighborList<Real>& nl, const std::vector<int>& types,
                             const EnvMatrixParams& params);

/// The smooth switch w(r) of docs/se_e2_a.md and its derivative dw/dr (for tests and the model).
double switch_function(double r, double rcut_smth, double rcut, double* dw_dr = nullptr);

/// Accumulates the davg/dstd statistics of docs/se_e2_a.md over frames, per centre type, over all
/// N_c slots including empty ones, in float64.
class EnvStat {
 public:
  EnvStat(int ntypes, int64_t nslots);
  /// Adds one frame: env.rij [N, N_c, 4], types [N].
  void add(const EnvMatrix& env, const std::vector<int>& types);
  /// [ntypes, 4] float64: (avg_r, 0, 0, 0) per centre type (0 for a type never seen).
  torch::Tensor davg() const;
  /// [ntypes, 4] float64: (std_r, std_a, std_a, std_a), each at least 1e-2 (1 for a type
  /// never seen).
  torch::Tensor dstd() const;
  /// Number of centre atoms of type t accumulated.
  int64_t count(int t) const { return count_[size_t(t)]; }

 private:
  int ntypes_;
  int64_t nslots_;
  std::vector<double> sum_r_, sum_r2_, sum_a_, sum_a2_;
  std::vector<int64_t> count_;
};

}  // namespace mlip::models
