// The device-generic se_e2_a training path (tensor operations, the one that runs on GPUs), with
// and without mlip's fused embedding kernels (docs/fused_kernels.md "The training path"), against
// the hand-written CPU path, on the CPU, so that CI exercises the GPU's code on every commit
// (docs/training_path.md "The device-generic path"): energies, forces, virials and every
// parameter gradient, in float64 and float32; and the same on CUDA where one is visible.
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "data/neighbor_list.h"
#include "models/se_e2_a/env_matrix.h"
#include "models/se_e2_a/fused_embedding.h"
#include "models/se_e2_a/se_e2_a.h"
#include "models/se_e2_a/se_e2_a_evaluator.h"
#include "models/se_e2_a/se_e2_a_generic_path.h"
#include "test_util.h"

namespace {

using mlip::models::PackedEnv;
using mlip::models::SeAConfig;
using mlip::models::SeAEvaluator;
using mlip::models::SeAGenericPath;
using mlip::test::Frame;

struct Case {
  bool one_side = true;
  bool resnet_dt = false;
  std::vector<int64_t> sel = {12, 24};
  bool periodic = true;
  int batch = 1;
  bool isolated_energy_is_bias = false;
  std::string name() const {
    return std::string(one_side ? "one_side" : "two_side") + (resnet_dt ? " resnet_dt" : "") + " sel " +
           std::to_string(sel[0]) + "," + std::to_string(sel[1]) + (periodic ? " periodic" : " cluster") + " batch " +
           std::to_string(batch) + (isolated_energy_is_bias ? " isolated_energy_is_bias" : "");
  }
};

std::vector<Case> cases() {
  std::vector<Case> out;
  for (bool one_side : {true, false})
    for (bool resnet : {false, true})
      for (int batch : {1, 3}) {
        Case k;
        k.one_side = one_side, k.resnet_dt = resnet, k.batch = batch;
        out.push_back(k);
      }
  Case k;
  k.sel = {3, 5};  // truncated environments
  k.periodic = false;
  k.batch = 2;
  out.push_back(k);
  k = Case();  // the isolated atom's fitting-net output subtracted (model.e0s isolated or given)
  k.one_side = false;
  k.batch = 3;
  k.isolated_energy_is_bias = true;
  out.push_back(k);
  return out;
}

template <typename Real>
struct Setup {
  SeAConfig config;
  torch::jit::Module module;
  std::vector<PackedEnv> frames;
  std::vector<int> types;
  torch::Tensor ge, gf, gv;  // a loss's gradient with respect to energy, forces, virial

  explicit Setup(const Case& k) {
    SeAConfig& c = config;
    c.type_map = {"O", "H"};
    c.sel = k.sel;
    c.rcut = 4.0;
    c.rcut_smth = 1.0;
    c.neuron = {4, 8, 16};
    c.axis_neuron = 3;
    c.type_one_side = k.one_side;
    c.resnet_dt = k.resnet_dt;
    c.fitting_neuron = {12, 12};
    c.precision = std::is_same_v<Real, float> ? "float32" : "float64";
    c.seed = 11;
    c.fitting_seed = 12;
    c.isolated_energy_is_bias = k.isolated_energy_is_bias;
    module = mlip::models::build_se_e2_a(c);
    mlip::models::EnvStat stat(2, c.nslots());
    for (int b = 0; b < k.batch; ++b) {
      Frame f = mlip::test::random_frame(30, k.periodic, 21, 6.5, {0.8, -0.5, 0.4}, 0.9, 0.4);
      std::mt19937 rng(100 + b);
      std::normal_distribution<double> noise(0.0, 0.05 * b);
      for (auto& x : f.pos) x += noise(rng);
      std::vector<Real> pos(f.pos.begin(), f.pos.end());
      auto nl = mlip::data::build_neighbor_list<Real>(pos.data(), f.natoms(), f.cell.empty() ? nullptr : f.cell.data(),
                                                      f.pbc, c.rcut);
      const auto env = mlip::models::compute_env_matrix<Real>(nl, f.types, {c.rcut, c.rcut_smth, c.sel});
      if (b == 0) stat.add(env, f.types);
      frames.push_back(PackedEnv::pack(env, f.types, c, true));
      types = f.types;
    }
    // Statistics that are not the 0/1 default, and a bias.
    module.setattr("davg", stat.davg().to(c.dtype()));
    module.setattr("dstd", stat.dstd().to(c.dtype()));
    module.setattr("bias", torch::tensor({-93.5, -187.2}, torch::kFloat64).to(c.dtype()));
    torch::manual_seed(5);
    const int64_t n = int64_t(types.size());
    ge = torch::randn({k.batch}, torch::kFloat64);
    gf = torch::randn({k.batch, n, 3}, torch::kFloat64).to(c.dtype());
    gv = torch::randn({k.batch, 3, 3}, torch::kFloat64).to(c.dtype());
  }

