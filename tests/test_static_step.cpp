// The training step from static buffers (src/train/static_step.h), on the CPU, where it runs
// without capture from the same buffers a CUDA graph would replay: step after step it equals
// the usual step (predict, the loss, its gradient, the model's backward, Adam's tensor
// operations with the moving average) in the parameters, the averages and the error sums, for
// both models, float64 and float32, with batches of two shapes interleaved, a learning rate and
// loss prefactors that change every step, and a non-finite loss recorded at its step; on a GPU
// (label gpu) the same with each shape's step captured as a CUDA graph and replayed. The step in
// two parts (several ranks: the all-reduce between the gradients and the update) likewise, its
// synchronise called once a step with the finished gradients and the weights not yet updated.
// On a GPU, the graphs of several shapes share one memory pool.
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/cuda.h>

#include <cmath>
#include <iostream>
#include <limits>
#include <type_traits>
#include <utility>

#include "data/load.h"
#include "models/registry.h"
#include "test_util.h"
#include "train/adam_step.h"
#include "train/batch_loss.h"
#include "train/config.h"
#include "train/device.h"
#include "train/ema.h"
#include "train/host_wait_check.h"
#include "train/static_step.h"

namespace {

using mlip::test::TempDir;

std::string input_of(const std::string& model, const std::string& precision) {
  const std::string head = "model:\n  type_map: [O, H]\n";
  const std::string tail = "training:\n  training_data: {systems: [sys]}\n  numb_steps: 1\n";
  if (model == "se_e2_a")
    return head +
           "  descriptor: {type: se_e2_a, sel: [8, 16], rcut: 4.0, rcut_smth: 1.0, neuron: [4, 8], axis_neuron: 4, "
           "seed: 3, precision: " +
           precision + "}\n  fitting_net: {neuron: [8, 8], seed: 3, precision: " + precision + "}\n" + tail;
  return head +
         "  type: equivariant\n  r_max: 3.5\n  num_features: 4\n  l_max: 1\n  num_layers: 2\n"
         "  correlation: 3\n  num_bessels: 4\n  radial_width: 8\n  avg_num_neighbors: 6\n  seed: 3\n"
         "  precision: " +
         precision + "\n" + tail;
}

/// A model of the input, built with or without static shapes, and its optimiser and average.
struct Trained {
  std::unique_ptr<mlip::models::Model> model;
  std::vector<torch::Tensor> params;
  std::unique_ptr<torch::optim::Adam> adam;
  std::unique_ptr<mlip::train::Ema> ema;
  Trained(const mlip::train::TrainConfig& config, const std::vector<mlip::data::System>& systems, bool static_shapes,
          torch::Device device = torch::kCPU) {
    mlip::models::ModelContext context;
    context.device = device;
    context.training_systems = &systems;
    context.static_shapes = static_shapes;
    model = mlip::models::create_model(*config.model, context);
    if (config.model->type == "equivariant")
      model->module().run_method("set_scale_shift", torch::tensor({1.3, 0.7}, torch::kFloat64).to(device),
                                 torch::tensor({-93.5, -187.2}, torch::kFloat64).to(device));
    for (const auto& p : model->module().parameters()) params.push_back(p);
    adam = std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(1e-3).betas({0.9, 0.999}));
    ema = std::make_unique<mlip::train::Ema>(params, 0.9);
  }
  /// The usual training step on `batch` (predict, the loss with `prefactors` [3] float64, its
  /// gradient, the model's backward, Adam with the average); returns the error sums [4].
  torch::Tensor step(const mlip::models::SystemAtoms& atoms, const std::vector<const mlip::models::FrameInput*>& batch,
                     const mlip::train::BatchLabels& labels, const torch::Tensor& prefactors) {
    for (auto& p : params)
      if (p.grad().defined()) p.mutable_grad().zero_();
    const auto out = model->predict(atoms, batch, true);
    const mlip::models::Prediction leaves{out.energy.detach().requires_grad_(true),
                                          out.forces.detach().requires_grad_(true),
                                          out.virial.detach().requires_grad_(true), {}};
    const auto loss = mlip::train::batch_loss(leaves, labels, prefactors, atoms.natoms);
    const auto g =
        torch::autograd::grad({loss.loss}, {leaves.energy, leaves.forces, leaves.virial}, {}, false, false, true);
    model->backward(g[0], g[1], g[2], {});
    mlip::train::adam_step(*adam, ema.get(), true);
    return loss.sums;
  }
};

