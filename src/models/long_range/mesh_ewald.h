#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "models/long_range/long_range.h"

namespace mlip::models {

/// The reciprocal-space sum of ReciprocalSum computed on a mesh (smooth particle-mesh Ewald,
/// docs/long_range.md "On a mesh"), for MD with many atoms: the charges are spread onto a grid
/// along the cell's axes with B-splines, the grid is Fourier transformed, each k-term weighted
/// as ReciprocalSum weighs it, and the potentials interpolated back. Its cost grows as N, not as
/// N times the number of k-vectors; it approximates ReciprocalSum to the accuracy its order and
/// grid give (test_long_range measures it).
///
/// For MD across ranks: each rank spreads its own atoms onto the whole grid, the ranks sum the
/// grids, every rank solves (the FFT of a grid of ~1 point per Å³), and each rank interpolates
/// its own atoms. Arrays as ReciprocalSum's; grids [K0 * K1 * K2] row-major (axis a along the
/// lattice vector a_a).
class MeshSum {
 public:
  /// order: the B-splines' order (even, 4 to 12); oversampling: grid points along each axis per
  /// integer n of the k-vectors kept (at least 1; the grid holds every n with |k| < k_end).
  MeshSum(const LongRangeSettings& settings, const double* cell, int order = 8, double oversampling = 1.5);

  /// K0, K1, K2.
  const std::array<int64_t, 3>& grid() const { return grid_; }
  int64_t grid_size() const { return grid_[0] * grid_[1] * grid_[2]; }

  /// Adds these atoms' spread charges to `mesh` (resized and zeroed when empty).
  void spread(int64_t n, const double* positions, const double* charges, std::vector<double>& mesh) const;
  /// From the summed charge mesh: E_long (eV, as ReciprocalSum::energy), the potential mesh
  /// ∂E/∂mesh (eV/e) into `potential_mesh`, and the fixed-charge virial [9] (eV) when not nullptr.
  double solve(const std::vector<double>& mesh, double charge_sum, double charge_square_sum,
               std::vector<double>& potential_mesh, double* virial) const;
  /// For these atoms: potentials φ_i (eV/e) and fixed-charge forces (eV/Å), either may be nullptr.
  void potentials_and_forces(const std::vector<double>& potential_mesh, double charge_sum, int64_t n,
                             const double* positions, const double* charges, double* potentials, double* forces) const;

 private:
  /// The grid points the atom at `r` touches along each axis (wrapped indices) and the spline values
  /// and derivatives (by the grid coordinate) there: each [3][order].
  void stencil(const double* r, int64_t* index, double* value, double* slope) const;

  /// The transforms between the grid and the box of kept n (docs/long_range.md "On a mesh"):
  /// only n with |n_a| <= reach_a (and n_2 >= 0, the real transform's half) can have C(n) ≠ 0,
  /// so each axis' transform keeps only those lines, and the inverse starts from them.
  torch::Tensor to_box(const torch::Tensor& grid) const;
  torch::Tensor from_box(const torch::Tensor& box) const;

  LongRangeSettings settings_;
  int order_;
  std::array<int64_t, 3> grid_{};
  std::array<int64_t, 3> reach_{};  // the largest |n_a| of a kept term
  double volume_ = 0;
  double inverse_[9] = {};  // cell⁻¹
  // [2 r0 + 1, 2 r1 + 1, r2 + 1] C(n) = weight/2 |B(n)|², the full-sum weight of |F(Q)(n)|², on
  // the box of n_a in [-r_a, r_a] (n_2 >= 0; index n_a, or 2 r_a + 1 + n_a for n_a < 0).
  std::vector<double> coefficient_;
  // The box's points with C(n) ≠ 0: flat index, k [3], and C(n) and slope/2 |B(n)|² times
  // the number of points of the full grid each stands for (n and -n).
  std::vector<int64_t> kept_;
  std::vector<double> kept_k_, kept_energy_, kept_slope_;
};

}  // namespace mlip::models
