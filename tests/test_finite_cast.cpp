// models::finite_cast (docs/robustness.md "Numbers that become a model's parameters"): a value
// finite in float64 but not in the model's dtype is refused by name, never stored as inf.
#include <gtest/gtest.h>
#include <torch/script.h>

#include <cmath>
#include <limits>

#include "models/finite_cast.h"
#include "test_util.h"

using mlip::models::finite_cast;
using mlip::test::error_of;

TEST(FiniteCast, ValuesBeyondTheDtypesRangeAreRefusedByName) {
  const torch::Tensor shifts = torch::tensor({-432.1, 1e39}, torch::kFloat64);
  EXPECT_EQ(error_of([&] { finite_cast(shifts, torch::kFloat32, "the energy shift", {"O", "H"}); }),
            "the energy shift of H is 1e+39, beyond float32's range (its largest finite value is 3.4028235e+38)");
  EXPECT_EQ(error_of([&] { finite_cast(shifts, torch::kFloat32, "davg"); }),
            "davg [1] is 1e+39, beyond float32's range (its largest finite value is 3.4028235e+38)");
  EXPECT_EQ(error_of([&] { finite_cast(torch::tensor({1e39}, torch::kFloat64), torch::kFloat32, "the scale"); }),
            "the scale is 1e+39, beyond float32's range (its largest finite value is 3.4028235e+38)");
  // Already not finite: said as such.
  const torch::Tensor nan = torch::tensor({1.0, std::nan("")}, torch::kFloat64);
  EXPECT_EQ(error_of([&] { finite_cast(nan, torch::kFloat64, "the shift", {"O", "H"}); }),
            "the shift of H is nan; expected a finite number");
}

TEST(FiniteCast, ValuesInRangeAreCastAsTheyWere) {
  const torch::Tensor values = torch::tensor({-432.1, 3.4e38, -3.4e38}, torch::kFloat64);
  const torch::Tensor cast = finite_cast(values, torch::kFloat32, "x");
  EXPECT_EQ(cast.scalar_type(), torch::kFloat32);
  EXPECT_TRUE(torch::equal(cast, values.to(torch::kFloat32)));
  const torch::Tensor big = torch::tensor({1e300}, torch::kFloat64);
  EXPECT_EQ(finite_cast(big, torch::kFloat64, "x").item<double>(), 1e300);
}
