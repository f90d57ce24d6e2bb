// The memory estimate before the first allocation (docs/training.md "Memory checked before the
// first allocation") and the smallest cutoffs: sizes far beyond a machine's memory are refused by
// `mlip train` within seconds, naming the setting and the memory; the equivariant model's
// parameter list equals what it builds.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "byte_size.h"
#include "error.h"
#include "data/load.h"
#include "models/equivariant/equivariant.h"
#include "models/equivariant/frame_batch.h"
#include "models/registry.h"
#include "models/memory_estimate.h"
#include "test_util.h"

namespace fs = std::filesystem;
using mlip::test::contains;
using mlip::test::TempDir;
using mlip::test::write_text;

namespace {

const std::string kWater = std::string(MLIP_SOURCE_DIR) + "/examples/water/data/valid";

/// A small se_e2_a input on the example's water frames, with `replace` applied to the defaults.
std::string se_input(const std::string& descriptor, const std::string& fitting = "neuron: [16, 16]") {
  return "model:\n  type_map: [O, H]\n  descriptor:\n    type: se_e2_a\n    " + descriptor + "\n  fitting_net:\n    " +
         fitting +
         "\nlearning_rate: {start_lr: 0.001, stop_lr: 0.0001, decay_steps: 10}\n"
         "training:\n  training_data: {systems: ['" +
         kWater +
         "'], batch_size: 1}\n  numb_steps: 1\n"
         "  disp_freq: 1\n  save_freq: 1\n";
}

/// A small equivariant input on the same frames with `settings` (YAML lines under model).
std::string equivariant_input(const std::string& settings) {
  return "model:\n  type: equivariant\n  type_map: [O, H]\n  precision: float32\n" + settings +
         "\nlearning_rate: {start_lr: 0.001, stop_lr: 0.0001, decay_steps: 10}\n"
         "training:\n  training_data: {systems: ['" +
         kWater +
         "'], batch_size: 1}\n  numb_steps: 1\n"
         "  disp_freq: 1\n  save_freq: 1\n";
}

/// Runs `mlip train` on `input` and returns its result.
mlip::test::CommandResult train(const TempDir& tmp, const std::string& name, const std::string& input) {
  write_text(tmp / (name + ".yaml"), input);
  return mlip::test::run_command(std::string(MLIP_EXE) + " train '" + (tmp / (name + ".yaml")) + "' -o '" +
                                 (tmp / name) + "'");
}

/// `mlip train` refuses the input with an mlip error holding every phrase, before any step.
void expect_refused(const std::string& name, const std::string& input, const std::vector<std::string>& phrases) {
  TempDir tmp;
  const mlip::test::CommandResult r = train(tmp, name, input);
  EXPECT_EQ(r.exit_code, 1) << name << "\nstdout: " << r.out << "\nstderr: " << r.err;
  EXPECT_TRUE(contains(r.err, "mlip: error: ")) << name << ": " << r.err;
  for (const std::string& p : phrases) EXPECT_TRUE(contains(r.err, p)) << name << ": " << r.err << "\n  missing: " << p;
  EXPECT_FALSE(contains(r.out, "step")) << name << " trained: " << r.out;
  EXPECT_FALSE(fs::exists(tmp / (name + "/lcurve.out"))) << name;
}

}  // namespace

TEST(MemoryEstimate, EquivariantSizesListTheBuiltModelsParameters) {
  for (int variant = 0; variant < 4; ++variant) {
    mlip::models::EquivariantConfig c;
    c.type_map = {"O", "H", "C"};
    c.num_features = 4 + variant;
    c.l_max = variant % 3;
    c.num_layers = 2 + variant % 2;
    c.correlation = 1 + variant % 3;
    c.readout_every_layer = variant == 3;
    c.parity = variant != 1;
    c.pseudotensors = variant != 2;
    c.radial_width = 8;
    c.radial_depth = 1 + variant % 2;
    c.num_bessels = 5;
    const auto sizes = mlip::models::equivariant_sizes(c);
    torch::jit::Module m = mlip::models::build_equivariant(c);
    std::vector<std::pair<std::string, std::vector<int64_t>>> built;
    for (const auto& p : m.named_parameters(false)) built.emplace_back(p.name, p.value.sizes().vec());
    EXPECT_EQ(sizes.parameters, built) << "variant " << variant;
    EXPECT_EQ(int64_t(sizes.paths.size()), c.num_layers);
    EXPECT_EQ(sizes.message_components.size(), sizes.paths.size());
  }
}

