#pragma once

#include <torch/script.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "models/equivariant/product_basis.h"
#include "models/long_range/long_range.h"
#include "models/pair_repulsion.h"

namespace mlip::models {

/// Hyperparameters of the NequIP-style E(3)-equivariant model (docs/equivariant.md; defaults in
/// brackets there).
struct EquivariantConfig {
  std::vector<std::string> type_map;
  double r_max = 5.0;               ///< Å, cutoff of the neighbour pairs
  int64_t num_features = 32;        ///< channels per irrep
  int64_t l_max = 1;                ///< highest l of features and edge harmonics (<= 3)
  bool parity = true;               ///< O(3) (even and odd irreps) instead of SO(3)
  /// With parity, whether features and messages keep the irreps of unnatural parity (the
  /// pseudotensors 0o, 1e, 2o, 3e) beside the natural ones (0e, 1o, 2e, 3o), as NequIP; false
  /// keeps the natural ones only, as MACE (docs/equivariant.md "Irreps").
  bool pseudotensors = true;
  int64_t num_layers = 4;           ///< interaction blocks
  /// Body order of the node features: 1, messages as NequIP (two-body); 2 or 3, MACE's product
  /// basis of the messages with themselves up to that many factors (docs/equivariant.md
  /// "Body order").
  int64_t correlation = 1;
  /// The energy from the last layer's scalars only (false), or, as MACE, from every layer's:
  /// each interaction layer's output scalars through a readout of their own, summed.
  bool readout_every_layer = false;
  int64_t num_bessels = 8;          ///< radial Bessel functions
  double polynomial_p = 6.0;        ///< exponent p of the polynomial cutoff
  int64_t radial_width = 64;        ///< hidden width of the radial MLP
  int64_t radial_depth = 2;         ///< hidden layers of the radial MLP
  double avg_num_neighbors = 1.0;   ///< messages are divided by its square root
  std::string precision = "float64";
  uint64_t seed = 1;
  /// model.pair_repulsion: a short-range repulsion added to every atom's energy (docs/repulsion.md).
  PairRepulsionSettings pair_repulsion;
  /// model.long_range: per-atom charges read out of the last layer's scalars, and their
  /// electrostatic energy added to the atoms' energies (docs/long_range.md).
  LongRangeSettings long_range;

