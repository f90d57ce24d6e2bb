// `mlip change-bias` (docs/training.md "Changing the energy shifts"), run as a user would, for
// se_e2_a in both precisions and the equivariant model: a re-fit makes the atom-weighted mean
// energy error (and each element's count-weighted one) zero and leaves forces and virials bit
// for bit; -b sets the shifts; a checkpoint stays restartable, a compressed model compressed;
// the errors. Tiny data, a few training steps: nothing depends on the machine's speed.
#include <gtest/gtest.h>
#include <torch/script.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "model_test_util.h"
#include "test_util.h"

namespace fs = std::filesystem;

namespace {

using mlip::test::CommandResult;
using mlip::test::contains;
using mlip::test::read_file;
using mlip::test::run_command;
using mlip::test::TempDir;
using mlip::test::write_system;
using mlip::test::write_text;
const std::string kMlip = MLIP_EXE;

struct ModelCase {
  std::string name;
  std::string model_yaml;
  std::string shift;  ///< the module attribute holding the per-type energy shift
};

/// The bound on the atom-weighted mean energy error after a re-fit, eV: float64 rounding (1e-9),
/// or for float32 the rounding of shifts near 10 eV (ulp 1e-6) and of frame energies near 60 eV
/// (ulp 4e-6), times ten.
double tolerance(bool float64) { return float64 ? 1e-9 : 1e-4; }

const ModelCase kSeFloat64{"se_e2_a_float64",
                           "model:\n"
                           "  type_map: [O, H]\n"
                           "  descriptor: {type: se_e2_a, sel: [8, 16], rcut: 4.0, rcut_smth: 1.0, neuron: [4, 8],\n"
                           "               axis_neuron: 4, type_one_side: true, seed: 3, precision: float64}\n"
                           "  fitting_net: {neuron: [8, 8], resnet_dt: true, seed: 3, precision: float64}\n",
                           "bias"};
const ModelCase kSeFloat32{"se_e2_a_float32",
                           std::regex_replace(kSeFloat64.model_yaml, std::regex("float64"), "float32"), "bias"};
const ModelCase kEquivariant{"equivariant",
                             "model: {type: equivariant, type_map: [O, H], r_max: 4.0, num_features: 4, l_max: 1,\n"
                             "        num_layers: 2, radial_width: 8}\n",
                             "shift"};

std::string input_yaml(const ModelCase& model, int steps) {
  return model.model_yaml +
         "learning_rate: {type: exp, start_lr: 0.005, stop_lr: 1.0e-4, decay_steps: 5}\n"
         "loss: {type: ener, start_pref_e: 0.02, limit_pref_e: 1, start_pref_f: 1000, limit_pref_f: 1}\n"
         "training:\n"
         "  training_data: {systems: [data/sys_a, data/sys_b], batch_size: [2, 1]}\n"
         "  numb_steps: " +
         std::to_string(steps) + "\n  seed: 5\n  disp_freq: 5\n  save_freq: 5\n";
}

/// The module's energy shift, float64.
std::vector<double> shift_of(const std::string& path, const std::string& attribute) {
  auto module = torch::jit::load(path);
  const auto t = module.attr(attribute).toTensor().to(torch::kFloat64).contiguous();
  return std::vector<double>(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
}

/// One extra file of an mlip archive ("" when absent).
std::string extra_file(const std::string& path, const std::string& name) {
  torch::jit::ExtraFilesMap files{{name, ""}};
  torch::jit::load(path, torch::kCPU, files);
  return files[name];
}

/// The second column minus the first... of `mlip test -d`'s .e.out: "data_e pred_e" per frame.
std::vector<double> energy_errors(const std::string& e_out) {
  std::istringstream in(e_out);
  std::string line;
  std::vector<double> out;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream row(line);
    double label = 0, predicted = 0;
    row >> label >> predicted;
    out.push_back(predicted - label);
  }
  return out;
}

class ChangeBiasTest : public ::testing::TestWithParam<ModelCase> {
 protected:
  void SetUp() override {
    // Three compositions (O:H 1:2, 1:2, 1:4): the shifts of O and H are both determined.
    write_system(dir_ / "data/sys_a", 2, 4, 8, 1);
    write_system(dir_ / "data/sys_b", 3, 6, 6, 2);
    write_system(dir_ / "data/sys_c", 1, 4, 5, 3);
    write_text(dir_ / "input.yaml", input_yaml(GetParam(), 5));
    const CommandResult train = mlip("train input.yaml -o run", "OMP_NUM_THREADS=1");
    ASSERT_EQ(train.exit_code, 0) << train.out << train.err;
    const CommandResult freeze = mlip("freeze -c run -o model.pt");
    ASSERT_EQ(freeze.exit_code, 0) << freeze.err;
  }
  CommandResult mlip(const std::string& args, const std::string& environment = "") {
    return run_command("cd " + dir_.path() + " && " + environment + " " + kMlip + " " + args);
  }
  std::string read(const std::string& name) const { return read_file(dir_ / name); }
  bool float64() { return extra_file(dir_ / "model.pt", "model_dtype") == "float64"; }
  TempDir dir_;
};

// The re-fit: afterwards sum_f count_t(f) * error(f) is 0 for O and for H (so the atom-weighted
// mean error is 0); the forces mlip test writes are the same bytes; the shift moved by the energy
// difference the frames see.
TEST_P(ChangeBiasTest, RefitZeroesTheMeanErrorAndKeepsForces) {
  const ModelCase& c = GetParam();
  const std::string systems = "data/sys_a data/sys_b data/sys_c";
  ASSERT_EQ(mlip("test -m model.pt -s " + systems + " -d before").exit_code, 0);
  const CommandResult change = mlip("change-bias model.pt -s " + systems + " -o changed.pt");
  ASSERT_EQ(change.exit_code, 0) << change.out << change.err;
  EXPECT_TRUE(contains(change.out, "energy shift change from 19 frame(s): per-atom energy RMSE")) << change.out;
  EXPECT_TRUE(contains(change.out, "energy shifts (eV per atom) before: O ")) << change.out;
  EXPECT_FALSE(contains(change.out, "note: the frames' compositions")) << change.out;
  const CommandResult after_test = mlip("test -m changed.pt -s " + systems + " -d after");
  ASSERT_EQ(after_test.exit_code, 0) << after_test.err;

  EXPECT_EQ(read("before.f.out"), read("after.f.out"));
  // Frames in order: 8 of (2 O, 4 H), 6 of (3 O, 6 H), 5 of (1 O, 4 H).
  std::vector<std::array<double, 2>> counts;
  for (int f = 0; f < 8; ++f) counts.push_back({2, 4});
  for (int f = 0; f < 6; ++f) counts.push_back({3, 6});
  for (int f = 0; f < 5; ++f) counts.push_back({1, 4});
  const auto before = energy_errors(read("before.e.out")), after = energy_errors(read("after.e.out"));
  ASSERT_EQ(before.size(), counts.size());
  ASSERT_EQ(after.size(), counts.size());
  double atoms = 0;
  std::array<double, 2> sum_before{0, 0}, sum_after{0, 0};
  for (size_t f = 0; f < counts.size(); ++f)
    for (int t = 0; t < 2; ++t) {
      sum_before[size_t(t)] += counts[f][size_t(t)] * before[f];
      sum_after[size_t(t)] += counts[f][size_t(t)] * after[f];
      atoms += counts[f][size_t(t)];
    }
  // Five steps leave the shifts far from the data's: the check below can fail.
  EXPECT_GT(std::abs(sum_before[0] + sum_before[1]) / atoms, 100 * tolerance(float64()));
  EXPECT_LT(std::abs(sum_after[0] + sum_after[1]) / atoms, tolerance(float64()));
  for (int t = 0; t < 2; ++t) EXPECT_LT(std::abs(sum_after[size_t(t)]) / atoms, tolerance(float64())) << "type " << t;

  // Only the shift changed: every other attribute is the same bytes.
  auto a = torch::jit::load(dir_ / "model.pt"), b = torch::jit::load(dir_ / "changed.pt");
  auto b_attributes = b.named_attributes(false);
  for (const auto& item : a.named_attributes(false)) {
    if (!item.value.isTensor() || item.name == c.shift) continue;
    bool found = false;
    for (const auto& other : b_attributes)
      if (other.name == item.name) {
        found = true;
        EXPECT_TRUE(torch::equal(item.value.toTensor(), other.value.toTensor())) << item.name;
      }
    EXPECT_TRUE(found) << item.name;
  }
  const std::string record = extra_file(dir_ / "changed.pt", "change_bias");
  EXPECT_TRUE(contains(record, "re-fitted to 19 frame(s) of data/sys_a data/sys_b data/sys_c")) << record;
  EXPECT_FALSE(extra_file(dir_ / "changed.pt", "inference_settings").empty());
}

// Forces and virials of a periodic frame through the frozen forward: the same bits; the energy
// moves by sum_i (new - old shift of atom i's type).
TEST_P(ChangeBiasTest, ForcesAndVirialsAreBitForBit) {
  const ModelCase& c = GetParam();
  ASSERT_EQ(mlip("change-bias model.pt -b O=-3.25 H=1.5 -o set.pt").exit_code, 0);
  const auto old_shift = shift_of(dir_ / "model.pt", c.shift), new_shift = shift_of(dir_ / "set.pt", c.shift);
  EXPECT_EQ(new_shift[0], -3.25);  // exact in float32 too
  EXPECT_EQ(new_shift[1], 1.5);
  const auto dtype = float64() ? torch::kFloat64 : torch::kFloat32;
  mlip::test::Frame frame = mlip::test::random_frame(12, true, 7, 5.0, {0.3, 0.0, 0.2}, 0.9, 0.4);
  auto a = torch::jit::load(dir_ / "model.pt"), b = torch::jit::load(dir_ / "set.pt");
  const auto ra = mlip::test::run_deploy(a, frame, 4.0, dtype), rb = mlip::test::run_deploy(b, frame, 4.0, dtype);
  EXPECT_TRUE(torch::equal(ra.forces, rb.forces));
  EXPECT_TRUE(torch::equal(ra.virial, rb.virial));
  double moved = 0;
  for (int t : frame.types) moved += new_shift[size_t(t)] - old_shift[size_t(t)];
  EXPECT_NEAR(rb.energy - ra.energy, moved, dtype == torch::kFloat64 ? 1e-10 : 1e-4);
  EXPECT_GT(std::abs(moved), 1.0);
}

// A checkpoint stays a checkpoint: --restart from the changed one continues with its shifts (they
// are not trained), and freezing it carries the record.
TEST_P(ChangeBiasTest, ChangedCheckpointRestartsAndFreezes) {
  const ModelCase& c = GetParam();
  const CommandResult change = mlip("change-bias run/model.ckpt-5.pt -b O=-9.5 -o changed.ckpt.pt");
  ASSERT_EQ(change.exit_code, 0) << change.out << change.err;
  EXPECT_TRUE(contains(change.out, "energy shifts (eV per atom) after:  O -9.5, H ")) << change.out;
  write_text(dir_ / "input10.yaml", input_yaml(c, 10));
  const CommandResult restart = mlip("train input10.yaml --restart changed.ckpt.pt -o run2", "OMP_NUM_THREADS=1");
  ASSERT_EQ(restart.exit_code, 0) << restart.out << restart.err;
  EXPECT_TRUE(contains(restart.out, "restarted from changed.ckpt.pt at step 5")) << restart.out;
  EXPECT_EQ(shift_of(dir_ / "run2/model.ckpt-10.pt", c.shift), shift_of(dir_ / "changed.ckpt.pt", c.shift));
  EXPECT_EQ(shift_of(dir_ / "changed.ckpt.pt", c.shift)[0], -9.5);
  ASSERT_EQ(mlip("freeze -c changed.ckpt.pt -o changed_frozen.pt").exit_code, 0);
  EXPECT_TRUE(contains(extra_file(dir_ / "changed_frozen.pt", "change_bias"), "set by -b"));
}

// Bad requests: a clear message, exit 1 or 2, nothing written.
TEST_P(ChangeBiasTest, BadRequestsAreRefused) {
  struct Case {
    std::string args;
    int code;
    std::string message;
  };
  write_system(dir_ / "data/sys_n", 2, 4, 3, 4);
  write_text(dir_ / "data/sys_n/type_map.raw", "O\nN\n");
  const std::vector<Case> cases = {
      {"model.pt -s data/sys_a -o model.pt", 1, "that is the model being changed"},
      {"model.pt -o out.pt", 2, "give systems to re-fit to (-s) or values to set (-b)"},
      {"model.pt -s data/sys_a -b O=1 -o out.pt", 2, "-s (re-fit) and -b (set) exclude each other"},
      {"model.pt -b C=1 -o out.pt", 1, "-b C: not an element of model.pt (its type_map: O H)"},
      {"model.pt -b O -o out.pt", 2, "-b O: expected <element>=<eV>"},
      {"model.pt -b O=abc -o out.pt", 2, "-b O=abc: expected a finite number of eV after '='"},
      {"model.pt -b O=1 O=2 -o out.pt", 2, "-b O=2: O is given twice"},
      {"model.pt -s data/sys_a", 2, "change-bias: -o <output> is required"},
      {"model.pt -s data/sys_n -o out.pt", 1,
       "element 'N' (used by atom 2 in type.raw) is not in the model's type_map [O, H]"},
      {"missing.pt -s data/sys_a -o out.pt", 1, "missing.pt"},
  };
  for (const Case& k : cases) {
    const CommandResult r = mlip("change-bias " + k.args);
    EXPECT_EQ(r.exit_code, k.code) << k.args << "\n" << r.err;
    EXPECT_TRUE(contains(r.err, k.message)) << k.args << "\n" << r.err;
    EXPECT_FALSE(fs::exists(dir_ / "out.pt")) << k.args;
  }
  // A shift the model's precision cannot hold (docs/robustness.md "Numbers that become a model's
  // parameters"): 1e39 eV overflows float32 (it printed "after: O inf" and wrote the model); a
  // float64 model holds it.
  const CommandResult big = mlip("change-bias model.pt -b O=1e39 -o out.pt");
  if (float64()) {
    EXPECT_EQ(big.exit_code, 0) << big.err;
    EXPECT_TRUE(contains(big.out, "O 1e+39")) << big.out;
    fs::remove(dir_ / "out.pt");
  } else {
    EXPECT_EQ(big.exit_code, 1) << big.out << big.err;
    EXPECT_TRUE(contains(big.err, "change-bias model.pt: the energy shift (eV per atom) of O is 1e+39, beyond "
                                  "float32's range (its largest finite value is 3.4028235e+38); nothing was written"))
        << big.err;
    EXPECT_FALSE(fs::exists(dir_ / "out.pt"));
  }
  // Just inside float32's range is held by both.
  const CommandResult inside = mlip("change-bias model.pt -b H=3e38 -o out.pt");
  EXPECT_EQ(inside.exit_code, 0) << inside.err;
  EXPECT_TRUE(std::isfinite(shift_of(dir_ / "out.pt", GetParam().shift)[1]));
}

INSTANTIATE_TEST_SUITE_P(Models, ChangeBiasTest, ::testing::Values(kSeFloat64, kSeFloat32, kEquivariant),
                         [](const ::testing::TestParamInfo<ModelCase>& info) { return info.param.name; });

// A compressed se_e2_a model stays compressed, its tables untouched.
TEST(ChangeBiasCompressed, KeepsTheCompression) {
  TempDir dir;
  write_system(dir / "data/sys_a", 2, 4, 8, 1);
  write_system(dir / "data/sys_b", 3, 6, 6, 2);
  write_text(dir / "input.yaml", input_yaml(kSeFloat64, 5));
  auto mlip = [&](const std::string& args) { return run_command("cd " + dir.path() + " && " + kMlip + " " + args); };
  ASSERT_EQ(mlip("train input.yaml -o run").exit_code, 0);
  ASSERT_EQ(mlip("freeze -c run -o model.pt").exit_code, 0);
  const CommandResult compress = mlip("compress -i model.pt -o compressed.pt --min-distance 0.8");
  ASSERT_EQ(compress.exit_code, 0) << compress.err;
  const CommandResult change = mlip("change-bias compressed.pt -s data/sys_a data/sys_b -o changed.pt");
  ASSERT_EQ(change.exit_code, 0) << change.out << change.err;
  // Both systems are O:H 1:2: the split between O and H is not determined, and the user is told.
  EXPECT_TRUE(contains(change.out, "note: the frames' compositions determine only 1 combination(s) of the 2"))
      << change.out;
  EXPECT_EQ(extra_file(dir / "changed.pt", "compression"), extra_file(dir / "compressed.pt", "compression"));
  ASSERT_EQ(mlip("test -m compressed.pt -s data/sys_a -d before").exit_code, 0);
  ASSERT_EQ(mlip("test -m changed.pt -s data/sys_a -d after").exit_code, 0);
  EXPECT_EQ(read_file(dir / "before.f.out"), read_file(dir / "after.f.out"));
  EXPECT_NE(read_file(dir / "before.e.out"), read_file(dir / "after.e.out"));
}

}  // namespace
