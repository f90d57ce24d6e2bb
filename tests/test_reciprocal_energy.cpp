// The k-vector sum of training as one fused host operation (models/long_range/reciprocal_energy.h,
// docs/long_range.md "The k-sum in training"): its energy against the host sum and the TorchScript
// methods, its first derivatives against the host sum's potentials, forces and virial, and the
// derivatives a training loss takes through them (by the charges fused, by positions and cell
// through the operations) against autograd on the same sum written as operations,
// with the k-vectors of the TorchScript methods.
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/script.h>

#include <random>

#include "error.h"
#include "models/long_range/ewald.h"
#include "models/long_range/long_range.h"
#include "models/long_range/reciprocal_energy.h"
#include "test_util.h"

namespace mlip::models {
namespace {

LongRangeSettings settings_of(double sigma, double spacing) {
  LongRangeSettings s;
  s.enabled = true;
  s.sigma = sigma;
  s.kspace_spacing = spacing;
  return s;
}

/// A charged frame (total 0.7 e) of 24 atoms in a skewed cell, as float64 host tensors.
struct Sample {
  torch::Tensor pos, cell, q;
};
Sample sample() {
  const test::Frame f = test::random_frame(24, true, 5, 9.0, {1.1, -0.7, 0.8}, 1.2, 0.5);
  Sample s;
  s.pos = torch::tensor(f.pos, torch::kFloat64).reshape({-1, 3});
  s.cell = torch::tensor(f.cell, torch::kFloat64).reshape({3, 3});
  torch::manual_seed(3);
  s.q = torch::rand({s.pos.size(0)}, torch::kFloat64) * 2 - 1;
  s.q = s.q - (s.q.sum() - 0.7) / double(s.q.size(0));
  return s;
}

double relative_difference(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>() / std::max(b.abs().max().item<double>(), 1e-300);
}

class ReciprocalEnergyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    module_.define(long_range_source(settings_, ""));
    n_int_ = module_.run_method("long_range_kvectors", sample_.cell).toTensor();
  }
  /// The reference: the sum as operations, over the TorchScript methods' k-vectors.
  torch::Tensor reference(const torch::Tensor& q, const torch::Tensor& pos, const torch::Tensor& cell) {
    return reciprocal_energy_by_operations(settings_, n_int_, q, pos, cell);
  }
  LongRangeSettings settings_ = settings_of(0.9, 1.7);
  torch::jit::Module module_{"reciprocal_energy_test"};
  Sample sample_ = sample();
  torch::Tensor n_int_;
};

TEST_F(ReciprocalEnergyTest, EnergyEqualsTheHostSumAndTheTorchScriptMethods) {
  const Sample& s = sample_;
  ASSERT_GT(n_int_.size(0), 100);
  const double fused = reciprocal_energy(settings_, s.q, s.pos, s.cell).item<double>();
  const double methods =
      module_.run_method("long_range_energy", s.q, s.pos, s.cell, true).toTensor().sum().item<double>();
  const ReciprocalSum host(settings_, s.cell.data_ptr<double>());
  std::vector<double> factor;
  host.add_structure_factor(s.q.size(0), s.pos.data_ptr<double>(), s.q.data_ptr<double>(), factor);
  const double sum = s.q.sum().item<double>(), square = (s.q * s.q).sum().item<double>();
  const double exact = host.energy(factor, sum, square);
  EXPECT_NEAR(fused, exact, 1e-12 * std::abs(exact));
  EXPECT_NEAR(fused, methods, 1e-12 * std::abs(exact));
  EXPECT_NEAR(reference(s.q, s.pos, s.cell).item<double>(), exact, 1e-12 * std::abs(exact));
}

