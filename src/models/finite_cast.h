#pragma once

#include <torch/script.h>

#include <string>
#include <vector>

namespace mlip::models {

/// `values` cast to `dtype`, after checking that each one is finite in that dtype: a number that
/// becomes a parameter or buffer of a model (an energy shift, a statistic) must not turn into
/// inf or NaN there (1e39 eV overflows a float32 model; docs/robustness.md "Numbers that become
/// a model's parameters"). Throws mlip::Error naming `what` ("the energy shift"), the element by
/// `names` (one per value of a 1-D tensor; empty: by index), the value and the dtype's range:
/// `the energy shift of O is 1e+39, beyond float32's range (its largest finite value is
/// 3.4028235e+38)`. The result is on `values`' device.
torch::Tensor finite_cast(const torch::Tensor& values, torch::ScalarType dtype, const std::string& what,
                          const std::vector<std::string>& names = {});

}  // namespace mlip::models