/// The tests' system (six frames of `oxygens` O and `hydrogens` H atoms, in a folder of its own)
/// loaded, its atoms on `device`, and the training input of `model` with `precision`.
struct TestSystem {
  TempDir dir;
  std::vector<mlip::data::System> systems;
  mlip::models::SystemAtoms atoms;
  mlip::train::TrainConfig config;
  TestSystem(const std::string& model, const std::string& precision, torch::Device device, int oxygens = 4,
             int hydrogens = 8) {
    mlip::test::write_system(dir / "sys", oxygens, hydrogens, 6, 11);
    std::vector<std::string> type_map{"O", "H"};
    systems = mlip::data::load_systems({dir / "sys"}, type_map, "", mlip::data::Loading::kStreamed);
    const auto& sys = systems[0];
    atoms.natoms = sys.natoms();
    atoms.types = sys.types;
    atoms.atype = torch::tensor(std::vector<int64_t>(sys.types.begin(), sys.types.end()), torch::kInt64).to(device);
    config = mlip::train::parse_train_config(input_of(model, precision), "test", dir.path());
  }
};

/// A batch of the frames `picked` (their prepared inputs) and its labels on `device`: the
/// frames' energies and forces, weights 1.
std::pair<std::vector<const mlip::models::FrameInput*>, mlip::train::BatchLabels> batch_of(
    const std::vector<int64_t>& picked, const std::vector<std::unique_ptr<mlip::models::FrameInput>>& inputs,
    const std::vector<mlip::data::Frame>& frames, torch::Device device) {
  std::vector<const mlip::models::FrameInput*> batch;
  std::vector<torch::Tensor> energy, forces;
  for (int64_t f : picked) {
    batch.push_back(inputs[size_t(f)].get());
    energy.push_back(torch::tensor(frames[size_t(f)].energy, torch::kFloat64));
    forces.push_back(torch::tensor(frames[size_t(f)].force, torch::kFloat64).reshape({-1, 3}));
  }
  mlip::train::BatchLabels labels;
  labels.energy = torch::cat(energy).to(device);
  labels.forces = torch::stack(forces).to(device);
  labels.weights = torch::ones({int64_t(picked.size())}, torch::kFloat64).to(device);
  return {batch, labels};
}

