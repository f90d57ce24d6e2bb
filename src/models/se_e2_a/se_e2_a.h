#pragma once

#include <torch/script.h>

#include <cstdint>
#include <string>
#include <vector>

#include "models/compress_options.h"
#include "models/long_range/long_range.h"
#include "models/pair_repulsion.h"
#include "models/se_e2_a/embedding_table.h"

namespace mlip::models {

/// Hyperparameters of the se_e2_a energy model (docs/se_e2_a.md; DeePMD key names). The
/// defaults are DeePMD-kit's, the same as the training input's (docs/input.md).
struct SeAConfig {
  std::vector<std::string> type_map;
  std::vector<int64_t> sel;                        ///< slots per neighbour type
  double rcut = 6.0;                               ///< Å
  double rcut_smth = 0.5;                          ///< Å
  std::vector<int64_t> neuron = {10, 20, 40};      ///< embedding widths; M = neuron.back()
  int64_t axis_neuron = 4;                         ///< M_<
  bool type_one_side = false;                      ///< one embedding net per neighbour type (else per type pair)
  bool resnet_dt = false;                          ///< embedding nets
  std::vector<int64_t> fitting_neuron = {120, 120, 120};
  bool fitting_resnet_dt = true;
  std::string precision = "float64";               ///< "float64" or "float32"
  uint64_t seed = 1;                               ///< initialises the embedding nets
  uint64_t fitting_seed = 1;                       ///< initialises the fitting nets
  /// true: E_i = FN(D_i) - FN(D_isolated) + bias, so that an atom without neighbours has exactly
  /// the energy bias[t] (the reference energy E0; docs/se_e2_a.md "Reference energies"). false
  /// (model.e0s: fit): E_i = FN(D_i) + bias.
  bool isolated_energy_is_bias = false;
  /// model.pair_repulsion: a short-range repulsion added to every atom's energy (docs/repulsion.md).
  PairRepulsionSettings pair_repulsion;
  /// model.long_range: each fitting net also reads out the atom's raw charge from its last hidden
  /// layer (parameters fit_<t>_wq [width, 1], fit_<t>_bq [1]) and the electrostatic energy of the
  /// charges joins the energy (docs/long_range.md "The charge heads").
  LongRangeSettings long_range;

  /// Throws mlip::Error naming the key (model.descriptor.sel, ...) that is invalid.
  void validate() const;
  int64_t nslots() const;
  torch::Dtype dtype() const;
};

/// What makes a model compressed (docs/se_e2_a.md "Compression: the embedding nets as tables"):
/// each embedding net tabulated on its grid, as DeePMD-kit's `dp compress` options set it.
struct SeACompression {
  CompressOptions options;  ///< how the grids were made (step, extrapolate, check frequency, r_min)
  /// Per embedding net, numbered as the nets are (ti * ntypes + t, or t with type_one_side);
  /// a net no pair uses (sel[t] = 0) has a grid without intervals.
  std::vector<TableGrid> grids;
};

/// The TorchScript source of the model (one embedding net per neighbour type, or per pair of
/// types, and one fitting net per centre type, unrolled). Exposed for inspection and tests. With
/// `compression`, each embedding net `emb_<..>` is its table (buffers `emb_<..>_table` [intervals,
/// 6, M]), the net itself `emb_<..>_exact` evaluating the inputs beyond the table.
std::string se_e2_a_source(const SeAConfig& config, const SeACompression* compression = nullptr);

/// Builds the se_e2_a model as a TorchScript module (source compiled with Module::define), with
/// freshly initialised, seeded parameters (docs/se_e2_a.md "Nets"), davg = 0, dstd = 1 and
/// a zero energy bias. The module runs without this project. Methods:
///
/// - `atomic_energy(rij [B,N,Nc,4], atype [N] int64) -> [B,N]`: the atomic energies from raw
///   environment rows (normalised inside with davg/dstd of the centre type; empty slots are
///   zero rows and are not masked). With model.long_range: [B,N,2], each atom's energy and raw
///   charge (e, before the shift to the total charge).
/// - `pair_forces(g [B,N,Nc,4], drij, vec, nlist) -> (forces [B,N,3], virial [B,3,3])`: the
///   forces and virial of an energy whose gradient by the rows is g (the chain rule through the
///   rows' derivatives by the pair vectors).
/// - `energy_force_env(rij [B,N,Nc,4], drij [B,N,Nc,4,3], vec [B,N,Nc,3], nlist [B,N,Nc] int64,
///   atype [N], create_graph: bool) -> (energy [B] float64, atomic [B,N], forces [B,N,3],
///   virial [B,3,3])`: the training path, from precomputed rows and their derivatives (chain
///   rule; create_graph keeps the graph for a force loss). Without model.long_range only (with
///   it, the training path adds E_long in C++, SeAGenericPath).
/// - `forward(data: Dict[str, Tensor]) -> Dict[str, Tensor]`: the docs/deploy.md interface
///   (pos, atom_types, edge_index, cell, edge_cell_shift -> atomic_energy, total_energy,
///   forces, virial), building the environment matrix itself from positions.
/// - `set_statistics(davg [ntypes,4], dstd [ntypes,4])`, `set_bias(bias [ntypes])`.
///
/// The module's bool attribute `isolated_energy_is_bias` records config.isolated_energy_is_bias.
///
/// With `compression`: also, per embedding net with a grid, the buffers `emb_<..>_table`
/// [intervals, 6, M] model dtype (zero: compress_se_e2_a fills them) and `emb_<..>_grid` [7]
/// float64 (TableGrid::packed), and the attributes compression_step, compression_extrapolate,
/// compression_min_distance (float) and compression_check_frequency (int).
torch::jit::Module build_se_e2_a(const SeAConfig& config, const SeACompression* compression = nullptr);

/// The name of embedding net g (ti * ntypes + t, or t with type_one_side): emb_<t> or emb_<ti>_<t>.
std::string embedding_net_name(const SeAConfig& config, int64_t g);
/// The number of embedding nets: ntypes with type_one_side, else ntypes^2.
int64_t embedding_net_count(const SeAConfig& config);

}  // namespace mlip::models
