// The long-range energy (docs/long_range.md): the host sum against finite differences, the
// TorchScript source against the host sum, the periodic sum against the direct sum in a large
// box, invariance, smoothness when the cell changes, and the host sum plus a brute-force real-space
// sum against LAMMPS' own Ewald summation (`pair_style coul/long` + `kspace_style ewald`), and the
// direct sum plus the rest of Coulomb's law against LAMMPS' plain `coul/cut` on a cluster.
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/script.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>

#include "error.h"
#include "models/long_range/ewald.h"
#include "models/long_range/long_range.h"
#include "models/long_range/mesh_ewald.h"
#include "test_util.h"

namespace mlip::models {
namespace {

/// n atoms in a (possibly skewed) cell with random charges summing to `total`.
struct Charges {
  std::vector<double> pos, q, cell;
  int64_t n() const { return int64_t(q.size()); }
};

Charges random_charges(int n, unsigned seed, double length, std::array<double, 3> skew, double total = 0) {
  const test::Frame f = test::random_frame(n, true, seed, length, skew, 1.2, 0.5);
  Charges c{f.pos, {}, f.cell};
  std::mt19937 rng(seed + 7);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  double sum = 0;
  for (int i = 0; i < n; ++i) {
    c.q.push_back(u(rng));
    sum += c.q.back();
  }
  for (double& q : c.q) q += (total - sum) / n;
  return c;
}

double host_energy(const LongRangeSettings& s, const Charges& c) {
  if (c.cell.empty()) return direct_sum(s, c.n(), c.pos.data(), c.q.data(), nullptr, nullptr, nullptr);
  const ReciprocalSum sum(s, c.cell.data());
  std::vector<double> sf;
  sum.add_structure_factor(c.n(), c.pos.data(), c.q.data(), sf);
  double qs = 0, q2 = 0;
  for (double q : c.q) qs += q, q2 += q * q;
  return sum.energy(sf, qs, q2);
}

/// Potentials, forces [n*3] and virial [9] from the host sums.
void host_derivatives(const LongRangeSettings& s, const Charges& c, std::vector<double>& phi, std::vector<double>& f,
                      std::vector<double>& w) {
  phi.assign(c.n(), 0);
  f.assign(3 * c.n(), 0);
  w.assign(9, 0);
  if (c.cell.empty()) {
    direct_sum(s, c.n(), c.pos.data(), c.q.data(), phi.data(), f.data(), w.data());
    return;
  }
  const ReciprocalSum sum(s, c.cell.data());
  std::vector<double> sf;
  sum.add_structure_factor(c.n(), c.pos.data(), c.q.data(), sf);
  double qs = 0;
  for (double q : c.q) qs += q;
  sum.potentials_and_forces(sf, qs, c.n(), c.pos.data(), c.q.data(), phi.data(), f.data());
  sum.virial(sf, qs, w.data());
}

LongRangeSettings settings(double sigma = 1.0, double spacing = 2.0) {
  LongRangeSettings s;
  s.enabled = true;
  s.sigma = sigma;
  s.kspace_spacing = spacing;
  return s;
}

/// The geometry strained by (1 + ε): positions and cell rows r -> r (1 + ε).
Charges strained(const Charges& c, int a, int b, double eps) {
  Charges out = c;
  for (size_t i = 0; i < c.pos.size() / 3; ++i) out.pos[3 * i + b] += eps * c.pos[3 * i + a];
  for (size_t i = 0; i < c.cell.size() / 3; ++i) out.cell[3 * i + b] += eps * c.cell[3 * i + a];
  return out;
}

class LongRangeGeometry : public ::testing::TestWithParam<bool> {};  // periodic or not

TEST_P(LongRangeGeometry, ForcesPotentialsAndVirialAreTheEnergysDerivatives) {
  const bool periodic = GetParam();
  const LongRangeSettings s = settings(0.9, 1.5);
  Charges c = random_charges(14, 3, 7.0, {0.8, -1.1, 0.6}, periodic ? 0.3 : 0.0);
  if (!periodic) c.cell.clear();
  std::vector<double> phi, f, w;
  host_derivatives(s, c, phi, f, w);
  const double h = 1e-5;
  for (int i = 0; i < c.n(); ++i) {
    for (int b = 0; b < 3; ++b) {
      Charges p = c, m = c;
      p.pos[3 * i + b] += h;
      m.pos[3 * i + b] -= h;
      const double fd = -(host_energy(s, p) - host_energy(s, m)) / (2 * h);
      EXPECT_NEAR(f[3 * i + b], fd, 1e-7 * (1 + std::abs(fd))) << "atom " << i << " axis " << b;
    }
    Charges p = c, m = c;
    p.q[i] += h;
    m.q[i] -= h;
    const double fd = (host_energy(s, p) - host_energy(s, m)) / (2 * h);
    EXPECT_NEAR(phi[i], fd, 1e-7 * (1 + std::abs(fd))) << "potential of atom " << i;
  }
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b) {
      const double fd = -(host_energy(s, strained(c, a, b, h)) - host_energy(s, strained(c, a, b, -h))) / (2 * h);
      EXPECT_NEAR(w[3 * a + b], fd, 1e-7 * (1 + std::abs(fd))) << "virial " << a << b;
    }
}

INSTANTIATE_TEST_SUITE_P(PeriodicOrNot, LongRangeGeometry, ::testing::Values(true, false));

TEST(LongRange, EnergyIsInvariantUnderRotationTranslationAndTheChoiceOfCell) {
  const LongRangeSettings s = settings();
  const Charges c = random_charges(12, 5, 8.0, {1.0, 0.5, -0.7});
  const double e = host_energy(s, c);
  // A rotation of positions and cell together.
  const double t = 0.7, u = -0.4;
  const double rot[9] = {std::cos(t), -std::sin(t), 0, std::sin(t) * std::cos(u), std::cos(t) * std::cos(u),
                         -std::sin(u), std::sin(t) * std::sin(u), std::cos(t) * std::sin(u), std::cos(u)};
  auto rotate = [&](std::vector<double>& v) {
    for (size_t i = 0; i < v.size() / 3; ++i) {
      double r[3];
      for (int a = 0; a < 3; ++a) r[a] = rot[3 * a] * v[3 * i] + rot[3 * a + 1] * v[3 * i + 1] + rot[3 * a + 2] * v[3 * i + 2];
      for (int a = 0; a < 3; ++a) v[3 * i + a] = r[a];
    }
  };
  Charges r = c;
  rotate(r.pos);
  rotate(r.cell);
  EXPECT_NEAR(host_energy(s, r), e, 1e-10 * std::abs(e));
  // A translation, and an atom moved by a lattice vector.
  Charges m = c;
  for (int i = 0; i < m.n(); ++i) m.pos[3 * i] += 3.3, m.pos[3 * i + 2] -= 1.1;
  for (int a = 0; a < 3; ++a) m.pos[3 * 4 + a] += m.cell[3 + a] - m.cell[6 + a];
  EXPECT_NEAR(host_energy(s, m), e, 1e-10 * std::abs(e));
  // Another cell of the same lattice (a_2 -> a_2 + a_1): the same k-vectors.
  Charges other = c;
  for (int a = 0; a < 3; ++a) other.cell[3 + a] += c.cell[a];
  EXPECT_NEAR(host_energy(s, other), e, 1e-10 * std::abs(e));
}

TEST(LongRange, ALargeBoxTendsToTheDirectSum) {
  // A neutral cluster in a cubic box of edge L: the periodic sum (conducting boundary) differs from
  // the direct sum by the dipole term 2π k_e |M|² / (3V) and terms of order k_e |quadrupole|² / L^5,
  // so that the difference left after the dipole term falls as L^-5.
  const LongRangeSettings s = settings(1.0, 1.0);
  const Charges molecule = random_charges(9, 11, 5.0, {0, 0, 0});
  auto remainder = [&](double length) {
    Charges c = molecule;
    c.cell = {length, 0, 0, 0, length, 0, 0, 0, length};
    for (double& x : c.pos) x += 20.0;
    Charges cluster = c;
    cluster.cell.clear();
    double dipole[3] = {0, 0, 0};
    for (int i = 0; i < c.n(); ++i)
      for (int a = 0; a < 3; ++a) dipole[a] += c.q[i] * c.pos[3 * i + a];
    const double m2 = dipole[0] * dipole[0] + dipole[1] * dipole[1] + dipole[2] * dipole[2];
    const double periodic = host_energy(s, c) + 2 * M_PI * kCoulomb * m2 / (3 * length * length * length);
    const double direct = host_energy(s, cluster);
    EXPECT_GT(std::abs(direct), 0.1);
    return periodic - direct;
  };
  const double at_50 = remainder(50.0), at_80 = remainder(80.0);
  std::printf("[ limit ] periodic - direct after the dipole term: %.3e eV at L = 50 Å, %.3e at 80 Å\n", at_50, at_80);
  EXPECT_LT(std::abs(at_80), 1e-6);
  EXPECT_LT(std::abs(at_80), 0.25 * std::abs(at_50));  // (50/80)^5 = 0.095
}

TEST(LongRange, EnergyIsSmoothWhenTheCellChanges) {
  // A box expanded by 4 % in small steps: k-vectors cross k_max and k_end, yet every step's energy
  // change agrees with the virial's prediction to second order (a jump of one k-vector's term
  // would break it).
  const LongRangeSettings s = settings(1.0, 2.0);
  const Charges c = random_charges(16, 9, 8.0, {0.5, 0.3, -0.4});
  const int steps = 400;
  const double ds = 0.04 / steps;
  double crossings = 0;
  int64_t k_before = ReciprocalSum(s, c.cell.data()).size();
  for (int step = 0; step < steps; ++step) {
    const double scale = 1 + step * ds;
    Charges a = c, b = c;
    for (double& x : a.pos) x *= scale;
    for (double& x : a.cell) x *= scale;
    for (double& x : b.pos) x *= scale + ds;
    for (double& x : b.cell) x *= scale + ds;
    std::vector<double> phi, f, wa, wb;
    host_derivatives(s, a, phi, f, wa);
    host_derivatives(s, b, phi, f, wb);
    // dE/dscale = -trace(W) / scale.
    const double predicted = -0.5 * ((wa[0] + wa[4] + wa[8]) / scale + (wb[0] + wb[4] + wb[8]) / (scale + ds)) * ds;
    const double change = host_energy(s, b) - host_energy(s, a);
    EXPECT_NEAR(change, predicted, 1e-8) << "step " << step;
    const int64_t k_now = ReciprocalSum(s, b.cell.data()).size();
    crossings += std::abs(double(k_now - k_before));
    k_before = k_now;
  }
  EXPECT_GT(crossings, 0) << "no k-vector crossed k_end: the test shows nothing";
}

TEST(LongRange, RecordRoundTripsAndRefusesWhatItDoesNotKnow) {
  LongRangeSettings s = settings(0.8, 1.7);
  s.total_charge = -1;
  SettingsRecord record("m.pt");
  record_long_range(record, s);
  const LongRangeSettings back = long_range_from(record);
  EXPECT_TRUE(back.enabled);
  EXPECT_EQ(back.sigma, 0.8);
  EXPECT_EQ(back.kspace_spacing, 1.7);
  EXPECT_EQ(back.total_charge, -1);
  EXPECT_FALSE(long_range_from(SettingsRecord("x")).enabled);
  SettingsRecord other("m.pt");
  other.set("long_range", "pppm");
  EXPECT_TRUE(test::contains(test::error_of([&] { long_range_from(other); }), "\"pppm\" is not one this mlip knows"));
  SettingsRecord bad("m.pt");
  record_long_range(bad, s);
  bad.set_number("long_range_sigma", -1);
  EXPECT_TRUE(test::contains(test::error_of([&] { long_range_from(bad); }), "long_range_sigma"));
}

// ---- The mesh (docs/long_range.md "On a mesh") against the k-vector sum.

/// E, potentials, forces and virial from the mesh, the atoms spread in `parts` groups (as ranks would).
double mesh_evaluation(const MeshSum& mesh, const Charges& c, int parts, std::vector<double>& phi, std::vector<double>& f,
                       std::vector<double>& w) {
  std::vector<double> grid, potential;
  const int64_t per_part = (c.n() + parts - 1) / parts;
  for (int64_t start = 0; start < c.n(); start += per_part) {
    const int64_t count = std::min(per_part, c.n() - start);
    mesh.spread(count, c.pos.data() + 3 * start, c.q.data() + start, grid);
  }
  double qs = 0, q2 = 0;
  for (double q : c.q) qs += q, q2 += q * q;
  w.assign(9, 0);
  const double e = mesh.solve(grid, qs, q2, potential, w.data());
  phi.assign(c.n(), 0);
  f.assign(3 * c.n(), 0);
  for (int64_t start = 0; start < c.n(); start += per_part) {
    const int64_t count = std::min(per_part, c.n() - start);
    mesh.potentials_and_forces(potential, qs, count, c.pos.data() + 3 * start, c.q.data() + start, phi.data() + start,
                               f.data() + 3 * start);
  }
  return e;
}

/// The largest |a_k - b_k| relative to the largest |b_k|.
double relative_difference(const std::vector<double>& a, const std::vector<double>& b) {
  double diff = 0, scale = 1e-300;
  for (size_t k = 0; k < a.size(); ++k) diff = std::max(diff, std::abs(a[k] - b[k])), scale = std::max(scale, std::abs(b[k]));
  return diff / scale;
}

// MD across ranks (docs/lammps.md "Long range across ranks") splits the sums by atoms: each
// part's energies Σ ½ q φ, forces and per-atom virials, summed over the parts, are the whole.
TEST(LongRange, ThePartsOfTheSumsAddUpToTheWhole) {
  for (bool periodic : {true, false}) {
    SCOPED_TRACE(periodic ? "periodic" : "direct");
    Charges c = random_charges(40, 11, 10.0, {0.1, -0.15, 0.2}, 0.7);
    if (!periodic) c.cell.clear();
    const LongRangeSettings s = settings(0.9, 1.5);
    std::vector<double> phi, f, w;
    host_derivatives(s, c, phi, f, w);
    const double e = host_energy(s, c);
    double parts_energy = 0;
    std::vector<double> parts_f(3 * c.n()), parts_w(9, 0.0), parts_phi(c.n());
    const int64_t cuts[] = {0, 7, 25, 40};
    for (int part = 0; part < 3; ++part) {
      const int64_t first = cuts[part], count = cuts[part + 1] - first;
      std::vector<double> pv(count), pf(3 * count), pw(9 * count);
      if (periodic) {
        // Each part's structure factor, summed as the ranks' all-reduce sums it.
        const ReciprocalSum sum(s, c.cell.data());
        std::vector<double> sf;
        for (int other = 0; other < 3; ++other)
          sum.add_structure_factor(cuts[other + 1] - cuts[other], c.pos.data() + 3 * cuts[other],
                                   c.q.data() + cuts[other], sf);
        double qs = 0;
        for (double q : c.q) qs += q;
        sum.potentials_and_forces(sf, qs, count, c.pos.data() + 3 * first, c.q.data() + first, pv.data(), pf.data());
        sum.atom_virials(sf, qs, count, c.pos.data() + 3 * first, c.q.data() + first, pw.data());
        for (int64_t i = 0; i < count; ++i) parts_energy += 0.5 * c.q[first + i] * pv[i];
      } else {
        parts_energy +=
            direct_sum_part(s, c.n(), c.pos.data(), c.q.data(), first, count, pv.data(), pf.data(), pw.data());
      }
      for (int64_t i = 0; i < count; ++i) {
        parts_phi[first + i] = pv[i];
        for (int b = 0; b < 3; ++b) parts_f[3 * (first + i) + b] = pf[3 * i + b];
        for (int b = 0; b < 9; ++b) parts_w[b] += pw[9 * i + b];
      }
    }
    EXPECT_NEAR(parts_energy, e, 1e-12 * std::abs(e));
    EXPECT_LT(relative_difference(parts_phi, phi), 1e-12);
    EXPECT_LT(relative_difference(parts_f, f), 1e-12);
    EXPECT_LT(relative_difference(parts_w, w), 1e-12);
  }
}

TEST(LongRange, TheMeshApproximatesTheKVectorSum) {
  // The default mesh (order 8, oversampling 1.5) and a finer one (oversampling 2) to the accuracy
  // docs/long_range.md states, and one finer still (order 12, oversampling 3): the mesh converges
  // to the exact sum.
  const LongRangeSettings s = settings(1.0, 2.0);
  struct Mesh {
    int order;
    double oversampling, energy, force, potential, virial;  // tolerances, relative as below
  };
  for (const Mesh& m : {Mesh{8, 1.5, 1e-4, 5e-5, 1e-4, 5e-4}, Mesh{8, 2.0, 5e-6, 1e-5, 1e-5, 2e-5},
                        Mesh{12, 3.0, 1e-8, 1e-8, 1e-8, 1e-8}})
    for (double total : {0.0, -1.0}) {
      const Charges c = random_charges(80, 31, 12.0, {2.0, -1.5, 1.0}, total);
      std::vector<double> phi, f, w, mesh_phi, mesh_f, mesh_w;
      host_derivatives(s, c, phi, f, w);
      const double exact = host_energy(s, c);
      const MeshSum mesh(s, c.cell.data(), m.order, m.oversampling);
      const double approx = mesh_evaluation(mesh, c, 1, mesh_phi, mesh_f, mesh_w);
      double force_scale = 0, force_error = 0, phi_error = 0, virial_error = 0;
      for (int i = 0; i < 3 * c.n(); ++i) {
        force_scale = std::max(force_scale, std::abs(f[i]));
        force_error = std::max(force_error, std::abs(mesh_f[i] - f[i]));
      }
      for (int i = 0; i < c.n(); ++i) phi_error = std::max(phi_error, std::abs(mesh_phi[i] - phi[i]));
      for (int a = 0; a < 9; ++a) virial_error = std::max(virial_error, std::abs(mesh_w[a] - w[a]));
      std::printf("[ mesh ] order %d, oversampling %g, grid %lld x %lld x %lld, total charge %g: energy error %.2e "
                  "(of %.3f eV), force %.2e (largest %.3f eV/Å), potential %.2e eV/e, virial %.2e eV\n",
                  m.order, m.oversampling, (long long)mesh.grid()[0], (long long)mesh.grid()[1],
                  (long long)mesh.grid()[2], total, approx - exact, exact, force_error, force_scale, phi_error,
                  virial_error);
      EXPECT_LT(std::abs(approx - exact), m.energy * std::abs(exact));
      EXPECT_LT(force_error, m.force * force_scale);
      EXPECT_LT(phi_error, m.potential);
      EXPECT_LT(virial_error, m.virial * std::abs(exact));
      // Spreading in parts (ranks) and summing the grids is the same grid: the same numbers.
      std::vector<double> part_phi, part_f, part_w;
      const double parts = mesh_evaluation(mesh, c, 3, part_phi, part_f, part_w);
      EXPECT_NEAR(parts, approx, 1e-12 * (1 + std::abs(approx)));
      for (int i = 0; i < 3 * c.n(); ++i) EXPECT_NEAR(part_f[i], mesh_f[i], 1e-12);
    }
}

TEST(LongRange, TheMeshsForcesAndVirialAreItsEnergysDerivatives) {
  const LongRangeSettings s = settings(0.9, 1.5);
  const Charges c = random_charges(14, 3, 7.0, {0.8, -1.1, 0.6}, 0.3);
  const MeshSum mesh(s, c.cell.data(), 6, 1.5);
  std::vector<double> phi, f, w, p1, f1, w1;
  mesh_evaluation(mesh, c, 1, phi, f, w);
  auto energy = [&](const Charges& x) { return mesh_evaluation(MeshSum(s, x.cell.data(), 6, 1.5), x, 1, p1, f1, w1); };
  // The grid size must not change under the small strains below.
  const double h = 1e-5;
  for (int i = 0; i < c.n(); ++i)
    for (int b = 0; b < 3; ++b) {
      Charges p = c, m = c;
      p.pos[3 * i + b] += h;
      m.pos[3 * i + b] -= h;
      const double fd = -(energy(p) - energy(m)) / (2 * h);
      EXPECT_NEAR(f[3 * i + b], fd, 1e-7 * (1 + std::abs(fd))) << "atom " << i << " axis " << b;
    }
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b) {
      const Charges p = strained(c, a, b, h), m = strained(c, a, b, -h);
      ASSERT_EQ(MeshSum(s, p.cell.data(), 6, 1.5).grid(), mesh.grid());
      const double fd = -(energy(p) - energy(m)) / (2 * h);
      EXPECT_NEAR(w[3 * a + b], fd, 1e-7 * (1 + std::abs(fd))) << "virial " << a << b;
    }
}

