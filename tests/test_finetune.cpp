// `mlip train --finetune` (docs/training.md "Fine-tuning"), run as a user would, for se_e2_a in
// both precisions (and with type_one_side: false, a net per pair of elements) and the equivariant
// model: the carried weights equal the pretrained model's by element after the type map is
// reordered, extended or cut; new elements start as a fresh model; the energy shifts are fitted
// to the new data; a differing setting is refused naming it; a fine-tuned run freezes, tests and
// restarts. Tiny data and a few steps: nothing here depends on the machine's speed. The start
// model is read from a run of one step at a learning rate of 1e-30, which moves no weight by a bit.
#include <gtest/gtest.h>
#include <torch/script.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

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

/// A model of the tests: its `model` section for a type map (the se_e2_a sel follows it).
struct ModelCase {
  std::string name;
  std::function<std::string(const std::string& type_map, const std::string& sel)> model_yaml;
  bool float64;
};

std::string se_yaml(const std::string& type_map, const std::string& sel, const std::string& precision,
                    bool one_side = true) {
  return "model:\n"
         "  type_map: " +
         type_map +
         "\n"
         "  descriptor: {type: se_e2_a, sel: " +
         sel +
         ", rcut: 4.0, rcut_smth: 1.0, neuron: [4, 8],\n"
         "               axis_neuron: 4, type_one_side: " +
         std::string(one_side ? "true" : "false") + ", seed: 3, precision: " +
         precision +
         "}\n"
         "  fitting_net: {neuron: [8, 8], resnet_dt: true, seed: 3, precision: " +
         precision + "}\n";
}

const ModelCase kSeFloat64{"se_e2_a_float64",
                           [](const std::string& t, const std::string& s) { return se_yaml(t, s, "float64"); }, true};
const ModelCase kSeFloat32{"se_e2_a_float32",
                           [](const std::string& t, const std::string& s) { return se_yaml(t, s, "float32"); }, false};
// type_one_side: false: a net per pair of elements (emb_<centre>_<neighbour>), both ids renamed.
const ModelCase kSeTwoSided{
    "se_e2_a_two_sided",
    [](const std::string& t, const std::string& s) { return se_yaml(t, s, "float64", false); }, true};
const ModelCase kEquivariant{"equivariant",
                             [](const std::string& t, const std::string&) {
                               return "model: {type: equivariant, type_map: " + t +
                                      ", r_max: 4.0, num_features: 4, l_max: 1,\n"
                                      "        num_layers: 2, radial_width: 8}\n";
                             },
                             true};

std::string training_yaml(const std::string& systems, int steps, double lr) {
  std::ostringstream out;
  out << "learning_rate: {type: exp, start_lr: " << lr << ", stop_lr: " << lr << ", decay_steps: 5}\n"
      << "loss: {type: ener, start_pref_e: 0.02, limit_pref_e: 1, start_pref_f: 1000, limit_pref_f: 1}\n"
      << "training:\n  training_data: {systems: " << systems << ", batch_size: 1}\n"
      << "  numb_steps: " << steps << "\n  seed: 5\n  disp_freq: 5\n  save_freq: 5\n";
  return out.str();
}

/// Every tensor attribute of a model file, by name, float64.
std::map<std::string, torch::Tensor> attributes_of(const std::string& path) {
  auto module = torch::jit::load(path);
  std::map<std::string, torch::Tensor> out;
  for (const auto& item : module.named_attributes(false))
    if (item.value.isTensor()) out[item.name] = item.value.toTensor().to(torch::kFloat64);
  return out;
}

/// Every number of a text file's lines that do not start with '#', in order.
std::vector<double> read_numbers(const std::string& path) {
  std::istringstream in(read_file(path));
  std::vector<double> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream row(line);
    double v = 0;
    while (row >> v) out.push_back(v);
  }
  return out;
}

std::string extra_file(const std::string& path, const std::string& name) {
  torch::jit::ExtraFilesMap files{{name, ""}};
  torch::jit::load(path, torch::kCPU, files);
  return files[name];
}