  /// Throws mlip::Error naming the key (model.l_max, ...) that is invalid.
  void validate() const;
  torch::Dtype dtype() const;
};

/// The TorchScript source of the model, unrolled over layers, irreps and tensor-product paths.
std::string equivariant_source(const EquivariantConfig& config);

/// The TorchScript source of the training path's function (docs/equivariant.md "The training
/// path"), the same model as equivariant_source() from cached geometry:
///
///   training_energy(params: Dict[str, Tensor], avg_num_neighbors: float,
///                   basis [Q, num_bessels], pair [E] int64, y [E, (l_max+1)^2],
///                   i [E] int64, j [E] int64, atype [N] int64, edges: List[Tensor]) -> [N]
///   ([N, 2] with long_range: the energies and the raw charges)
///
/// `params` holds the module's parameters, buffers, scale and shift by name and the blocks'
/// couplings (`l<k>_terms`, `l<k>_coefficients`, message_couplings()); `basis` is the radial
/// basis of the Q distinct pairs, `pair[e]` the pair of edge e; `edges` the contraction's edge
/// tables (models/equivariant/message_contraction.h). Calls the operator mlip::message_contract.
/// inference: the variant for MD (first derivatives only, by the pair geometry), whose radial MLP
/// and message contraction are one operator, mlip::radial_message (models/equivariant/radial_message.h),
/// which keeps neither the radial weights nor the MLP's activations.
std::string equivariant_training_source(const EquivariantConfig& config, bool inference = false);

/// The training path's body split per interaction block for MD with features exchanged between
/// ranks (docs/equivariant.md "Features exchanged between ranks"): TorchScript functions
/// `layer_<k>(params, avg_num_neighbors, basis, pair, y, atype, edges, nlocal, x)` returning
/// (e_k, x'). atype [N] are the types of all N nodes (the owned ones, [0, nlocal), first); x the
/// block's input features of all N nodes, one [N, 2l+1, f] tensor per input irrep (empty for
/// block 0: the embedding); edges as in the MD variant of equivariant_training_source, centres
/// owned. e_k [nlocal] is block k's part of the owned atoms' energies (scaled; the last block
/// adds the shift); x' the block's output features of the owned atoms (empty for the last).
/// The e_k summed equal equivariant_training_source's energies.
std::string equivariant_layer_source(const EquivariantConfig& config);

/// For each block but the last, the sizes 2l+1 of its output irreps in layer_<k>'s order (each
/// irrep has num_features channels): what crosses between ranks after the block.
std::vector<std::vector<int64_t>> equivariant_layer_outputs(const EquivariantConfig& config);

/// The message coupling of one interaction block for models/equivariant/message_contraction.h.
struct BlockCoupling {
  torch::Tensor terms;         ///< [T, 4] int64 rows (m, d, s, p)
  torch::Tensor coefficients;  ///< [T] float64
  std::vector<int64_t> sizes;  ///< {H, D, S, P}
};

/// The couplings of the blocks, in block order.
std::vector<BlockCoupling> message_couplings(const EquivariantConfig& config);

/// One product-basis contraction of one block (models/equivariant/product_basis.h; docs/equivariant.md
/// "The training path"): the block's pair products P (`factors` 0: every pair of message irreps
/// coupled to an irrep that some product needs, from the messages side by side, each message
/// irrep's 2l+1 components in the order of the block's message irreps), or the products of one
/// target irrep with `factors` 1 (from the messages), 2 (from P) or 3 (from P and the messages);
/// and the names under which the training path's `params` holds its tables.
struct ProductTables {
  /// "l<k>_pairs_terms", or "l<k>_pterms<factors>_<irrep>"; likewise with "coefficients"
  std::string terms_name, coefficients_name;
  int64_t block = 0;     ///< the interaction block
  std::string target;    ///< the target irrep's name ("0e", "1o", ...); "" for P
  int64_t factors = 0;   ///< 0 for P, else the products' number of factors
  ProductCoupling coupling;
};

/// Every block's product-basis contractions (correlation > 1; none otherwise), block by block:
/// P first, then each target's by number of factors (those with any term).
std::vector<ProductTables> product_couplings(const EquivariantConfig& config);

/// The sizes a model of `config` has, read off its plan without building it (validates config;
/// nothing is allocated but the lists): what the memory estimate before training counts
/// (docs/training.md "Memory checked before the first allocation").
struct EquivariantSizes {
  /// Every parameter's name and shape, in the order build_equivariant registers (and draws) them.
  std::vector<std::pair<std::string, std::vector<int64_t>>> parameters;
  /// Per interaction layer: its tensor-product paths (the radial MLP's outputs per edge are
  /// num_features x paths).
  std::vector<int64_t> paths;
  /// Per interaction layer: the components of its messages per edge and channel, the sum over
  /// paths of 2 l_out + 1.
  std::vector<int64_t> message_components;
  /// Per interaction layer: the components of its input features per atom and channel.
  std::vector<int64_t> input_components;
};
EquivariantSizes equivariant_sizes(const EquivariantConfig& config);

/// Builds the model as a TorchScript module (Module::define) with seeded parameters, the
/// coupling coefficients as buffers, per-type scale 1 and shift 0. Methods:
///
/// - `atomic_energy(d [E,3], i [E] int64, j [E] int64, atype [N] int64) -> [N]`: atomic
///   energies from the pair vectors d_ij = r_j - r_i (+ shift·cell) of centre i and neighbour
///   j; pairs at r >= r_max contribute exactly zero. With long_range: [N, 2], the short-range
///   energies and the raw charges (e, before long_range_charges shifts them to the total), as
///   training_energy gives them.
/// - with long_range, the methods of long_range_source (models/long_range/long_range.h).
/// - `edge_geometry(d [E,3]) -> (basis [E, num_bessels], y [E, (l_max+1)^2])`: the radial basis
///   times the cutoff and the edge harmonics (what the training path caches per frame).
/// - `forward(data: Dict[str, Tensor]) -> Dict[str, Tensor]`: the docs/deploy.md interface, with
///   forces and virial from autograd through the pair vectors.
/// - `set_scale_shift(scale [ntypes], shift [ntypes])`: E_i = scale[t] e_i + shift[t].
/// - attribute `avg_num_neighbors` (float; config value at build, set from the data by the
///   trainer): messages are divided by its square root.
torch::jit::Module build_equivariant(const EquivariantConfig& config);

}  // namespace mlip::models
