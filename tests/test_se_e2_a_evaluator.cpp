#include "models/se_e2_a/se_e2_a_evaluator.h"

#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <random>
#include <string>
#include <vector>

#include "data/neighbor_list.h"
#include "models/se_e2_a/env_matrix.h"
#include "models/se_e2_a/se_e2_a.h"
#include "model_test_util.h"
#include "test_util.h"

// The hand-written training path against the TorchScript module's energy_force_env with
// LibTorch's autograd (an independent implementation): energies, forces, virials and the
// gradient of a loss with respect to every parameter.

namespace {

using mlip::models::PackedEnv;
using mlip::models::SeAConfig;
using mlip::models::SeAEvaluator;
using mlip::test::Frame;

struct Case {
  bool one_side = true;
  bool emb_resnet_dt = false;
  std::vector<int64_t> sel = {12, 24};
  std::vector<int64_t> neuron = {4, 8, 16};
  bool periodic = true;
  double p_type0 = 0.4;  // 1.0: no atom of type 1 (its fitting net idle, its slots all empty)
  int batch = 1;
  bool isolated_energy_is_bias = false;  // FN(D_isolated) subtracted (model.e0s isolated or given)
  std::string name() const {
    std::string s = std::string(one_side ? "one_side" : "two_side") + (emb_resnet_dt ? " emb_resnet_dt" : "") +
                    " sel " + std::to_string(sel[0]) + "," + std::to_string(sel[1]) + " neuron";
    for (auto w : neuron) s += " " + std::to_string(w);
    return s + (periodic ? " periodic" : " cluster") + " p_type0 " + std::to_string(p_type0) + " batch " +
           std::to_string(batch) + (isolated_energy_is_bias ? " isolated_energy_is_bias" : "");
  }
};

SeAConfig config_of(const Case& k, const std::string& precision) {
  SeAConfig c;
  c.type_map = {"O", "H"};
  c.sel = k.sel;
  c.rcut = 4.0;
  c.rcut_smth = 1.0;
  c.neuron = k.neuron;
  c.axis_neuron = 3;
  c.type_one_side = k.one_side;
  c.resnet_dt = k.emb_resnet_dt;
  c.fitting_neuron = {12, 12};
  c.fitting_resnet_dt = true;
  c.precision = precision;
  c.seed = 11;
  c.isolated_energy_is_bias = k.isolated_energy_is_bias;
  return c;
}

template <typename Real>
mlip::models::EnvMatrix env_of(const Frame& f, const SeAConfig& c) {
  std::vector<Real> pos(f.pos.begin(), f.pos.end());
  auto nl = mlip::data::build_neighbor_list<Real>(pos.data(), f.natoms(), f.cell.empty() ? nullptr : f.cell.data(),
                                                  f.pbc, c.rcut);
  return mlip::models::compute_env_matrix<Real>(nl, f.types, {c.rcut, c.rcut_smth, c.sel});
}

struct Compared {
  double energy = 0, forces = 0, virial = 0, grad = 0;  // largest relative differences
  double grad_scale = 0;
};

/// Runs both paths on `frames` (same atoms) and returns the largest differences.
template <typename Real>
Compared compare(const Case& k, const std::string& precision) {
  const SeAConfig c = config_of(k, precision);
  auto model = mlip::models::build_se_e2_a(c);
  std::vector<Frame> frames;
  for (int b = 0; b < k.batch; ++b) {
    Frame f = mlip::test::random_frame(30, k.periodic, 21, 6.5, {0.8, -0.5, 0.4}, 0.9, k.p_type0);
    // Same atoms, moved a little per frame.
    std::mt19937 rng(100 + b);
    std::normal_distribution<double> noise(0.0, 0.05 * b);
    for (auto& x : f.pos) x += noise(rng);
    frames.push_back(f);
  }
  // Statistics of the first frame: a normalisation that is not the 0/1 default.
  mlip::models::EnvStat stat(2, c.nslots());
  std::vector<mlip::models::EnvMatrix> envs;
  for (auto& f : frames) envs.push_back(env_of<Real>(f, c));
  stat.add(env_of<double>(frames[0], c), frames[0].types);
  model.setattr("davg", stat.davg().to(c.dtype()));
  model.setattr("dstd", stat.dstd().to(c.dtype()));
  model.setattr("bias", torch::tensor({-93.5, -187.2}, torch::kFloat64).to(c.dtype()));

  const int64_t n = frames[0].natoms();
  torch::manual_seed(5);
  const auto ge = torch::randn({k.batch}, torch::kFloat64);
  const auto gf = torch::randn({k.batch, n, 3}, torch::kFloat64).to(c.dtype());
  const auto gv = torch::randn({k.batch, 3, 3}, torch::kFloat64).to(c.dtype());

  // Reference: TorchScript with autograd (double backward through the force).
  std::vector<torch::Tensor> rij, drij, vec, nlist;
  for (auto& e : envs) {
    rij.push_back(e.rij);
    drij.push_back(e.drij);
    vec.push_back(e.vec);
    nlist.push_back(e.nlist);
  }
  auto atype = torch::tensor(std::vector<int64_t>(frames[0].types.begin(), frames[0].types.end()), torch::kInt64);
  auto out = model.get_method("energy_force_env")({torch::stack(rij), torch::stack(drij), torch::stack(vec),
                                                   torch::stack(nlist), atype, true})
                 .toTuple();
  const auto e_ref = out->elements()[0].toTensor();
  const auto f_ref = out->elements()[2].toTensor();
  const auto v_ref = out->elements()[3].toTensor();
  auto loss = (e_ref * ge).sum() + (f_ref * gf).sum().to(torch::kFloat64) + (v_ref * gv).sum().to(torch::kFloat64);
  std::vector<torch::Tensor> params;
  std::vector<std::string> names;
  for (const auto& p : model.named_parameters(false)) {
    params.push_back(p.value);
    names.push_back(p.name);
  }
  auto g_ref = torch::autograd::grad({loss}, params, {}, false, false, true);

  // The hand-written path.
  std::vector<PackedEnv> packed;
  for (auto& e : envs) packed.push_back(PackedEnv::pack(e, frames[0].types, c));
  std::vector<const PackedEnv*> ptrs;
  for (auto& p : packed) ptrs.push_back(&p);
  const PackedEnv batch = PackedEnv::concat(ptrs);
  SeAEvaluator path(c, model);
  auto mine = path.forward(batch, frames[0].types);
  for (auto& p : params) p.mutable_grad() = torch::Tensor();
  path.backward(ge, gf, gv);

  auto rel = [](const torch::Tensor& a, const torch::Tensor& b) {
    const double scale = std::max(b.abs().max().item<double>(), 1e-300);
    return (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>() / scale;
  };
  Compared r;
  r.energy = rel(mine.energy, e_ref);
  r.forces = rel(mine.forces, f_ref);
  r.virial = rel(mine.virial, v_ref);
  EXPECT_EQ(mine.energy.scalar_type(), torch::kFloat64);
  EXPECT_EQ(mine.forces.scalar_type(), c.dtype());
  for (size_t p = 0; p < params.size(); ++p) {
    SCOPED_TRACE(names[p]);
    const auto expected = g_ref[p].defined() ? g_ref[p] : torch::zeros_like(params[p]);
    const auto got = params[p].grad();
    EXPECT_TRUE(got.defined());
    if (!got.defined()) continue;
    EXPECT_EQ(got.sizes(), params[p].sizes());
    // Relative to the largest gradient entry of the tensor (with a floor for all-zero ones).
    const double scale = std::max(expected.abs().max().item<double>(), 1e-8);
    const double d = (got.to(torch::kFloat64) - expected.to(torch::kFloat64)).abs().max().item<double>() / scale;
    r.grad = std::max(r.grad, d);
    r.grad_scale = std::max(r.grad_scale, expected.abs().max().item<double>());
  }
  EXPECT_GT(f_ref.abs().max().item<double>(), 1e-3) << "forces should not vanish";
  EXPECT_GT(r.grad_scale, 1e-3) << "gradients should not vanish";
  return r;
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (bool one_side : {true, false})
    for (bool resnet : {false, true}) {
      Case k;
      k.one_side = one_side;
      k.emb_resnet_dt = resnet;
      out.push_back(k);
    }
  Case k;
  k.sel = {3, 5};  // truncation: atoms with more neighbours than sel
  out.push_back(k);
  k = Case();
  k.neuron = {4, 4, 8};  // a same-width skip in the embedding net
  k.emb_resnet_dt = true;
  out.push_back(k);
  k = Case();
  k.neuron = {1, 2, 3};  // input-width skips from the scalar s, no skip at the end
  out.push_back(k);
  k = Case();
  k.periodic = false;
  out.push_back(k);
  k = Case();
  k.p_type0 = 1.0;  // no atom of type 1
  k.one_side = false;
  out.push_back(k);
  k = Case();
  k.batch = 3;
  out.push_back(k);
  k.one_side = false;
  out.push_back(k);
  // The isolated atom's FN subtracted: its adjoint reaches the fitting and embedding nets.
  k.isolated_energy_is_bias = true;
  out.push_back(k);
  k = Case();
  k.isolated_energy_is_bias = true;
  k.p_type0 = 1.0;  // type 1's isolated atom unused
  out.push_back(k);
  k = Case();
  k.isolated_energy_is_bias = true;
  k.neuron = {1, 2, 3};
  k.sel = {3, 5};
  out.push_back(k);
  return out;
}

TEST(SeAEvaluator, EqualsAutogradInDouble) {
  for (const Case& k : cases()) {
    SCOPED_TRACE(k.name());
    const Compared r = compare<double>(k, "float64");
    EXPECT_LT(r.energy, 1e-12);
    EXPECT_LT(r.forces, 1e-10);
    EXPECT_LT(r.virial, 1e-10);
    EXPECT_LT(r.grad, 1e-10);
  }
}

TEST(SeAEvaluator, EqualsAutogradInFloat) {
  for (const Case& k : {Case(), cases()[3], cases()[cases().size() - 4], cases()[cases().size() - 3]}) {
    SCOPED_TRACE(k.name());
    const Compared r = compare<float>(k, "float32");
    EXPECT_LT(r.energy, 1e-6);
    EXPECT_LT(r.forces, 1e-4);
    EXPECT_LT(r.virial, 1e-4);
    EXPECT_LT(r.grad, 1e-3);
  }
}

TEST(SeAEvaluator, PackKeepsOnlyRealSlotsSortedByCentre) {
  Case k;
  const SeAConfig c = config_of(k, "float64");
  Frame f = mlip::test::random_frame(30, true, 21, 6.5, {0.8, -0.5, 0.4}, 0.9, 0.4);
  auto env = env_of<double>(f, c);
  auto packed = PackedEnv::pack(env, f.types, c);
  ASSERT_EQ(packed.groups.size(), 2u);
  int64_t real = (env.rij.select(2, 0) != 0).sum().item<int64_t>(), total = 0;
  for (int64_t t = 0; t < 2; ++t) {
    const auto& g = packed.groups[size_t(t)];
    total += int64_t(g.neighbor.size());
    for (int i = 0; i < f.natoms(); ++i) {
      EXPECT_LE(g.offsets[size_t(i)], g.offsets[size_t(i + 1)]);
      EXPECT_LE(g.offsets[size_t(i + 1)] - g.offsets[size_t(i)], c.sel[size_t(t)]);
      for (int64_t p = g.offsets[size_t(i)]; p < g.offsets[size_t(i + 1)]; ++p)
        EXPECT_EQ(f.types[size_t(g.neighbor[size_t(p)])], t);
    }
  }
  EXPECT_EQ(total, real);
  EXPECT_GT(real, 0);
}

template <typename Real>
struct PackedFromList : ::testing::Test {};
using Reals = ::testing::Types<float, double>;
TYPED_TEST_SUITE(PackedFromList, Reals);

// The MD path's packed pairs straight from the neighbour list (PackedEnv::from_neighbor_list)
// against the dense environment matrix packed afterwards: the same pairs, order and bits, with
// truncated blocks (sel smaller than the neighbours), both type layouts, and only the first
// atoms as centres (an MD rank's owned atoms among owned + ghosts).
TYPED_TEST(PackedFromList, EqualsTheDenseMatrixPacked) {
  using Real = TypeParam;
  for (const Case& k : {Case{}, Case{false, false, {12, 24}}, Case{true, false, {3, 5}}, Case{false, false, {4, 6}},
                        Case{true, false, {12, 24}, {4, 8, 16}, false}}) {
    SCOPED_TRACE(k.name());
    const SeAConfig c = config_of(k, std::is_same_v<Real, float> ? "float32" : "float64");
    Frame f = mlip::test::random_frame(40, k.periodic, 5, 6.5, {0.8, -0.5, 0.4}, 0.9, 0.4);
    std::vector<Real> pos(f.pos.begin(), f.pos.end());
    for (int64_t centres : std::vector<int64_t>{int64_t(f.natoms()), 17}) {
      mlip::data::NeighborListBuilder<Real> builder;
      auto nl = builder.build(pos.data(), f.natoms(), f.cell.empty() ? nullptr : f.cell.data(), f.pbc, c.rcut, centres);
      auto env = mlip::models::compute_env_matrix<Real>(nl, f.types, {c.rcut, c.rcut_smth, c.sel});
      std::vector<int> centre_types(f.types.begin(), f.types.begin() + centres);
      const PackedEnv dense = PackedEnv::pack(env, centre_types, c);
      const PackedEnv direct = PackedEnv::from_neighbor_list<Real>(nl, f.types, c);
      ASSERT_EQ(direct.natoms, centres);
      ASSERT_EQ(direct.groups.size(), dense.groups.size());
      int64_t pairs = 0;
      for (size_t g = 0; g < dense.groups.size(); ++g) {
        EXPECT_EQ(direct.groups[g].offsets, dense.groups[g].offsets) << "group " << g;
        EXPECT_EQ(direct.groups[g].neighbor, dense.groups[g].neighbor) << "group " << g;
        EXPECT_TRUE(torch::equal(direct.groups[g].r, dense.groups[g].r)) << "group " << g;
        EXPECT_TRUE(torch::equal(direct.groups[g].dr, dense.groups[g].dr)) << "group " << g;
        EXPECT_TRUE(torch::equal(direct.groups[g].vec, dense.groups[g].vec)) << "group " << g;
        pairs += int64_t(direct.groups[g].neighbor.size());
      }
      EXPECT_GT(pairs, 0);
      if (k.sel[0] < 12) {
        EXPECT_GT(env.truncated_blocks, 0) << "the case meant to truncate did not";
      }
    }
  }
}

template <typename Real>
struct IsolatedAtom : ::testing::Test {};
TYPED_TEST_SUITE(IsolatedAtom, Reals);

// With isolated_energy_is_bias (model.e0s isolated or given), an atom without neighbours has
// exactly its bias as energy in every path: the hand-written training forward, the MD
// evaluation, the TorchScript training method and the frozen interface; without it, it does not.
TYPED_TEST(IsolatedAtom, EnergyIsTheBiasInEveryPath) {
  using Real = TypeParam;
  const std::string precision = std::is_same_v<Real, float> ? "float32" : "float64";
  // Three atoms (O, H, O) 10 Å apart, no cell: nobody has a neighbour within rcut = 4.
  Frame lone;
  lone.pos = {0, 0, 0, 10, 0, 0, 0, 10, 0};
  lone.types = {0, 1, 0};
  lone.pbc = {false, false, false};
  Frame dense = mlip::test::random_frame(30, true, 21, 6.5, {0.8, -0.5, 0.4}, 0.9, 0.4);
  const std::vector<double> bias = {-93.5, -187.2};
  for (bool subtract : {true, false}) {
    SCOPED_TRACE(subtract ? "isolated_energy_is_bias" : "plain");
    Case k;
    k.one_side = false;
    k.isolated_energy_is_bias = subtract;
    const SeAConfig c = config_of(k, precision);
    auto model = mlip::models::build_se_e2_a(c);
    EXPECT_EQ(model.attr("isolated_energy_is_bias").toBool(), subtract);
    mlip::models::EnvStat stat(2, c.nslots());
    stat.add(env_of<double>(dense, c), dense.types);
    model.setattr("davg", stat.davg().to(c.dtype()));
    model.setattr("dstd", stat.dstd().to(c.dtype()));
    model.setattr("bias", torch::tensor(bias, torch::kFloat64).to(c.dtype()));

    const auto env = env_of<Real>(lone, c);
    ASSERT_EQ((env.rij.select(-1, 0) != 0).sum().template item<int64_t>(), 0) << "the atoms should have no neighbours";
    SeAEvaluator path(c, model);
    const auto trained = path.forward(PackedEnv::pack(env, lone.types, c), lone.types).atomic.to(torch::kFloat64);
    mlip::data::NeighborListBuilder<Real> builder;
    std::vector<Real> pos(lone.pos.begin(), lone.pos.end());
    auto nl = builder.build(pos.data(), 3, nullptr, lone.pbc, c.rcut);
    const auto evaluated = path.evaluate(PackedEnv::from_neighbor_list<Real>(nl, lone.types, c), lone.types, 3);
    auto atype = torch::tensor(std::vector<int64_t>{0, 1, 0}, torch::kInt64);
    const auto script = model.get_method("atomic_energy")({env.rij.unsqueeze(0), atype}).toTensor().to(torch::kFloat64);
    // As frozen: parameters without gradients (the energies then have no graph at all).
    for (auto p : model.parameters()) p.requires_grad_(false);
    const double frozen = mlip::test::run_deploy(model, lone, c.rcut, c.dtype()).energy;

    // float64: a few ulps of the bias (two fitting-net evaluations of one input, 1-row and
    // n-row GEMMs); float32: of float32's.
    const double tol = std::is_same_v<Real, float> ? 2e-5 : 1e-12;
    double worst = 0;
    for (int i = 0; i < 3; ++i) {
      const double b = bias[size_t(lone.types[size_t(i)])];
      for (double e : {trained[0][i].template item<double>(), evaluated.atomic[size_t(i)],
                       script[0][i].template item<double>()})
        worst = std::max(worst, std::abs(e - b));
    }
    const double total = 2 * bias[0] + bias[1];
    worst = std::max({worst, std::abs(evaluated.energy - total), std::abs(frozen - total)});
    if (subtract) {
      EXPECT_LT(worst, tol * std::abs(total));
    } else {
      EXPECT_GT(worst, 1e-3) << "the fitting nets' output at the isolated atom should not vanish by itself";
    }
    // Forces on isolated atoms are zero either way.
    EXPECT_EQ(*std::max_element(evaluated.forces.begin(), evaluated.forces.end(), [](double a, double b) {
      return std::abs(a) < std::abs(b);
    }), 0.0);
  }
}

}  // namespace