class FinetuneTest : public ::testing::TestWithParam<ModelCase> {
 protected:
  void SetUp() override {
    write_system(dir_ / "data/sys_a", 2, 4, 6, 1);
    write_system(dir_ / "data/sys_b", 1, 4, 5, 2);
    // The same geometry generator with H relabelled N: a system of O and N.
    write_system(dir_ / "data/sys_n", 2, 4, 6, 3);
    write_text(dir_ / "data/sys_n/type_map.raw", "O\nN\n");
    write_text(dir_ / "pretrain.yaml",
               model("[O, H]", "[8, 16]") + training_yaml("[data/sys_a, data/sys_b]", 5, 0.005));
    const CommandResult run = mlip("train pretrain.yaml -o first", "OMP_NUM_THREADS=1");
    ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
    ASSERT_EQ(mlip("freeze -c first -o first.pt").exit_code, 0);
  }
  std::string model(const std::string& type_map, const std::string& sel) const {
    return GetParam().model_yaml(type_map, sel);
  }
  CommandResult mlip(const std::string& args, const std::string& environment = "") {
    return run_command("cd " + dir_.path() + " && " + environment + " " + kMlip + " " + args);
  }
  /// The start model of `--finetune first.pt` for this model section and systems (a step at a
  /// learning rate of 1e-30), frozen to `<name>.pt`; the run's output.
  CommandResult start_model(const std::string& name, const std::string& model_section, const std::string& systems,
                            const std::string& option = "--finetune first.pt") {
    write_text(dir_ / (name + ".yaml"), model_section + training_yaml(systems, 1, 1e-30));
    const CommandResult run = mlip("train " + name + ".yaml " + option + " -o " + name, "OMP_NUM_THREADS=1");
    if (run.exit_code == 0) {
      EXPECT_EQ(mlip("freeze -c " + name + " -o " + name + ".pt").exit_code, 0);
    }
    return run;
  }
  TempDir dir_;
};

/// The type ids in an se_e2_a net's name (emb_<t>_<layer>, fit_<t>_<layer>; two-sided:
/// emb_<centre>_<neighbour>_<layer>); empty for any other name. `layer`: the rest.
std::vector<int> net_ids(const std::string& name, std::string* net = nullptr, std::string* layer = nullptr) {
  static const std::regex named(R"(^(emb|fit)_(\d+)(?:_(\d+))?_([a-z]+\d*)$)");
  std::smatch m;
  if (!std::regex_match(name, m, named)) return {};
  std::vector<int> ids = {std::stoi(m[2])};
  if (m[3].matched) ids.push_back(std::stoi(m[3]));
  if (net) *net = m[1];
  if (layer) *layer = m[4];
  return ids;
}

/// se_e2_a names a net by its type ids (net_ids); the equivariant model keeps a row per type.
/// `from[t]`: the pretrained id of the input's type t (-1: new).
void expect_taken(const std::map<std::string, torch::Tensor>& pretrained,
                  const std::map<std::string, torch::Tensor>& tuned, const std::vector<int>& from) {
  const std::vector<std::string> rows = {"davg", "dstd", "embed", "scale"};
  int checked = 0;
  for (const auto& [name, value] : tuned) {
    std::string net, layer;
    const std::vector<int> ids = net_ids(name, &net, &layer);
    if (!ids.empty()) {
      std::string source = net;
      bool shared = true;
      for (int t : ids) {
        shared = shared && from[size_t(t)] >= 0;
        if (shared) source += "_" + std::to_string(from[size_t(t)]);
      }
      if (!shared) continue;
      source += "_" + layer;
      ASSERT_TRUE(pretrained.count(source)) << source;
      EXPECT_TRUE(torch::equal(value, pretrained.at(source))) << name << " <- " << source;
      ++checked;
    } else if (std::find(rows.begin(), rows.end(), name) != rows.end() ||
               std::regex_match(name, std::regex(R"(^l\d+_(pw|sc)_.*)"))) {
      for (size_t t = 0; t < from.size(); ++t) {
        if (from[t] >= 0) {
          EXPECT_TRUE(torch::equal(value[int64_t(t)], pretrained.at(name)[from[t]])) << name << " row " << t;
        }
      }
      ++checked;
    } else if (pretrained.count(name) && name != "bias" && name != "shift" && name != "sel" && name != "sel_offset") {
      EXPECT_TRUE(torch::equal(value, pretrained.at(name))) << name;
      ++checked;
    }
  }
  EXPECT_GT(checked, 4);
}

