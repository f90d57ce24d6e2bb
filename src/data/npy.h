#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mlip::data {

/// Contents of one .npy file, converted to float64 (or int64 for integer files) in C order.
struct NpyArray {
  std::vector<int64_t> shape;
  /// Numeric values in C (row-major) order; Fortran-ordered files are transposed on read.
  std::vector<double> values;
  /// The dtype descriptor found in the header, e.g. "<f8".
  std::string dtype;
  int64_t size() const;
};

/// "[2, 576]": a shape as messages print it.
std::string shape_string(const std::vector<int64_t>& shape);

/// Reads a NumPy .npy file (format 1.0, 2.0, 3.0). Accepted dtypes: float32/float64 (f4/f8) and
/// int32/int64 (i4/i8), little- or big-endian, C or Fortran order. Anything else (wrong magic,
/// truncated data, other dtypes, object arrays) throws mlip::Error naming the file.
NpyArray read_npy(const std::string& path);

/// Writes a float64 little-endian C-order .npy (used by tests and the example data converter).
void write_npy(const std::string& path, const std::vector<int64_t>& shape,
               const std::vector<double>& values);

}  // namespace mlip::data