double relative(const torch::Tensor& a, const torch::Tensor& b) {
  const double scale = b.to(torch::kFloat64).abs().max().item<double>();
  return (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>() / (scale > 0 ? scale : 1.0);
}

/// Trains `model` (its input in `precision`) for ten steps twice, the usual way and through a
/// StaticStep on `device` (capturing where `capture` and it can), on batches of two frames and
/// of one, and compares the error sums, the parameters and the averages after every step within
/// `tol` (with capture: the two-frame shape captured at step 4, the one-frame shape at step 9,
/// their replays interleaved); then records a non-finite loss (a replay). Returns the StaticStep's replays (0 without capture).
/// `two_parts`: the step with a synchronise, as two ranks with the same batch would all-reduce:
/// the gradients' mean is this rank's, the error sums double. `check_waits` (CUDA): from step 5
/// on (the two-frame shape captured at step 4) StaticStep::run, its packing of the batch, its
/// numbers and the replay included, must not make the host wait for the device (HostWaitCheck:
/// such an operation throws, and the test fails naming it).
int64_t train_both_ways(const std::string& model, const std::string& precision, torch::Device device, bool capture,
                        double tol, bool two_parts = false, bool check_waits = false) {
  TestSystem test(model, precision, device);
  const auto& systems = test.systems;
  const auto& sys = systems[0];
  const auto& atoms = test.atoms;
  const auto& config = test.config;
  // The usual step: se_e2_a's device-generic path (the one with static shapes), the equivariant
  // model without padding.
  Trained usual(config, systems, model == "se_e2_a", device);
  Trained fixed(config, systems, true, device);
  // The synchronise of two ranks with the same batch; it checks what it is handed: the step's
  // gradients (the usual step's, which ran first), the weights before the update.
  int synchronised = 0;
  bool checked = true;
  std::vector<torch::Tensor> weights_before;
  mlip::train::StaticStep::Synchronise synchronise;
  if (two_parts)
    synchronise = [&](torch::Tensor& sums) {
      ++synchronised;
      for (size_t k = 0; checked && k < fixed.params.size(); ++k) {
        EXPECT_LT(relative(fixed.params[k].grad(), usual.params[k].grad()), tol) << "gradient " << k;
        EXPECT_TRUE(torch::equal(fixed.params[k], weights_before[k])) << "parameter " << k << " updated before";
      }
      sums.mul_(2.0);
    };
  mlip::train::StaticStep step(*fixed.model, *fixed.adam, fixed.ema.get(), fixed.params, device, capture, &std::cout, 2,
                               synchronise);
  if (device.is_cpu()) {
    EXPECT_NE(step.capture_status().find("not captured: "), std::string::npos) << step.capture_status();
  }

  std::vector<std::unique_ptr<mlip::models::FrameInput>> inputs;
  std::vector<mlip::data::Frame> frames;
  for (int64_t f = 0; f < sys.nframes; ++f) {
    frames.push_back(sys.frame(f));
    inputs.push_back(usual.model->prepare_frame(sys, frames.back()));
  }
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64).device(device);
  for (int64_t s = 1; s <= 10; ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    // Batches of two frames and of one, interleaved (two shapes; the equivariant model's padded
    // sizes may differ within a shape's frames).
    std::vector<int64_t> picked = s % 3 == 0 ? std::vector<int64_t>{s % 6} : std::vector<int64_t>{s % 6, (s + 2) % 6};
    auto [batch, labels] = batch_of(picked, inputs, frames, device);
    auto weights = torch::full({int64_t(picked.size())}, 1.0, torch::kFloat64);
    weights[0] = 0.5 + 0.1 * double(s);
    labels.weights = weights.to(device);
    const double lr = 2e-3 * std::pow(0.8, double(s)), pe = 0.02 * double(s), pf = 100.0 / double(s), pv = 0.0;
    for (auto* t : {&usual, &fixed})
      static_cast<torch::optim::AdamOptions&>(t->adam->param_groups()[0].options()).lr(lr);

    const torch::Tensor usual_sums = usual.step(atoms, batch, labels, torch::tensor({pe, pf, pv}, f64));

    weights_before.clear();
    for (const auto& p : fixed.params) weights_before.push_back(p.detach().clone());
    torch::Tensor sums;
    {
      mlip::train::HostWaitCheck no_waits(check_waits && s >= 5);
      sums = step.run(atoms, batch, labels, pe, pf, pv, s);
    }
    EXPECT_LT(relative(sums, two_parts ? 2.0 * usual_sums : usual_sums), tol) << "error sums";
    EXPECT_EQ(synchronised, two_parts ? s : 0) << "synchronise once a step";
    for (size_t k = 0; k < usual.params.size(); ++k) {
      EXPECT_LT(relative(fixed.params[k], usual.params[k]), tol) << "parameter " << k;
      EXPECT_LT(relative(fixed.ema->averages()[k], usual.ema->averages()[k]), tol) << "average " << k;
    }
  }
  EXPECT_EQ(step.first_bad_step().item<int64_t>(), std::numeric_limits<int64_t>::max());
  // The weights moved.
  Trained fresh(config, systems, true, device);
  double moved = 0;
  for (size_t k = 0; k < fresh.params.size(); ++k) moved = std::max(moved, relative(fixed.params[k], fresh.params[k]));
  EXPECT_GT(moved, 1e-4);

  // A NaN label makes the loss non-finite: recorded at its step, read by the trainer later.
  mlip::train::BatchLabels bad;
  bad.energy = torch::full({1}, std::nan(""), f64);
  bad.forces = torch::zeros({1, atoms.natoms, 3}, f64);
  bad.weights = torch::ones({1}, f64);
  weights_before.clear();
  for (const auto& p : fixed.params) weights_before.push_back(p.detach().clone());
  checked = false;  // no usual step to compare with
  step.run(atoms, {inputs[0].get()}, bad, 1.0, 1.0, 0.0, 11);
  EXPECT_EQ(step.first_bad_step().item<int64_t>(), 11);
  if (two_parts) {
    EXPECT_EQ(step.captures(), capture && device.is_cuda() ? 2 * 2 : 0) << "two graphs per shape";
  }
  return step.replays();
}

template <typename T>
class StaticStepTest : public ::testing::Test {};
using Dtypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(StaticStepTest, Dtypes);

TYPED_TEST(StaticStepTest, EqualsTheUsualStepStepAfterStep) {
  const bool is_double = std::is_same_v<TypeParam, double>;
  for (const std::string model : {"se_e2_a", "equivariant"}) {
    SCOPED_TRACE(model);
    EXPECT_EQ(train_both_ways(model, is_double ? "float64" : "float32", torch::kCPU, true, is_double ? 1e-11 : 2e-5), 0)
        << "nothing is captured on the CPU";
  }
}

