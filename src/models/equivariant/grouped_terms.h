// A coupling table's terms grouped by the output row they write, on the device: the form
// mlip's CUDA kernels and their host twins read (docs/fused_kernels.md).
#pragma once

#include <torch/script.h>

#include <cstdint>

namespace mlip::models {

/// The terms of a coupling table reordered so that each output row's terms are contiguous (in
/// table order), with the offsets of each row's terms; all on the operands' device.
struct GroupedTerms {
  torch::Tensor terms;         ///< [T, columns] int64: the table's rows, grouped by the output row
  torch::Tensor coefficients;  ///< [T] the terms' coefficients in the operands' dtype
  torch::Tensor group;         ///< [rows + 1] int64: output row r's terms are [group[r], group[r + 1])
};

/// The table (terms [T, columns] int64, coefficients [T]) grouped by the row named in column
/// `column`, one of `rows` rows, as tensors with `options`' dtype (the coefficients) and device.
/// Made once per table (the same tensors), column, dtype and device and kept: a GPU's step reads
/// them without a copy. Throws mlip::Error naming the term when its row is outside [0, rows).
GroupedTerms grouped_terms(const torch::Tensor& terms, const torch::Tensor& coefficients, int64_t column, int64_t rows,
                           const torch::TensorOptions& options);

}  // namespace mlip::models
