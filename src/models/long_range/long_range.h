#pragma once

#include <torch/script.h>

#include <string>
#include <utility>
#include <vector>

#include "models/settings_record.h"

namespace mlip::data {
struct System;
struct Frame;
}  // namespace mlip::data

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

/// The error of a frame periodic along one or two cell vectors only (a slab, a wire): the sums
/// are for frames periodic in three directions or none (docs/long_range.md).
constexpr const char* kPartlyPeriodic =
    "model.long_range: this frame is periodic along some cell vectors only (pbc mixed); the long-range sum "
    "is for frames periodic in all three directions or in none";

/// The TorchScript methods of the long-range energy, each `def` indented by `def_indent` (empty
/// when disabled):
///
///   long_range_charges(self, raw, total_charge: float) -> Tensor: [n] float64 charges, e,
///     shifted equally so that they sum to total_charge (in float64 whatever the model's dtype).
///   long_range_energy(self, q, pos, cell, periodic: bool) -> Tensor: [n] float64 per-atom
///     energies, eV (their sum is E_long): the reciprocal-space sum when periodic (cell [3, 3],
///     rows the lattice vectors, Å), the direct sum of the smeared kernel otherwise (cell unread).
///     Differentiable in q, pos and cell (forces, the virial by a strain).
///   long_range_total_charge(self, data) -> float: e, the input's `total_charge` when given, else
///     the settings' total_charge.
///   long_range_periodic(self, data) -> bool: the input's `pbc` (three flags, all or none set)
///     when given, else whether its cell has a volume. Raises kPartlyPeriodic for a frame
///     periodic along some cell vectors only.
///   long_range_kvectors(self, cell) -> Tensor: [K, 3] float64 integer vectors n (one of each
///     ±n pair) with |2π cell⁻ᵀ n| < k_end.
std::string long_range_source(const LongRangeSettings& settings, const std::string& def_indent);

/// What the long-range term reads of one training frame besides the charges (docs/long_range.md
/// "Training"), made when the frame is prepared.
struct LongRangeFrame {
  torch::Tensor pos;      ///< [N, 3] float64 on the model's device: the positions, Å
  torch::Tensor cell;     ///< [3, 3] float64 on the model's device: rows the cell vectors, Å; zeros without periodicity
  bool periodic = false;  ///< host: the frame is periodic in all three directions (its cell is read)
};
/// The frame's LongRangeFrame on `device`. Throws mlip::Error (kPartlyPeriodic, naming the system)
/// for a system periodic along some cell vectors only.
LongRangeFrame long_range_frame(const data::System& system, const data::Frame& frame, torch::Device device);

/// The long-range part of a training batch of B frames of N atoms (docs/long_range.md
/// "Training"): on the host, a periodic frame's energy is reciprocal_energy's fused operation; a
/// frame without a cell, or on another device, is the methods long_range_source put into `module`.
struct LongRangeBatch {
  torch::Tensor energy;   ///< [B] float64, eV: E_long of each frame, a graph back to its inputs
  torch::Tensor charges;  ///< [B, N] e, float64: the charges shifted to settings.total_charge
};
/// From the raw charges [B, N] (any float dtype), positions [B, N, 3] (Å) and cells [B, 3, 3]
/// (float64, Å; read for the frames `periodic` [B] says are): differentiable in all three, twice.
LongRangeBatch long_range_batch(torch::jit::Module& module, const LongRangeSettings& settings,
                                const torch::Tensor& raw_charges, const torch::Tensor& pos, const torch::Tensor& cell,
                                const std::vector<bool>& periodic);

/// Whether a training batch's long-range term runs as one fused operation (reciprocal_batch,
/// docs/long_range.md "The k-sum in training"): every frame periodic and `on` (a tensor of the
/// batch) on the host. Else long_range_batch.
bool long_range_fused(const std::vector<bool>& periodic, const torch::Tensor& on);

/// The forces and virial of the long-range energy's direct dependence on the positions and the
/// cells, from its gradients by them (undefined: zero): forces = -grad_pos [B, N, 3] and
/// virial = -(posᵀ grad_pos + cellᵀ grad_cell) [B, 3, 3] (docs/long_range.md "Forces and virial"),
/// both in `dtype`. Their dependence through the charges is the model's, through its pairs.
std::pair<torch::Tensor, torch::Tensor> long_range_direct_forces(const torch::Tensor& pos, const torch::Tensor& cell,
                                                                 const torch::Tensor& grad_pos,
                                                                 const torch::Tensor& grad_cell, torch::Dtype dtype);

}  // namespace mlip::models