TEST(MemoryEstimate, TheMessageNamesTheLargestPartAndNothingIsCheckedWhenMemoryIsUnknown) {
  mlip::models::MemoryEstimate e;
  e.parts = {{"small things", "model.a 1", 1024.0 * 1024 * 1024},
             {"big things", "model.b 2", 3.0 * 1024 * 1024 * 1024}};
  mlip::models::BatchSizes batch{"sys", 96, 2, 1000.0};
  const std::string msg =
      mlip::test::error_of([&] { mlip::models::check_memory(e, 2.0 * 1024 * 1024 * 1024, batch, "are available"); });
  EXPECT_TRUE(contains(msg,
                       "model.b 2: training would need about 4.0 GiB of memory, 3.0 GiB of it for big things "
                       "(for a batch of 2 frames of 96 atoms of sys), and 2.0 GiB are available"))
      << msg;
  EXPECT_NO_THROW(mlip::models::check_memory(e, 4.5 * 1024 * 1024 * 1024, batch, "are available"));
  EXPECT_NO_THROW(mlip::models::check_memory(e, 0.0, batch, "are available"));
  EXPECT_EQ(mlip::bytes_in_words(1.5 * 1024 * 1024 * 1024 * 1024 * 1024), "1.5e+03 TiB");
  EXPECT_EQ(mlip::bytes_in_words(200.0 * 1024 * 1024), "200.0 MiB");
  EXPECT_EQ(mlip::bytes_in_words(2.5 * 1024 * 1024 * 1024 * 1024), "2.5 TiB");
}

// Each size of the issue, through the real CLI: refused in seconds, naming the key and the memory.
TEST(MemoryEstimate, SizesBeyondAnyMachineAreRefusedBeforeAllocating) {
  const std::string se_ok = "sel: [46, 92]\n    rcut: 6.0\n    rcut_smth: 0.5\n    neuron: [8, 16]\n    axis_neuron: 4";
  expect_refused("rcut1000", se_input("sel: [46, 92]\n    rcut: 1000\n    neuron: [8, 16]\n    axis_neuron: 4"),
                 {"model.descriptor.rcut 1000 Å (about", "for the neighbour list of one frame",
                  "training would need about", "TiB of memory"});
  expect_refused("sel1e10", se_input("sel: [10000000000, 92]\n    rcut: 6.0\n    neuron: [8, 16]\n    axis_neuron: 4"),
                 {"model.descriptor.sel [10000000000, 92]", "dense environment matrix", "TiB of memory"});
  expect_refused("neuron1e10",
                 se_input("sel: [46, 92]\n    rcut: 6.0\n    neuron: [8, 10000000000]\n    axis_neuron: 4"),
                 {"neuron [8, 10000000000]", "TiB of memory"});
  expect_refused("fitting1e8", se_input(se_ok, "neuron: [240, 100000000]"),
                 {"model.fitting_net.neuron [240, 100000000]", "the fitting nets' weights", "of memory"});
  expect_refused("r_max200", equivariant_input("  r_max: 200\n  num_features: 8\n  l_max: 1\n  num_layers: 2"),
                 {"model.r_max 200 Å (about", "pairs in a frame of", "training would need about"});
  expect_refused("features1e5", equivariant_input("  r_max: 4.5\n  num_features: 100000\n  l_max: 1\n  num_layers: 2"),
                 {"num_features 100000", "weights, their gradients and Adam's two moments", "TiB of memory"});
  expect_refused("bessels1e8", equivariant_input("  r_max: 4.5\n  num_features: 8\n  num_bessels: 100000000"),
                 {"num_bessels 100000000", "TiB of memory"});
  expect_refused("layers1e5", equivariant_input("  r_max: 4.5\n  num_features: 8\n  num_layers: 100000"),
                 {"num_layers 100000", "of memory"});
  expect_refused("depth1e5", equivariant_input("  r_max: 4.5\n  num_features: 8\n  radial_depth: 100000"),
                 {"radial_depth 100000", "of memory"});
  expect_refused("width1e7", equivariant_input("  r_max: 4.5\n  num_features: 8\n  radial_width: 10000000"),
                 {"radial_width 10000000", "of memory"});
}