// [O, H] -> [H, O]: every weight carried to the element it belongs to; the forces of a frame are
// the pretrained model's (the same function: only the ids moved).
TEST_P(FinetuneTest, ReorderedTypeMap) {
  const CommandResult run = start_model("reorder", model("[H, O]", "[16, 8]"), "[data/sys_a, data/sys_b]");
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_TRUE(contains(run.out, "fine-tune: elements: H <- type 1, O <- type 0")) << run.out;
  EXPECT_TRUE(contains(run.out, "fine-tune: weights of new elements and sections as a fresh model's: 0")) << run.out;
  expect_taken(attributes_of(dir_ / "first.pt"), attributes_of(dir_ / "reorder.pt"), {1, 0});
  ASSERT_EQ(mlip("test -m first.pt -s data/sys_a -d a").exit_code, 0);
  ASSERT_EQ(mlip("test -m reorder.pt -s data/sys_a -d b").exit_code, 0);
  const auto fa = torch::tensor(read_numbers(dir_ / "a.f.out")), fb = torch::tensor(read_numbers(dir_ / "b.f.out"));
  ASSERT_EQ(fa.numel(), fb.numel());
  EXPECT_LT((fa - fb).abs().max().item<double>(), GetParam().float64 ? 1e-10 : 1e-4);
  EXPECT_TRUE(contains(extra_file(dir_ / "reorder.pt", "finetune"), "pretrained model first.pt")) << "frozen record";
}

// [O, H] -> [O, H, N]: O and H carried, N's weights those of a fresh model of the same input
// (its own seed), its statistics from the new data; the energy shifts fitted, so that the
// count-weighted energy errors of the statistics frames sum to zero at the start.
TEST_P(FinetuneTest, AddedElement) {
  const std::string section = model("[O, H, N]", "[8, 16, 16]");
  const std::string systems = "[data/sys_a, data/sys_n]";
  const CommandResult run = start_model("added", section, systems);
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_TRUE(contains(run.out, "fine-tune: elements: O <- type 0, H <- type 1, N new")) << run.out;
  EXPECT_TRUE(contains(run.out, "fine-tune: energy shift change from 12 frame(s)")) << run.out;
  const auto pretrained = attributes_of(dir_ / "first.pt"), tuned = attributes_of(dir_ / "added.pt");
  expect_taken(pretrained, tuned, {0, 1, -1});
  const CommandResult fresh = start_model("fresh", section, systems, "");
  ASSERT_EQ(fresh.exit_code, 0) << fresh.err;
  const auto scratch = attributes_of(dir_ / "fresh.pt");
  int fresh_checked = 0;
  for (const auto& [name, value] : tuned) {
    const std::vector<int> ids = net_ids(name);
    if (std::find(ids.begin(), ids.end(), 2) != ids.end()) {
      EXPECT_TRUE(torch::equal(value, scratch.at(name))) << name;
      ++fresh_checked;
    } else if (name == "embed" || name == "davg" || name == "dstd") {
      EXPECT_TRUE(torch::equal(value[2], scratch.at(name)[2])) << name;
      ++fresh_checked;
    }
  }
  EXPECT_GT(fresh_checked, 0);
  if (GetParam().name == "equivariant") {
    // The mean neighbour count (auto) is the new data's, as the fresh model's.
    auto a = torch::jit::load(dir_ / "added.pt"), b = torch::jit::load(dir_ / "fresh.pt");
    auto first = torch::jit::load(dir_ / "first.pt");
    EXPECT_EQ(a.attr("avg_num_neighbors").toDouble(), b.attr("avg_num_neighbors").toDouble());
    EXPECT_NE(a.attr("avg_num_neighbors").toDouble(), first.attr("avg_num_neighbors").toDouble());
    EXPECT_TRUE(contains(run.out, "fine-tune: numbers taken: none")) << run.out;
  }
  // The start's energy errors on the training frames (all of them are statistics frames here).
  ASSERT_EQ(mlip("test -m added.pt -s data/sys_a data/sys_n -d start").exit_code, 0);
  const auto e = read_numbers(dir_ / "start.e.out");  // label, prediction per frame
  ASSERT_EQ(e.size(), 24u);
  double weighted = 0, atoms = 0;
  for (size_t f = 0; f < 12; ++f) {
    weighted += 6 * (e[2 * f + 1] - e[2 * f]);
    atoms += 6;
  }
  EXPECT_LT(std::abs(weighted / atoms), GetParam().float64 ? 1e-9 : 1e-4);
}

