#pragma once

#include <cstdint>
#include <vector>

#include "models/long_range/long_range.h"

namespace mlip::models {

/// A cell's reciprocal-space facts both host sums need (docs/long_range.md "The k-vectors").
struct ReciprocalCell {
  /// Throws mlip::Error when the cell [9] (rows the lattice vectors, Å) is singular.
  ReciprocalCell(const LongRangeSettings& settings, const double* cell);
  double volume = 0;       ///< Å³
  double inverse[9] = {};  ///< cell⁻¹ (row-major), 1/Å: fractional coordinates s = r cell⁻¹
  /// The largest |n_a| any k-vector inside k_end can have: floor(k_end |a_a| / 2π).
  int64_t reach[3] = {0, 0, 0};
  /// The k-vector 2π n cell⁻ᵀ of the integer vector n, 1/Å.
  void k_of(const int64_t n[3], double k[3]) const;
  /// The term of n (n ≠ 0): its k-vector and reciprocal_weight()'s weight and slope; false (and
  /// nothing else) when |k| >= k_end, where the term is zero.
  bool term(const LongRangeSettings& settings, const int64_t n[3], double k[3], double& weight, double& slope) const;
};

/// The weight of one term, (4π k_e / V) w(|k|) exp(-σ²k²/2) / k² (eV Å), and its slope
/// d weight / d|k| divided by |k|; `volume` Å³, `k2` = |k|² 1/Å².
void reciprocal_weight(const LongRangeSettings& settings, double volume, double k2, double& weight, double& slope);
/// E_self's coefficient k_e / (σ √(2π)) (eV / e²) and E_background's π k_e σ² (eV Å³ / e²).
double self_coefficient(const LongRangeSettings& settings);
double background_coefficient(const LongRangeSettings& settings);

/// The long-range energy of fixed charges in float64 (docs/long_range.md), computed on the host
/// in the stages MD across ranks needs: each rank adds its own atoms' terms to the structure
/// factor, the ranks sum it, and each rank then takes its own atoms' potentials and forces from
/// the sum. The TorchScript source (long_range_source) computes the same numbers by autograd.
///
/// Arrays: positions [n * 3] Å, charges [n] e, potentials [n] eV/e, forces [n * 3] eV/Å,
/// cell and virial [9] row-major (cell rows: the lattice vectors, Å; virial eV).
class ReciprocalSum {
 public:
  /// The k-vectors of this cell: one of each ±k pair with |k| < k_end. Throws mlip::Error when the
  /// cell is singular.
  ReciprocalSum(const LongRangeSettings& settings, const double* cell);

  /// The number K of k-vectors (one of each ±k pair).
  int64_t size() const { return int64_t(weight_.size()); }
  /// Å³.
  double volume() const { return volume_; }
  /// The k-vectors [K * 3] (1/Å), their integer vectors n [K * 3] (k = 2π n cell⁻ᵀ; n_0 >= 0),
  /// weights [K] (eV Å, reciprocal_weight()'s) and weight slopes [K]; the largest |n_a| [3].
  const std::vector<double>& k_vectors() const { return k_; }
  const std::vector<int64_t>& integer_vectors() const { return n_; }
  const std::vector<double>& weights() const { return weight_; }
  const std::vector<double>& weight_slopes() const { return weight_slope_; }
  const int64_t* reach() const { return reach_; }

  /// Adds these atoms' terms to the structure factor `s` [2K] (S(k)'s real parts, then its
  /// imaginary parts; resized to 2K and zeroed when empty).
  void add_structure_factor(int64_t n, const double* positions, const double* charges, std::vector<double>& s) const;

  /// E_long of the whole system, eV, from its structure factor, the sum of its charges and the sum
  /// of their squares.
  double energy(const std::vector<double>& s, double charge_sum, double charge_square_sum) const;
  /// For these atoms (any subset of the system): φ_i = ∂E_long/∂q_i (eV/e) and, with fixed
  /// charges, F_i = -∂E_long/∂r_i (eV/Å); either output may be nullptr.
  void potentials_and_forces(const std::vector<double>& s, double charge_sum, int64_t n, const double* positions,
                             const double* charges, double* potentials, double* forces) const;
  /// The fixed-charge virial W = -∂E/∂ε (a homogeneous strain of positions and cell), eV.
  void virial(const std::vector<double>& s, double charge_sum, double* virial) const;
  /// Each of these atoms' share of virial() [n * 9] (eV): its own part of every term, q_i Re(S(k)*
  /// e^{ik·r_i}) in place of |S(k)|² and Q q_i in place of Q²; the shares of all atoms sum to virial().
  void atom_virials(const std::vector<double>& s, double charge_sum, int64_t n, const double* positions,
                    const double* charges, double* virials) const;

 private:
  LongRangeSettings settings_;
  std::vector<double> k_;       // [K * 3] 1/Å
  std::vector<int64_t> n_;      // [K * 3]
  int64_t reach_[3] = {0, 0, 0};
  std::vector<double> weight_;  // [K] (4π k_e / V) w(k) exp(-σ²k²/2) / k², eV Å
  std::vector<double> weight_slope_;  // [K] d weight / d|k| divided by |k|
  double volume_ = 0;
};

/// The direct sum k_e Σ_{i<j} q_i q_j erf(r_ij / (√2 σ)) / r_ij of n atoms without a cell, eV;
/// fills potentials [n] and fixed-charge forces [n * 3] and virial [9] where not nullptr.
double direct_sum(const LongRangeSettings& settings, int64_t n, const double* positions, const double* charges,
                  double* potentials, double* forces, double* virial);
/// The direct sum's part of the atoms [first, first + count) of the n atoms (an MD rank's own atoms
/// among all ranks' atoms): their potentials φ_i [count] (eV/e), fixed-charge forces [count * 3]
/// (eV/Å) and virials [count * 9] (eV, half of each pair's to each of its atoms), where not
/// nullptr; returns their energies Σ ½ q_i φ_i (eV), which summed over every part are E_long.
double direct_sum_part(const LongRangeSettings& settings, int64_t n, const double* positions, const double* charges,
                       int64_t first, int64_t count, double* potentials, double* forces, double* virials);

}  // namespace mlip::models