TEST(LongRange, TheMeshRefusesWhatItCannotDo) {
  const LongRangeSettings s = settings();
  const double cell[9] = {10, 0, 0, 0, 10, 0, 0, 0, 10};
  EXPECT_TRUE(test::contains(test::error_of([&] { MeshSum(s, cell, 5); }), "even B-spline order"));
  EXPECT_TRUE(test::contains(test::error_of([&] { MeshSum(s, cell, 8, 0.5); }), "oversampling"));
  const double flat[9] = {10, 0, 0, 0, 10, 0, 0, 0, 0};
  EXPECT_TRUE(test::contains(test::error_of([&] { MeshSum(s, flat); }), "singular"));
}

// ---- The TorchScript source against the host sums, in both dtypes of a model's inputs.

template <typename T>
class LongRangeSource : public ::testing::Test {};
using Reals = ::testing::Types<float, double>;
TYPED_TEST_SUITE(LongRangeSource, Reals);

TYPED_TEST(LongRangeSource, EnergyForcesAndVirialEqualTheHostSums) {
  const torch::Dtype dtype = std::is_same_v<TypeParam, float> ? torch::kFloat32 : torch::kFloat64;
  const LongRangeSettings s = settings(1.0, 1.8);
  torch::jit::Module module("long_range_test");
  module.define(long_range_source(s, ""));
  for (bool periodic : {true, false}) {
    Charges c = random_charges(20, 13, 8.0, {1.2, -0.6, 0.9}, 0.0);
    if (!periodic) c.cell.clear();
    // The host sums see the inputs as the model's dtype rounds them.
    torch::Tensor pos = torch::tensor(c.pos, torch::kFloat64).reshape({-1, 3}).to(dtype);
    torch::Tensor raw = torch::tensor(c.q, torch::kFloat64).to(dtype);
    Charges rounded = c;
    auto back = [](const torch::Tensor& t) {
      torch::Tensor d = t.to(torch::kFloat64).contiguous();
      return std::vector<double>(d.data_ptr<double>(), d.data_ptr<double>() + d.numel());
    };
    rounded.pos = back(pos);
    torch::Tensor q = module.run_method("long_range_charges", raw, 0.0).toTensor();
    rounded.q = back(q);
    double sum = 0;
    for (double v : rounded.q) sum += v;
    const double sum_tolerance = std::is_same_v<TypeParam, float> ? 1e-5 : 1e-12;
    EXPECT_NEAR(sum, 0.0, sum_tolerance);
    torch::Tensor cell = c.cell.empty() ? torch::zeros({3, 3}, torch::kFloat64)
                                        : torch::tensor(c.cell, torch::kFloat64).reshape({3, 3});
    // A strain ε: positions and cell times (1 + ε); W = -∂E/∂ε.
    torch::Tensor strain = torch::zeros({3, 3}, torch::kFloat64).requires_grad_(true);
    torch::Tensor x = pos.detach().to(torch::kFloat64).requires_grad_(true);
    torch::Tensor eye = torch::eye(3, torch::kFloat64);
    torch::Tensor e = module
                          .run_method("long_range_energy", q, torch::matmul(x, eye + strain),
                                      torch::matmul(cell, eye + strain), periodic)
                          .toTensor();
    ASSERT_EQ(e.scalar_type(), torch::kFloat64);
    ASSERT_EQ(e.size(0), c.n());
    const double energy = e.sum().item<double>();
    auto grads = torch::autograd::grad({e.sum()}, {x, strain});
    std::vector<double> phi, f, w;
    host_derivatives(s, rounded, phi, f, w);
    EXPECT_NEAR(energy, host_energy(s, rounded), 1e-10 * (1 + std::abs(energy))) << "periodic " << periodic;
    const std::vector<double> g = back(grads[0]), gs = back(grads[1]);
    for (int i = 0; i < 3 * c.n(); ++i) EXPECT_NEAR(-g[i], f[i], 1e-9) << "force " << i << " periodic " << periodic;
    for (int i = 0; i < 9; ++i) EXPECT_NEAR(-gs[i], w[i], 1e-9) << "virial " << i << " periodic " << periodic;
  }
}