// [O, H] -> [O] on O-only data: H's weights are not taken, and the log says so.
TEST_P(FinetuneTest, DroppedElement) {
  write_system(dir_ / "data/sys_o", 5, 0, 4, 4);
  const CommandResult run = start_model("dropped", model("[O]", "[8]"), "[data/sys_o]");
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_TRUE(contains(run.out, "fine-tune: elements: O <- type 0; not in the input: H")) << run.out;
  expect_taken(attributes_of(dir_ / "first.pt"), attributes_of(dir_ / "dropped.pt"), {0});
  if (GetParam().name == "se_e2_a_float64" || GetParam().name == "se_e2_a_float32") {
    EXPECT_TRUE(contains(run.out, "not taken from the pretrained model: 11 (emb_1_b0, emb_1_b1")) << run.out;
  }
  if (GetParam().name == "se_e2_a_two_sided") {  // emb_0_1, emb_1_0, emb_1_1 (4 each) and fit_1 (7)
    EXPECT_TRUE(contains(run.out, "not taken from the pretrained model: 19 (emb_0_1_b0, emb_0_1_b1")) << run.out;
  }
}

// A fine-tuned run restarts bit for bit: 10 steps equal 5, then --restart to 10.
TEST_P(FinetuneTest, RestartsBitForBit) {
  const std::string section = model("[O, H, N]", "[8, 16, 16]");
  write_text(dir_ / "tune10.yaml", section + training_yaml("[data/sys_a, data/sys_n]", 10, 0.005));
  write_text(dir_ / "tune5.yaml", section + training_yaml("[data/sys_a, data/sys_n]", 5, 0.005));
  const CommandResult whole = mlip("train tune10.yaml --finetune first.pt -o whole", "OMP_NUM_THREADS=1");
  ASSERT_EQ(whole.exit_code, 0) << whole.out << whole.err;
  ASSERT_EQ(mlip("train tune5.yaml --finetune first/model.ckpt-5.pt -o part", "OMP_NUM_THREADS=1").exit_code, 0);
  const CommandResult rest = mlip("train tune10.yaml --restart part -o part", "OMP_NUM_THREADS=1");
  ASSERT_EQ(rest.exit_code, 0) << rest.out << rest.err;
  EXPECT_EQ(read_file(dir_ / "whole/lcurve.out"), read_file(dir_ / "part/lcurve.out"));
  const auto a = attributes_of(dir_ / "whole/model.ckpt-10.pt"), b = attributes_of(dir_ / "part/model.ckpt-10.pt");
  for (const auto& [name, value] : a) EXPECT_TRUE(torch::equal(value, b.at(name))) << name;
  EXPECT_FALSE(extra_file(dir_ / "part/model.ckpt-10.pt", "finetune").empty());
  ASSERT_EQ(mlip("freeze -c part -o tuned.pt").exit_code, 0);
  EXPECT_TRUE(contains(extra_file(dir_ / "tuned.pt", "finetune"), "N new"));
  const CommandResult test = mlip("test -m tuned.pt -s data/sys_n");
  EXPECT_EQ(test.exit_code, 0) << test.err;
}

// A setting that fixes a weight's shape or meaning must match; the message names it and both
// values. --finetune excludes --restart and --init-model.
TEST_P(FinetuneTest, MismatchesAreRefused) {
  const bool se = GetParam().name != "equivariant";
  std::string section = model("[O, H]", "[8, 16]");
  section = se ? std::regex_replace(section, std::regex("neuron: \\[4, 8\\]"), "neuron: [4, 6]")
               : std::regex_replace(section, std::regex("num_features: 4"), "num_features: 6");
  const CommandResult run = start_model("bad", section, "[data/sys_a]");
  EXPECT_EQ(run.exit_code, 1);
  // A refused fine-tune leaves nothing behind: not even the output folder it made.
  EXPECT_FALSE(fs::exists(dir_ / "bad")) << "the refused run left its output folder";
  EXPECT_TRUE(contains(run.err, se ? "the setting 'neuron' differs: the pretrained model has 4 8, the input 4 6"
                                   : "the setting 'num_features' differs: the pretrained model has 4, the input 6"))
      << run.err;
  if (se) {
    const CommandResult sel = start_model("bad_sel", model("[O, H]", "[10, 16]"), "[data/sys_a]");
    EXPECT_EQ(sel.exit_code, 1);
    EXPECT_TRUE(contains(sel.err, "model.descriptor.sel: O has 8 in the pretrained model, 10 in the input's model"))
        << sel.err;
  }
  const std::string other = se ? kEquivariant.model_yaml("[O, H]", "") : kSeFloat64.model_yaml("[O, H]", "[8, 16]");
  const CommandResult type = start_model("bad_type", other, "[data/sys_a]");
  EXPECT_EQ(type.exit_code, 1);
  EXPECT_TRUE(contains(type.err, "fine-tuning keeps the model type")) << type.err;
  EXPECT_TRUE(contains(type.err, se ? "first.pt: a se_e2_a model" : "first.pt: an equivariant model")) << type.err;
  EXPECT_FALSE(fs::exists(dir_ / "bad_type"));
  const CommandResult both = mlip("train pretrain.yaml --finetune first.pt --restart first -o x");
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_TRUE(contains(both.err, "--finetune and --restart exclude each other")) << both.err;
}

