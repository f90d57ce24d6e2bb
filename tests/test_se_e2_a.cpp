#include "models/se_e2_a/se_e2_a.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "data/neighbor_list.h"
#include "error.h"
#include "models/se_e2_a/env_matrix.h"
#include "model_test_util.h"
#include "test_util.h"

namespace {

using mlip::data::build_neighbor_list;
using mlip::models::SeAConfig;

/// A small model (fast to run) with the structure of the reference one.
SeAConfig small_config(const std::string& precision, std::vector<int64_t> sel = {12, 24}, bool one_side = true) {
  SeAConfig c;
  c.type_map = {"O", "H"};
  c.sel = std::move(sel);
  c.rcut = 4.0;
  c.rcut_smth = 1.0;
  c.neuron = {4, 8, 16};
  c.axis_neuron = 4;
  c.type_one_side = one_side;
  c.resnet_dt = true;
  c.fitting_neuron = {12, 12};
  c.fitting_resnet_dt = true;
  c.precision = precision;
  c.seed = 7;
  return c;
}

using mlip::test::Frame;

Frame random_frame(int n, bool periodic, unsigned seed) {
  return mlip::test::random_frame(n, periodic, seed, 6.5, {0.8, -0.5, 0.4}, 0.9, 0.4);
}

using Result = mlip::test::ModelResult;
using mlip::test::random_rotation;
using mlip::test::transform;

Result run_deploy(torch::jit::Module& model, const Frame& f, const SeAConfig& c) {
  return mlip::test::run_deploy(model, f, c.rcut, c.dtype());
}

template <typename Real>
Result run_training_path(torch::jit::Module& model, const Frame& f, const SeAConfig& c) {
  std::vector<Real> pos(f.pos.begin(), f.pos.end());
  auto nl = build_neighbor_list<Real>(pos.data(), f.natoms(), f.cell.empty() ? nullptr : f.cell.data(), f.pbc, c.rcut);
  mlip::models::EnvMatrixParams p{c.rcut, c.rcut_smth, c.sel};
  auto env = mlip::models::compute_env_matrix<Real>(nl, f.types, p);
  auto atype = torch::tensor(std::vector<int64_t>(f.types.begin(), f.types.end()), torch::kInt64);
  auto out = model.get_method("energy_force_env")({env.rij.unsqueeze(0), env.drij.unsqueeze(0), env.vec.unsqueeze(0),
                                                   env.nlist.unsqueeze(0), atype, false})
                 .toTuple();
  Result r;
  r.energy = out->elements()[0].toTensor().template item<double>();
  r.forces = out->elements()[2].toTensor()[0].to(torch::kFloat64);
  r.virial = out->elements()[3].toTensor()[0].to(torch::kFloat64);
  return r;
}

/// Statistics and bias that make the normalisation matter (not the 0/1 defaults).
void set_statistics(torch::jit::Module& model, const Frame& f, const SeAConfig& c) {
  std::vector<double> pos = f.pos;
  auto nl = build_neighbor_list<double>(pos.data(), f.natoms(), f.cell.empty() ? nullptr : f.cell.data(), f.pbc, c.rcut);
  mlip::models::EnvStat stat(2, c.nslots());
  stat.add(mlip::models::compute_env_matrix<double>(nl, f.types, {c.rcut, c.rcut_smth, c.sel}), f.types);
  model.setattr("davg", stat.davg().to(c.dtype()));
  model.setattr("dstd", stat.dstd().to(c.dtype()));
  model.setattr("bias", torch::tensor({-93.5, -187.2}, torch::kFloat64).to(c.dtype()));
}

TEST(SeA, TrainingPathEqualsDeployPathDouble) {
  for (bool periodic : {true, false})
    for (bool one_side : {true, false})
      for (auto sel : {std::vector<int64_t>{12, 24}, std::vector<int64_t>{3, 5}}) {  // second: truncation
        SCOPED_TRACE(std::string(periodic ? "periodic" : "cluster") + (one_side ? " one_side" : " two_side") +
                     " sel " + std::to_string(sel[0]));
        SeAConfig c = small_config("float64", sel, one_side);
        auto model = mlip::models::build_se_e2_a(c);
        Frame f = random_frame(30, periodic, periodic ? 3 : 4);
        set_statistics(model, f, c);
        Result a = run_training_path<double>(model, f, c), b = run_deploy(model, f, c);
        EXPECT_NEAR(a.energy, b.energy, 1e-10 * std::abs(b.energy));
        EXPECT_LT((a.forces - b.forces).abs().max().item<double>(), 1e-10);
        EXPECT_LT((a.virial - b.virial).abs().max().item<double>(), 1e-10);
        EXPECT_GT(b.forces.abs().max().item<double>(), 1e-3) << "forces should not vanish";
      }
}

TEST(SeA, TrainingPathEqualsDeployPathFloat) {
  SeAConfig c = small_config("float32");
  auto model = mlip::models::build_se_e2_a(c);
  Frame f = random_frame(30, true, 5);
  set_statistics(model, f, c);
  Result a = run_training_path<float>(model, f, c), b = run_deploy(model, f, c);
  EXPECT_NEAR(a.energy, b.energy, 1e-5 * std::abs(b.energy));
  EXPECT_LT((a.forces - b.forces).abs().max().item<double>(), 1e-4);
}

TEST(SeA, ForcesAreMinusTheEnergyGradient) {
  for (bool periodic : {true, false}) {
    SCOPED_TRACE(periodic ? "periodic" : "cluster");
    SeAConfig c = small_config("float64", {30, 60});  // no truncation: the energy is smooth
    auto model = mlip::models::build_se_e2_a(c);
    Frame f = random_frame(12, periodic, 6);
    set_statistics(model, f, c);
    Result r = run_deploy(model, f, c);
    const double h = 1e-5;
    for (int a = 0; a < f.natoms(); ++a)
      for (int k = 0; k < 3; ++k) {
        Frame fp = f, fm = f;
        fp.pos[3 * a + k] += h;
        fm.pos[3 * a + k] -= h;
        const double fd = -(run_deploy(model, fp, c).energy - run_deploy(model, fm, c).energy) / (2 * h);
        EXPECT_NEAR(r.forces[a][k].item<double>(), fd, 1e-6 * std::max(1.0, std::abs(fd))) << "atom " << a << " dir " << k;
      }
  }
}

TEST(SeA, VirialIsMinusStrainDerivative) {
  // W = -dE/d(eps) for a homogeneous strain r -> r (1 + eps), cell -> cell (1 + eps).
  SeAConfig c = small_config("float64", {30, 60});
  auto model = mlip::models::build_se_e2_a(c);
  Frame f = random_frame(12, true, 8);
  set_statistics(model, f, c);
  Result r = run_deploy(model, f, c);
  const double h = 1e-6;
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b) {
      auto strained = [&](double eps) {
        Frame g = f;
        auto apply = [&](std::vector<double>& v) {
          for (size_t p = 0; p < v.size() / 3; ++p) v[3 * p + b] += eps * v[3 * p + a];
        };
        apply(g.pos);
        apply(g.cell);
        return run_deploy(model, g, c).energy;
      };
      const double fd = -(strained(h) - strained(-h)) / (2 * h);
      EXPECT_NEAR(r.virial[a][b].item<double>(), fd, 1e-6 * std::max(1.0, std::abs(fd))) << a << b;
    }
}

