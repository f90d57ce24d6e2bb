#include "models/committee_deviation.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace mlip::models {

namespace {

/// printf into a std::string.
template <typename... Args>
std::string format(const char* pattern, Args... args) {
  char buffer[64];
  const int n = std::snprintf(buffer, sizeof(buffer), pattern, args...);
  return std::string(buffer, size_t(std::max(n, 0)));
}

}  // namespace

void mean_and_deviation(const double* values, size_t count, double& mean, double& deviation) {
  double shift = 0;
  for (size_t k = 0; k < count; ++k) shift += values[k] - values[0];
  shift /= double(count);
  double squares = 0;
  for (size_t k = 0; k < count; ++k) squares += (values[k] - values[0] - shift) * (values[k] - values[0] - shift);
  mean = values[0] + shift;
  deviation = std::sqrt(squares / double(count));
}

double atom_force_deviation(const double* forces, size_t models, std::optional<double> relative) {
  std::vector<double> column(models);
  double squares = 0, mean_squares = 0;
  for (size_t c = 0; c < 3; ++c) {
    for (size_t k = 0; k < models; ++k) column[k] = forces[3 * k + c];
    double mean, deviation;
    mean_and_deviation(column.data(), models, mean, deviation);
    squares += deviation * deviation;
    mean_squares += mean * mean;
  }
  double deviation = std::sqrt(squares);
  if (relative) deviation /= std::sqrt(mean_squares) + *relative;
  return deviation;
}

VirialDeviation virial_deviation(const double* virials, size_t models, std::optional<double> relative_v) {
  std::vector<double> column(models);
  double components[9];
  double mean_squares = 0;
  for (size_t c = 0; c < 9; ++c) {
    for (size_t k = 0; k < models; ++k) column[k] = virials[9 * k + c];
    double mean;
    mean_and_deviation(column.data(), models, mean, components[c]);
    mean_squares += mean * mean;
  }
  if (relative_v)
    for (double& v : components) v /= std::sqrt(mean_squares) + *relative_v;
  VirialDeviation d;
  d.max = *std::max_element(components, components + 9);
  d.min = *std::min_element(components, components + 9);
  double norm = 0;
  for (double v : components) norm += v * v;
  d.avg = std::sqrt(norm) / 3.0;
  return d;
}

std::string deviation_columns_line(bool with_energy, bool atomic) {
  std::string line = "# " + format("%10s", "step");
  for (const char* item : {"v", "f"})
    for (const char* what : {"max", "min", "avg"})
      line += format("%19s", (std::string(what) + "_devi_" + item).c_str());
  if (with_energy) line += format("%19s", "devi_e");
  if (atomic) line += format("%19s", "atm_devi_f(N)");
  return line + "\n";
}

std::string deviation_row(int64_t step, const std::vector<double>& columns, const std::vector<double>& atoms) {
  std::string row = format("%12lld", static_cast<long long>(step));
  row.reserve(row.size() + 19 * (columns.size() + atoms.size()) + 1);
  for (double v : columns) row += format("%19.6e", v);
  for (double v : atoms) row += format("%19.6e", v);
  return row + "\n";
}

}  // namespace mlip::models
