// models::host_coupling (models/equivariant/host_coupling.h): the host arrays equal the tables,
// one conversion serves repeated calls, and a table changed in place or replaced by a new one
// (even at the same address) is converted again, never served stale.
#include "models/equivariant/host_coupling.h"

#include <gtest/gtest.h>

#include "test_util.h"

namespace {

using mlip::models::host_coupling;

torch::Tensor terms_of(int64_t base) { return torch::arange(base, base + 12, torch::kInt64).reshape({4, 3}); }

TEST(HostCoupling, EqualsTheTablesAndIsConvertedOnce) {
  const auto terms = terms_of(5);
  const auto coefficients = torch::tensor({0.5, -1.0, 2.0, 0.25}, torch::kFloat32);
  const auto a = host_coupling(terms, coefficients);
  EXPECT_EQ(a->columns, 3);
  EXPECT_EQ(a->terms, std::vector<int64_t>({5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}));
  EXPECT_EQ(a->coefficients, std::vector<double>({0.5, -1.0, 2.0, 0.25}));
  EXPECT_EQ(host_coupling(terms, coefficients).get(), a.get()) << "a second conversion of the same tables";
}

TEST(HostCoupling, ATableChangedOrReplacedIsConvertedAgain) {
  auto terms = terms_of(0);
  const auto coefficients = torch::ones({4}, torch::kFloat64);
  const auto before = host_coupling(terms, coefficients);
  terms.add_(100);  // in place: a new version
  EXPECT_EQ(host_coupling(terms, coefficients)->terms[0], 100);
  for (int64_t k = 0; k < 20; ++k) {  // new tables, often at a freed one's address
    const auto fresh = terms_of(1000 * (k + 1));
    EXPECT_EQ(host_coupling(fresh, coefficients)->terms[0], 1000 * (k + 1));
  }
  EXPECT_EQ(before->terms[0], 0) << "an earlier result is not changed";
}

TEST(HostCoupling, MismatchedTablesAreAnError) {
  const auto message =
      mlip::test::error_of([] { host_coupling(terms_of(0), torch::ones({3}, torch::kFloat64)); });
  EXPECT_TRUE(mlip::test::contains(message, "expected terms [T, columns] and coefficients [T], got [4, 3] and [3]"))
      << message;
}

}  // namespace
