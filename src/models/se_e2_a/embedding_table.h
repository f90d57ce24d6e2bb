#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "models/kernels/layer_rule.h"

namespace mlip::models {

/// The grid over an embedding net's input ŝ on which a compressed model tabulates the net
/// (docs/se_e2_a.md "Compression: the embedding nets as tables"): `fine_intervals` intervals of
/// width `fine_step` from `lower` to `upper` (the range the training data covers), then
/// `coarse_intervals` of width `coarse_step` from `upper` to `max` (room for configurations the
/// data did not have). ŝ is dimensionless (the normalised s(r) = w(r)/r of docs/se_e2_a.md).
struct TableGrid {
  double lower = 0;               ///< the first node: ŝ of an empty slot, rounded down
  double upper = 0;               ///< the end of the fine part: ŝ at the data's shortest distance, rounded up
  double max = 0;                 ///< the last node; beyond it the table does not reach
  int64_t fine_intervals = 0;     ///< intervals in [lower, upper)
  int64_t coarse_intervals = 0;   ///< intervals in [upper, max]
  double fine_step = 0;           ///< (upper - lower) / fine_intervals
  double coarse_step = 0;         ///< (max - upper) / coarse_intervals; 0 without a coarse part

  int64_t intervals() const { return fine_intervals + coarse_intervals; }
  /// The left node of interval k (0 <= k < intervals()).
  double node(int64_t k) const {
    return k < fine_intervals ? lower + double(k) * fine_step : upper + double(k - fine_intervals) * coarse_step;
  }
  /// The interval of s and s's offset t = s - node(k) in it; false when s is outside
  /// [lower, max] (or not a number): the table does not cover it.
  bool locate(double s, int64_t& k, double& t) const;

  /// The grid as 7 numbers (lower, upper, max, fine_intervals, coarse_intervals, fine_step,
  /// coarse_step), as a compressed model stores it, and back.
  static constexpr int kPacked = 7;
  std::array<double, kPacked> packed() const;
  static TableGrid unpack(const double* values);
};

/// The fewest intervals a table's fine grid may have over the data's range, and the most
/// intervals (fine + coarse) a table may have: make_table_grid refuses tables outside them.
constexpr int64_t kMinFineIntervals = 20;
constexpr int64_t kMaxIntervals = 2000000;

/// The grid of a net whose inputs reach from `lower` to `upper` (ŝ; both rounded outwards to
/// integers, as DeePMD-kit's `dp compress` does): fine intervals of about `step`, adjusted so that
/// a whole number of them spans [lower, upper], then intervals of about 10 `step` up to
/// `extrapolate` x upper (none when that is not above upper). Throws mlip::Error naming the
/// option for a step that is not positive or an extrapolate below 1, for upper <= lower, and for
/// fewer than kMinFineIntervals fine intervals or more than kMaxIntervals in all.
TableGrid make_table_grid(double lower, double upper, double step, double extrapolate);

/// An embedding net in float64 (docs/se_e2_a.md's layer rule: y = tanh(x W + b), times idt, plus
/// skip(x)); its input is one scalar, its output M = layers.back().out values.
struct EmbeddingNet {
  std::vector<Layer> layers;
  std::vector<std::vector<double>> w;    ///< per layer [in, out], row-major
  std::vector<std::vector<double>> b;    ///< per layer [out]
  std::vector<std::vector<double>> idt;  ///< per layer [out], empty when the layer has none
  int64_t outputs() const { return layers.empty() ? 0 : layers.back().out; }
};

/// The net's outputs at s and their first and second derivatives with respect to s (each [M]),
/// carried through the layers in forward mode, in float64.
void embedding_jet(const EmbeddingNet& net, double s, double* value, double* first, double* second);

/// The net as piecewise quintic polynomials on the grid: [intervals, 6, M] float64, row k holding
/// for each output the coefficients a_0..a_5 of p(t) = sum_j a_j t^j, t = s - node(k), the
/// polynomial that matches the net's value, first and second derivative at both ends of the
/// interval (so the table is twice continuously differentiable at every node).
std::vector<double> build_embedding_table(const EmbeddingNet& net, const TableGrid& grid);

/// The tabulated outputs at offset t of a table row (6 x M coefficients of type R): g[m] = p_m(t)
/// and, when dg is not null, dg[m] = p_m'(t).
template <typename R>
inline void evaluate_table_row(const R* row, int64_t outputs, R t, R* g, R* dg) {
  const R* a0 = row;
  const R* a1 = row + outputs;
  const R* a2 = row + 2 * outputs;
  const R* a3 = row + 3 * outputs;
  const R* a4 = row + 4 * outputs;
  const R* a5 = row + 5 * outputs;
  for (int64_t m = 0; m < outputs; ++m)
    g[m] = a0[m] + t * (a1[m] + t * (a2[m] + t * (a3[m] + t * (a4[m] + t * a5[m]))));
  if (dg == nullptr) return;
  for (int64_t m = 0; m < outputs; ++m)
    dg[m] = a1[m] + t * (R(2) * a2[m] + t * (R(3) * a3[m] + t * (R(4) * a4[m] + t * R(5) * a5[m])));
}

/// The tabulated net at q inputs s[p * stride] (p < q): g and dg [q, M] row-major, the outputs
/// and their derivatives d/ds. An input outside the grid is left to the caller: its rows of g and
/// dg are not written and its index p is appended to `outside`. Returns how many were outside.
template <typename R>
int64_t lookup_table(const R* table, const TableGrid& grid, int64_t outputs, const R* s, int64_t stride, int64_t q,
                     R* g, R* dg, std::vector<int64_t>& outside) {
  int64_t missed = 0;
  for (int64_t p = 0; p < q; ++p) {
    int64_t k;
    double t;
    if (!grid.locate(double(s[p * stride]), k, t)) {
      outside.push_back(p);
      ++missed;
      continue;
    }
    evaluate_table_row(table + k * 6 * outputs, outputs, R(t), g + p * outputs, dg + p * outputs);
  }
  return missed;
}

}  // namespace mlip::models
