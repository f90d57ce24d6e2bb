#pragma once

#include <cstdint>
#include <vector>

#include "models/kernels/layer_rule.h"
#include "models/se_e2_a/fitting_adjoint.h"
#include "models/se_e2_a/se_e2_a.h"

namespace mlip::models {

/// The fitting net's output for an atom without neighbours, FN_t(D_isolated,t), per centre type
/// t, and its adjoint: what se_e2_a subtracts from every atomic energy when
/// config.isolated_energy_is_bias, so that an isolated atom's energy is exactly its bias
/// (docs/se_e2_a.md "Reference energies"). The steps are those of an atom whose slots are all
/// empty in SeAEvaluator (the same arithmetic, so the two agree to the last bit of T and D).
template <typename R>
class IsolatedAtomFit {
 public:
  IsolatedAtomFit(const SeAConfig& config, const std::vector<Layer>& fit_layers);

  /// params[t]: the fitting nets' parameters. e0[t]: the normalised s of an empty slot of centre
  /// type t. empty[t][u]: the embedding net's output G (M values) at that s, in the net of
  /// centre type t and neighbour type u (null where sel[u] = 0). used[t]: the types to compute.
  /// Keeps what backward() needs.
  void forward(const std::vector<typename FittingAdjoint<R>::Params>& params, const std::vector<double>& e0,
               const std::vector<std::vector<const R*>>& empty, const std::vector<bool>& used);

  /// FN_t(D_isolated,t) of the last forward(), eV (without the bias).
  R energy(int64_t t) const { return energy_[size_t(t)]; }

  /// After forward(): given energy_bar[t] = d loss / d energy(t) for the used types, adds
  /// d loss / d(fitting parameters) to their .grad() and returns d loss / dG of the empty inputs,
  /// [t][u] (M values each; empty where sel[u] = 0 or t unused).
  std::vector<std::vector<std::vector<R>>> backward(const std::vector<R>& energy_bar);

 private:
  SeAConfig config_;
  int64_t nt_, m_, ms_;
  std::vector<FittingAdjoint<R>> fit_;  // per centre type
  std::vector<int64_t> index_;          // [nt]: index_[t] = t, the row of type t in d_
  std::vector<bool> used_;
  std::vector<double> e0_;
  std::vector<R> t_;       // [nt, 4, M] T of the isolated atom (rows 1-3 zero)
  std::vector<R> d_;       // [nt, M * M<] D = T^T T<
  std::vector<R> energy_;  // [nt]
  std::vector<R> dedx_;    // [nt, M * M<] dE/dD
};

}  // namespace mlip::models