// ---- Against LAMMPS: E_long + Σ_{pairs, images} k_e q_i q_j erfc(r / (√2σ)) / r is the Ewald energy
// of point charges; LAMMPS computes it with `coul/long` + `kspace_style ewald` at g_ewald = 1/(√2σ).

/// The real-space part by brute force over images within `cutoff`, with its forces.
double real_space(const LongRangeSettings& s, const Charges& c, double cutoff, std::vector<double>& forces) {
  const double width = 1.0 / (std::sqrt(2.0) * s.sigma);
  forces.assign(3 * c.n(), 0);
  double e = 0;
  const int reach = 4;
  for (int i = 0; i < c.n(); ++i)
    for (int j = 0; j < c.n(); ++j)
      for (int x = -reach; x <= reach; ++x)
        for (int y = -reach; y <= reach; ++y)
          for (int z = -reach; z <= reach; ++z) {
            if (i == j && x == 0 && y == 0 && z == 0) continue;
            double d[3];
            for (int a = 0; a < 3; ++a)
              d[a] = c.pos[3 * j + a] - c.pos[3 * i + a] + x * c.cell[a] + y * c.cell[3 + a] + z * c.cell[6 + a];
            const double r = std::sqrt(d[0] * d[0] + d[1] * d[1] + d[2] * d[2]);
            if (r >= cutoff) continue;
            e += 0.5 * kCoulomb * c.q[i] * c.q[j] * std::erfc(r * width) / r;
            const double slope = -kCoulomb * c.q[i] * c.q[j] *
                                 (2 / std::sqrt(M_PI) * width * std::exp(-r * r * width * width) + std::erfc(r * width) / r) /
                                 (r * r);
            for (int a = 0; a < 3; ++a) forces[3 * i + a] += slope * d[a];
          }
  return e;
}

