#include "models/equivariant/grouped_terms.h"

#include <mutex>
#include <string>
#include <vector>

#include "error.h"
#include "models/equivariant/host_coupling.h"

namespace mlip::models {
namespace {

/// One grouped table: the tensors it came from (held, so their identity stays theirs), the key,
/// and the result.
struct Made {
  torch::Tensor terms, coefficients;
  int64_t column = 0;
  GroupedTerms grouped;
};

GroupedTerms make(const torch::Tensor& terms, const torch::Tensor& coefficients, int64_t column, int64_t rows,
                  const torch::TensorOptions& options) {
  const auto host = host_coupling(terms, coefficients);
  const int64_t columns = host->columns, count = host->rows();
  if (column < 0 || column >= columns)
    throw Error("coupling table: column " + std::to_string(column) + " of a table of " + std::to_string(columns));
  const int64_t* row_of = host->terms.data();
  std::vector<int64_t> group(size_t(rows + 1), 0);
  for (int64_t t = 0; t < count; ++t) {
    const int64_t r = row_of[t * columns + column];
    if (r < 0 || r >= rows)
      throw Error("coupling table: term " + std::to_string(t) + " writes row " + std::to_string(r) + " of column " +
                  std::to_string(column) + ", expected 0 to " + std::to_string(rows - 1));
    ++group[size_t(r + 1)];
  }
  for (int64_t r = 0; r < rows; ++r) group[size_t(r + 1)] += group[size_t(r)];
  // A counting sort, stable: each row's terms in table order.
  std::vector<int64_t> next(group.begin(), group.end() - 1), sorted(size_t(count * columns));
  std::vector<double> values(static_cast<size_t>(count));
  for (int64_t t = 0; t < count; ++t) {
    const int64_t k = next[size_t(row_of[t * columns + column])]++;
    for (int64_t c = 0; c < columns; ++c) sorted[size_t(k * columns + c)] = row_of[t * columns + c];
    values[size_t(k)] = host->coefficients[size_t(t)];
  }
  const auto int64 = torch::TensorOptions().dtype(torch::kInt64);
  GroupedTerms g;
  g.terms = torch::tensor(sorted, int64).reshape({count, columns}).to(options.device());
  g.coefficients = torch::tensor(values, torch::kFloat64).to(options);
  g.group = torch::tensor(group, int64).to(options.device());
  return g;
}

}  // namespace

GroupedTerms grouped_terms(const torch::Tensor& terms, const torch::Tensor& coefficients, int64_t column, int64_t rows,
                           const torch::TensorOptions& options) {
  static std::mutex mutex;
  // Never destroyed: device tensors must not be freed by static destructors after the device's
  // runtime has gone at exit.
  static auto& made = *new std::vector<Made>();
  const std::lock_guard<std::mutex> lock(mutex);
  for (const Made& m : made)
    if (m.column == column && m.terms.is_same(terms) && m.coefficients.is_same(coefficients) &&
        m.grouped.coefficients.scalar_type() == options.dtype().toScalarType() &&
        m.grouped.coefficients.device() == options.device())
      return m.grouped;
  Made m{terms, coefficients, column, make(terms, coefficients, column, rows, options)};
  constexpr size_t kMostTables = 1024;  // a few slots of a few tables per model; tests make many models
  if (made.size() == kMostTables) made.clear();
  made.push_back(m);
  return m.grouped;
}

}  // namespace mlip::models
