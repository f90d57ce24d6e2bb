#include "long_range_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "model_test_util.h"

namespace mlip::test {
namespace {

c10::impl::GenericDict forward(torch::jit::Module& model, const Frame& f, double rcut, double total_charge = 0.0,
                               bool with_total = false) {
  auto in = deploy_input(f, rcut, torch::kFloat64);
  if (with_total) in.insert("total_charge", torch::tensor(total_charge, torch::kFloat64));
  return model.forward({in}).toGenericDict();
}

}  // namespace

LongRangeSample long_range_sample(bool periodic, unsigned seed, int natoms) {
  LongRangeSample s;
  s.frame = random_frame(natoms, periodic, seed, 7.0, {0.8, -0.5, 0.6}, 0.9, 0.4);
  s.sys.type_map = {"O", "H"};
  s.sys.types = s.frame.types;
  s.sys.pbc = s.frame.pbc;
  s.sys.nframes = 1;
  s.data.coord = s.frame.pos;
  s.data.box = s.frame.cell;
  s.atoms.natoms = natoms;
  s.atoms.types = s.frame.types;
  s.atoms.atype = torch::tensor(std::vector<int64_t>(s.frame.types.begin(), s.frame.types.end()), torch::kInt64);
  return s;
}

void expect_forces_and_virial_are_derivatives(torch::jit::Module& model, const Frame& frame, double rcut) {
  auto energy = [&](const std::vector<double>& pos, const std::vector<double>& cell) {
    Frame moved = frame;
    moved.pos = pos;
    moved.cell = cell;
    return forward(model, moved, rcut).at("total_energy").toTensor().item<double>();
  };
  const auto out = forward(model, frame, rcut);
  const auto forces = out.at("forces").toTensor();
  const auto virial = out.at("virial").toTensor().reshape({3, 3});
  const double h = 1e-5, largest = forces.abs().max().item<double>();
  ASSERT_GT(largest, 1e-3);
  for (int atom : {0, 5, 11})
    for (int a = 0; a < 3; ++a) {
      auto plus = frame.pos, minus = frame.pos;
      plus[size_t(3 * atom + a)] += h;
      minus[size_t(3 * atom + a)] -= h;
      const double fd = -(energy(plus, frame.cell) - energy(minus, frame.cell)) / (2 * h);
      EXPECT_NEAR(forces[atom][a].item<double>(), fd, 1e-6 * std::max(1.0, largest)) << "atom " << atom << " axis " << a;
    }
  if (frame.cell.empty()) return;
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b) {
      // r -> r (1 + ε) with ε = ±h e_b e_aᵀ: W_ba = -dE/dε_ba moves coordinate a by h·(coordinate b).
      auto strained = [&](double t) {
        auto pos = frame.pos, cell = frame.cell;
        for (size_t i = 0; i < pos.size() / 3; ++i) pos[3 * i + size_t(a)] += t * frame.pos[3 * i + size_t(b)];
        for (size_t i = 0; i < 3; ++i) cell[3 * i + size_t(a)] += t * frame.cell[3 * i + size_t(b)];
        return energy(pos, cell);
      };
      const double fd = -(strained(h) - strained(-h)) / (2 * h);
      EXPECT_NEAR(virial[b][a].item<double>(), fd, 1e-6 * std::max(1.0, virial.abs().max().item<double>()))
          << "virial " << b << a;
    }
}

void expect_long_range_invariances(torch::jit::Module& model, const Frame& frame, double rcut) {
  const auto out = forward(model, frame, rcut);
  std::mt19937 rng(7);
  for (const bool reflect : {false, true}) {
    SCOPED_TRACE(reflect ? "rotation and reflection" : "rotation");
    const torch::Tensor rot = random_rotation(rng, reflect);
    Frame g = frame;
    g.pos = transform(frame.pos, rot);
    for (double& x : g.pos) x += 1.7;  // and a translation
    g.cell = transform(frame.cell, rot);
    const auto moved = forward(model, g, rcut);
    EXPECT_NEAR(moved.at("total_energy").toTensor().item<double>(), out.at("total_energy").toTensor().item<double>(),
                1e-9);
    EXPECT_LT(relative(moved.at("charges").toTensor(), out.at("charges").toTensor()), 1e-9);
    EXPECT_LT(relative(moved.at("forces").toTensor(), out.at("forces").toTensor().matmul(rot.t())), 1e-9);
  }
  const auto charged = forward(model, frame, rcut, 2.0, true);
  EXPECT_NEAR(charged.at("charges").toTensor().sum().item<double>(), 2.0, 1e-12);
  EXPECT_NEAR(out.at("charges").toTensor().sum().item<double>(), 0.0, 1e-12);
  const auto shifted = charged.at("charges").toTensor() - out.at("charges").toTensor();
  const double natoms = double(frame.pos.size() / 3);
  EXPECT_LT((shifted - 2.0 / natoms).abs().max().item<double>(), 1e-12) << "the shift is equal for every atom";
}

}  // namespace mlip::test
