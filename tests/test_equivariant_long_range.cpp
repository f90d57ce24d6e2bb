// The equivariant model with model.long_range (docs/long_range.md "The charge heads", "In the
// frozen model", "Training"): the training path against autograd through the saved model's own
// methods (energies, forces, virials, every parameter gradient), the frozen forward's forces and
// virial against finite differences of its energy with the charges' dependence on positions
// included, the charges' total, rotations and translations, and the errors of what it refuses.
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <cmath>
#include <type_traits>

#include "data/neighbor_list.h"
#include "data/system.h"
#include "models/equivariant/equivariant_model.h"
#include "models/inference_registry.h"
#include "models/registry.h"
#include "models/pair_list.h"
#include "long_range_test_util.h"
#include "model_test_util.h"
#include "test_util.h"

namespace {

using mlip::models::EquivariantSettings;
using mlip::models::Prediction;
using mlip::test::parameter_grads;
using mlip::test::relative;
using mlip::test::zero_grads;

EquivariantSettings settings(const std::string& precision, double total_charge = 0.0) {
  EquivariantSettings s;
  s.type = "equivariant";
  s.type_map = {"O", "H"};
  s.precision = precision;
  s.avg_num_neighbors = 6.0;
  s.seed = 5;
  s.long_range.enabled = true;
  s.long_range.sigma = 1.0;
  s.long_range.kspace_spacing = 1.5;
  s.long_range.total_charge = total_charge;
  auto& c = s.config;
  c.type_map = s.type_map;
  c.r_max = 3.5;
  c.num_features = 4;
  c.l_max = 1;
  c.num_layers = 2;
  c.correlation = 2;
  c.num_bessels = 4;
  c.radial_width = 8;
  c.radial_depth = 2;
  c.precision = precision;
  return s;
}

using Sample = mlip::test::LongRangeSample;
Sample sample(bool periodic, unsigned seed) { return mlip::test::long_range_sample(periodic, seed); }

/// The forward's input (docs/deploy.md "Interface") of the sample, pairs within `r_max`.
c10::Dict<std::string, torch::Tensor> forward_input(const Sample& s, double r_max, torch::Dtype dtype) {
  return mlip::test::deploy_input(s.frame, r_max, dtype);
}

c10::impl::GenericDict run_forward(torch::jit::Module& m, const c10::Dict<std::string, torch::Tensor>& in) {
  return m.forward({in}).toGenericDict();
}

/// The reference of the training path: autograd from independent leaves (the pair vectors, the
/// positions and the cell) through the saved model's atomic_energy and long-range methods, the
/// forces kept as a graph to be differentiated again.
Prediction reference(torch::jit::Module& m, const Sample& s, torch::Dtype dtype, double r_max, double total_charge) {
  const int64_t n = s.atoms.natoms;
  const auto pairs = mlip::models::pair_list(mlip::data::build_neighbor_list<double>(
      s.frame.pos.data(), int(n), s.frame.cell.empty() ? nullptr : s.frame.cell.data(), s.frame.pbc, r_max));
  const auto d = pairs.vector.to(dtype).detach().requires_grad_(true);
  const auto pos = torch::tensor(s.frame.pos, torch::kFloat64).reshape({n, 3}).requires_grad_(true);
  const bool periodic = !s.frame.cell.empty();
  const auto cell = (periodic ? torch::tensor(s.frame.cell, torch::kFloat64).reshape({3, 3}) : torch::zeros({3, 3}, torch::kFloat64))
                        .requires_grad_(true);
  const auto out = m.get_method("atomic_energy")({d, pairs.centre, pairs.neighbor, s.atoms.atype}).toTensor();
  const auto q = m.run_method("long_range_charges", out.select(1, 1).to(torch::kFloat64), total_charge).toTensor();
  const auto e_long = m.run_method("long_range_energy", q, pos, cell, periodic).toTensor();
  const auto total = out.select(1, 0).to(torch::kFloat64).sum() + e_long.sum();
  auto g = torch::autograd::grad({total}, {d, pos, cell}, {}, true, true, true);
  if (!g[2].defined()) g[2] = torch::zeros_like(cell);
  const auto forces = torch::zeros({n, 3}, g[0].options())
                          .index_add(0, pairs.centre, g[0])
                          .index_add(0, pairs.neighbor, -g[0])
                          .to(torch::kFloat64) -
                      g[1];
  const auto virial = -d.detach().to(torch::kFloat64).t().matmul(g[0].to(torch::kFloat64)) -
                      pos.detach().t().matmul(g[1]) - cell.detach().t().matmul(g[2]);
  return {total.unsqueeze(0), forces.to(dtype).unsqueeze(0), virial.to(dtype).unsqueeze(0), q.unsqueeze(0)};
}

template <typename T>
class EquivariantLongRange : public ::testing::Test {};
using Dtypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(EquivariantLongRange, Dtypes);

// The training path (cached geometry, charges from the energy function, E_long per frame) equals
// autograd through the saved model's methods: energy, forces, virial, charges and the gradient of
// a loss of all four (charge labels' term included) by every parameter, the charge readout's
// included; and the frozen forward gives
// the same energy, forces and virial.
TYPED_TEST(EquivariantLongRange, TheTrainingPathEqualsAutogradAndTheForward) {
  const bool is_double = std::is_same_v<TypeParam, double>;
  const auto dtype = is_double ? torch::kFloat64 : torch::kFloat32;
  const double tol = is_double ? 1e-10 : 2e-4;
  for (const bool periodic : {true, false}) {
    SCOPED_TRACE(periodic ? "periodic" : "cluster");
    const double total_charge = periodic ? 0.0 : -1.0;
    const auto s = settings(is_double ? "float64" : "float32", total_charge);
    auto model = mlip::models::create_model(s, mlip::models::ModelContext{});
    auto& module = model->module();
    module.run_method("set_scale_shift", torch::tensor({1.3, 0.7}, torch::kFloat64),
                      torch::tensor({-3.5, -1.2}, torch::kFloat64));
    const Sample f = sample(periodic, 21);
    auto gen = at::detail::createCPUGenerator(17);
    const auto grad_energy = at::randn({1}, gen, torch::kFloat64);
    const auto grad_forces = at::randn({1, f.atoms.natoms, 3}, gen, torch::kFloat64);
    const auto grad_virial = at::randn({1, 3, 3}, gen, torch::kFloat64);
    const auto grad_charges = at::randn({1, f.atoms.natoms}, gen, torch::kFloat64);

    const auto input = model->prepare_frame(f.sys, f.data);
    zero_grads(module);
    const Prediction fast = model->predict(f.atoms, {input.get()}, true);
    model->backward(grad_energy, grad_forces, grad_virial, grad_charges);
    const auto fast_grads = parameter_grads(module);

    zero_grads(module);
    const Prediction ref = reference(module, f, dtype, s.config.r_max, total_charge);
    mlip::models::backward_through_graph(ref, grad_energy, grad_forces, grad_virial, grad_charges);
    const auto ref_grads = parameter_grads(module);

    EXPECT_LT(relative(fast.energy, ref.energy), tol) << "energy";
    EXPECT_LT(relative(fast.forces, ref.forces), tol) << "forces";
    EXPECT_LT(relative(fast.virial, ref.virial), tol) << "virial";
    ASSERT_TRUE(fast.charges.defined());
    EXPECT_EQ(fast.charges.scalar_type(), torch::kFloat64);
    EXPECT_LT(relative(fast.charges, ref.charges), tol) << "charges";
    EXPECT_NEAR(fast.charges.sum().item<double>(), total_charge, 1e-9) << "the charges sum to the total charge";
    size_t k = 0;
    for (const auto& p : module.named_parameters()) {
      EXPECT_LT(relative(fast_grads[k], ref_grads[k]), tol) << "d loss / d " << p.name;
      if (p.name == "charge_readout") {
        EXPECT_GT(ref_grads[k].abs().max().item<double>(), 1e-6);
      }
      ++k;
    }

    const auto out = run_forward(module, forward_input(f, s.config.r_max, dtype));
    EXPECT_LT(relative(out.at("total_energy").toTensor().reshape({1}), ref.energy), tol) << "forward energy";
    EXPECT_LT(relative(out.at("forces").toTensor().unsqueeze(0), ref.forces), tol) << "forward forces";
    EXPECT_LT(relative(out.at("virial").toTensor(), ref.virial), tol) << "forward virial";
    const auto atomic = out.at("atomic_energy").toTensor().to(torch::kFloat64).sum();
    EXPECT_LT(relative(atomic.reshape({1}), ref.energy), tol) << "the atomic energies sum to the energy";
    const auto charges = out.at("charges").toTensor().to(torch::kFloat64);
    ASSERT_EQ(charges.sizes(), (std::vector<int64_t>{f.atoms.natoms, 1}));
    EXPECT_NEAR(charges.sum().item<double>(), total_charge, is_double ? 1e-12 : 1e-5);
    EXPECT_GT(charges.abs().max().item<double>(), 1e-4) << "charges not all zero";
  }
}

// The frozen forward's forces and virial are derivatives of its energy, through the charges too
// (central differences of the positions, and of a strain of positions and cell together); also
// with the ZBL repulsion beside the long-range term.
TEST(EquivariantLongRange, ForcesAndVirialAreDerivativesOfTheEnergy) {
  for (const auto& [periodic, zbl] : {std::pair{true, false}, {false, false}, {true, true}}) {
    SCOPED_TRACE(std::string(periodic ? "periodic" : "cluster") + (zbl ? ", with ZBL" : ""));
    auto s = settings("float64");
    if (zbl) s.pair_repulsion = {"zbl", 0.8, 1.6};
    auto model = mlip::models::create_model(s, mlip::models::ModelContext{});
    auto& module = model->module();
    // Charges large enough that E_long is a good part of the forces.
    module.run_method("set_scale_shift", torch::tensor({0.2, 0.2}, torch::kFloat64),
                      torch::tensor({0.0, 0.0}, torch::kFloat64));
    const Sample f = sample(periodic, 33);
    const double r_max = s.config.r_max;
    const auto out = run_forward(module, forward_input(f, r_max, torch::kFloat64));
    if (zbl) {  // the repulsion is there: the energy differs from the same model's without it
      auto plain = settings("float64");
      auto without = mlip::models::create_model(plain, mlip::models::ModelContext{});
      without->module().run_method("set_scale_shift", torch::tensor({0.2, 0.2}, torch::kFloat64),
                                   torch::tensor({0.0, 0.0}, torch::kFloat64));
      const double e_without =
          run_forward(without->module(), forward_input(f, r_max, torch::kFloat64)).at("total_energy").toTensor().item<double>();
      EXPECT_GT(std::abs(out.at("total_energy").toTensor().item<double>() - e_without), 1e-3);
    }
    mlip::test::expect_forces_and_virial_are_derivatives(module, f.frame, r_max);
  }
}

// Rotating (or reflecting) and translating the frame, cell and all, leaves the energy and the
// charges as they were and rotates the forces; the total charge comes from the input's total_charge when given.
TEST(EquivariantLongRange, RotationsTranslationsAndTheTotalCharge) {
  const auto s = settings("float64");
  auto model = mlip::models::create_model(s, mlip::models::ModelContext{});
  mlip::test::expect_long_range_invariances(model->module(), sample(true, 41).frame, s.config.r_max);
}

// What the model refuses, by name: a frame periodic along some cell vectors only (forward and
// training), an MD rank's nlocal, static shapes.
TEST(EquivariantLongRange, RefusalsNameTheirReason) {
  const auto s = settings("float64");
  auto model = mlip::models::create_model(s, mlip::models::ModelContext{});
  auto& module = model->module();
  const Sample f = sample(true, 41);
  auto slab = forward_input(f, s.config.r_max, torch::kFloat64);
  slab.insert_or_assign("pbc", torch::tensor({int64_t(1), int64_t(1), int64_t(0)}, torch::kInt64));
  try {
    run_forward(module, slab);
    ADD_FAILURE() << "a slab was evaluated";
  } catch (const std::exception& e) {  // TorchScript's assertion: torch::jit::JITException
    EXPECT_TRUE(mlip::test::contains(e.what(), "periodic along some cell vectors only")) << e.what();
  }
  auto ranked = forward_input(f, s.config.r_max, torch::kFloat64);
  ranked.insert("nlocal", torch::tensor(int64_t(8)));
  try {
    run_forward(module, ranked);
    ADD_FAILURE() << "nlocal was accepted";
  } catch (const std::exception& e) {
    EXPECT_TRUE(mlip::test::contains(e.what(), "nlocal")) << e.what();
  }
  Sample g = f;
  g.sys.pbc = {true, true, false};
  EXPECT_TRUE(mlip::test::contains(mlip::test::error_of([&] { model->prepare_frame(g.sys, g.data); }),
                                   "periodic along some cell vectors only"));
  // The hand-written inference for MD declares its charges and evaluates nothing without the
  // long-range term's coupling (md/long_range_term.h): refused, never dropped.
  const mlip::models::SettingsRecord record = mlip::models::inference_record(s, module);
  EXPECT_TRUE(record.has("long_range"));
  auto inference = mlip::models::find_inference("equivariant")->inference(record, module);
  EXPECT_TRUE(inference->inputs().charges);
  const std::vector<int64_t> types = {0, 1}, centre = {0, 1}, neighbour = {1, 0};
  const std::vector<double> vectors = {1.0, 0.0, 0.0, -1.0, 0.0, 0.0};
  mlip::models::AtomGraph graph;
  graph.nodes = graph.nlocal = 2;
  graph.types = types.data();
  graph.npairs = 2;
  graph.centre = centre.data();
  graph.neighbour = neighbour.data();
  graph.vectors = vectors.data();
  mlip::models::Request request;
  request.graph = &graph;
  EXPECT_TRUE(mlip::test::contains(mlip::test::error_of([&] { inference->evaluate(request); }),
                                   "the model has charges (model.long_range): the request needs the long-range term's "
                                   "coupling"));
  mlip::models::ModelContext context;
  context.static_shapes = true;
  EXPECT_TRUE(mlip::test::contains(mlip::test::error_of([&] { mlip::models::create_model(s, context); }),
                                   "training.cuda_graphs: false"));
}

}  // namespace
