// The k-vector sum's cost in a training step (docs/long_range.md "The k-sum in training"): the
// fused host operation (reciprocal_energy) against the same sum as tensor operations
// (reciprocal_energy_by_operations, the path of the TorchScript methods), for boxes of N ions at
// the density of examples/ions (64 ions in a 12 Å cube), float64, the default settings. One
// "step" as training takes it: charges from a weight, E_long, its gradient by positions and cell
// kept as a graph, a loss of forces and virial, and the loss's gradient by the weight.
// Prints the k-vectors, ms per step of each (best of 5 rounds of 20 steps), their ratio, and the
// step's own cost with a trivial energy in place of the sum (what either pays beside the sum).
//
// usage: bench_reciprocal_training [N ...]     (default 64 96 216)
#include <torch/csrc/autograd/autograd.h>
#include <torch/script.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "models/long_range/ewald.h"
#include "models/long_range/reciprocal_energy.h"

using namespace mlip::models;

namespace {

using Energy = std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&)>;

/// One training-like step through `energy`; returns the weight's gradient (kept alive).
torch::Tensor step(const Energy& energy, const torch::Tensor& pos0, const torch::Tensor& cell0, const torch::Tensor& w) {
  const auto pos = pos0.detach().requires_grad_(true), cell = cell0.detach().requires_grad_(true);
  const auto raw = torch::tanh(torch::matmul(torch::sin(pos), w));
  const auto q = raw - raw.mean();
  const auto e = energy(q, pos, cell);
  const auto first = torch::autograd::grad({e}, {pos, cell}, {}, true, true);
  const auto virial = -(torch::matmul(pos.transpose(0, 1), first[0]) + torch::matmul(cell.transpose(0, 1), first[1]));
  const auto loss = (first[0] * first[0]).sum() + (virial * virial).sum() + e;
  return torch::autograd::grad({loss}, {w})[0];
}

double best_ms(const Energy& energy, const torch::Tensor& pos, const torch::Tensor& cell, int repeats) {
  const auto w = torch::tensor({0.7, -0.4, 0.3}, torch::kFloat64).requires_grad_(true);
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    for (int s = 0; s < 20; ++s) step(energy, pos, cell, w);
    best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / 20);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<long> sizes;
  for (int a = 1; a < argc; ++a) sizes.push_back(std::atol(argv[a]));
  if (sizes.empty()) sizes = {64, 96, 216};
  LongRangeSettings settings;
  settings.enabled = true;  // sigma 1 Å, spacing 2 Å
  std::printf("%8s %10s %10s %14s %16s %8s %16s\n", "ions", "box (Å)", "k-vectors", "fused (ms)", "operations (ms)",
              "ratio", "no sum (ms)");
  for (long n : sizes) {
    const double length = 12.0 * std::cbrt(double(n) / 64.0);
    torch::manual_seed(uint64_t(n));
    const auto pos = torch::rand({n, 3}, torch::kFloat64) * length;
    const auto cell = torch::eye(3, torch::kFloat64) * length;
    const ReciprocalSum sum(settings, cell.data_ptr<double>());
    const auto n_int = torch::tensor(std::vector<int64_t>(sum.integer_vectors()), torch::kInt64)
                           .reshape({-1, 3})
                           .to(torch::kFloat64);
    const Energy fused = [&](const torch::Tensor& q, const torch::Tensor& p, const torch::Tensor& c) {
      return reciprocal_energy(settings, q, p, c);
    };
    const Energy operations = [&](const torch::Tensor& q, const torch::Tensor& p, const torch::Tensor& c) {
      return reciprocal_energy_by_operations(settings, n_int, q, p, c);
    };
    const Energy trivial = [&](const torch::Tensor& q, const torch::Tensor& p, const torch::Tensor& c) {
      return (q * q).sum() + (p * p).sum() * 1e-3 + c.sum();
    };
    const double fused_ms = best_ms(fused, pos, cell, 5), operations_ms = best_ms(operations, pos, cell, 5);
    const double trivial_ms = best_ms(trivial, pos, cell, 5);
    std::printf("%8ld %10.1f %10lld %14.3f %16.3f %7.1fx %16.3f\n", n, length, (long long)sum.size(), fused_ms,
                operations_ms, operations_ms / fused_ms, trivial_ms);
  }
  return 0;
}