TYPED_TEST(StaticStepTest, InTwoPartsWithTheAllReduceBetweenEqualsTheUsualStep) {
  const bool is_double = std::is_same_v<TypeParam, double>;
  for (const std::string model : {"se_e2_a", "equivariant"}) {
    SCOPED_TRACE(model);
    EXPECT_EQ(
        train_both_ways(model, is_double ? "float64" : "float32", torch::kCPU, true, is_double ? 1e-11 : 2e-5, true),
        0);
  }
}

// On a GPU (label gpu): each shape's step is captured as a CUDA graph after its warm-up and
// replayed, and still equals the usual step (atomics in the scatter-adds: round-off only).
TYPED_TEST(StaticStepTest, CapturedOnCudaEqualsTheUsualStep) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible: the captured step is not checked here";
  const bool is_double = std::is_same_v<TypeParam, double>;
  for (const std::string model : {"se_e2_a", "equivariant"}) {
    SCOPED_TRACE(model);
    for (const bool two_parts : {false, true}) {
      SCOPED_TRACE(two_parts ? "in two parts" : "in one part");
      EXPECT_GT(train_both_ways(model, is_double ? "float64" : "float32", torch::Device(torch::kCUDA, 0), true,
                                is_double ? 1e-10 : 1e-4, two_parts),
                0)
          << "some steps were replayed";
    }
  }
}

// On a GPU (label gpu): once captured, a step asks nothing of the device that makes the host wait
// (the batch's index tables, the labels' weights and the step's numbers are copied through
// page-locked memory), so the host prepares the next step while the device runs this one.
TYPED_TEST(StaticStepTest, CapturedOnCudaMakesTheHostWaitForNothing) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible: the host's waits are not checked here";
  ASSERT_TRUE(mlip::train::HostWaitCheck::available());
  const bool is_double = std::is_same_v<TypeParam, double>;
  for (const std::string model : {"se_e2_a", "equivariant"}) {
    SCOPED_TRACE(model);
    EXPECT_GT(train_both_ways(model, is_double ? "float64" : "float32", torch::Device(torch::kCUDA, 0), true,
                              is_double ? 1e-10 : 1e-4, false, true),
              0);
  }
}

/// Bytes the caching allocator holds on `device` (captured graphs' pools included) after each
/// of four batch shapes, largest first, has run its two warm-up steps and been captured and
/// replayed once; [0] before the first.
std::vector<double> reserved_after_each_shape(const std::string& model, const std::string& precision,
                                              torch::Device device) {
  TestSystem test(model, precision, device);
  const auto& sys = test.systems[0];
  const auto& atoms = test.atoms;
  Trained fixed(test.config, test.systems, true, device);
  mlip::train::StaticStep step(*fixed.model, *fixed.adam, fixed.ema.get(), fixed.params, device, true, &std::cout, 2);
  std::vector<std::unique_ptr<mlip::models::FrameInput>> inputs;
  std::vector<mlip::data::Frame> frames;
  for (int64_t f = 0; f < sys.nframes; ++f) {
    frames.push_back(sys.frame(f));
    inputs.push_back(fixed.model->prepare_frame(sys, frames.back()));
  }
  std::vector<double> reserved{mlip::train::reserved_memory_bytes(device)};
  int64_t s = 0;
  for (const int64_t n : {4, 3, 2, 1}) {
    std::vector<int64_t> picked;  // the first n frames
    for (int64_t f = 0; f < n; ++f) picked.push_back(f);
    const auto [batch, labels] = batch_of(picked, inputs, frames, device);
    for (int k = 0; k < 3; ++k) step.run(atoms, batch, labels, 0.1, 10.0, 0.0, ++s);
    torch::cuda::synchronize();
    reserved.push_back(mlip::train::reserved_memory_bytes(device));
  }
  EXPECT_EQ(step.captures(), 4) << "one graph per shape";
  EXPECT_EQ(step.replays(), 4) << "each shape's third step replayed";
  return reserved;
}

// On a GPU (label gpu): the graphs of all shapes are captured into one memory pool, so that the
// memory of N shapes is about the largest shape's, not the sum of N. The largest shape comes
// first; the three smaller ones then fit in what its graph's temporaries left free. A pool per
// graph would add at least one new segment (2 MiB, the caching allocator's smallest) for each.
TYPED_TEST(StaticStepTest, CapturedShapesShareOneMemoryPool) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible: the graphs' memory is not checked here";
  const bool is_double = std::is_same_v<TypeParam, double>;
  for (const std::string model : {"se_e2_a", "equivariant"}) {
    SCOPED_TRACE(model);
    const auto reserved =
        reserved_after_each_shape(model, is_double ? "float64" : "float32", torch::Device(torch::kCUDA, 0));
    const double mib = 1024.0 * 1024.0;
    const double first = (reserved[1] - reserved[0]) / mib, later = (reserved[4] - reserved[1]) / mib;
    std::cout << model << ": reserved " << first << " MiB for the largest shape, " << later
              << " MiB more for the three smaller ones\n";
    EXPECT_GT(first, 0.0);
    EXPECT_LT(later, 4.0) << "three more graphs, each with a pool of its own, would hold at least 6 MiB";
  }
}