  PackedEnv batch(bool with_slots) const {
    std::vector<const PackedEnv*> ptrs;
    for (const auto& f : frames) ptrs.push_back(&f);
    return ptrs.size() == 1 ? frames[0] : PackedEnv::concat(ptrs, with_slots);
  }

  std::vector<torch::Tensor> take_grads() {
    std::vector<torch::Tensor> out;
    for (const auto& p : module.parameters()) {
      out.push_back(p.grad().defined() ? p.grad().detach().clone() : torch::Tensor());
      p.mutable_grad() = torch::Tensor();
    }
    return out;
  }
};

/// Largest |a - b| relative to the largest |b| of the tensor (floored at 1e-8).
double rel(const torch::Tensor& a, const torch::Tensor& b) {
  const double scale = std::max(b.abs().max().item<double>(), 1e-8);
  return (a.to(torch::kCPU, torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>() / scale;
}

struct Differences {
  double energy = 0, forces = 0, virial = 0, grad = 0;
};

/// The generic path (on `device`; with the fused kernels or without) against the hand-written
/// one (CPU) for one case.
template <typename Real>
Differences compare(const Case& k, const torch::Device& device, int repeats = 1, bool fused = false) {
  Setup<Real> s(k);
  SeAEvaluator hand_written(s.config, s.module);
  const PackedEnv cpu_batch = s.batch(false);
  SeAEvaluator::Output expected;
  for (int r = 0; r < repeats; ++r) {
    expected = hand_written.forward(cpu_batch, s.types);
    hand_written.backward(s.ge, s.gf, s.gv);
  }
  const std::vector<torch::Tensor> expected_grads = s.take_grads();

  s.module.to(device);
  SeAGenericPath generic(s.config, s.module, fused);
  const PackedEnv batch = s.batch(true).to(device);
  SeAEvaluator::Output got;
  for (int r = 0; r < repeats; ++r) {
    got = generic.forward(batch, s.types);
    generic.backward(s.ge.to(device), s.gf.to(device), s.gv.to(device));
  }
  s.module.to(torch::kCPU);
  const std::vector<torch::Tensor> grads = s.take_grads();

  Differences d;
  EXPECT_EQ(got.energy.scalar_type(), torch::kFloat64);
  EXPECT_EQ(got.forces.scalar_type(), s.config.dtype());
  EXPECT_EQ(got.forces.device(), device);
  d.energy = rel(got.energy, expected.energy);
  d.forces = rel(got.forces, expected.forces);
  d.virial = rel(got.virial, expected.virial);
  EXPECT_GT(expected.forces.abs().max().item<double>(), 1e-3) << "forces should not vanish";
  EXPECT_EQ(grads.size(), expected_grads.size());
  double largest = 0;
  for (size_t p = 0; p < grads.size() && p < expected_grads.size(); ++p) {
    SCOPED_TRACE("parameter " + std::to_string(p));
    EXPECT_TRUE(grads[p].defined());
    EXPECT_TRUE(expected_grads[p].defined());
    if (!grads[p].defined() || !expected_grads[p].defined()) continue;
    d.grad = std::max(d.grad, rel(grads[p], expected_grads[p]));
    largest = std::max(largest, expected_grads[p].abs().max().item<double>());
  }
  EXPECT_GT(largest, 1e-3) << "gradients should not vanish";
  return d;
}

template <typename Real>
class SeAGenericPathTest : public ::testing::Test {};
using Reals = ::testing::Types<float, double>;
TYPED_TEST_SUITE(SeAGenericPathTest, Reals);

template <typename Real>
double tolerance() {
  return std::is_same_v<Real, float> ? 1e-4 : 1e-10;
}

/// Every case on the CPU, the generic path with or without the fused kernels against the
/// hand-written one; prints the largest differences.
template <typename Real>
void expect_every_case_equal(bool fused) {
  Differences worst;
  for (const Case& k : cases()) {
    SCOPED_TRACE(k.name());
    const Differences d = compare<Real>(k, torch::kCPU, 1, fused);
    worst.energy = std::max(worst.energy, d.energy), worst.forces = std::max(worst.forces, d.forces);
    worst.virial = std::max(worst.virial, d.virial), worst.grad = std::max(worst.grad, d.grad);
    EXPECT_LT(d.energy, tolerance<Real>());
    EXPECT_LT(d.forces, tolerance<Real>());
    EXPECT_LT(d.virial, tolerance<Real>());
    EXPECT_LT(d.grad, tolerance<Real>());
  }
  std::cout << (fused ? "with the fused kernels' host twins, " : "") << "largest relative differences: energy "
            << worst.energy << ", forces " << worst.forces << ", virial " << worst.virial << ", parameter gradients "
            << worst.grad << "\n";
}

TYPED_TEST(SeAGenericPathTest, EqualsTheHandWrittenPathOnTheCpu) { expect_every_case_equal<TypeParam>(false); }

TYPED_TEST(SeAGenericPathTest, WithFusedKernelsEqualsTheHandWrittenPathOnTheCpu) {
  expect_every_case_equal<TypeParam>(true);
}

TYPED_TEST(SeAGenericPathTest, GradientsAccumulateOverCalls) {
  // Two forward/backward rounds without zeroing: every path adds to .grad().
  Case k;
  k.batch = 2;
  for (bool fused : {false, true}) {
    SCOPED_TRACE(fused ? "fused kernels" : "module's energy_force_env");
    const Differences d = compare<TypeParam>(k, torch::kCPU, 2, fused);
    EXPECT_LT(d.grad, tolerance<TypeParam>());
  }
}

/// Every case on the first CUDA device against the hand-written path on the CPU, float64.
void expect_every_case_equal_on_cuda(bool fused) {
  for (const Case& k : cases()) {
    SCOPED_TRACE(k.name());
    const Differences d = compare<double>(k, torch::Device(torch::kCUDA, 0), 1, fused);
    EXPECT_LT(d.energy, 1e-10);
    EXPECT_LT(d.forces, 1e-10);
    EXPECT_LT(d.virial, 1e-10);
    EXPECT_LT(d.grad, 1e-10);
  }
}

TEST(SeAGenericPathCuda, EqualsTheHandWrittenPathInFloat64) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible (or this build has no CUDA)";
  expect_every_case_equal_on_cuda(false);
}

TEST(SeAGenericPathCuda, WithFusedKernelsEqualsTheHandWrittenPathInFloat64) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible (or this build has no CUDA)";
  if (!mlip::models::fused_kernels_compiled()) GTEST_SKIP() << "this build has no CUDA kernels (MLIP_CUDA_KERNELS=OFF)";
  expect_every_case_equal_on_cuda(true);
}

}  // namespace