TEST(SeA, InvariantUnderRotationTranslationPermutation) {
  std::mt19937 rng(11);
  for (bool periodic : {true, false}) {
    SCOPED_TRACE(periodic ? "periodic" : "cluster");
    SeAConfig c = small_config("float64");
    auto model = mlip::models::build_se_e2_a(c);
    Frame f = random_frame(30, periodic, 9);
    set_statistics(model, f, c);
    Result r0 = run_deploy(model, f, c);
    for (bool reflect : {false, true}) {
      auto rot = random_rotation(rng, reflect);
      Frame g = f;
      g.pos = transform(f.pos, rot);
      g.cell = transform(f.cell, rot);
      Result r1 = run_deploy(model, g, c);
      EXPECT_NEAR(r1.energy, r0.energy, 1e-10 * std::abs(r0.energy));
      EXPECT_LT((r1.forces - r0.forces.matmul(rot.t())).abs().max().item<double>(), 1e-10);
      EXPECT_LT((r1.virial - rot.matmul(r0.virial).matmul(rot.t())).abs().max().item<double>(), 1e-10);
    }
    Frame t = f;
    for (size_t p = 0; p < t.pos.size(); p += 3) t.pos[p] += 1.7, t.pos[p + 1] -= 0.3, t.pos[p + 2] += 11.0;
    Result rt = run_deploy(model, t, c);
    EXPECT_NEAR(rt.energy, r0.energy, 1e-10 * std::abs(r0.energy));
    EXPECT_LT((rt.forces - r0.forces).abs().max().item<double>(), 1e-10);
    // Permutation of the atoms.
    std::vector<int> perm(f.natoms());
    for (int k = 0; k < f.natoms(); ++k) perm[size_t(k)] = k;
    std::shuffle(perm.begin(), perm.end(), rng);
    Frame pf = f;
    for (int k = 0; k < f.natoms(); ++k) {
      pf.types[size_t(k)] = f.types[size_t(perm[size_t(k)])];
      for (int d = 0; d < 3; ++d) pf.pos[3 * k + d] = f.pos[3 * perm[size_t(k)] + d];
    }
    Result rp = run_deploy(model, pf, c);
    EXPECT_NEAR(rp.energy, r0.energy, 1e-10 * std::abs(r0.energy));
    for (int k = 0; k < f.natoms(); ++k)
      for (int d = 0; d < 3; ++d)
        EXPECT_NEAR(rp.forces[k][d].item<double>(), r0.forces[perm[size_t(k)]][d].item<double>(), 1e-10);
  }
}

