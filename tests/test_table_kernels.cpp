// The compressed se_e2_a's fused kernels (models/se_e2_a/table_kernels.h) against the same sums
// written out in float64 from evaluate_table_row, per dtype, for output counts that do and do
// not fill the kernels' vector lanes, with pairs the table does not cover mixed in.
#include "models/se_e2_a/table_kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <type_traits>
#include <vector>

#include "models/se_e2_a/embedding_table.h"

namespace {

template <typename R>
class TableKernelsTest : public ::testing::Test {};
using Dtypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(TableKernelsTest, Dtypes);

template <typename R>
struct Case {
  int64_t m = 0, q = 0;
  std::vector<R> table, offset, rows, grad_t;
  std::vector<int64_t> interval;
};

template <typename R>
Case<R> random_case(int64_t m, int64_t q, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  const int64_t intervals = 9;
  Case<R> c;
  c.m = m, c.q = q;
  c.table.resize(size_t(intervals * 6 * m));
  for (auto& v : c.table) v = R(u(rng));
  for (int64_t p = 0; p < q; ++p) {
    // Every fifth pair is not covered (negative interval, as the caller marks it).
    c.interval.push_back(p % 5 == 3 ? -1 - p / 5 : int64_t(rng() % intervals));
    c.offset.push_back(R(0.01 * (u(rng) + 1.0)));
    for (int a = 0; a < 4; ++a) c.rows.push_back(R(u(rng)));
  }
  c.grad_t.resize(size_t(4 * m));
  for (auto& v : c.grad_t) v = R(u(rng));
  return c;
}

/// G and G' of pair p in float64 (the table's coefficients as stored).
template <typename R>
void reference_row(const Case<R>& c, int64_t p, std::vector<double>& g, std::vector<double>& dg) {
  std::vector<double> row(c.table.begin() + c.interval[size_t(p)] * 6 * c.m,
                          c.table.begin() + (c.interval[size_t(p)] + 1) * 6 * c.m);
  g.assign(size_t(c.m), 0.0), dg.assign(size_t(c.m), 0.0);
  mlip::models::evaluate_table_row(row.data(), c.m, double(c.offset[size_t(p)]), g.data(), dg.data());
}

template <typename R>
double tolerance() {
  return std::is_same_v<R, float> ? 2e-5 : 1e-13;
}

TYPED_TEST(TableKernelsTest, AccumulateIsTheSumOfRowsTimesTheTabulatedNet) {
  using R = TypeParam;
  for (int64_t m : {1, 3, 8, 37, 100}) {
    const auto c = random_case<R>(m, 23, unsigned(m));
    std::vector<R> t(size_t(4 * m));
    for (size_t k = 0; k < t.size(); ++k) t[k] = R(0.5) * R(k % 7);  // accumulates onto what is there
    std::vector<double> expect(t.begin(), t.end()), g, dg;
    double scale = 1;
    for (int64_t p = 0; p < c.q; ++p) {
      if (c.interval[size_t(p)] < 0) continue;
      reference_row(c, p, g, dg);
      for (int a = 0; a < 4; ++a)
        for (int64_t k = 0; k < m; ++k) {
          expect[size_t(a * m + k)] += double(c.rows[size_t(p * 4 + a)]) * g[size_t(k)];
          scale += std::abs(double(c.rows[size_t(p * 4 + a)]) * g[size_t(k)]);
        }
    }
    mlip::models::table_embed_accumulate(c.table.data(), m, c.interval.data(), c.offset.data(), c.rows.data(), c.q,
                                         t.data());
    for (size_t k = 0; k < t.size(); ++k)
      ASSERT_NEAR(double(t[k]), expect[k], tolerance<R>() * scale) << "M " << m << " entry " << k;
  }
}

TYPED_TEST(TableKernelsTest, AdjointGivesTheRowAndInputGradients) {
  using R = TypeParam;
  for (int64_t m : {1, 3, 8, 37, 100}) {
    const auto c = random_case<R>(m, 23, 100u + unsigned(m));
    const R untouched = R(-7.25);
    std::vector<R> grad_rows(size_t(4 * c.q), untouched), grad_s(size_t(c.q), untouched);
    mlip::models::table_embed_adjoint(c.table.data(), m, c.interval.data(), c.offset.data(), c.rows.data(), c.q,
                                      c.grad_t.data(), grad_rows.data(), grad_s.data());
    std::vector<double> g, dg;
    for (int64_t p = 0; p < c.q; ++p) {
      if (c.interval[size_t(p)] < 0) {
        EXPECT_EQ(grad_s[size_t(p)], untouched) << "an uncovered pair's entry was written";
        for (int a = 0; a < 4; ++a) EXPECT_EQ(grad_rows[size_t(p * 4 + a)], untouched);
        continue;
      }
      reference_row(c, p, g, dg);
      double gs = 0, gs_scale = 1;
      for (int64_t k = 0; k < m; ++k) {
        double h = 0;
        for (int a = 0; a < 4; ++a) h += double(c.rows[size_t(p * 4 + a)]) * double(c.grad_t[size_t(a * m + k)]);
        gs += h * dg[size_t(k)];
        gs_scale += std::abs(h * dg[size_t(k)]);
      }
      EXPECT_NEAR(double(grad_s[size_t(p)]), gs, tolerance<R>() * gs_scale) << "M " << m << " pair " << p;
      for (int a = 0; a < 4; ++a) {
        double gr = 0, scale = 1;
        for (int64_t k = 0; k < m; ++k) {
          gr += g[size_t(k)] * double(c.grad_t[size_t(a * m + k)]);
          scale += std::abs(g[size_t(k)] * double(c.grad_t[size_t(a * m + k)]));
        }
        EXPECT_NEAR(double(grad_rows[size_t(p * 4 + a)]), gr, tolerance<R>() * scale)
            << "M " << m << " pair " << p << " column " << a;
      }
    }
  }
}

}  // namespace
