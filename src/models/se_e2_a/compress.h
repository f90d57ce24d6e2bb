#pragma once

#include <torch/script.h>

#include <ostream>

#include "models/compress_options.h"
#include "models/se_e2_a/se_e2_a.h"

namespace mlip::models {

/// s(r) = w(r) / r of docs/se_e2_a.md "Rows of the environment matrix", 1/Å.
double switched_inverse_distance(double r, double rcut_smth, double rcut);

/// The grids of a model's embedding nets (docs/se_e2_a.md "Compression: the embedding nets as
/// tables"): net g takes ŝ = (s - davg[ti, 0]) / dstd[ti, 0] for its centre types ti (all of them
/// with type_one_side), from an empty slot's (s = 0) to that at options.min_distance. davg, dstd:
/// [ntypes, 4], any floating dtype. Throws mlip::Error naming the option that is invalid.
SeACompression se_e2_a_grids(const SeAConfig& config, const torch::Tensor& davg, const torch::Tensor& dstd,
                             const CompressOptions& options);

/// The compressed copy of an se_e2_a module: the same parameters, statistics and attributes
/// (config must be the module's: its sel and isolated_energy_is_bias), each embedding net also
/// as its table (build_se_e2_a with compression). A compressed source is compressed again from
/// its nets, which it keeps. Writes one line per table to `log`.
torch::jit::Module compress_se_e2_a(const SeAConfig& config, const torch::jit::Module& source,
                                    const CompressOptions& options, std::ostream& log);

}  // namespace mlip::models