TEST(SeA, SmoothWhenAnAtomCrossesRcut) {
  SeAConfig c = small_config("float64");
  auto model = mlip::models::build_se_e2_a(c);
  Frame f;
  f.pbc = {{false, false, false}};
  f.types = {0, 1, 1, 0};
  f.pos = {0, 0, 0, 0.96, 0, 0, 0.24, 0.93, 0, 0, 0, 0};
  auto energy_at = [&](double x) {
    Frame g = f;
    g.pos[9] = -x;  // atom 3 at (-x, 0, 0): near rcut only of atom 0 (atoms 1, 2 are > rcut away)
    return run_deploy(model, g, c);
  };
  for (double eps : {1e-2, 1e-3, 1e-4}) {
    Result in = energy_at(c.rcut - eps), out = energy_at(c.rcut + eps);
    // w ~ (eps/width)^3 near rcut: energy jumps and forces on atom 3 vanish with eps.
    EXPECT_LT(std::abs(in.energy - out.energy), 1e3 * std::pow(eps, 3)) << eps;
    EXPECT_LT(in.forces[3].abs().max().item<double>(), 1e3 * std::pow(eps, 2)) << eps;
    EXPECT_EQ(out.forces[3].abs().max().item<double>(), 0.0);
  }
}

TEST(SeA, EmptySlotsInClosedFormEqualTheDenseSum) {
  // The net runs only on the slots some atom of the batch uses; the other empty slots are
  // added in closed form. A frame's energy and forces must not depend on its batch: alone,
  // and next to a denser copy of itself (which uses more slots), they are the same.
  SeAConfig c = small_config("float64", {20, 40});
  auto model = mlip::models::build_se_e2_a(c);
  Frame a = random_frame(30, true, 21);
  set_statistics(model, a, c);
  Frame b = a;
  for (auto& x : b.pos) x *= 0.8;
  for (auto& x : b.cell) x *= 0.8;
  auto env_of_frame = [&](const Frame& f) {
    std::vector<double> pos = f.pos;
    auto nl = build_neighbor_list<double>(pos.data(), f.natoms(), f.cell.data(), f.pbc, c.rcut);
    return mlip::models::compute_env_matrix<double>(nl, f.types, {c.rcut, c.rcut_smth, c.sel});
  };
  auto ea = env_of_frame(a), eb = env_of_frame(b);
  ASSERT_GT((eb.nlist >= 0).sum().item<int64_t>(), (ea.nlist >= 0).sum().item<int64_t>());
  auto atype = torch::tensor(std::vector<int64_t>(a.types.begin(), a.types.end()), torch::kInt64);
  auto run = [&](std::vector<mlip::models::EnvMatrix*> envs) {
    std::vector<torch::Tensor> r, d, v, n;
    for (auto* e : envs) r.push_back(e->rij), d.push_back(e->drij), v.push_back(e->vec), n.push_back(e->nlist);
    return model.get_method("energy_force_env")({torch::stack(r), torch::stack(d), torch::stack(v), torch::stack(n), atype, false})
        .toTuple();
  };
  auto alone = run({&ea}), both = run({&ea, &eb});
  const double e_alone = alone->elements()[0].toTensor()[0].item<double>();
  const double e_both = both->elements()[0].toTensor()[0].item<double>();
  EXPECT_NEAR(e_alone, e_both, 1e-12 * std::abs(e_alone));
  EXPECT_LT((alone->elements()[2].toTensor()[0] - both->elements()[2].toTensor()[0]).abs().max().item<double>(), 1e-12);
}

