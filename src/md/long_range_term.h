// The long-range term of a model with charges in MD, summed over the ranks (docs/lammps.md
// "Long range across ranks").
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "md/long_range_solver.h"
#include "md/rank_collectives.h"
#include "models/charge_coupling.h"
#include "models/long_range/ewald.h"
#include "models/long_range/long_range.h"
#include "models/long_range/mesh_ewald.h"

namespace mlip::md {

/// The periodic sum's set-up for one cell (its k-vectors, or the mesh's weights), kept between
/// steps while the box stays the same (NVE, NVT); made anew when it changes (NPT).
struct LongRangeCache {
  std::array<double, 9> cell{};
  std::optional<models::ReciprocalSum> ewald;
  std::optional<models::MeshSum> mesh;
  /// The mesh's charge and potential grids, kept between steps so that they are not allocated
  /// anew each step (their values are made anew).
  std::vector<double> grid, potential_grid;
};

/// E_long of every rank's owned atoms, as the coupling of the model's charge head
/// (models/charge_coupling.h): couple() gets this rank's raw charges, shifts all ranks' charges
/// equally to the total, sums the structure factor (or the charge mesh) over the ranks, or
/// gathers every rank's atoms for the direct sum of a frame without a cell, and gives back
/// ∂E_long/∂q̃. Afterwards the accessors hold this rank's part: the energies, fixed-charge forces
/// and virials of its own atoms, which summed over the ranks are E_long's.
class LongRangeTerm : public models::ChargeCoupling {
 public:
  /// positions: [nlocal * 3] Å, this rank's owned atoms; cell: [9] Å, rows the lattice vectors,
  /// read when periodic; periodic: the box is periodic along all three vectors (else along none);
  /// ranks: null for one rank; solver: kAuto is resolved in place at the first call; cache: the
  /// set-up of the last cell, reused when `cell` is the same; atom_virials: also compute each
  /// owned atom's virial.
  LongRangeTerm(const models::LongRangeSettings& settings, const double* positions, int64_t nlocal, const double* cell,
                bool periodic, RankCollectives* ranks, LongRangeSolver& solver, LongRangeCache& cache,
                bool atom_virials);

  void couple(const double* raw, int64_t nlocal, double* gradient) override;

  /// eV, this rank's atoms' share of E_long (Σ ½ q_i φ_i).
  double energy() const { return energy_; }
  /// [nlocal] e, the charges (shifted to the total charge).
  const std::vector<double>& charges() const { return charges_; }
  /// [nlocal] eV, each owned atom's share ½ q_i φ_i.
  const std::vector<double>& atomic_energy() const { return atomic_energy_; }
  /// [nlocal * 3] eV/Å, -∂E_long/∂r_i at fixed charges (the force through the charges is the
  /// model's backward pass).
  const std::vector<double>& forces() const { return forces_; }
  /// [9] eV, row-major: this rank's share of the fixed-charge virial.
  const std::array<double, 9>& virial() const { return virial_; }
  /// [nlocal * 9] eV, each owned atom's share of it (when asked).
  const std::vector<double>& atom_virial() const { return atom_virial_; }
  /// Seconds couple() took (the sums over the ranks included).
  double seconds() const { return seconds_; }

 private:
  /// The sums over the ranks (identity on one rank).
  void sum(double* values, int64_t n) const;
  void periodic_sum(int64_t total_atoms, double charge_sum, std::vector<double>& potentials);
  void direct(std::vector<double>& potentials);

  models::LongRangeSettings settings_;
  const double* positions_;
  int64_t nlocal_;
  const double* cell_;
  bool periodic_;
  RankCollectives* ranks_;
  LongRangeSolver& solver_;
  LongRangeCache& cache_;
  bool want_atom_virial_;
  double energy_ = 0, seconds_ = 0;
  std::vector<double> charges_, atomic_energy_, forces_, atom_virial_;
  std::array<double, 9> virial_{};
};

}  // namespace mlip::md