TEST_F(ReciprocalEnergyTest, FirstDerivativesArePotentialsForcesAndVirial) {
  const Sample& s = sample_;
  const auto q = s.q.clone().requires_grad_(true), pos = s.pos.clone().requires_grad_(true),
             cell = s.cell.clone().requires_grad_(true);
  const auto grads = torch::autograd::grad({reciprocal_energy(settings_, q, pos, cell)}, {q, pos, cell});
  const ReciprocalSum host(settings_, s.cell.data_ptr<double>());
  const int64_t n = s.q.size(0);
  std::vector<double> factor, phi(size_t(n), 0.0), forces(size_t(3 * n), 0.0), w(9, 0.0);
  host.add_structure_factor(n, s.pos.data_ptr<double>(), s.q.data_ptr<double>(), factor);
  const double charge = s.q.sum().item<double>();
  host.potentials_and_forces(factor, charge, n, s.pos.data_ptr<double>(), s.q.data_ptr<double>(), phi.data(),
                             forces.data());
  host.virial(factor, charge, w.data());
  EXPECT_LT(relative_difference(grads[0], torch::tensor(phi, torch::kFloat64)), 1e-12);
  EXPECT_LT(relative_difference(-grads[1], torch::tensor(forces, torch::kFloat64).reshape({n, 3})), 1e-12);
  const auto virial = -(torch::matmul(s.pos.transpose(0, 1), grads[1]) + torch::matmul(s.cell.transpose(0, 1), grads[2]));
  EXPECT_LT(relative_difference(virial, torch::tensor(w, torch::kFloat64).reshape({3, 3})), 1e-11);
  // ∂E/∂cell itself, against autograd through the operations.
  const auto cell_ref = s.cell.clone().requires_grad_(true);
  const auto by_ops = torch::autograd::grad({reference(s.q, s.pos, cell_ref)}, {cell_ref});
  EXPECT_LT(relative_difference(grads[2], by_ops[0]), 1e-11);
}

/// A training step's derivative in miniature: charges that depend on the positions through a
/// weight w [3], E(q(w, pos), pos, cell), forces and virial by a graph, a loss of them, and its
/// gradient by w (and, when `by_positions_too`, by the positions: the operations' path).
std::vector<torch::Tensor> loss_gradient(const std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&,
                                                                           const torch::Tensor&)>& energy,
                                         const Sample& s, bool by_positions_too) {
  const auto w = torch::tensor({0.7, -0.4, 0.3}, torch::kFloat64).requires_grad_(true);
  const auto pos = s.pos.clone().requires_grad_(true), cell = s.cell.clone().requires_grad_(true);
  auto raw = torch::tanh(torch::matmul(torch::sin(pos), w) + s.q);
  auto q = raw - raw.mean();
  const auto e = energy(q, pos, cell);
  const auto first = torch::autograd::grad({e}, {pos, cell}, {}, true, true);
  const auto forces = -first[0];
  const auto virial = -(torch::matmul(pos.transpose(0, 1), first[0]) + torch::matmul(cell.transpose(0, 1), first[1]));
  torch::manual_seed(11);
  const auto target_forces = torch::randn_like(forces), virial_weights = torch::randn({3, 3}, torch::kFloat64);
  const auto loss = (forces - target_forces).pow(2).sum() + (virial * virial_weights).sum() + 0.3 * e;
  if (by_positions_too) return torch::autograd::grad({loss}, {w, pos, cell});
  return torch::autograd::grad({loss}, {w});
}

TEST_F(ReciprocalEnergyTest, ALossOfForcesAndVirialDifferentiatesAsThroughTheOperations) {
  auto fused = [&](const torch::Tensor& q, const torch::Tensor& pos, const torch::Tensor& cell) {
    return reciprocal_energy(settings_, q, pos, cell);
  };
  auto ops = [&](const torch::Tensor& q, const torch::Tensor& pos, const torch::Tensor& cell) {
    return reference(q, pos, cell);
  };
  for (bool by_positions_too : {false, true}) {
    SCOPED_TRACE(by_positions_too ? "by w, positions and cell" : "by w (the fused derivative by the charges)");
    const auto got = loss_gradient(fused, sample_, by_positions_too);
    const auto want = loss_gradient(ops, sample_, by_positions_too);
    ASSERT_EQ(got.size(), want.size());
    for (size_t a = 0; a < got.size(); ++a) {
      EXPECT_GT(want[a].abs().max().item<double>(), 1e-6);
      EXPECT_LT(relative_difference(got[a], want[a]), 1e-10) << "gradient " << a;
    }
  }
}

