#pragma once

#include <torch/script.h>

#include <string>

#include "models/settings_record.h"

namespace mlip::models {

/// model.long_range (docs/long_range.md): per-atom charges from a head on the model's invariant
/// features and the electrostatic energy of their Gaussian-smeared charges, added to the model's
/// short-range energy. One piece every model type calls.
struct LongRangeSettings {
  /// Whether the section is present.
  bool enabled = false;
  /// sigma, Å: the width (standard deviation) of each atom's Gaussian charge.
  double sigma = 1.0;
  /// kspace_spacing, Å: k_max = 2π / spacing, the radius of the sphere of k-vectors summed in
  /// full; the terms are tapered to zero between k_max and kTaperEnd * k_max.
  double kspace_spacing = 2.0;
  /// total_charge, e: the sum of every frame's charges (the charges are shifted equally to it).
  double total_charge = 0.0;

  /// 1/Å: 2π / kspace_spacing.
  double k_max() const;
  /// 1/Å: where the taper reaches zero.
  double k_end() const;
};

/// k_end / k_max: the taper's outer end (docs/long_range.md "The k-vectors").
constexpr double kTaperEnd = 1.1;
/// k_e = 1 / (4π ε0), eV Å / e²: the Coulomb constant (the value LAMMPS' `units metal` uses).
constexpr double kCoulomb = 14.399645;

/// Writes the settings into a model's record (long_range, long_range_sigma,
/// long_range_kspace_spacing, long_range_total_charge; nothing when disabled).
void record_long_range(SettingsRecord& record, const LongRangeSettings& settings);
/// Reads them back (disabled when the record has none). Throws mlip::Error naming the record.
LongRangeSettings long_range_from(const SettingsRecord& record);

/// The TorchScript methods of the long-range energy, each `def` indented by `def_indent` (empty
/// when disabled):
///
///   long_range_charges(self, raw, total_charge: float) -> Tensor: [n] charges, e, shifted
///     equally so that they sum to total_charge.
///   long_range_energy(self, q, pos, cell, periodic: bool) -> Tensor: [n] float64 per-atom
///     energies, eV (their sum is E_long): the reciprocal-space sum when periodic (cell [3, 3],
///     rows the lattice vectors, Å), the direct sum of the smeared kernel otherwise (cell unread).
///     Differentiable in q, pos and cell (forces, the virial by a strain).
///   long_range_kvectors(self, cell) -> Tensor: [K, 3] float64 integer vectors n (one of each
///     ±n pair) with |2π cell⁻ᵀ n| < k_end.
std::string long_range_source(const LongRangeSettings& settings, const std::string& def_indent);

}  // namespace mlip::models
