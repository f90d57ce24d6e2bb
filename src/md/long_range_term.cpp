#include "md/long_range_term.h"

#include <algorithm>
#include <chrono>

#include "error.h"
#include "models/long_range/ewald.h"
#include "models/long_range/mesh_ewald.h"

namespace mlip::md {

LongRangeTerm::LongRangeTerm(const models::LongRangeSettings& settings, const double* positions, int64_t nlocal,
                             const double* cell, bool periodic, RankCollectives* ranks, LongRangeSolver& solver,
                             LongRangeCache& cache, bool atom_virials)
    : settings_(settings),
      positions_(positions),
      nlocal_(nlocal),
      cell_(cell),
      periodic_(periodic),
      ranks_(ranks),
      solver_(solver),
      cache_(cache),
      want_atom_virial_(atom_virials) {
  if (periodic_ && cell_ == nullptr) throw Error("model.long_range: a periodic box without its cell");
}

void LongRangeTerm::sum(double* values, int64_t n) const {
  if (ranks_ != nullptr) ranks_->sum(values, n);
}

void LongRangeTerm::couple(const double* raw, int64_t nlocal, double* gradient) {
  if (nlocal != nlocal_) throw Error("model.long_range: the charges of " + std::to_string(nlocal) +
                                     " atoms for a term of " + std::to_string(nlocal_));
  const auto start = std::chrono::steady_clock::now();
  // docs/long_range.md "The charge heads": every charge moves by the same amount, so that all
  // ranks' charges together sum to the total.
  double totals[3] = {0, double(nlocal), 1};  // Σ q̃, atoms, ranks
  for (int64_t i = 0; i < nlocal; ++i) totals[0] += raw[i];
  sum(totals, 3);
  const double atoms = totals[1], rank_count = totals[2];
  const double shift = atoms > 0 ? (totals[0] - settings_.total_charge) / atoms : 0.0;
  charges_.resize(size_t(nlocal));
  for (int64_t i = 0; i < nlocal; ++i) charges_[size_t(i)] = raw[i] - shift;
  std::vector<double> potentials(size_t(nlocal), 0.0);
  forces_.assign(size_t(nlocal) * 3, 0.0);
  virial_.fill(0.0);
  atom_virial_.assign(want_atom_virial_ ? size_t(nlocal) * 9 : 0, 0.0);
  if (periodic_) {
    periodic_sum(int64_t(atoms), settings_.total_charge, potentials);
    for (double& w : virial_) w /= rank_count;  // the whole system's, computed alike on every rank
  } else {
    direct(potentials);
  }
  atomic_energy_.resize(size_t(nlocal));
  energy_ = 0;
  double potential_sum = 0;
  for (int64_t i = 0; i < nlocal; ++i) {
    atomic_energy_[size_t(i)] = 0.5 * charges_[size_t(i)] * potentials[size_t(i)];
    energy_ += atomic_energy_[size_t(i)];
    potential_sum += potentials[size_t(i)];
  }
  // ∂E/∂q̃_k = φ_k − (1/N) Σ_i φ_i: the shift's dependence on every raw charge.
  sum(&potential_sum, 1);
  const double mean = atoms > 0 ? potential_sum / atoms : 0.0;
  for (int64_t i = 0; i < nlocal; ++i) gradient[i] = potentials[size_t(i)] - mean;
  seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void LongRangeTerm::periodic_sum(int64_t total_atoms, double charge_sum, std::vector<double>& potentials) {
  if (!std::equal(cell_, cell_ + 9, cache_.cell.begin()) || (!cache_.ewald && !cache_.mesh)) {
    cache_.ewald.reset();
    cache_.mesh.reset();
    std::copy(cell_, cell_ + 9, cache_.cell.begin());
  }
  if (solver_ == LongRangeSolver::kAuto) {
    // Decided alike on every rank: the atoms and the cell are the whole system's. The k-vectors
    // made to count them are the cache's when the sum over them is chosen.
    models::ReciprocalSum sizes(settings_, cell_);
    solver_ = double(total_atoms) * double(sizes.size()) > kMeshAbove ? LongRangeSolver::kMesh : LongRangeSolver::kEwald;
    if (solver_ == LongRangeSolver::kEwald && !cache_.ewald) cache_.ewald.emplace(std::move(sizes));
  }
  if (solver_ == LongRangeSolver::kEwald) {
    if (!cache_.ewald) cache_.ewald.emplace(settings_, cell_);
    const models::ReciprocalSum& ewald = *cache_.ewald;
    std::vector<double> s(size_t(2 * ewald.size()), 0.0);
    ewald.add_structure_factor(nlocal_, positions_, charges_.data(), s);
    sum(s.data(), int64_t(s.size()));
    ewald.potentials_and_forces(s, charge_sum, nlocal_, positions_, charges_.data(), potentials.data(),
                                forces_.data());
    ewald.virial(s, charge_sum, virial_.data());
    if (want_atom_virial_)
      ewald.atom_virials(s, charge_sum, nlocal_, positions_, charges_.data(), atom_virial_.data());
    return;
  }
  if (want_atom_virial_)
    throw Error(
        "model.long_range: per-atom virials (compute stress/atom) of the long-range term come from the k-vector "
        "sum only, not the mesh: use pair_style mlip ... kspace ewald");
  if (!cache_.mesh) cache_.mesh.emplace(settings_, cell_);
  const models::MeshSum& mesh = *cache_.mesh;
  std::vector<double>& grid = cache_.grid;
  std::vector<double>& potential_grid = cache_.potential_grid;
  grid.assign(size_t(mesh.grid_size()), 0.0);  // the kept capacity: no allocation after the first step
  mesh.spread(nlocal_, positions_, charges_.data(), grid);
  sum(grid.data(), int64_t(grid.size()));
  mesh.solve(grid, charge_sum, 0.0, potential_grid, virial_.data());  // the energy is taken as Σ ½ q φ
  mesh.potentials_and_forces(potential_grid, charge_sum, nlocal_, positions_, charges_.data(), potentials.data(),
                             forces_.data());
}

void LongRangeTerm::direct(std::vector<double>& potentials) {
  // Every rank's atoms: the direct sum runs over all pairs (docs/lammps.md "Long range across ranks").
  std::vector<double> rows(size_t(nlocal_) * 4), all;
  for (int64_t i = 0; i < nlocal_; ++i) {
    std::copy(positions_ + 3 * i, positions_ + 3 * i + 3, rows.begin() + 4 * i);
    rows[size_t(4 * i + 3)] = charges_[size_t(i)];
  }
  int64_t first = 0;
  if (ranks_ != nullptr) {
    first = ranks_->gather(rows.data(), int64_t(rows.size()), all) / 4;
  } else {
    all = rows;
  }
  const int64_t n = int64_t(all.size()) / 4;
  std::vector<double> pos(size_t(n) * 3), q(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) {
    std::copy(all.begin() + 4 * j, all.begin() + 4 * j + 3, pos.begin() + 3 * j);
    q[size_t(j)] = all[size_t(4 * j + 3)];
  }
  std::vector<double> atom_virial(size_t(nlocal_) * 9, 0.0);
  models::direct_sum_part(settings_, n, pos.data(), q.data(), first, nlocal_, potentials.data(), forces_.data(),
                          atom_virial.data());
  for (int64_t i = 0; i < nlocal_; ++i)
    for (int c = 0; c < 9; ++c) virial_[size_t(c)] += atom_virial[size_t(9 * i + c)];
  if (want_atom_virial_) atom_virial_ = std::move(atom_virial);
}

}  // namespace mlip::md