/// LAMMPS' energy (eV) and forces [n*3] (eV/Å) of charges `c` (one atom type, `atom_style charge`)
/// under `boundary` with the `interaction` lines (pair style, kspace), by `mlip lammps`. The box of
/// a cluster (no cell) is `cluster_box` Å wide around the origin.
struct LammpsResult {
  double energy = NAN;
  std::vector<double> forces;
};

LammpsResult lammps_energy_and_forces(const Charges& c, const std::string& boundary, const std::string& interaction,
                                      double cluster_box = 0) {
  test::TempDir dir;
  std::ostringstream data;
  data.precision(17);
  data << "long-range test\n\n" << c.n() << " atoms\n1 atom types\n\n";
  if (c.cell.empty()) {
    for (const char* axis : {"x", "y", "z"})
      data << -cluster_box / 2 << " " << cluster_box / 2 << " " << axis << "lo " << axis << "hi\n";
  } else {
    data << "0 " << c.cell[0] << " xlo xhi\n0 " << c.cell[4] << " ylo yhi\n0 " << c.cell[8] << " zlo zhi\n"
         << c.cell[3] << " " << c.cell[6] << " " << c.cell[7] << " xy xz yz\n";
  }
  data << "\nMasses\n\n1 1.0\n\nAtoms # charge\n\n";
  for (int i = 0; i < c.n(); ++i)
    data << i + 1 << " 1 " << c.q[i] << " " << c.pos[3 * i] << " " << c.pos[3 * i + 1] << " " << c.pos[3 * i + 2] << "\n";
  test::write_text(dir / "data.txt", data.str());
  std::ostringstream in;
  in.precision(17);
  in << "units metal\natom_style charge\nboundary " << boundary << "\nread_data data.txt\n" << interaction
     << "thermo_style custom step pe\nthermo_modify format float %.17g\nrun 0\n"
     << "write_dump all custom forces.txt id fx fy fz modify format float %.17g sort id\n";
  test::write_text(dir / "in.lammps", in.str());
  const test::CommandResult r =
      test::run_command("cd " + dir.path() + " && " + MLIP_EXE + " lammps -in in.lammps -log log.lammps -screen none");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err << test::read_file(dir / "log.lammps");
  LammpsResult out;
  // The energy: the line after the thermo header "Step PotEng".
  std::istringstream log(test::read_file(dir / "log.lammps"));
  std::string line;
  while (std::getline(log, line))
    if (line.find("Step") != std::string::npos && line.find("PotEng") != std::string::npos) {
      std::getline(log, line);
      std::istringstream(line) >> out.energy >> out.energy;
    }
  std::istringstream dump(test::read_file(dir / "forces.txt"));
  while (std::getline(dump, line) && line.rfind("ITEM: ATOMS", 0) != 0) {
  }
  out.forces.assign(3 * c.n(), NAN);
  int id;
  double fx[3];
  while (dump >> id >> fx[0] >> fx[1] >> fx[2])
    if (id >= 1 && id <= c.n())
      for (int a = 0; a < 3; ++a) out.forces[3 * (id - 1) + a] = fx[a];
  return out;
}