// The batch operation of training (reciprocal_batch) against autograd through the operations: for
// two frames of a charged cell, from raw charges, the energies, the shifted charges, the seeds
// ∂E/∂q̃, the fixed-charge forces and virials; and the gradient by the raw charges of a loss of all
// five (what a training step asks of it). A second order is refused by name.
TEST_F(ReciprocalEnergyTest, TheBatchTermsAreTheOperationsDerivatives) {
  LongRangeSettings settings = settings_;
  settings.total_charge = 0.7;
  const int64_t N = sample_.pos.size(0);
  torch::manual_seed(11);
  const torch::Tensor pos = torch::stack({sample_.pos, sample_.pos + 0.3 * torch::rand({N, 3}, torch::kFloat64)});
  const torch::Tensor cell = torch::stack({sample_.cell, sample_.cell});
  const torch::Tensor raw = (torch::rand({2, N}, torch::kFloat64) - 0.5).requires_grad_(true);
  const ReciprocalBatchTerms fused = reciprocal_batch(settings, raw, pos, cell);
  std::vector<torch::Tensor> energy, charges, seeds, forces, virial;
  for (int64_t f = 0; f < 2; ++f) {
    const torch::Tensor p = pos[f].clone().requires_grad_(true), c = cell[f].clone().requires_grad_(true);
    const torch::Tensor q = raw[f] - (raw[f].sum() - 0.7) / double(N);
    const torch::Tensor e = reference(q, p, c);
    const auto first = torch::autograd::grad({e}, {raw, p, c}, {}, true, true);
    energy.push_back(e), charges.push_back(q), seeds.push_back(first[0][f]), forces.push_back(-first[1]);
    virial.push_back(-(torch::matmul(p.detach().t(), first[1]) + torch::matmul(c.detach().t(), first[2])));
  }
  const std::vector<std::pair<const char*, std::pair<torch::Tensor, torch::Tensor>>> pairs = {
      {"energy", {fused.energy, torch::stack(energy)}},   {"charges", {fused.charges, torch::stack(charges)}},
      {"seeds", {fused.seeds, torch::stack(seeds)}},      {"forces", {fused.forces, torch::stack(forces)}},
      {"virial", {fused.virial, torch::stack(virial)}}};
  torch::Tensor loss_fused = torch::zeros({}, torch::kFloat64), loss_reference = torch::zeros({}, torch::kFloat64);
  for (const auto& [name, values] : pairs) {
    EXPECT_LT(relative_difference(values.first, values.second.detach()), 1e-10) << name;
    const torch::Tensor weight = torch::randn(values.first.sizes(), torch::kFloat64);
    loss_fused = loss_fused + (weight * values.first).sum();
    loss_reference = loss_reference + (weight * values.second).sum();
  }
  EXPECT_NEAR(fused.charges.sum(1)[1].item<double>(), 0.7, 1e-12);
  const torch::Tensor by_fused = torch::autograd::grad({loss_fused}, {raw}, {}, true)[0];
  const torch::Tensor by_reference = torch::autograd::grad({loss_reference}, {raw})[0];
  EXPECT_LT(relative_difference(by_fused, by_reference), 1e-9);
  const std::string message = test::error_of([&] {
    const auto g = torch::autograd::grad({loss_fused}, {raw}, {}, true, true);
    (void)g;
  });
  EXPECT_TRUE(test::contains(message, "reciprocal_batch: derivatives of the first order by the charges; a second "
                                      "was asked for"))
      << message;
  EXPECT_TRUE(test::contains(test::error_of([&] { reciprocal_batch(settings, raw.to(torch::kFloat32), pos, cell); }),
                             "reciprocal_energy: raw charges: expected a float64 tensor"));
}

TEST_F(ReciprocalEnergyTest, AThirdDerivativeIsRefusedByName) {
  const auto q = sample_.q.clone().requires_grad_(true);
  const auto e = reciprocal_energy(settings_, q, sample_.pos, sample_.cell);
  const auto phi = torch::autograd::grad({e}, {q}, {}, true, true)[0];
  EXPECT_TRUE(test::contains(test::error_of([&] { torch::autograd::grad({(phi * phi).sum()}, {q}, {}, true, true); }),
                             "a third was asked for"));
}

TEST_F(ReciprocalEnergyTest, RefusesTensorsItCannotRead) {
  const Sample& s = sample_;
  EXPECT_TRUE(test::contains(test::error_of([&] { reciprocal_energy(settings_, s.q.to(torch::kFloat32), s.pos, s.cell); }),
                             "q: expected a float64 tensor on the CPU"));
  EXPECT_TRUE(test::contains(test::error_of([&] { reciprocal_energy(settings_, s.q, s.pos.narrow(0, 0, 3), s.cell); }),
                             "pos: expected a float64 tensor on the CPU of shape [24, 3], got"));
  EXPECT_TRUE(test::contains(test::error_of([&] { reciprocal_energy(settings_, s.q, s.pos, torch::zeros({3, 3}, torch::kFloat64)); }),
                             "singular"));
}

}  // namespace
}  // namespace mlip::models