TEST(MemoryEstimate, TinyCutoffsAndAveragesAreRefused) {
  for (const std::string r : {"1e-300", "1e-5", "0.4"}) {
    expect_refused("se_rcut", se_input("sel: [46, 92]\n    rcut: " + r + "\n    rcut_smth: 0\n    neuron: [8, 16]"),
                   {"model.descriptor.rcut: expected a cutoff of at least 0.5 Å", "got " + r});
    expect_refused("eq_rmax", equivariant_input("  r_max: " + r),
                   {"model.r_max: expected a cutoff of at least 0.5 Å", "got " + r});
  }
  expect_refused("eq_avg", equivariant_input("  r_max: 4.5\n  avg_num_neighbors: 1e-300"),
                 {"model.avg_num_neighbors: expected a number of at least 0.001", "got 1e-300"});
  // No pair of the water frames is within 0.6 Å (O-H is 0.9-1.0 Å): avg_num_neighbors: auto
  // would be 0 and every message NaN.
  expect_refused("eq_nopairs", equivariant_input("  r_max: 0.6\n  num_features: 4\n  num_layers: 1"),
                 {"model.r_max 0.6: no pair of atoms of the", "statistics frames is within it"});
}

// A made frame is what a training holds of every frame it has made (the batch's, those made
// ahead, the cache): the estimate of one (MemoryEstimate::frame_bytes) covers what
// prepare_frame allocates, counted from its tensors, for both precisions and several l_max and
// radial bases, and is not far above it. With r_max 60 on the 96-atom water frames a frame is
// gigabytes, which the estimate used to leave out (the run passed the check and then failed in
// LibTorch's allocator).
TEST(MemoryEstimate, TheEquivariantEstimateCoversAMadeFrame) {
  std::vector<std::string> type_map{"O", "H"};
  const auto systems = mlip::data::load_systems({kWater}, type_map);
  const mlip::data::System& sys = systems.at(0);
  const mlip::data::Frame frame = sys.frame(0);
  for (const std::string precision : {"float32", "float64"})
    for (const std::string shape : {"l_max: 1, num_bessels: 8", "l_max: 2, num_bessels: 12", "l_max: 3, num_bessels: 4"}) {
      SCOPED_TRACE(precision + ", " + shape);
      const auto settings = mlip::models::parse_model_settings(
          "model: {type: equivariant, type_map: [O, H], r_max: 5.0, num_features: 4, num_layers: 1, " + shape +
              ", precision: " + precision + "}\n",
          "test input");
      const auto model = mlip::models::create_model(*settings, mlip::models::ModelContext{});
      const auto made = model->prepare_frame(sys, frame);
      const auto& input = dynamic_cast<const mlip::models::EquivariantFrame&>(*made);
      mlip::models::BatchSizes batch{sys.name, sys.natoms(), 1, double(input.i.size(0))};
      batch.frames_ahead = 5;
      const mlip::models::MemoryEstimate e = mlip::models::estimate_training_memory(*settings, batch);
      const double actual = double(made->bytes());
      EXPECT_GE(e.frame_bytes, actual) << "pairs " << batch.pairs;
      EXPECT_LE(e.frame_bytes, 1.25 * actual) << "pairs " << batch.pairs;
      // Held: the batch's frame and the five made ahead, each a made frame.
      bool held = false;
      for (const auto& part : e.parts)
        if (contains(part.what, "6 made frame(s) held at once")) {
          held = true;
          EXPECT_DOUBLE_EQ(part.bytes, 6.0 * e.frame_bytes);
        }
      EXPECT_TRUE(held);
    }
}

// The control: the example's sizes pass the check, which says what it estimated.
TEST(MemoryEstimate, UsualSizesTrainAndTheEstimateIsPrinted) {
  TempDir tmp;
  mlip::test::CommandResult r = train(
      tmp, "se", se_input("sel: [46, 92]\n    rcut: 6.0\n    rcut_smth: 0.5\n    neuron: [8, 16]\n    axis_neuron: 4"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "memory: about ")) << r.out;
  r = train(tmp, "eq", equivariant_input("  r_max: 4.5\n  num_features: 4\n  num_layers: 1"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "memory: about ")) << r.out;
}
