// The equivariant model's training path (cached geometry, the message contraction, the energy's
// gradient by the basis and the harmonics; docs/equivariant.md "The training path") against
// autograd through the saved model's atomic_energy from the pair vectors: energies, forces,
// virials and the gradients of a loss of all three with respect to every parameter.
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <type_traits>

#include "data/system.h"
#include "models/equivariant/equivariant_model.h"
#include "gpu_code_on_the_cpu.h"
#include "models/kernels/device_kernels.h"
#include "models/kernels/host_tensor.h"
#include "models/pair_list.h"
#include "data/neighbor_list.h"
#include "model_test_util.h"
#include "test_util.h"

namespace {

using mlip::models::EquivariantSettings;
using mlip::models::Prediction;
using mlip::test::parameter_grads;
using mlip::test::relative;
using mlip::test::zero_grads;

struct Case {
  bool parity;
  bool pseudotensors;
  int64_t l_max, correlation;
  bool periodic;
  double box;  // edge of the random box, Å (below r_max: an atom sees its own images)
};

EquivariantSettings settings(const std::string& precision, const Case& k) {
  EquivariantSettings s;
  s.type = "equivariant";
  s.type_map = {"O", "H"};
  s.precision = precision;
  s.avg_num_neighbors = 6.0;
  s.seed = 3;
  auto& c = s.config;
  c.type_map = s.type_map;
  c.r_max = 3.5;
  c.num_features = 4;
  c.l_max = k.l_max;
  c.parity = k.parity;
  c.pseudotensors = k.pseudotensors;
  c.num_layers = 3;
  c.correlation = k.correlation;
  c.readout_every_layer = k.correlation == 2;
  c.num_bessels = 4;
  c.radial_width = 8;
  c.radial_depth = 2;
  c.precision = precision;
  return s;
}

/// The reference: autograd from the pair vectors through atomic_energy, the forces kept as a
/// graph and differentiated again (the model's training as it was before the training path).
Prediction reference(torch::jit::Module& m, const mlip::models::PairList& pairs, const torch::Tensor& atype,
                     torch::Dtype dtype, int64_t natoms) {
  const auto d = pairs.vector.to(dtype).detach().requires_grad_(true);
  const auto e = m.get_method("atomic_energy")({d, pairs.centre, pairs.neighbor, atype}).toTensor();
  const auto grad = torch::autograd::grad({e.sum()}, {d}, {}, true, true)[0];
  const auto forces =
      torch::zeros({natoms, 3}, grad.options()).index_add(0, pairs.centre, grad).index_add(0, pairs.neighbor, -grad);
  return {e.to(torch::kFloat64).sum().unsqueeze(0), forces.unsqueeze(0), (-d.detach().t().matmul(grad)).unsqueeze(0), {}};
}

/// A batch's prediction and d loss / d parameter for every parameter, loss = <grad_energy, E> +
/// <grad_forces, F> + <grad_virial, W>, from zeroed gradients.
struct Trained {
  Prediction prediction;
  std::vector<torch::Tensor> grads;
};

Trained predict_and_backward(mlip::models::Model& model, const mlip::models::SystemAtoms& atoms,
                             const std::vector<const mlip::models::FrameInput*>& batch,
                             const torch::Tensor& grad_energy, const torch::Tensor& grad_forces,
                             const torch::Tensor& grad_virial) {
  zero_grads(model.module());
  Trained out;
  out.prediction = model.predict(atoms, batch, true);
  model.backward(grad_energy, grad_forces, grad_virial, {});
  out.grads = parameter_grads(model.module());
  return out;
}

/// Energies, forces, virials and every parameter gradient of `got` within `tol` of `want`
/// (relative to the largest of each), the forces not all tiny; parameters named from `module`.
void expect_same_training(const Trained& got, const Trained& want, torch::jit::Module& module, double tol) {
  EXPECT_LT(relative(got.prediction.energy, want.prediction.energy), tol) << "energy";
  EXPECT_LT(relative(got.prediction.forces, want.prediction.forces), tol) << "forces";
  EXPECT_LT(relative(got.prediction.virial, want.prediction.virial), tol) << "virial";
  EXPECT_GT(want.prediction.forces.abs().max().item<double>(), 1e-3);
  ASSERT_EQ(got.grads.size(), want.grads.size());
  size_t k = 0;
  for (const auto& p : module.named_parameters()) {
    EXPECT_LT(relative(got.grads[k], want.grads[k]), tol) << "d loss / d " << p.name;
    ++k;
  }
}

/// `nframes` frames of the same `natoms` atoms (types and system from the first of them), with
/// other positions and boxes (so other edge counts), made by `model`.
struct FrameSet {
  mlip::data::System sys;
  mlip::models::SystemAtoms atoms;
  std::vector<std::unique_ptr<mlip::models::FrameInput>> inputs;
  std::vector<const mlip::models::FrameInput*> all() const {
    std::vector<const mlip::models::FrameInput*> out;
    for (const auto& in : inputs) out.push_back(in.get());
    return out;
  }
};

FrameSet frame_set(mlip::models::Model& model, const EquivariantSettings& s, const Case& k, int64_t natoms,
                   int64_t nframes) {
  FrameSet set;
  const auto first = mlip::test::random_frame(int(natoms), k.periodic, 5, k.box, {0.7, -0.4, 0.3}, 0.9, 0.4);
  set.sys.type_map = s.type_map;
  set.sys.types = first.types;
  set.sys.pbc = first.pbc;
  set.sys.nframes = nframes;
  set.atoms.natoms = natoms;
  set.atoms.types = first.types;
  set.atoms.atype = torch::tensor(std::vector<int64_t>(first.types.begin(), first.types.end()), torch::kInt64);
  for (int64_t f = 0; f < nframes; ++f) {
    const auto r = mlip::test::random_frame(int(natoms), k.periodic, unsigned(5 + 7 * f),
                                            k.box * (1.0 + 0.15 * double(f)), {0.7, -0.4, 0.3}, 0.9, 0.4);
    mlip::data::Frame frame;
    frame.coord = r.pos;
    frame.box = r.cell;
    set.inputs.push_back(model.prepare_frame(set.sys, frame));
  }
  return set;
}

template <typename T>
class EquivariantTrainingPath : public ::testing::Test {};
using Dtypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(EquivariantTrainingPath, Dtypes);

TYPED_TEST(EquivariantTrainingPath, EqualsAutogradThroughThePairVectors) {
  const bool is_double = std::is_same_v<TypeParam, double>;
  const std::string precision = is_double ? "float64" : "float32";
  const auto dtype = is_double ? torch::kFloat64 : torch::kFloat32;
  const double tol = is_double ? 1e-10 : 2e-4;
  const Case cases[] = {
      {true, true, 1, 1, true, 5.0},    // the table's model shape
      {false, true, 2, 1, false, 5.0},  // SO(3), l_max 2, a cluster
      {true, true, 2, 2, true, 5.0},    // product basis, readouts of every layer
      {true, true, 1, 3, true, 3.0},    // correlation 3; box below r_max: self-image pairs
      {true, false, 2, 3, true, 5.0},   // natural irreps only (as MACE), l_max 2, correlation 3
  };
  for (const Case& k : cases) {
    SCOPED_TRACE("parity " + std::to_string(k.parity) + (k.pseudotensors ? "" : " natural only") + ", l_max " + std::to_string(k.l_max) + ", correlation " +
                 std::to_string(k.correlation) + ", box " + std::to_string(k.box));
    const auto s = settings(precision, k);
    auto model = mlip::models::create_model(s, mlip::models::ModelContext{});
    auto& module = model->module();
    module.run_method("set_scale_shift", torch::tensor({1.3, 0.7}, torch::kFloat64),
                      torch::tensor({-93.5, -187.2}, torch::kFloat64));
    const auto f = mlip::test::random_frame(14, k.periodic, 11, k.box, {0.7, -0.4, 0.3}, 0.9, 0.4);
    mlip::data::System sys;
    sys.type_map = s.type_map;
    sys.types = f.types;
    sys.pbc = f.pbc;
    sys.nframes = 1;
    mlip::data::Frame frame;
    frame.coord = f.pos;
    frame.box = f.cell;
    mlip::models::SystemAtoms atoms;
    atoms.natoms = f.natoms();
    atoms.types = f.types;
    atoms.atype = torch::tensor(std::vector<int64_t>(f.types.begin(), f.types.end()), torch::kInt64);

    auto gen = at::detail::createCPUGenerator(17);
    const auto grad_energy = at::randn({1}, gen, torch::kFloat64);
    const auto grad_forces = at::randn({1, atoms.natoms, 3}, gen, torch::kFloat64);
    const auto grad_virial = at::randn({1, 3, 3}, gen, torch::kFloat64);

    const auto input = model->prepare_frame(sys, frame);
    zero_grads(module);
    const Prediction fast = model->predict(atoms, {input.get()}, true);
    model->backward(grad_energy, grad_forces, grad_virial, {});
    const auto fast_grads = parameter_grads(module);

    const auto pairs = mlip::models::pair_list(mlip::data::build_neighbor_list<double>(
        f.pos.data(), f.natoms(), f.cell.empty() ? nullptr : f.cell.data(), f.pbc, s.config.r_max));
    ASSERT_GT(pairs.npairs(), 0);
    zero_grads(module);
    const Prediction ref = reference(module, pairs, atoms.atype, dtype, atoms.natoms);
    mlip::models::backward_through_graph(ref, grad_energy, grad_forces, grad_virial, {});
    const auto ref_grads = parameter_grads(module);

    EXPECT_LT(std::abs(fast.energy.item<double>() - ref.energy.item<double>()) / std::abs(ref.energy.item<double>()),
              tol);
    EXPECT_LT(relative(fast.forces, ref.forces), tol) << "forces";
    EXPECT_LT(relative(fast.virial, ref.virial), tol) << "virial";
    ASSERT_EQ(fast_grads.size(), ref_grads.size());
    size_t k_param = 0;
    for (const auto& p : module.named_parameters()) {
      EXPECT_LT(relative(fast_grads[k_param], ref_grads[k_param]), tol) << "d loss / d " << p.name;
      ++k_param;
    }
    // The comparison can fail: the forces' weights reach the parameters.
    EXPECT_GT(ref.forces.abs().max().item<double>(), 1e-3);
  }
}

// A batch of frames is one call of the energy function (docs/equivariant.md "A batch in one
// call"): its energies, forces, virials and parameter gradients equal those of each frame alone
// (the gradients summed over the frames), for frames of different edge counts.
TYPED_TEST(EquivariantTrainingPath, ABatchEqualsItsFramesOneByOne) {
  const bool is_double = std::is_same_v<TypeParam, double>;
  const std::string precision = is_double ? "float64" : "float32";
  const double tol = is_double ? 1e-12 : 1e-5;
  for (const Case& k : {Case{true, true, 1, 1, true, 5.0}, Case{true, true, 1, 3, true, 4.0}}) {
    SCOPED_TRACE("l_max " + std::to_string(k.l_max) + ", correlation " + std::to_string(k.correlation));
    const auto s = settings(precision, k);
    auto model = mlip::models::create_model(s, mlip::models::ModelContext{});
    auto& module = model->module();
    module.run_method("set_scale_shift", torch::tensor({1.3, 0.7}, torch::kFloat64),
                      torch::tensor({-93.5, -187.2}, torch::kFloat64));
    const int64_t natoms = 12, nframes = 3;
    const FrameSet set = frame_set(*model, s, k, natoms, nframes);
    const auto& atoms = set.atoms;
    ASSERT_NE(set.inputs[0]->bytes(), set.inputs[2]->bytes()) << "the frames should differ in their edges";
    const std::vector<const mlip::models::FrameInput*> batch = set.all();

    auto gen = at::detail::createCPUGenerator(23);
    const auto grad_energy = at::randn({nframes}, gen, torch::kFloat64);
    const auto grad_forces = at::randn({nframes, natoms, 3}, gen, torch::kFloat64);
    const auto grad_virial = at::randn({nframes, 3, 3}, gen, torch::kFloat64);

    zero_grads(module);
    const Prediction together = model->predict(atoms, batch, true);
    model->backward(grad_energy, grad_forces, grad_virial, {});
    const auto together_grads = parameter_grads(module);
    ASSERT_EQ(together.energy.sizes(), (std::vector<int64_t>{nframes}));
    ASSERT_EQ(together.forces.sizes(), (std::vector<int64_t>{nframes, natoms, 3}));
    ASSERT_EQ(together.virial.sizes(), (std::vector<int64_t>{nframes, 3, 3}));

    zero_grads(module);
    std::vector<Prediction> alone;
    for (int64_t f = 0; f < nframes; ++f) {
      alone.push_back(model->predict(atoms, {batch[f]}, true));
      model->backward(grad_energy.slice(0, f, f + 1), grad_forces.slice(0, f, f + 1), grad_virial.slice(0, f, f + 1), {});
    }
    const auto alone_grads = parameter_grads(module);  // accumulated over the frames
    for (int64_t f = 0; f < nframes; ++f) {
      SCOPED_TRACE("frame " + std::to_string(f));
      EXPECT_LT(relative(together.energy[f], alone[f].energy[0]), tol);
      EXPECT_LT(relative(together.forces[f], alone[f].forces[0]), tol) << "forces";
      EXPECT_LT(relative(together.virial[f], alone[f].virial[0]), tol) << "virial";
      EXPECT_GT(alone[f].forces.abs().max().item<double>(), 1e-3);
    }
    size_t k_param = 0;
    for (const auto& p : module.named_parameters()) {
      EXPECT_LT(relative(together_grads[k_param], alone_grads[k_param]), tol) << "d loss / d " << p.name;
      ++k_param;
    }
  }
}


// Padded to static shapes (docs/device.md "Static shapes": edges and pairs to bucket sizes, the
// padded edges joining the last atom to itself with zero geometry): the energies, forces,
// virials and parameter gradients of a batch equal those of the same model without padding,
// for one frame and for a batch of frames of different edge counts.
TYPED_TEST(EquivariantTrainingPath, PaddedToBucketsEqualsUnpadded) {
  const bool is_double = std::is_same_v<TypeParam, double>;
  const std::string precision = is_double ? "float64" : "float32";
  const double tol = is_double ? 1e-12 : 1e-6;
  for (const Case& k : {Case{true, true, 1, 1, true, 5.0}, Case{true, true, 1, 3, true, 4.0},
                        Case{false, true, 2, 2, false, 5.0}}) {
    SCOPED_TRACE("parity " + std::to_string(k.parity) + ", l_max " + std::to_string(k.l_max) + ", correlation " +
                 std::to_string(k.correlation));
    const auto s = settings(precision, k);
    mlip::models::ModelContext padded_context;
    padded_context.static_shapes = true;
    auto plain = mlip::models::create_model(s, mlip::models::ModelContext{});
    auto padded = mlip::models::create_model(s, padded_context);
    for (auto* m : {plain.get(), padded.get()})
      m->module().run_method("set_scale_shift", torch::tensor({1.3, 0.7}, torch::kFloat64),
                             torch::tensor({-93.5, -187.2}, torch::kFloat64));
    const int64_t natoms = 12, nframes = 3;
    const FrameSet set = frame_set(*plain, s, k, natoms, nframes);
    const auto& atoms = set.atoms;
    const std::vector<const mlip::models::FrameInput*> all = set.all();
    EXPECT_TRUE(plain->shape_key(atoms, all).empty()) << "no static shapes without the context's flag";

    for (const auto& batch : {std::vector<const mlip::models::FrameInput*>{all[1]}, all}) {
      const int64_t b = int64_t(batch.size());
      SCOPED_TRACE(std::to_string(b) + " frame(s)");
      const auto key = padded->shape_key(atoms, batch);
      ASSERT_EQ(key.size(), 4u);
      EXPECT_EQ(key[0], b);
      EXPECT_EQ(key[1], natoms);
      auto gen = at::detail::createCPUGenerator(29);
      const auto grad_energy = at::randn({b}, gen, torch::kFloat64);
      const auto grad_forces = at::randn({b, natoms, 3}, gen, torch::kFloat64);
      const auto grad_virial = at::randn({b, 3, 3}, gen, torch::kFloat64);

      const Trained want = predict_and_backward(*plain, atoms, batch, grad_energy, grad_forces, grad_virial);
      const Trained got = predict_and_backward(*padded, atoms, batch, grad_energy, grad_forces, grad_virial);
      ASSERT_EQ(got.prediction.energy.sizes(), want.prediction.energy.sizes());
      ASSERT_EQ(got.prediction.forces.sizes(), want.prediction.forces.sizes());
      ASSERT_EQ(got.prediction.virial.sizes(), want.prediction.virial.sizes());
      expect_same_training(got, want, plain->module(), tol);
    }
  }
}

/// Turns the host kernels off for its lifetime (models/kernels/host_tensor.h).
using mlip::test::GpuCodeOnTheCpu;

TYPED_TEST(EquivariantTrainingPath, WithoutHostKernelsEqualsTheHostKernels) {
  // The LibTorch operations a GPU runs (every custom node's generic form, the geometry by
  // autograd), on the CPU, against the CPU's hand-written loops: energies, forces, virials and
  // every parameter gradient of a batch of three frames and of one; then the same with mlip's
  // device kernels on (the message contraction by the CUDA kernels' host twin).
  const bool is_double = std::is_same_v<TypeParam, double>;
  const std::string precision = is_double ? "float64" : "float32";
  const double tol = is_double ? 1e-10 : 2e-5;
  for (const Case& k : {Case{true, true, 1, 1, true, 5.0}, Case{true, true, 1, 3, true, 4.0},
                        Case{false, true, 2, 2, false, 5.0}}) {
    SCOPED_TRACE("parity " + std::to_string(k.parity) + ", l_max " + std::to_string(k.l_max) + ", correlation " +
                 std::to_string(k.correlation));
    const auto s = settings(precision, k);
    auto model = mlip::models::create_model(s, mlip::models::ModelContext{});
    model->module().run_method("set_scale_shift", torch::tensor({1.3, 0.7}, torch::kFloat64),
                               torch::tensor({-93.5, -187.2}, torch::kFloat64));
    const int64_t natoms = 12, nframes = 3;
    const FrameSet host_set = frame_set(*model, s, k, natoms, nframes);
    std::unique_ptr<FrameSet> generic_set;
    {
      GpuCodeOnTheCpu gpu_code;
      generic_set = std::make_unique<FrameSet>(frame_set(*model, s, k, natoms, nframes));
    }
    for (const bool whole : {false, true}) {
      SCOPED_TRACE(whole ? "3 frames" : "1 frame");
      auto pick = [&](const FrameSet& set) {
        const auto all = set.all();
        return whole ? all : std::vector<const mlip::models::FrameInput*>{all[1]};
      };
      const int64_t b = whole ? nframes : 1;
      auto gen = at::detail::createCPUGenerator(31);
      const auto grad_energy = at::randn({b}, gen, torch::kFloat64);
      const auto grad_forces = at::randn({b, natoms, 3}, gen, torch::kFloat64);
      const auto grad_virial = at::randn({b, 3, 3}, gen, torch::kFloat64);

      const Trained want =
          predict_and_backward(*model, host_set.atoms, pick(host_set), grad_energy, grad_forces, grad_virial);
      for (const bool device_kernels : {false, true}) {
        SCOPED_TRACE(device_kernels ? "device kernels' twins" : "LibTorch operations");
        Trained got;
        {
          GpuCodeOnTheCpu gpu_code(device_kernels);
          got = predict_and_backward(*model, generic_set->atoms, pick(*generic_set), grad_energy, grad_forces,
                                     grad_virial);
        }
        expect_same_training(got, want, model->module(), tol);
      }
      size_t moved = 0;
      for (const auto& g : want.grads) moved += g.abs().max().item<double>() > 0.0;
      EXPECT_GT(2 * moved, want.grads.size()) << "most parameters have a gradient";
    }
  }
}

TEST(HostKernels, TheEnvironmentDecidesUnlessSet) {
  EXPECT_TRUE(mlip::models::host_kernels_enabled());  // the tests run without MLIP_HOST_KERNELS
  const auto host = torch::zeros({2}, torch::kFloat64);
  EXPECT_TRUE(mlip::models::on_host(host));
  {
    GpuCodeOnTheCpu gpu_code;
    EXPECT_FALSE(mlip::models::host_kernels_enabled());
    EXPECT_FALSE(mlip::models::on_host(host));
  }
  EXPECT_TRUE(mlip::models::on_host(host));
  EXPECT_FALSE(mlip::models::on_host(torch::zeros({2}, torch::kInt64)));
  // The device kernels are off unless asked for (the tests run without MLIP_DEVICE_KERNELS).
  EXPECT_FALSE(mlip::models::device_kernels_enabled());
  {
    GpuCodeOnTheCpu gpu_code(true);
    EXPECT_TRUE(mlip::models::device_kernels_enabled());
  }
  EXPECT_FALSE(mlip::models::device_kernels_enabled());
}

}  // namespace