// Two systems of 12 atoms, 4 O + 8 H and 6 O + 6 H, in batches of two frames: se_e2_a's packed
// batch holds each type's atoms, so their shape keys differ; the equivariant model's holds the
// types as data, so one key (and one graph) may serve both. Either way StaticStep gives each
// batch buffers of its shapes and computes what the usual step does.
TEST(StaticStep, SystemsOfOneSizeWithOtherTypesFitTheirBuffers) {
  for (const std::string model : {"se_e2_a", "equivariant"}) {
    SCOPED_TRACE(model);
    TestSystem first(model, "float64", torch::kCPU, 4, 8), second(model, "float64", torch::kCPU, 6, 6);
    Trained usual(first.config, first.systems, model == "se_e2_a"), fixed(first.config, first.systems, true);
    mlip::train::StaticStep step(*fixed.model, *fixed.adam, fixed.ema.get(), fixed.params, torch::kCPU, true);
    std::vector<std::vector<int64_t>> keys;
    int64_t s = 0;
    for (int round = 0; round < 2; ++round) {
      for (TestSystem* test : {&first, &second}) {
        const auto& sys = test->systems[0];
        std::vector<std::unique_ptr<mlip::models::FrameInput>> inputs;
        std::vector<mlip::data::Frame> frames;
        for (int64_t f = 0; f < 2; ++f) {
          frames.push_back(sys.frame(f));
          inputs.push_back(fixed.model->prepare_frame(sys, frames.back()));
        }
        const auto [batch, labels] = batch_of({0, 1}, inputs, frames, torch::kCPU);
        if (round == 0) keys.push_back(fixed.model->shape_key(test->atoms, batch));
        const auto sums = step.run(test->atoms, batch, labels, 0.5, 10.0, 0.0, ++s);
        // The usual step on the same batch (its own copy of the weights, which stay equal).
        const auto usual_sums =
            usual.step(test->atoms, batch, labels, torch::tensor({0.5, 10.0, 0.0}, torch::kFloat64));
        EXPECT_LT(relative(sums, usual_sums), 1e-11) << "step " << s;
        for (size_t k = 0; k < usual.params.size(); ++k)
          EXPECT_LT(relative(fixed.params[k], usual.params[k]), 1e-11) << "step " << s << ", parameter " << k;
      }
    }
    ASSERT_EQ(keys.size(), 2u);
    if (model == "se_e2_a") {
      EXPECT_NE(keys[0], keys[1]) << "the types' atoms are part of se_e2_a's shapes";
    }
  }
}

TEST(StaticStep, AModelWithoutStaticShapesIsAnError) {
  TempDir dir;
  mlip::test::write_system(dir / "sys", 2, 4, 2, 5);
  std::vector<std::string> type_map{"O", "H"};
  const auto systems = mlip::data::load_systems({dir / "sys"}, type_map, "", mlip::data::Loading::kStreamed);
  const auto config = mlip::train::parse_train_config(input_of("equivariant", "float64"), "test", dir.path());
  Trained plain(config, systems, false);
  mlip::train::StaticStep step(*plain.model, *plain.adam, plain.ema.get(), plain.params, torch::kCPU, false);
  const auto input = plain.model->prepare_frame(systems[0], systems[0].frame(0));
  mlip::models::SystemAtoms atoms;
  atoms.natoms = systems[0].natoms();
  atoms.types = systems[0].types;
  atoms.atype = torch::tensor(std::vector<int64_t>(atoms.types.begin(), atoms.types.end()), torch::kInt64);
  mlip::train::BatchLabels labels{torch::zeros({1}, torch::kFloat64),
                                  torch::zeros({1, atoms.natoms, 3}, torch::kFloat64),
                                  {},
                                  torch::ones({1}, torch::kFloat64), {}};
  const std::string message = mlip::test::error_of([&] { step.run(atoms, {input.get()}, labels, 1.0, 1.0, 0.0, 1); });
  EXPECT_NE(message.find("gives no static shapes"), std::string::npos) << message;
}

}  // namespace