// model.long_range (docs/long_range.md "Fine-tuning"): added to a short-range model, every
// short-range weight is carried and the charge outputs (the equivariant model's readout,
// se_e2_a's second output of each fitting net) start as built; the fine-tuned model freezes and
// tests with its charges; dropped again, the charge outputs are the weights not taken.
TEST_P(FinetuneTest, ALongRangeSectionIsAddedAndDropped) {
  const bool se = GetParam().name != "equivariant";
  const std::string plain = model("[O, H]", "[8, 16]");
  const std::string with_long_range =
      se ? plain + "  long_range: {sigma: 1.0}\n"
         : std::regex_replace(plain, std::regex("radial_width: 8\\}"), "radial_width: 8, long_range: {sigma: 1.0}}");
  ASSERT_NE(with_long_range, plain);
  const CommandResult run = start_model("long", with_long_range, "[data/sys_a, data/sys_b]");
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  const std::string charge_outputs = se ? "4 (fit_0_wq, fit_0_bq, fit_1_wq, fit_1_bq)" : "1 (charge_readout)";
  EXPECT_TRUE(contains(run.out, "fine-tune: weights of new elements and sections as a fresh model's: " + charge_outputs))
      << run.out;
  const auto pretrained = attributes_of(dir_ / "first.pt");
  auto tuned = attributes_of(dir_ / "long.pt");
  for (const std::string name : {se ? "fit_1_wq" : "charge_readout"}) {
    ASSERT_TRUE(tuned.count(name)) << name;
    EXPECT_FALSE(pretrained.count(name)) << name;
  }
  for (const std::string name : {"charge_readout", "fit_0_wq", "fit_0_bq", "fit_1_wq", "fit_1_bq"}) tuned.erase(name);
  expect_taken(pretrained, tuned, {0, 1});
  const CommandResult tested = mlip("test -m long.pt -s data/sys_a -d det");
  ASSERT_EQ(tested.exit_code, 0) << tested.out << tested.err;
  EXPECT_EQ(read_numbers(dir_ / "det.e.out").size(), 2u * 6u);  // 6 frames: label, prediction
  // The charges (a number and an element per atom, 6 atoms a frame) sum to zero in each frame, and
  // each frame (sys_a has no cell) has its dipole line.
  std::istringstream charges(read_file(dir_ / "det.q.out"));
  std::vector<double> q;
  std::string line;
  while (std::getline(charges, line))
    if (!line.empty() && line[0] != '#') q.push_back(std::stod(line));
  ASSERT_EQ(q.size(), 36u);
  for (size_t f = 0; f < 6; ++f) {
    double sum = 0;
    for (size_t a = 0; a < 6; ++a) sum += q[6 * f + a];
    EXPECT_NEAR(sum, 0.0, 1e-9) << "frame " << f;
  }
  EXPECT_EQ(read_numbers(dir_ / "det.dipole.out").size(), 3u * 6u);
  EXPECT_GT(*std::max_element(q.begin(), q.end()), 1e-6);
  const CommandResult dropped = start_model("short", plain, "[data/sys_a]", "--finetune long.pt");
  ASSERT_EQ(dropped.exit_code, 0) << dropped.out << dropped.err;
  EXPECT_TRUE(contains(dropped.out, "fine-tune: not taken from the pretrained model: " +
                                    (se ? "4 (fit_0_bq, fit_0_wq, fit_1_bq, fit_1_wq)" : charge_outputs))) << dropped.out;
}

