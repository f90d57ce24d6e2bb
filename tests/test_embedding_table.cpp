#include "models/se_e2_a/embedding_table.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "error.h"

namespace {

using mlip::models::EmbeddingNet;
using mlip::models::TableGrid;

/// A net of widths [1, ...] with DeePMD-kit's initialisation (W ~ N(0, 1/sqrt(in + out)),
/// b ~ N(0, 1), idt ~ N(0.1, 0.001)), so that its outputs are as smooth as a trained net's.
EmbeddingNet random_net(const std::vector<int64_t>& widths, bool resnet_dt, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  EmbeddingNet net;
  net.layers = mlip::models::layers_of(widths, resnet_dt);
  for (const auto& layer : net.layers) {
    std::vector<double> w(size_t(layer.in * layer.out)), b(size_t(layer.out)), idt;
    for (auto& v : w) v = normal(rng) / std::sqrt(double(layer.in + layer.out));
    for (auto& v : b) v = normal(rng);
    if (layer.idt)
      for (int64_t o = 0; o < layer.out; ++o) idt.push_back(0.1 + 0.001 * normal(rng));
    net.w.push_back(w);
    net.b.push_back(b);
    net.idt.push_back(idt);
  }
  return net;
}

/// The net's outputs at s, layer by layer as the model's TorchScript writes it (an independent
/// reference for the jet's values).
std::vector<double> forward(const EmbeddingNet& net, double s) {
  std::vector<double> x{s};
  for (size_t l = 0; l < net.layers.size(); ++l) {
    const auto& L = net.layers[l];
    std::vector<double> y(size_t(L.out));
    for (int64_t o = 0; o < L.out; ++o) {
      double z = net.b[l][size_t(o)];
      for (int64_t i = 0; i < L.in; ++i) z += x[size_t(i)] * net.w[l][size_t(i * L.out + o)];
      y[size_t(o)] = std::tanh(z) * (L.idt ? net.idt[l][size_t(o)] : 1.0);
    }
    if (L.skip != mlip::models::Layer::kNone)
      for (int64_t o = 0; o < L.out; ++o) y[size_t(o)] += x[size_t(o % L.in)];
    x = y;
  }
  return x;
}

struct Jet {
  std::vector<double> value, first, second;
};
Jet jet(const EmbeddingNet& net, double s) {
  const size_t m = size_t(net.outputs());
  Jet j{std::vector<double>(m), std::vector<double>(m), std::vector<double>(m)};
  mlip::models::embedding_jet(net, s, j.value.data(), j.first.data(), j.second.data());
  return j;
}

class EmbeddingTable : public ::testing::TestWithParam<bool> {};
INSTANTIATE_TEST_SUITE_P(ResnetDt, EmbeddingTable, ::testing::Bool());

TEST_P(EmbeddingTable, JetMatchesTheNetAndFiniteDifferences) {
  // Widths 1 -> 25 (no skip) -> 50 (concat skip) -> 100 (concat skip), and a same-width skip.
  for (const auto& widths : {std::vector<int64_t>{1, 25, 50, 100}, std::vector<int64_t>{1, 8, 8, 16}}) {
    const EmbeddingNet net = random_net(widths, GetParam(), 7);
    const double h = 1e-4;
    for (double s : {-1.3, -0.2, 0.0, 0.7, 2.5, 6.0, 14.0}) {
      const Jet at = jet(net, s), left = jet(net, s - h), right = jet(net, s + h);
      const auto reference = forward(net, s);
      for (size_t m = 0; m < at.value.size(); ++m) {
        EXPECT_NEAR(at.value[m], reference[m], 1e-13 * (1 + std::abs(reference[m]))) << "s " << s << " output " << m;
        // Central differences: error h^2/6 f''' (about 1e-9 here) plus rounding 1e-16/h.
        EXPECT_NEAR(at.first[m], (right.value[m] - left.value[m]) / (2 * h), 1e-8) << "s " << s << " output " << m;
        EXPECT_NEAR(at.second[m], (right.first[m] - left.first[m]) / (2 * h), 1e-8) << "s " << s << " output " << m;
      }
    }
  }
}

TEST(TableGrid, RoundsTheRangeOutwardsAndSpansItWithWholeIntervals) {
  const TableGrid g = mlip::models::make_table_grid(-0.37, 4.2, 0.01, 5);
  EXPECT_EQ(g.lower, -1.0);
  EXPECT_EQ(g.upper, 5.0);
  EXPECT_EQ(g.max, 25.0);
  EXPECT_EQ(g.fine_intervals, 600);
  EXPECT_EQ(g.coarse_intervals, 200);
  EXPECT_NEAR(g.fine_step, 0.01, 1e-15);
  EXPECT_NEAR(g.coarse_step, 0.1, 1e-15);
  EXPECT_DOUBLE_EQ(g.node(600), 5.0);
  // A step that does not divide the range: a whole number of intervals still ends at upper.
  const TableGrid odd = mlip::models::make_table_grid(0.0, 1.0, 0.003, 1);
  EXPECT_EQ(odd.fine_intervals, 333);
  EXPECT_EQ(odd.coarse_intervals, 0);
  EXPECT_EQ(odd.max, 1.0);
  EXPECT_NEAR(odd.node(odd.fine_intervals - 1) + odd.fine_step, 1.0, 1e-14);
}

TEST(TableGrid, LocatesEveryPointOfTheRangeAndNothingOutsideIt) {
  const TableGrid g = mlip::models::make_table_grid(-0.37, 4.2, 0.01, 5);
  int64_t k = -1;
  double t = -1;
  for (int64_t node = 0; node < g.intervals(); node += 37) {
    ASSERT_TRUE(g.locate(g.node(node), k, t));
    // A node is the start of its interval (rounding may put it at the end of the one before).
    EXPECT_TRUE(k == node || (k == node - 1 && std::abs(t - (g.node(node) - g.node(k))) < 1e-12)) << node;
  }
  ASSERT_TRUE(g.locate(g.max, k, t));
  EXPECT_EQ(k, g.intervals() - 1);
  EXPECT_NEAR(t, g.coarse_step, 1e-12);
  ASSERT_TRUE(g.locate(std::nextafter(g.upper, 0.0), k, t));
  EXPECT_EQ(k, g.fine_intervals - 1);
  ASSERT_TRUE(g.locate(g.upper, k, t));
  EXPECT_EQ(k, g.fine_intervals);
  EXPECT_EQ(t, 0.0);
  EXPECT_FALSE(g.locate(std::nextafter(g.max, 1e9), k, t));
  EXPECT_FALSE(g.locate(std::nextafter(g.lower, -1e9), k, t));
  EXPECT_FALSE(g.locate(std::numeric_limits<double>::quiet_NaN(), k, t));
  EXPECT_FALSE(g.locate(std::numeric_limits<double>::infinity(), k, t));
}

TEST(TableGrid, BadOptionsAreClearErrors) {
  auto message = [](double lower, double upper, double step, double extrapolate) -> std::string {
    try {
      mlip::models::make_table_grid(lower, upper, step, extrapolate);
    } catch (const mlip::Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(message(0, 1, 0, 5).find("the table step (-s): expected a positive number, got 0"), std::string::npos);
  EXPECT_NE(message(0, 1, -0.1, 5).find("got -0.1"), std::string::npos);
  EXPECT_NE(message(0, 1, 0.01, 0.5).find("the extrapolation (-e): expected a number of at least 1, got 0.5"),
            std::string::npos);
  EXPECT_NE(message(1, 1, 0.01, 5).find("expected lower < upper, got [1, 1]"), std::string::npos);
  EXPECT_NE(message(std::nan(""), 1, 0.01, 5).find("expected lower < upper"), std::string::npos);
}

/// p''(t) of a table row (the tests' own, from the coefficients).
double second_derivative(const double* row, int64_t m, int64_t o, double t) {
  const double a2 = row[2 * m + o], a3 = row[3 * m + o], a4 = row[4 * m + o], a5 = row[5 * m + o];
  return 2 * a2 + t * (6 * a3 + t * (12 * a4 + t * 20 * a5));
}

TEST_P(EmbeddingTable, IsTwiceContinuouslyDifferentiableAtEveryNode) {
  const EmbeddingNet net = random_net({1, 25, 50, 100}, GetParam(), 11);
  const TableGrid g = mlip::models::make_table_grid(-0.37, 4.2, 0.01, 5);
  const auto table = mlip::models::build_embedding_table(net, g);
  const int64_t m = net.outputs();
  ASSERT_EQ(int64_t(table.size()), g.intervals() * 6 * m);
  std::vector<double> gl(static_cast<size_t>(m)), dl(gl), gr(gl), dr(gl);
  double worst[3] = {0, 0, 0};
  for (int64_t k = 0; k + 1 < g.intervals(); ++k) {
    const double h = g.node(k + 1) - g.node(k);
    const double* left = &table[size_t(k * 6 * m)];
    const double* right = &table[size_t((k + 1) * 6 * m)];
    mlip::models::evaluate_table_row(left, m, h, gl.data(), dl.data());
    mlip::models::evaluate_table_row(right, m, 0.0, gr.data(), dr.data());
    for (int64_t o = 0; o < m; ++o) {
      const size_t u = size_t(o);
      worst[0] = std::max(worst[0], std::abs(gl[u] - gr[u]) / (1 + std::abs(gr[u])));
      worst[1] = std::max(worst[1], std::abs(dl[u] - dr[u]) / (1 + std::abs(dr[u])));
      const double cl = second_derivative(left, m, o, h), cr = second_derivative(right, m, o, 0.0);
      worst[2] = std::max(worst[2], std::abs(cl - cr) / (1 + std::abs(cr)));
    }
  }
  std::cout << "[ nodes ] value " << worst[0] << ", slope " << worst[1] << ", curvature " << worst[2] << "\n";
  EXPECT_LT(worst[0], 1e-12) << "value";
  EXPECT_LT(worst[1], 1e-10) << "first derivative";
  EXPECT_LT(worst[2], 1e-10) << "second derivative";
}

template <typename Real>
class EmbeddingTableEvaluation : public ::testing::Test {};
using Reals = ::testing::Types<float, double>;
TYPED_TEST_SUITE(EmbeddingTableEvaluation, Reals);

TYPED_TEST(EmbeddingTableEvaluation, MatchesTheNetBetweenTheNodes) {
  // The table in the model's dtype against the net in float64 at random points: in the fine part
  // the quintic's error (h^6 / 46080 max|y^(6)|) is at float64's rounding of the outputs
  // (measured 1e-15, slopes 3e-13); in the coarse part (h 10x larger) about 100 times larger
  // (2e-13, slopes 2e-11); float32 is limited by its own rounding of the coefficients and of t
  // (measured 8e-8, a few of its epsilons).
  using Real = TypeParam;
  const bool is_float = std::is_same_v<Real, float>;
  for (bool resnet_dt : {false, true}) {
    const EmbeddingNet net = random_net({1, 25, 50, 100}, resnet_dt, 13);
    const TableGrid g = mlip::models::make_table_grid(-0.37, 4.2, 0.01, 5);
    const auto table64 = mlip::models::build_embedding_table(net, g);
    const std::vector<Real> table(table64.begin(), table64.end());
    const int64_t m = net.outputs();
    std::vector<Real> value(static_cast<size_t>(m)), slope(value);
    std::mt19937_64 rng(5);
    std::uniform_real_distribution<double> fine(g.lower, g.upper), coarse(g.upper, g.max);
    double worst_fine[2] = {0, 0}, worst_coarse[2] = {0, 0};
    for (int n = 0; n < 4000; ++n) {
      const bool in_fine = n % 2 == 0;
      const double s = in_fine ? fine(rng) : coarse(rng);
      int64_t k;
      double t;
      ASSERT_TRUE(g.locate(s, k, t));
      mlip::models::evaluate_table_row(&table[size_t(k * 6 * m)], m, Real(t), value.data(), slope.data());
      const Jet reference = jet(net, s);
      double* worst = in_fine ? worst_fine : worst_coarse;
      for (int64_t o = 0; o < m; ++o) {
        const size_t u = size_t(o);
        worst[0] = std::max(worst[0], std::abs(double(value[u]) - reference.value[u]) / (1 + std::abs(reference.value[u])));
        worst[1] = std::max(worst[1], std::abs(double(slope[u]) - reference.first[u]) / (1 + std::abs(reference.first[u])));
      }
    }
    std::cout << "[ table ] " << (is_float ? "float32" : "float64") << (resnet_dt ? " resnet_dt" : "")
              << ": fine part value " << worst_fine[0] << ", slope " << worst_fine[1] << "; coarse part value "
              << worst_coarse[0] << ", slope " << worst_coarse[1] << " (relative to 1 + |y|)\n";
    EXPECT_LT(worst_fine[0], is_float ? 5e-7 : 1e-13) << "value, fine part, resnet_dt " << resnet_dt;
    EXPECT_LT(worst_fine[1], is_float ? 5e-7 : 1e-11) << "slope, fine part";
    EXPECT_LT(worst_coarse[0], is_float ? 5e-7 : 1e-11) << "value, coarse part";
    EXPECT_LT(worst_coarse[1], is_float ? 5e-7 : 1e-9) << "slope, coarse part";
  }
}

}  // namespace