bool have_lammps() { return test::run_command(std::string(MLIP_EXE) + " lammps -h > /dev/null 2>&1").exit_code == 0; }

TEST(LongRange, PlusTheRealSpaceSumEqualsLammpsEwald) {
  if (!have_lammps()) GTEST_SKIP() << "mlip was built without LAMMPS";
  const LongRangeSettings s = settings(1.0, 0.7);  // k up to ~10/Å: exp(-σ²k²/2) < 1e-20
  for (double total : {0.0, 1.5}) {
    const Charges c = random_charges(24, 21, 9.0, {1.5, -1.0, 0.8}, total);
    const double cutoff = 9.0;
    std::ostringstream interaction;
    interaction.precision(17);
    interaction << "pair_style coul/long " << cutoff << "\npair_coeff * *\n"
                << "kspace_style ewald 1e-12\nkspace_modify gewald " << 1.0 / (std::sqrt(2.0) * s.sigma) << "\n";
    const LammpsResult lammps = lammps_energy_and_forces(c, "p p p", interaction.str());
    std::vector<double> real_forces, phi, f, w;
    const double ours = host_energy(s, c) + real_space(s, c, cutoff, real_forces);
    EXPECT_NEAR(ours, lammps.energy, 1e-6 * std::abs(lammps.energy)) << "total charge " << total;
    host_derivatives(s, c, phi, f, w);
    for (int i = 0; i < 3 * c.n(); ++i)
      EXPECT_NEAR(f[size_t(i)] + real_forces[size_t(i)], lammps.forces[size_t(i)], 1e-6) << "atom " << i / 3 + 1;
  }
}

