#include "models/equivariant/equivariant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "error.h"
#include "model_test_util.h"

namespace {

using mlip::models::EquivariantConfig;
using mlip::test::Frame;
using mlip::test::ModelResult;

/// A small model (fast) with every piece: 3 layers, l_max 2, gates, self-connections.
EquivariantConfig small_config(const std::string& precision, bool parity, int64_t l_max = 2, int64_t correlation = 1) {
  EquivariantConfig c;
  c.correlation = correlation;
  c.readout_every_layer = correlation == 2;  // MACE's readouts of every layer, tested with the product basis
  c.type_map = {"O", "H"};
  c.r_max = 3.5;
  c.num_features = 4;
  c.l_max = l_max;
  c.parity = parity;
  c.num_layers = 3;  // parity matters from 3 layers on: a middle layer makes pseudo-vectors
  c.num_bessels = 4;
  c.radial_width = 8;
  c.radial_depth = 2;
  c.avg_num_neighbors = 6.0;
  c.precision = precision;
  c.seed = 3;
  return c;
}

Frame random_frame(int n, bool periodic, unsigned seed) {
  return mlip::test::random_frame(n, periodic, seed, 5.0, {0.7, -0.4, 0.3}, 0.9, 0.4);
}

ModelResult run(torch::jit::Module& model, const Frame& f, const EquivariantConfig& c) {
  return mlip::test::run_deploy(model, f, c.r_max, c.dtype());
}

/// Scale and shift that are not the 1/0 defaults.
void set_scale_shift(torch::jit::Module& model) {
  model.run_method("set_scale_shift", torch::tensor({1.3, 0.7}, torch::kFloat64), torch::tensor({-93.5, -187.2}, torch::kFloat64));
}

template <typename T>
class EquivariantSymmetry : public ::testing::Test {};
using Dtypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(EquivariantSymmetry, Dtypes);

// Energy invariant, forces and virial rotated, under random rotations and (with parity) 
// reflections; invariant under translations and permutations. 1e-10 double, 1e-4 float.
TYPED_TEST(EquivariantSymmetry, InvariantAndCovariant) {
  const bool is_double = std::is_same_v<TypeParam, double>;
  const double tol = is_double ? 1e-10 : 1e-4;
  std::mt19937 rng(5);
  for (int64_t correlation : {1, 2, 3})
  for (const std::string irreps : {"parity", "natural irreps only", "no parity"})
    for (bool periodic : {true, false}) {
      SCOPED_TRACE(irreps + (periodic ? ", periodic" : ", cluster") + ", correlation " + std::to_string(correlation));
      const bool parity = irreps != "no parity";
      // correlation 3 at l_max 1 (its middle irreps still reach l = 2) keeps the test short.
      auto c = small_config(is_double ? "float64" : "float32", parity, correlation == 3 ? 1 : 2, correlation);
      c.pseudotensors = irreps != "natural irreps only";
      auto model = mlip::models::build_equivariant(c);
      set_scale_shift(model);
      const Frame f = random_frame(14, periodic, 21);
      const ModelResult r0 = run(model, f, c);
      const double fscale = std::max(1.0, r0.forces.abs().max().item<double>());
      ASSERT_GT(r0.forces.abs().max().item<double>(), 1e-3) << "forces should not vanish";
      // With parity off the model is only SO(3)-equivariant: reflections are not a symmetry.
      for (bool reflect : parity ? std::vector<bool>{false, true} : std::vector<bool>{false}) {
        const auto rot = mlip::test::random_rotation(rng, reflect);
        Frame g = f;
        g.pos = mlip::test::transform(f.pos, rot);
        g.cell = mlip::test::transform(f.cell, rot);
        const ModelResult r1 = run(model, g, c);
        EXPECT_NEAR(r1.energy, r0.energy, tol * std::abs(r0.energy)) << (reflect ? "reflection" : "rotation");
        EXPECT_LT((r1.forces - r0.forces.matmul(rot.t())).abs().max().item<double>(), tol * fscale);
        EXPECT_LT((r1.virial - rot.matmul(r0.virial).matmul(rot.t())).abs().max().item<double>(),
                  tol * std::max(1.0, r0.virial.abs().max().item<double>()));
      }
      Frame t = f;
      for (size_t p = 0; p < t.pos.size(); p += 3) t.pos[p] += 1.7, t.pos[p + 1] -= 0.3, t.pos[p + 2] += 4.0;
      const ModelResult rt = run(model, t, c);
      EXPECT_NEAR(rt.energy, r0.energy, tol * std::abs(r0.energy));
      EXPECT_LT((rt.forces - r0.forces).abs().max().item<double>(), tol * fscale);
      std::vector<int> perm(size_t(f.natoms()));
      for (int k = 0; k < f.natoms(); ++k) perm[size_t(k)] = k;
      std::shuffle(perm.begin(), perm.end(), rng);
      Frame pf = f;
      for (int k = 0; k < f.natoms(); ++k) {
        pf.types[size_t(k)] = f.types[size_t(perm[size_t(k)])];
        for (int d = 0; d < 3; ++d) pf.pos[size_t(3 * k + d)] = f.pos[size_t(3 * perm[size_t(k)] + d)];
      }
      const ModelResult rp = run(model, pf, c);
      EXPECT_NEAR(rp.energy, r0.energy, tol * std::abs(r0.energy));
      for (int k = 0; k < f.natoms(); ++k)
        EXPECT_LT((rp.forces[k] - r0.forces[perm[size_t(k)]]).abs().max().item<double>(), tol * fscale);
    }
}

// Without parity the l = 1 x l = 1 -> l = 1 path (a cross product, in a middle layer) makes
// the energy change under a reflection: a check that the parity bookkeeping above matters.
TEST(Equivariant, WithoutParityReflectionsAreNotASymmetry) {
  auto c = small_config("float64", false);
  c.num_layers = 3;
  auto model = mlip::models::build_equivariant(c);
  const Frame f = random_frame(14, false, 21);
  std::mt19937 rng(8);
  const auto rot = mlip::test::random_rotation(rng, true);
  Frame g = f;
  g.pos = mlip::test::transform(f.pos, rot);
  EXPECT_GT(std::abs(run(model, g, c).energy - run(model, f, c).energy), 1e-8);
}

// Without pseudotensors (as MACE) no feature or message of unnatural parity (0o, 1e, 2o) is
// made, in any layer and at any correlation; with them the middle layers make 1e and 2o, and
// the last one, when its messages feed a product basis, 0o too.
TEST(Equivariant, WithoutPseudotensorsOnlyNaturalIrrepsAreMade) {
  for (int64_t correlation : {1, 3}) {
    auto c = small_config("float64", true, 2, correlation);
    const std::string with = mlip::models::equivariant_source(c);
    c.pseudotensors = false;
    const std::string without = mlip::models::equivariant_source(c);
    const std::vector<std::string> pseudo =
        correlation == 1 ? std::vector<std::string>{"_1e", "_2o"} : std::vector<std::string>{"_0o", "_1e", "_2o"};
    for (const std::string& name : pseudo) {
      EXPECT_NE(with.find(name), std::string::npos) << name << ", correlation " << correlation;
      EXPECT_EQ(without.find(name), std::string::npos) << name << ", correlation " << correlation;
    }
    for (const std::string name : {"_0e", "_1o", "_2e"})
      EXPECT_NE(without.find(name), std::string::npos) << name << ", correlation " << correlation;
  }
}

TEST(Equivariant, ForcesAndVirialAreEnergyDerivatives) {
  for (int64_t correlation : {1, 2, 3})
  for (bool periodic : {true, false}) {
    SCOPED_TRACE(std::string(periodic ? "periodic" : "cluster") + ", correlation " + std::to_string(correlation));
    const auto c = small_config("float64", true, correlation == 3 ? 1 : 2, correlation);
    auto model = mlip::models::build_equivariant(c);
    set_scale_shift(model);
    const Frame f = random_frame(10, periodic, 4);
    const ModelResult r = run(model, f, c);
    const double h = 1e-5;
    for (int a = 0; a < f.natoms(); ++a)
      for (int k = 0; k < 3; ++k) {
        Frame fp = f, fm = f;
        fp.pos[size_t(3 * a + k)] += h;
        fm.pos[size_t(3 * a + k)] -= h;
        const double fd = -(run(model, fp, c).energy - run(model, fm, c).energy) / (2 * h);
        EXPECT_NEAR(r.forces[a][k].item<double>(), fd, 1e-6 * std::max(1.0, std::abs(fd))) << a << " " << k;
      }
    if (!periodic) continue;
    for (int a = 0; a < 3; ++a)
      for (int b = 0; b < 3; ++b) {
        auto strained = [&](double eps) {
          Frame g = f;
          auto apply = [&](std::vector<double>& v) {
            for (size_t p = 0; p < v.size() / 3; ++p) v[3 * p + size_t(b)] += eps * v[3 * p + size_t(a)];
          };
          apply(g.pos);
          apply(g.cell);
          return run(model, g, c).energy;
        };
        const double fd = -(strained(h) - strained(-h)) / (2 * h);
        EXPECT_NEAR(r.virial[a][b].item<double>(), fd, 1e-6 * std::max(1.0, std::abs(fd))) << a << b;
      }
  }
}

// correlation 2 and 3 (MACE's product basis): the products of the messages with themselves
// reach the energy, and the model grows by their weights only.
TEST(Equivariant, ProductBasisTermsContribute) {
  const Frame f = random_frame(14, true, 21);
  int64_t previous = 0;
  for (int64_t correlation : {1, 2, 3}) {
    SCOPED_TRACE("correlation " + std::to_string(correlation));
    const auto c = small_config("float64", true, 2, correlation);
    auto model = mlip::models::build_equivariant(c);
    int64_t count = 0;
    for (const auto& p : model.parameters()) count += p.numel();
    EXPECT_GT(count, previous);
    previous = count;
    if (correlation == 1) continue;
    const double e0 = run(model, f, c).energy;
    if (c.readout_every_layer) {
      // The first layers' readouts reach the energy.
      auto first = model.attr("l1_readout").toTensor();
      auto scale = [&](double by) {
        torch::NoGradGuard no_grad;
        first.mul_(by);
      };
      scale(2.0);
      EXPECT_GT(std::abs(run(model, f, c).energy - e0), 1e-6 * std::abs(e0));
      scale(0.5);
    }
    // The last layer's weights of its products of two or more messages (columns 1.. of pw).
    const std::string name = "l" + std::to_string(c.num_layers - 1) + "_pw_0e";
    auto pw = model.attr(name).toTensor();
    ASSERT_GT(pw.size(1), 1);
    {
      torch::NoGradGuard no_grad;
      pw.narrow(1, 1, pw.size(1) - 1).mul_(2.0);
    }
    EXPECT_GT(std::abs(run(model, f, c).energy - e0), 1e-6 * std::abs(e0));
  }
}

TEST(Equivariant, SmoothWhenAnAtomCrossesRmax) {
  for (int64_t correlation : {1, 2, 3}) {
  SCOPED_TRACE("correlation " + std::to_string(correlation));
  const auto c = small_config("float64", true, correlation == 3 ? 1 : 2, correlation);
  auto model = mlip::models::build_equivariant(c);
  Frame f;
  f.pbc = {{false, false, false}};
  f.types = {0, 1, 1, 0};
  f.pos = {0, 0, 0, 0.96, 0, 0, 0.24, 0.93, 0, 0, 0, 0};
  auto at = [&](double x) {
    Frame g = f;
    g.pos[9] = -x;  // atom 3 on the -x axis, near r_max of atom 0 only
    return run(model, g, c);
  };
  for (double eps : {1e-2, 1e-3, 1e-4}) {
    const ModelResult in = at(c.r_max - eps), out = at(c.r_max + eps);
    // u(x) has zero value, slope and curvature at x = 1: the energy gap is O(eps^3).
    EXPECT_LT(std::abs(in.energy - out.energy), 1e3 * std::pow(eps, 3)) << eps;
    EXPECT_LT(in.forces[3].abs().max().item<double>(), 1e3 * std::pow(eps, 2)) << eps;
    EXPECT_EQ(out.forces[3].abs().max().item<double>(), 0.0);
  }
  }
}

TEST(Equivariant, SavedModuleRunsAloneAndSeedsAreReproducible) {
  const auto c = small_config("float64", true, 1);
  auto a = mlip::models::build_equivariant(c);
  auto b = mlip::models::build_equivariant(c);
  const Frame f = random_frame(8, true, 2);
  // The same seed gives the same parameters, bit for bit (the energies may differ in the last
  // bits: LibTorch's threaded kernels need not sum in the same order on a loaded machine).
  const auto pa = a.named_parameters(), pb = b.named_parameters();
  auto ib = pb.begin();
  for (const auto& p : pa) EXPECT_TRUE(torch::equal(p.value, (*ib++).value)) << p.name;
  const double e = run(a, f, c).energy;
  EXPECT_NEAR(run(b, f, c).energy, e, 1e-12 * std::abs(e));
  const std::string path = ::testing::TempDir() + "/equivariant.pt";
  a.save(path);
  auto loaded = torch::jit::load(path);
  EXPECT_NEAR(run(loaded, f, c).energy, e, 1e-12 * std::abs(e));
  auto c32 = c;
  c32.precision = "float32";
  auto m32 = mlip::models::build_equivariant(c32);
  EXPECT_NEAR(run(m32, f, c32).energy, run(a, f, c).energy, 1e-4 * std::abs(run(a, f, c).energy) + 1e-4);
}

TEST(Equivariant, InvalidConfigurationNamesTheKey) {
  auto c = small_config("float64", true);
  c.l_max = 4;
  try {
    mlip::models::build_equivariant(c);
    FAIL();
  } catch (const mlip::Error& e) {
    EXPECT_STREQ(e.what(), "model.l_max: expected an integer from 0 to 3, got 4");
  }
  c = small_config("float64", true);
  c.precision = "float16";
  EXPECT_THROW(mlip::models::build_equivariant(c), mlip::Error);
}

}  // namespace
