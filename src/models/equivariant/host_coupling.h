// A coupling's sparse terms as host arrays, converted once per table rather than on every call
// of the custom operators that read them (docs/equivariant.md "The training path").
#pragma once

#include <torch/script.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace mlip::models {

/// The terms [T, columns] int64 and coefficients [T] (as float64) of a coupling table, on the host.
struct HostCoupling {
  int64_t columns = 0;
  std::vector<int64_t> terms;       ///< row-major [T, columns]
  std::vector<double> coefficients;  ///< [T]
  int64_t rows() const { return int64_t(coefficients.size()); }
};

/// The host arrays of (terms, coefficients): converted on the first call for this pair of
/// tensors and kept while both live, unchanged (same version), so the model's tables are
/// converted once per model. Thread-safe.
std::shared_ptr<const HostCoupling> host_coupling(const torch::Tensor& terms, const torch::Tensor& coefficients);

}  // namespace mlip::models
