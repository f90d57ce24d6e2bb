#pragma once

#include <torch/script.h>

#include <string>
#include <vector>

#include "models/settings_record.h"

namespace mlip::models {

/// model.pair_repulsion (docs/repulsion.md): a fixed short-range pair repulsion added to a
/// model's energy, the same in training, in the frozen TorchScript model and in mlip's own MD
/// inference. The network learns the rest.
struct PairRepulsionSettings {
  /// "zbl" (Ziegler-Biersack-Littmark universal screened Coulomb potential), or empty: none.
  std::string type;
  /// Å: the switch starts here (the pair energy is pure ZBL plus a constant below it).
  double inner = 0;
  /// Å: the pair energy and its first two derivatives reach zero here; <= the model's cutoff.
  double outer = 0;

  bool enabled() const { return !type.empty(); }
};

/// The atomic number of an element symbol ("H" 1 ... "Og" 118); 0 when it is not one.
int atomic_number(const std::string& element);

/// The ZBL pair energy with LAMMPS' `pair_style zbl inner outer` switch (docs/repulsion.md
/// "The formula"), for the element pairs of a type map. Energies in eV, distances in Å.
class ZblRepulsion {
 public:
  /// Throws mlip::Error naming model.pair_repulsion when a type is not an element or the radii
  /// are not 0 < inner < outer.
  ZblRepulsion(const PairRepulsionSettings& settings, const std::vector<std::string>& type_map);

  double inner() const { return inner_; }
  double outer() const { return outer_; }
  int64_t ntypes() const { return ntypes_; }

  /// The energy V(r) of one pair of types (ti, tj) at distance r (0 < r; 0 at r >= outer) and
  /// its derivative dV/dr, eV/Å.
  void evaluate(int64_t ti, int64_t tj, double r, double& energy, double& derivative) const;

  /// What the TorchScript source reads, per type pair p = ti * ntypes + tj, [ntypes^2] float64:
  struct PairTable {
    std::vector<double> charge;             ///< eV Å: Z_i Z_j e^2 / (4 pi eps0)
    std::vector<double> inverse_screening;  ///< 1/Å: 1 / a_ij, the screening length's inverse
    std::vector<double> switch_cubic;       ///< eV/Å^3: A/3, the switch's t^3 coefficient
    std::vector<double> switch_quartic;     ///< eV/Å^4: B/4, its t^4 coefficient
    std::vector<double> shift;              ///< eV: C, added below outer
  };
  const PairTable& table() const { return table_; }

  /// The screening function's four weights and exponents (dimensionless).
  static const std::vector<double>& weights();
  static const std::vector<double>& rates();

 private:
  /// The unswitched ZBL energy of pair p and its first two derivatives.
  void unswitched(size_t p, double r, double& e, double& de, double& d2e) const;

  int64_t ntypes_ = 0;
  double inner_ = 0, outer_ = 0;
  PairTable table_;
};

/// Writes the settings into a model's record (keys pair_repulsion, pair_repulsion_inner,
/// pair_repulsion_outer; nothing when disabled).
void record_pair_repulsion(SettingsRecord& record, const PairRepulsionSettings& settings);
/// Reads them back (disabled when the record has none). Throws mlip::Error naming the record.
PairRepulsionSettings pair_repulsion_from(const SettingsRecord& record);

/// Registers the float64 buffers the source reads (zbl_*); nothing when disabled.
void register_repulsion_buffers(torch::jit::Module& module, const PairRepulsionSettings& settings,
                                const std::vector<std::string>& type_map);

/// The TorchScript method `pair_repulsion_energy(self, r_all, edge_index, atype, n) -> Tensor`,
/// its `def` indented by `def_indent`: [n] float64, each directed pair (i, j) of edge_index
/// closer than outer gives half its energy to atom i. Empty when disabled.
std::string pair_repulsion_source(const PairRepulsionSettings& settings, int64_t ntypes, const std::string& def_indent);

}  // namespace mlip::models