// ---- Without a cell: the direct sum of Gaussian charges, Σ k_e q_i q_j erf(r/(√2σ))/r, plus the
// rest of Coulomb's law, Σ k_e q_i q_j erfc(r/(√2σ))/r by brute force, is plain Coulomb: LAMMPS'
// `pair_style coul/cut` with a cutoff beyond the cluster under `boundary f f f`.
TEST(LongRange, TheDirectSumPlusTheRestEqualsLammpsPlainCoulomb) {
  if (!have_lammps()) GTEST_SKIP() << "mlip was built without LAMMPS";
  for (double sigma : {0.6, 1.5}) {
    const LongRangeSettings s = settings(sigma);
    Charges c = random_charges(30, 5, 8.0, {0, 0, 0}, 1.0);  // a charged cluster
    c.cell.clear();
    for (double& x : c.pos) x -= 4.0;  // centred on the origin
    const LammpsResult lammps = lammps_energy_and_forces(c, "f f f", "pair_style coul/cut 100\npair_coeff * *\n", 60.0);
    std::vector<double> phi, f, w;
    double ours = host_energy(s, c);
    host_derivatives(s, c, phi, f, w);
    const double width = 1.0 / (std::sqrt(2.0) * sigma);
    for (int i = 0; i < c.n(); ++i)
      for (int j = 0; j < c.n(); ++j) {
        if (i == j) continue;
        double d[3];
        for (int a = 0; a < 3; ++a) d[a] = c.pos[size_t(3 * j + a)] - c.pos[size_t(3 * i + a)];
        const double r = std::sqrt(d[0] * d[0] + d[1] * d[1] + d[2] * d[2]);
        const double qq = kCoulomb * c.q[size_t(i)] * c.q[size_t(j)];
        ours += 0.5 * qq * std::erfc(r * width) / r;
        const double slope = -qq * (2 / std::sqrt(M_PI) * width * std::exp(-r * r * width * width) + std::erfc(r * width) / r) / (r * r);
        for (int a = 0; a < 3; ++a) f[size_t(3 * i + a)] += slope * d[a];
      }
    EXPECT_NEAR(ours, lammps.energy, 1e-9 * std::abs(lammps.energy)) << "sigma " << sigma;
    for (int i = 0; i < 3 * c.n(); ++i) EXPECT_NEAR(f[size_t(i)], lammps.forces[size_t(i)], 1e-8) << "atom " << i / 3 + 1;
  }
}

}  // namespace
}  // namespace mlip::models
