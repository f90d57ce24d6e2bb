#include "models/finite_cast.h"

#include <cmath>
#include <cstdio>
#include <limits>

#include "error.h"

namespace mlip::models {
namespace {

std::string number_text(double value) {
  char text[40];
  std::snprintf(text, sizeof text, "%.8g", value);
  return text;
}

std::string dtype_name(torch::ScalarType dtype) {
  switch (dtype) {
    case torch::kFloat32: return "float32";
    case torch::kFloat64: return "float64";
    case torch::kFloat16: return "float16";
    case torch::kBFloat16: return "bfloat16";
    default: return c10::toString(dtype);
  }
}

}  // namespace

torch::Tensor finite_cast(const torch::Tensor& values, torch::ScalarType dtype, const std::string& what,
                          const std::vector<std::string>& names) {
  const torch::Tensor cast = values.to(dtype);
  const torch::Tensor bad = torch::logical_not(torch::isfinite(cast)).flatten().to(torch::kCPU);
  if (!bad.any().item<bool>()) return cast;
  const int64_t k = bad.nonzero()[0][0].item<int64_t>();
  const double given = values.flatten()[k].to(torch::kCPU).item<double>();
  const std::string element = size_t(k) < names.size() ? " of " + names[size_t(k)]
                                                       : (values.numel() > 1 ? " [" + std::to_string(k) + "]" : "");
  if (!std::isfinite(given))
    throw Error(what + element + " is " + number_text(given) + "; expected a finite number");
  const double largest = dtype == torch::kFloat32    ? double(std::numeric_limits<float>::max())
                         : dtype == torch::kFloat16  ? 65504.0
                         : dtype == torch::kBFloat16 ? 3.3895313892515355e38
                                                     : std::numeric_limits<double>::max();
  throw Error(what + element + " is " + number_text(given) + ", beyond " + dtype_name(dtype) +
              "'s range (its largest finite value is " + number_text(largest) + ")");
}

}  // namespace mlip::models
