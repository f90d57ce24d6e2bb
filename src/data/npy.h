#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/file_identity.h"

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

/// An opened .npy file: its header, checked (dtype, shape, size against the file's length), and
/// where its data starts. Holds no file descriptor: rows are read with read_npy_rows.
struct NpyFile {
  std::string path;
  std::vector<int64_t> shape;
  /// The dtype descriptor found in the header, e.g. "<f8".
  std::string dtype;
  bool fortran_order = false, is_float = true, swap_bytes = false;
  int itemsize = 8;           ///< bytes per value: 4 or 8
  uint64_t data_offset = 0;   ///< byte offset of the first value
  /// The file as open_npy found it; read_npy_rows refuses to read a file that differs from it.
  FileIdentity identity;
  /// shape[0] (1 for a 0-d array).
  int64_t rows() const;
  /// Values per row: the product of shape[1..] (1 for 0-d and 1-d arrays).
  int64_t row_size() const;
};

/// Opens a .npy file and checks its header as read_npy does, without reading its data (the
/// same messages for the same faults). A FIFO, device or folder is refused without blocking.
NpyFile open_npy(const std::string& path);

/// Rows [first, first + count) as float64 in C order (positioned reads; both byte orders, C and
/// Fortran order). Opens and closes the file; thread-safe. Throws mlip::Error naming the file
/// when it is no longer the file open_npy opened (check_unchanged: replaced, resized, modified).
std::vector<double> read_npy_rows(const NpyFile& file, int64_t first, int64_t count);

/// Reads a NumPy .npy file (format 1.0, 2.0, 3.0). Accepted dtypes: float32/float64 (f4/f8) and
/// int32/int64 (i4/i8), little- or big-endian, C or Fortran order. Anything else (wrong magic,
/// truncated data, other dtypes, object arrays) throws mlip::Error naming the file.
NpyArray read_npy(const std::string& path);

/// Writes a float64 little-endian C-order .npy (used by tests and the example data converter).
void write_npy(const std::string& path, const std::vector<int64_t>& shape,
               const std::vector<double>& values);

}  // namespace mlip::data
