#pragma once

#include <torch/script.h>

#include <random>
#include <string>
#include <vector>

#include "test_util.h"

namespace mlip::test {

/// The docs/deploy.md input dictionary of a frame, with the edges of the Kokkos neighbour list
/// within rcut, positions and cell in `dtype`, and `pbc` (the frame's, all zero without a cell).
c10::Dict<std::string, torch::Tensor> deploy_input(const Frame& f, double rcut, torch::Dtype dtype);

/// A frozen-interface model's outputs, in float64.
struct ModelResult {
  double energy = 0;
  torch::Tensor forces;  ///< [N, 3]
  torch::Tensor virial;  ///< [3, 3]
  torch::Tensor charges;  ///< [N] float64, from a model with charges (model.long_range); undefined otherwise
};

/// Calls model.forward(deploy_input(f, rcut, dtype)).
ModelResult run_deploy(torch::jit::Module& model, const Frame& f, double rcut, torch::Dtype dtype);

/// max |a - b| / max |b| (float64; divided by 1 when b is all zero).
double relative(const torch::Tensor& a, const torch::Tensor& b);

/// Every parameter's gradient (zeros where it has none), cloned, in the module's order.
std::vector<torch::Tensor> parameter_grads(torch::jit::Module& module);

/// Sets every parameter's gradient that exists to zero.
void zero_grads(torch::jit::Module& module);

/// A random proper rotation [3, 3] float64, times a reflection when `reflect`.
torch::Tensor random_rotation(std::mt19937& rng, bool reflect);

/// The [n, 3] rows of v (flattened) times rot^T.
std::vector<double> transform(const std::vector<double>& v, const torch::Tensor& rot);

}  // namespace mlip::test
