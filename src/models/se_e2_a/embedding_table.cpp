#include "models/se_e2_a/embedding_table.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "error.h"

namespace mlip::models {

bool TableGrid::locate(double s, int64_t& k, double& t) const {
  if (!(s >= lower && s <= max)) return false;  // NaN too
  if (s < upper || coarse_intervals == 0) {
    k = std::min(int64_t(std::floor((s - lower) / fine_step)), fine_intervals - 1);
  } else {
    k = fine_intervals + std::min(int64_t(std::floor((s - upper) / coarse_step)), coarse_intervals - 1);
  }
  k = std::max<int64_t>(k, 0);
  t = s - node(k);
  return true;
}

std::array<double, TableGrid::kPacked> TableGrid::packed() const {
  return {lower, upper, max, double(fine_intervals), double(coarse_intervals), fine_step, coarse_step};
}

TableGrid TableGrid::unpack(const double* v) {
  TableGrid g;
  g.lower = v[0];
  g.upper = v[1];
  g.max = v[2];
  g.fine_intervals = int64_t(v[3]);
  g.coarse_intervals = int64_t(v[4]);
  g.fine_step = v[5];
  g.coarse_step = v[6];
  if (!(g.fine_intervals >= 1 && g.coarse_intervals >= 0 && g.fine_step > 0 && g.upper > g.lower && g.max >= g.upper &&
        (g.coarse_intervals == 0 || g.coarse_step > 0)))
    throw Error("compressed se_e2_a: a table's grid is not valid (lower " + std::to_string(g.lower) + ", upper " +
                std::to_string(g.upper) + ", " + std::to_string(g.fine_intervals) + " fine intervals)");
  return g;
}

TableGrid make_table_grid(double lower, double upper, double step, double extrapolate) {
  auto text = [](double v) {
    std::ostringstream o;
    o << v;
    return o.str();
  };
  if (!(step > 0) || !std::isfinite(step))
    throw Error("compress: the table step (-s): expected a positive number, got " + text(step));
  if (!(extrapolate >= 1) || !std::isfinite(extrapolate))
    throw Error("compress: the extrapolation (-e): expected a number of at least 1, got " + text(extrapolate));
  if (!std::isfinite(lower) || !std::isfinite(upper) || !(upper > lower))
    throw Error("compress: the embedding input's range: expected lower < upper, got [" + text(lower) + ", " +
                text(upper) + "] (are the model's statistics set?)");
  TableGrid g;
  g.lower = std::floor(lower);
  g.upper = std::ceil(upper);
  // A whole number of intervals spans each part, so no node falls short of the part's end
  // (DeePMD-kit truncates a floating quotient, which can lose the last interval).
  g.fine_intervals = std::max<int64_t>(1, std::llround((g.upper - g.lower) / step));
  g.fine_step = (g.upper - g.lower) / double(g.fine_intervals);
  g.max = g.upper;
  const double top = extrapolate * g.upper;
  if (top > g.upper) {
    g.coarse_intervals = std::max<int64_t>(1, std::llround((top - g.upper) / (10 * step)));
    g.coarse_step = (top - g.upper) / double(g.coarse_intervals);
    g.max = top;
  }
  // A table too coarse to follow the net, or too large to hold (docs/se_e2_a.md "Compression:
  // the embedding nets as tables"): refused before any node is computed.
  if (g.fine_intervals < kMinFineIntervals)
    throw Error("compress -s " + text(step) + ": the fine grid would have " + std::to_string(g.fine_intervals) +
                " interval(s) over the embedding input's range [" + text(g.lower) + ", " + text(g.upper) +
                "], expected at least " + std::to_string(kMinFineIntervals) + " (a step of at most " +
                text((g.upper - g.lower) / double(kMinFineIntervals)) + "; the default is 0.01)");
  if (g.fine_intervals + g.coarse_intervals > kMaxIntervals)
    throw Error("compress: the table would have " + std::to_string(g.fine_intervals) + " + " +
                std::to_string(g.coarse_intervals) + " intervals (-s " + text(step) + " over [" + text(g.lower) +
                ", " + text(g.upper) + "], -e " + text(extrapolate) + "), expected at most " +
                std::to_string(kMaxIntervals) + " per embedding net (each interval holds every output's " +
                "polynomial: a larger -s or a smaller -e)");
  return g;
}

void embedding_jet(const EmbeddingNet& net, double s, double* value, double* first, double* second) {
  std::vector<double> x{s}, dx{1.0}, ddx{0.0};
  for (size_t l = 0; l < net.layers.size(); ++l) {
    const Layer& L = net.layers[l];
    std::vector<double> z(size_t(L.out)), dz(size_t(L.out), 0.0), ddz(size_t(L.out), 0.0);
    for (int64_t o = 0; o < L.out; ++o) z[size_t(o)] = net.b[l][size_t(o)];
    for (int64_t i = 0; i < L.in; ++i) {
      const double* wi = net.w[l].data() + i * L.out;
      for (int64_t o = 0; o < L.out; ++o) {
        z[size_t(o)] += x[size_t(i)] * wi[o];
        dz[size_t(o)] += dx[size_t(i)] * wi[o];
        ddz[size_t(o)] += ddx[size_t(i)] * wi[o];
      }
    }
    // y = tanh(z): y' = (1 - y^2) z', y'' = (1 - y^2) z'' - 2 y (1 - y^2) z'^2.
    std::vector<double> y(size_t(L.out)), dy(size_t(L.out)), ddy(size_t(L.out));
    for (int64_t o = 0; o < L.out; ++o) {
      const size_t u = size_t(o);
      const double t = std::tanh(z[u]), d = 1 - t * t;
      const double scale = L.idt ? net.idt[l][u] : 1.0;
      y[u] = scale * t;
      dy[u] = scale * d * dz[u];
      ddy[u] = scale * (d * ddz[u] - 2 * t * d * dz[u] * dz[u]);
    }
    const int copies = skip_copies(L);
    for (int h = 0; h < copies; ++h)
      for (int64_t i = 0; i < L.in; ++i) {
        const size_t u = size_t(h * L.in + i), v = size_t(i);
        y[u] += x[v];
        dy[u] += dx[v];
        ddy[u] += ddx[v];
      }
    x = std::move(y);
    dx = std::move(dy);
    ddx = std::move(ddy);
  }
  std::copy(x.begin(), x.end(), value);
  std::copy(dx.begin(), dx.end(), first);
  std::copy(ddx.begin(), ddx.end(), second);
}

std::vector<double> build_embedding_table(const EmbeddingNet& net, const TableGrid& grid) {
  const int64_t m = net.outputs(), n = grid.intervals();
  if (m <= 0 || n <= 0) throw Error("compress: an embedding net without outputs or a grid without intervals");
  std::vector<double> table(size_t(n * 6 * m));
  // The value, first and second derivative at every node (n + 1 of them).
  std::vector<double> y(size_t((n + 1) * m)), dy(y.size()), ddy(y.size());
  for (int64_t k = 0; k <= n; ++k) {
    const double s = k < n ? grid.node(k) : grid.max;
    embedding_jet(net, s, &y[size_t(k * m)], &dy[size_t(k * m)], &ddy[size_t(k * m)]);
  }
  // The quintic Hermite interpolant on [0, h] (docs/se_e2_a.md "Compression: the embedding nets
  // as tables"): a_0..a_2 from the left end; a_3..a_5 solve for the right end's value, slope and
  // curvature.
  for (int64_t k = 0; k < n; ++k) {
    const double h = (k + 1 < n ? grid.node(k + 1) : grid.max) - grid.node(k);
    double* row = &table[size_t(k * 6 * m)];
    for (int64_t o = 0; o < m; ++o) {
      const size_t l = size_t(k * m + o), r = size_t((k + 1) * m + o);
      const double dv = y[r] - y[l];
      row[o] = y[l];
      row[m + o] = dy[l];
      row[2 * m + o] = ddy[l] / 2;
      row[3 * m + o] = (20 * dv - (8 * dy[r] + 12 * dy[l]) * h - (3 * ddy[l] - ddy[r]) * h * h) / (2 * h * h * h);
      row[4 * m + o] = (-30 * dv + (14 * dy[r] + 16 * dy[l]) * h + (3 * ddy[l] - 2 * ddy[r]) * h * h) /
                       (2 * h * h * h * h);
      row[5 * m + o] = (12 * dv - 6 * (dy[r] + dy[l]) * h + (ddy[r] - ddy[l]) * h * h) / (2 * h * h * h * h * h);
    }
  }
  return table;
}

}  // namespace mlip::models
