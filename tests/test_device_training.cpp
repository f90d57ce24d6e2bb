// Training on a device against training on the CPU (docs/device.md). The CUDA cases are
// labelled gpu and skip with a message where no CUDA device is visible; the CPU cases (the
// device-generic se_e2_a path against the hand-written one, checkpoints in host memory) run
// everywhere.
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/script.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "test_util.h"
#include "train/config.h"
#include "train/trainer.h"

namespace {

using mlip::test::TempDir;
using mlip::test::write_system;
using mlip::test::write_text;

const char* kSeA =
    "model:\n"
    "  type_map: [O, H]\n"
    "  descriptor: {sel: [8, 16], rcut: 4.0, rcut_smth: 1.0, neuron: [4, 8], axis_neuron: 4, seed: 3}\n"
    "  fitting_net: {neuron: [8, 8], seed: 4}\n";
const char* kEquivariant =
    "model: {type: equivariant, type_map: [O, H], r_max: 3.5, num_features: 4, l_max: 1, num_layers: 2,\n"
    "        radial_width: 8, num_bessels: 4, seed: 3}\n";

/// Trains `steps` steps of `model` on two small systems in `dir`/<name>, on `device`, with a
/// checkpoint every 10 steps; returns the module's parameters of the last checkpoint (host).
std::vector<torch::Tensor> train(const TempDir& dir, const std::string& name, const std::string& model, int steps,
                                 const std::string& device, const std::string& restart = "") {
  write_text(dir / (name + ".yaml"),
             model +
                 "learning_rate: {start_lr: 0.005, stop_lr: 1.0e-4, decay_steps: 5}\n"
                 "loss: {start_pref_e: 0.02, limit_pref_e: 1, start_pref_f: 1000, limit_pref_f: 1}\n"
                 "training:\n"
                 "  training_data: {systems: [data/a, data/b], batch_size: [2, 1]}\n"
                 "  validation_data: {systems: [data/a], batch_size: 2}\n"
                 "  numb_steps: " + std::to_string(steps) + "\n  seed: 5\n  disp_freq: 5\n  save_freq: 10\n");
  mlip::train::TrainOptions options;
  options.output_dir = dir / name;
  options.device = device;
  options.restart = restart;
  EXPECT_EQ(mlip::train::train(mlip::train::load_train_config(dir / (name + ".yaml")), options), 0);
  auto module = torch::jit::load(dir / (name + "/model.ckpt-" + std::to_string(steps) + ".pt"));
  std::vector<torch::Tensor> out;
  for (const auto& p : module.named_parameters()) {
    EXPECT_TRUE(p.value.device().is_cpu()) << p.name << " is saved on " << p.value.device();
    out.push_back(p.value.detach().clone());
  }
  return out;
}

/// max |a - b| / max |b| over all tensors.
double relative_difference(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0, scale = 0;
  for (size_t k = 0; k < a.size() && k < b.size(); ++k) {
    diff = std::max(diff, (a[k].to(torch::kFloat64) - b[k].to(torch::kFloat64)).abs().max().item<double>());
    scale = std::max(scale, b[k].abs().max().item<double>());
  }
  return diff / scale;
}

class DeviceTraining : public ::testing::Test {
 protected:
  void SetUp() override {
    write_system(dir_ / "data/a", 2, 4, 6, 1);
    write_system(dir_ / "data/b", 3, 6, 4, 2);
  }
  void TearDown() override { ::unsetenv("MLIP_SE_E2_A_PATH"); }
  TempDir dir_;
};

TEST_F(DeviceTraining, GenericSeAPathTrainsLikeTheHandWrittenOneOnTheCpu) {
  const auto hand_written = train(dir_, "hand", kSeA, 20, "cpu");
  ::setenv("MLIP_SE_E2_A_PATH", "generic", 1);
  const auto generic = train(dir_, "generic", kSeA, 20, "cpu");
  const double d = relative_difference(generic, hand_written);
  EXPECT_LT(d, 1e-8) << "20 steps of the generic path against the hand-written one";
  EXPECT_GT(relative_difference(generic, train(dir_, "fewer", kSeA, 10, "cpu")), 1e-6)
      << "the comparison can see a difference";
}

TEST_F(DeviceTraining, CudaEqualsCpuForBothModels) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible (or this build has no CUDA)";
  for (const char* model : {kSeA, kEquivariant}) {
    const std::string tag = model == kSeA ? "se_e2_a" : "equivariant";
    const auto cpu = train(dir_, tag + "_cpu", model, 20, "cpu");
    const auto cuda = train(dir_, tag + "_cuda", model, 20, "cuda");
    EXPECT_LT(relative_difference(cuda, cpu), 1e-8) << tag << ": 20 steps on CUDA against 20 on the CPU (float64)";
  }
}

// The interrupted run is a 20-step run too (its checkpoint at step 10 is resumed): the
// learning rate's decay depends on numb_steps, so a 10-step run's step 10 is not a 20-step
// run's.
TEST_F(DeviceTraining, GenericPathCheckpointRestartsOnTheHandWrittenPath) {
  // The CPU's version of a CUDA checkpoint resumed on the CPU: written by the generic path.
  const auto straight = train(dir_, "straight", kSeA, 20, "cpu");
  ::setenv("MLIP_SE_E2_A_PATH", "generic", 1);
  train(dir_, "split", kSeA, 20, "cpu");
  ::unsetenv("MLIP_SE_E2_A_PATH");
  const auto resumed = train(dir_, "split", kSeA, 20, "cpu", dir_ / "split/model.ckpt-10.pt");
  EXPECT_LT(relative_difference(resumed, straight), 1e-8);
  EXPECT_GT(relative_difference(train(dir_, "fewer", kSeA, 10, "cpu"), straight), 1e-6)
      << "the comparison can see a difference";
}

/// Both models: 20 steps on `straight_device` against a 20-step run on `first_device` resumed
/// from its step-10 checkpoint on `second_device`.
void expect_restart_across_devices(const TempDir& dir, const std::string& straight_device,
                                   const std::string& first_device, const std::string& second_device) {
  for (const char* model : {kSeA, kEquivariant}) {
    const std::string tag = model == kSeA ? "se_e2_a" : "equivariant";
    const auto straight = train(dir, tag + "_straight", model, 20, straight_device);
    train(dir, tag + "_split", model, 20, first_device);
    const auto resumed =
        train(dir, tag + "_split", model, 20, second_device, dir / (tag + "_split/model.ckpt-10.pt"));
    EXPECT_LT(relative_difference(resumed, straight), 1e-8) << tag;
  }
}

TEST_F(DeviceTraining, CudaCheckpointRestartsOnTheCpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible (or this build has no CUDA)";
  expect_restart_across_devices(dir_, "cpu", "cuda", "cpu");
}

TEST_F(DeviceTraining, CpuCheckpointRestartsOnCuda) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible (or this build has no CUDA)";
  expect_restart_across_devices(dir_, "cuda", "cpu", "cuda");
}

}  // namespace
