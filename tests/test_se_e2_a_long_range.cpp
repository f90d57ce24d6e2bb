// se_e2_a with model.long_range (docs/long_range.md "The charge heads", "Training"): the training
// path (dense rows, charges from the fitting nets' second output, E_long per frame in C++) against
// the frozen forward, which builds its rows from the positions itself; the gradient of a loss of
// energy, forces and virial by the parameters against central differences of that loss; the
// forward's forces and virial against finite differences of its energy (the charges' dependence on
// positions included); rotations, translations and the total charge; and what it refuses, by name.
#include <gtest/gtest.h>

#include <cmath>
#include <type_traits>

#include "data/neighbor_list.h"
#include "data/system.h"
#include "models/inference_registry.h"
#include "models/registry.h"
#include "models/se_e2_a/se_e2_a_evaluator.h"
#include "models/se_e2_a/se_e2_a_inference.h"
#include "models/se_e2_a/se_e2_a_model.h"
#include "long_range_test_util.h"
#include "model_test_util.h"
#include "test_util.h"

namespace {

using mlip::models::Prediction;
using mlip::models::SeASettings;
using mlip::test::relative;

SeASettings settings(const std::string& precision, double total_charge = 0.0, bool isolated_energy_is_bias = false) {
  SeASettings s;
  s.type = "se_e2_a";
  s.type_map = {"O", "H"};
  s.precision = precision;
  s.descriptor_seed = 3;
  s.fitting_seed = 4;
  if (isolated_energy_is_bias) s.e0s.kind = mlip::models::ReferenceEnergies::Kind::kIsolated;
  s.sel.values = {16, 24};
  s.long_range.enabled = true;
  s.long_range.sigma = 1.0;
  s.long_range.kspace_spacing = 1.5;
  s.long_range.total_charge = total_charge;
  auto& c = s.config;
  c.type_map = s.type_map;
  c.rcut = 3.5;
  c.rcut_smth = 0.5;
  c.neuron = {4, 8};
  c.axis_neuron = 4;
  c.fitting_neuron = {12, 12};
  c.precision = precision;
  return s;
}

using Sample = mlip::test::LongRangeSample;
Sample sample(bool periodic, unsigned seed) { return mlip::test::long_range_sample(periodic, seed); }

c10::impl::GenericDict run_forward(torch::jit::Module& m, const mlip::test::Frame& f, double rcut, torch::Dtype dtype,
                                   double total_charge = std::nan("")) {
  auto in = mlip::test::deploy_input(f, rcut, dtype);
  if (!std::isnan(total_charge)) in.insert("total_charge", torch::tensor(total_charge, torch::kFloat64));
  return m.forward({in}).toGenericDict();
}

/// The loss the tests differentiate: a fixed random combination of energy, forces, virial and
/// charges (what charge labels add to the loss).
struct Loss {
  torch::Tensor ge, gf, gv, gq;
  explicit Loss(int64_t natoms) {
    auto gen = at::detail::createCPUGenerator(17);
    ge = at::randn({1}, gen, torch::kFloat64);
    gf = at::randn({1, natoms, 3}, gen, torch::kFloat64);
    gv = at::randn({1, 3, 3}, gen, torch::kFloat64);
    gq = at::randn({1, natoms}, gen, torch::kFloat64);
  }
  double of(const Prediction& p) const {
    return (p.energy * ge).sum().item<double>() + (p.forces.to(torch::kFloat64) * gf).sum().item<double>() +
           (p.virial.to(torch::kFloat64) * gv).sum().item<double>() + (p.charges * gq).sum().item<double>();
  }
};

template <typename T>
class SeALongRange : public ::testing::Test {};
using Dtypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(SeALongRange, Dtypes);

// The training path gives the frozen forward's energy, forces and virial (and the charges sum to
// the total), periodic and not, with and without the isolated atom's energy subtracted.
TYPED_TEST(SeALongRange, TheTrainingPathEqualsTheForward) {
  const bool is_double = std::is_same_v<TypeParam, double>;
  const auto dtype = is_double ? torch::kFloat64 : torch::kFloat32;
  const double tol = is_double ? 1e-10 : 2e-4;
  for (const bool periodic : {true, false})
    for (const bool isolated : {false, true}) {
      SCOPED_TRACE(std::string(periodic ? "periodic" : "cluster") + (isolated ? ", isolated_energy_is_bias" : ""));
      const double total_charge = periodic ? 0.0 : -1.0;
      const auto s = settings(is_double ? "float64" : "float32", total_charge, isolated);
      auto model = mlip::models::create_model(s, mlip::models::ModelContext{});
      EXPECT_TRUE(mlip::test::contains(model->summary(), "device-generic training path, long-range charges"))
          << model->summary();
      auto& module = model->module();
      module.setattr("bias", torch::tensor({-3.5, -1.2}, dtype));
      const Sample f = sample(periodic, 21);
      const auto input = model->prepare_frame(f.sys, f.data);
      const Prediction fast = model->predict(f.atoms, {input.get()}, false);
      const auto out = run_forward(module, f.frame, s.config.rcut, dtype);
      EXPECT_LT(relative(fast.energy, out.at("total_energy").toTensor().reshape({1})), tol) << "energy";
      EXPECT_LT(relative(fast.forces, out.at("forces").toTensor().unsqueeze(0)), tol) << "forces";
      EXPECT_LT(relative(fast.virial, out.at("virial").toTensor()), tol) << "virial";
      const auto charges = out.at("charges").toTensor().to(torch::kFloat64);
      ASSERT_EQ(charges.sizes(), (std::vector<int64_t>{f.atoms.natoms, 1}));
      EXPECT_NEAR(charges.sum().item<double>(), total_charge, is_double ? 1e-12 : 1e-5);
      EXPECT_GT(charges.abs().max().item<double>(), 1e-2) << "charges not all zero";
      ASSERT_TRUE(fast.charges.defined());
      EXPECT_LT(relative(fast.charges, charges.reshape({1, -1})), tol) << "the training path's charges";
      const auto atomic = out.at("atomic_energy").toTensor().to(torch::kFloat64).sum();
      EXPECT_LT(relative(atomic.reshape({1}), fast.energy), tol) << "the atomic energies sum to the energy";
    }
}

// The gradient of the loss by the parameters (autograd's double backward through the charges and
// E_long) against central differences of the loss, for a weight of every kind, the charge
// outputs' included; the charge outputs do move the loss.
TEST(SeALongRange, ParameterGradientsAreDerivativesOfTheLoss) {
  for (const bool periodic : {true, false}) {
    SCOPED_TRACE(periodic ? "periodic" : "cluster");
    const auto s = settings("float64");
    auto model = mlip::models::create_model(s, mlip::models::ModelContext{});
    auto& module = model->module();
    const Sample f = sample(periodic, 23);
    const Loss loss(f.atoms.natoms);
    const auto input = model->prepare_frame(f.sys, f.data);
    mlip::test::zero_grads(module);
    model->predict(f.atoms, {input.get()}, true);
    model->backward(loss.ge, loss.gf, loss.gv, loss.gq);
    const std::vector<std::string> names = {"emb_0_0_w0", "emb_1_1_b1", "fit_0_w1", "fit_1_wout", "fit_0_wq",
                                            "fit_1_bq"};
    for (const std::string& name : names) {
      torch::Tensor p = module.attr(name).toTensor();
      const torch::Tensor grad = p.grad().reshape(-1);
      ASSERT_TRUE(grad.defined()) << name;
      auto flat = p.detach().view(-1);
      const double h = 1e-6;
      double largest = grad.abs().max().item<double>();
      if (name == "fit_0_wq" || name == "fit_1_bq") EXPECT_GT(largest, 1e-4) << name << ": the charges move the loss";
      for (int64_t k : {int64_t(0), flat.numel() - 1}) {
        const double kept = flat[k].item<double>();
        flat[k] = kept + h;
        const double plus = loss.of(model->predict(f.atoms, {input.get()}, false));
        flat[k] = kept - h;
        const double minus = loss.of(model->predict(f.atoms, {input.get()}, false));
        flat[k] = kept;
        EXPECT_NEAR(grad[k].item<double>(), (plus - minus) / (2 * h), 1e-6 * std::max(1.0, largest))
            << name << "[" << k << "]";
      }
    }
  }
}

// The frozen forward's forces and virial are derivatives of its energy, through the charges too;
// rotations, translations and the input's total charge (long_range_test_util.h).
TEST(SeALongRange, ForcesAndVirialAreDerivativesOfTheEnergy) {
  for (const bool periodic : {true, false}) {
    SCOPED_TRACE(periodic ? "periodic" : "cluster");
    const auto s = settings("float64");
    auto model = mlip::models::create_model(s, mlip::models::ModelContext{});
    mlip::test::expect_forces_and_virial_are_derivatives(model->module(), sample(periodic, 33).frame, s.config.rcut);
  }
}

TEST(SeALongRange, RotationsTranslationsAndTheTotalCharge) {
  const auto s = settings("float64");
  auto model = mlip::models::create_model(s, mlip::models::ModelContext{});
  mlip::test::expect_long_range_invariances(model->module(), sample(true, 41).frame, s.config.rcut);
}

/// A long-range term of the test's own, E = ½ a Σ q̃_i² (a = 20 eV/e²): ∂E/∂q̃_i = a q̃_i.
class SquareCoupling : public mlip::models::ChargeCoupling {
 public:
  void couple(const double* raw, int64_t n, double* gradient) override {
    energy = 0;
    for (int64_t i = 0; i < n; ++i) gradient[i] = kA * raw[i], energy += 0.5 * kA * raw[i] * raw[i];
  }
  static constexpr double kA = 20.0;
  double energy = 0;
};

// MD's hand-written evaluation with charges (docs/long_range.md "In MD"): with any coupling its
// forces are those of E_short + E_coupling(q̃), against central differences of that sum on a
// cluster; keeping the first pass's embedding outputs for the second, or making them again, gives
// the same numbers.
TEST(SeALongRange, MdsTwoPassesGiveTheForcesThroughTheCharges) {
  const auto s = settings("float64");
  auto model = mlip::models::create_model(s, mlip::models::ModelContext{});
  auto& module = model->module();
  module.setattr("dstd", torch::full({2, 4}, 0.3, torch::kFloat64));  // rows that move the nets
  const mlip::models::SeAConfig config =
      mlip::models::se_e2_a_config(mlip::models::inference_record(s, module), module);
  mlip::models::SeAEvaluator kept(config, module), remade(config, module);
  remade.set_kept_embedding_bytes(0);
  const Sample f = sample(false, 27);
  const int64_t n = f.atoms.natoms;
  auto evaluate = [&](mlip::models::SeAEvaluator& evaluator, const std::vector<double>& pos,
                      mlip::models::SeAEvaluator::Evaluation* out) {
    const auto list = mlip::data::build_neighbor_list<double>(pos.data(), n, nullptr, {false, false, false},
                                                              config.rcut);
    const auto packed = mlip::models::PackedEnv::from_neighbor_list<double>(list, f.frame.types, config);
    SquareCoupling coupling;
    auto e = evaluator.evaluate(packed, f.frame.types, n, false, &coupling);
    const double total = e.energy + coupling.energy;
    if (out != nullptr) *out = std::move(e);
    return total;
  };
  mlip::models::SeAEvaluator::Evaluation a, b;
  evaluate(kept, f.frame.pos, &a);
  evaluate(remade, f.frame.pos, &b);
  ASSERT_EQ(a.charges.size(), size_t(n));
  EXPECT_EQ(a.charges, b.charges);
  EXPECT_EQ(a.forces, b.forces) << "the kept embedding outputs are the ones made again";
  EXPECT_EQ(a.virial, b.virial);
  double largest = 0;
  for (double v : a.forces) largest = std::max(largest, std::abs(v));
  ASSERT_GT(largest, 1e-3);
  const double h = 1e-5;
  for (int atom : {0, 5, 11})
    for (int d = 0; d < 3; ++d) {
      auto plus = f.frame.pos, minus = f.frame.pos;
      plus[size_t(3 * atom + d)] += h;
      minus[size_t(3 * atom + d)] -= h;
      const double fd = -(evaluate(kept, plus, nullptr) - evaluate(kept, minus, nullptr)) / (2 * h);
      EXPECT_NEAR(a.forces[size_t(3 * atom + d)], fd, 1e-6 * std::max(1.0, largest)) << "atom " << atom << " axis " << d;
    }
}

// What it refuses, by name: static shapes (a captured CUDA graph), a slab, and an MD request
// without the long-range term's coupling; its own inference declares its charges.
TEST(SeALongRange, RefusalsNameTheirReason) {
  const auto s = settings("float64");
  mlip::models::ModelContext context;
  context.static_shapes = true;
  EXPECT_TRUE(mlip::test::contains(mlip::test::error_of([&] { mlip::models::create_model(s, context); }),
                                   "training.cuda_graphs: false"));
  auto model = mlip::models::create_model(s, mlip::models::ModelContext{});
  Sample g = sample(true, 41);
  g.sys.pbc = {true, true, false};
  EXPECT_TRUE(mlip::test::contains(mlip::test::error_of([&] { model->prepare_frame(g.sys, g.data); }),
                                   "periodic along some cell vectors only"));
  const mlip::models::SettingsRecord record = mlip::models::inference_record(s, model->module());
  EXPECT_TRUE(record.has("long_range"));
  EXPECT_FALSE(mlip::models::capabilities_of(s).inference.empty());
  EXPECT_FALSE(mlip::models::capabilities_from(record).inference.empty());
  auto inference = mlip::models::find_inference("se_e2_a")->inference(record, model->module());
  EXPECT_TRUE(inference->inputs().charges);
  const Sample f = sample(true, 41);
  const auto list = mlip::data::build_neighbor_list<double>(f.frame.pos.data(), int(f.atoms.natoms),
                                                            f.frame.cell.data(), f.frame.pbc, s.config.rcut);
  mlip::models::NeighborInput input;
  input.list_double = &list;
  input.types = f.frame.types.data();
  input.natoms = input.nlocal = f.atoms.natoms;
  mlip::models::Request request;
  request.neighbors = &input;
  EXPECT_TRUE(mlip::test::contains(mlip::test::error_of([&] { inference->evaluate(request); }),
                                   "the model has charges (model.long_range): the request needs the long-range term's "
                                   "coupling"));
}

}  // namespace