// The models frozen by mlip 0.1 (tests/data/frozen_0.1) fine-tune with the inputs they were
// trained from: their settings were stored as the input's text and their cutoff as "4.000000",
// and each compares as a value ("4.0", "4" and "4.000000" are one cutoff). A setting that really
// differs is still refused.
TEST(FinetuneFromEarlierVersions, EveryKeptModelOfVersion01FineTunes) {
  TempDir dir;
  const std::string fixture = std::string(MLIP_SOURCE_DIR) + "/tests/data/frozen_0.1/";
  const std::string data = std::string(MLIP_SOURCE_DIR) + "/examples/water/data/valid";
  const std::string se64 =
      "model:\n  type_map: [O, H]\n"
      "  descriptor: {type: se_e2_a, sel: [20, 40], rcut: 4.0, rcut_smth: 0.5, neuron: [8, 16, 32], axis_neuron: 4,\n"
      "               type_one_side: false, resnet_dt: false, precision: float64, seed: 3}\n"
      "  fitting_net: {neuron: [32, 32], resnet_dt: true, precision: float64, seed: 4}\n";
  const std::string eq32 =
      "model:\n  type: equivariant\n  type_map: [O, H]\n  r_max: 4.0\n  num_features: 8\n  l_max: 1\n"
      "  num_layers: 2\n  correlation: 2\n  readout: every_layer\n  radial_width: 16\n"
      "  avg_num_neighbors: auto\n  precision: float32\n  seed: 5\n";
  const std::string training = "learning_rate: {type: exp, decay_steps: 10, start_lr: 1.0e-30, stop_lr: 1.0e-30}\n"
                               "training:\n  training_data: {systems: ['" + data + "'], batch_size: 1}\n"
                               "  numb_steps: 1\n  seed: 7\n  disp_freq: 1\n  save_freq: 1\n";
  for (const auto& [file, section] : std::vector<std::pair<std::string, std::string>>{
           {"se64.pt", se64}, {"se64c.pt", se64}, {"eq32.pt", eq32}}) {
    // The cutoff written as mlip 0.1's own input had it (4.0), as a whole number and with decimals.
    const std::vector<std::string> cutoffs =
        file == "se64.pt" ? std::vector<std::string>{"4.0", "4", "4.000000"} : std::vector<std::string>{"4.0"};
    for (const std::string& rcut : cutoffs) {
      const std::string name = file.substr(0, file.size() - 3) + "_" + rcut;
      std::string text = std::regex_replace(section, std::regex("(rcut|r_max): 4\\.0"), "$1: " + rcut);
      write_text(dir / (name + ".yaml"), text + training);
      const CommandResult r = run_command("cd " + dir.path() + " && " + kMlip + " train " + name + ".yaml --finetune " +
                                          fixture + file + " -o " + name);
      EXPECT_EQ(r.exit_code, 0) << file << " rcut " << rcut << "\n" << r.out << r.err;
      EXPECT_TRUE(fs::exists(dir / (name + "/model.ckpt-1.pt"))) << name;
    }
    // A cutoff that differs is refused, with both values as numbers.
    const std::string name = file.substr(0, file.size() - 3) + "_other";
    write_text(dir / (name + ".yaml"),
               std::regex_replace(section, std::regex("(rcut|r_max): 4\\.0"), "$1: 4.5") + training);
    const CommandResult other = run_command("cd " + dir.path() + " && " + kMlip + " train " + name +
                                            ".yaml --finetune " + fixture + file + " -o " + name);
    EXPECT_EQ(other.exit_code, 1) << file << other.out;
    EXPECT_TRUE(contains(other.err, "differs: the pretrained model has 4")) << file << ": " << other.err;
    EXPECT_TRUE(contains(other.err, ", the input 4.5")) << file << ": " << other.err;
    EXPECT_FALSE(fs::exists(dir / name)) << "the refused run left its output folder";
  }
}

INSTANTIATE_TEST_SUITE_P(Models, FinetuneTest, ::testing::Values(kSeFloat64, kSeFloat32, kSeTwoSided, kEquivariant),
                         [](const ::testing::TestParamInfo<ModelCase>& info) { return info.param.name; });

}  // namespace