TEST(SeA, SavedModuleRunsWithTheSameResults) {
  SeAConfig c = small_config("float64");
  auto model = mlip::models::build_se_e2_a(c);
  Frame f = random_frame(20, true, 12);
  set_statistics(model, f, c);
  mlip::test::TempDir dir;
  model.save(dir / "model.pt");
  auto loaded = torch::jit::load(dir / "model.pt");
  Result a = run_deploy(model, f, c), b = run_deploy(loaded, f, c);
  EXPECT_EQ(a.energy, b.energy);
  EXPECT_TRUE(torch::equal(a.forces, b.forces));
}

TEST(SeA, SameSeedSameModelAndFloat32StartsFromTheSameNumbers) {
  auto a = mlip::models::build_se_e2_a(small_config("float64"));
  auto b = mlip::models::build_se_e2_a(small_config("float64"));
  auto c = mlip::models::build_se_e2_a(small_config("float32"));
  auto pa = a.named_parameters(), pb = b.named_parameters(), pc = c.named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  int64_t count = 0;
  for (auto it = pa.begin(), jt = pb.begin(), kt = pc.begin(); it != pa.end(); ++it, ++jt, ++kt) {
    EXPECT_EQ((*it).name, (*jt).name);
    EXPECT_TRUE(torch::equal((*it).value, (*jt).value));
    EXPECT_TRUE(torch::equal((*it).value.to(torch::kFloat32), (*kt).value));
    EXPECT_TRUE((*it).value.requires_grad());
    count += (*it).value.numel();
  }
  // 2 embedding nets (1-4-8-16: 8 + 40 + 144 + idt 8 + 16) and 2 fitting nets (64-12-12-1).
  EXPECT_EQ(count, 2 * (8 + 40 + 8 + 144 + 16) + 2 * (64 * 12 + 12 + 12 * 12 + 12 + 12 + 12 + 1));
}

TEST(SeA, InvalidConfigurationNamesTheKey) {
  SeAConfig c = small_config("float64");
  c.sel = {4};
  EXPECT_NE(mlip::test::error_of([&] { mlip::models::build_se_e2_a(c); })
                .find("model.descriptor.sel: expected 2 entries (one per type of model.type_map), got 1"),
            std::string::npos);
  c = small_config("float16");
  EXPECT_NE(mlip::test::error_of([&] { mlip::models::build_se_e2_a(c); }).find("precision"), std::string::npos);
  c = small_config("float64");
  c.axis_neuron = 40;
  EXPECT_NE(mlip::test::error_of([&] { mlip::models::build_se_e2_a(c); }).find("axis_neuron"), std::string::npos);
}

}  // namespace
