#pragma once

#include <optional>

#include "models/registry.h"
#include "models/se_e2_a/se_e2_a.h"

namespace mlip::models {

/// descriptor.sel: a list, or "auto" / "auto:ratio" (4 * ceil(max_neighbours * ratio / 4),
/// ratio 1.1 for "auto"), resolved from the training data when the model is built.
struct SelSpec {
  bool automatic = false;
  double ratio = 1.1;
  std::vector<int64_t> values;  ///< the list when not automatic
};

/// The se_e2_a model's input: DeePMD-kit's standard model with `model.descriptor` (type
/// se_e2_a, alias se_a) and `model.fitting_net` (type ener). Defaults are DeePMD-kit's
/// (docs/input.md).
struct SeASettings : ModelSettings {
  /// Hyperparameters; `sel` and the seeds are filled when the model is built.
  SeAConfig config;
  SelSpec sel;
  /// descriptor.seed and fitting_net.seed; absent: training.seed, else 1 (each plus
  /// ModelContext::seed_offset when the model is built).
  std::optional<uint64_t> descriptor_seed, fitting_seed;
  /// fitting_net.precision as written (it must equal the descriptor's).
  std::string fitting_precision = "float64";

  double cutoff() const override { return config.rcut; }
};

/// The registry entry of se_e2_a: its reader and its factory (models/registry.h).
ModelEntry se_e2_a_entry();

/// Which training computation se_e2_a uses: the hand-written adjoint on raw arrays (CPU only,
/// the fast one there), the device-generic path of LibTorch tensor operations (any device), or
/// that path with the embedding nets run by mlip's fused kernels (docs/fused_kernels.md "The
/// training path"; any device, CUDA's kernels in a CUDA build, their host twins elsewhere).
/// Default: hand-written on the CPU, generic elsewhere; the environment variable
/// MLIP_SE_E2_A_PATH=generic, fused or hand-written overrides it (docs/training_path.md).
enum class SeAPathKind { kHandWritten, kGeneric, kFused };
SeAPathKind se_e2_a_path_kind(torch::Device device);

}  // namespace mlip::models
