#include "models/kernels/scaled_product.h"

#include <mutex>
#include <vector>

namespace mlip::models {
namespace {

/// A zero of `options`' dtype and device, made once: addmm's addend when beta is 0 (its values
/// are then not read).
torch::Tensor zero_of(const torch::TensorOptions& options) {
  static std::mutex mutex;
  static auto& made = *new std::vector<torch::Tensor>();  // never destroyed (device tensors at exit)
  const std::lock_guard<std::mutex> lock(mutex);
  for (const torch::Tensor& z : made)
    if (z.scalar_type() == options.dtype().toScalarType() && z.device() == options.device()) return z;
  made.push_back(torch::zeros({}, options));
  return made.back();
}

}  // namespace

torch::Tensor scaled_product(const torch::Tensor& a, const torch::Tensor& b, double alpha, const torch::Tensor& c,
                             double beta) {
  if (c.defined() && beta != 0.0) return at::addmm(c, a, b, beta, alpha);
  if (alpha == 1.0) return at::mm(a, b);
  return at::addmm(zero_of(a.options()), a, b, 0.0, alpha);
}

}  // namespace mlip::models
