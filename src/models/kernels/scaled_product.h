#pragma once

#include <torch/script.h>

namespace mlip::models {

/// alpha · (a @ b) + beta · c (c undefined or beta 0: no such term) as one LibTorch call on any
/// device: at::mm when alpha is 1 and nothing is added, else at::addmm (with a kept zero as its
/// addend when there is none). One kernel instead of a product and a scaling on a GPU.
///   a: [m, k], b: [k, n] (transposed views are fine), c: [m, n] or undefined; one dtype and
///   device. Returns a new [m, n] tensor.
torch::Tensor scaled_product(const torch::Tensor& a, const torch::Tensor& b, double alpha,
                             const torch::Tensor& c = torch::Tensor(), double beta = 0.0);

}  // namespace mlip::models
