#pragma once

#include <cstdint>

namespace mlip::models {

/// What `mlip compress` asks of a model (docs/se_e2_a.md "Compression: the embedding nets as
/// tables"), with DeePMD-kit's `dp compress` options and defaults.
struct CompressOptions {
  double step = 0.01;            ///< -s: the fine grid's step in the tabulated input (dimensionless)
  double extrapolate = 5;        ///< -e: the coarse grid reaches extrapolate x the data's upper end
  int64_t check_frequency = -1;  ///< -f: MD reports inputs beyond the tables every this many steps (<= 0: at the end)
  double min_distance = 0;       ///< Å: the shortest pair distance of the training data (> 0)
};

}  // namespace mlip::models
