#include <gtest/gtest.h>
#include <torch/script.h>
#include <torch/serialize.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <regex>
#include <sstream>
#include <thread>

#include <unistd.h>

#include "data/npy.h"
#include "test_util.h"

namespace fs = std::filesystem;

namespace {

using mlip::test::run_command;
using mlip::test::TempDir;
using mlip::test::write_text;
using mlip::test::write_system;
const std::string kMlip = MLIP_EXE;

std::string input_yaml(int steps, const std::string& extra_training = "") {
  return "model:\n"
         "  type_map: [O, H]\n"
         "  descriptor: {type: se_e2_a, sel: [8, 16], rcut: 4.0, rcut_smth: 1.0, neuron: [4, 8], axis_neuron: 4,\n"
         "               type_one_side: true, seed: 3}\n"
         "  fitting_net: {neuron: [8, 8], resnet_dt: true, seed: 3}\n"
         "learning_rate: {type: exp, start_lr: 0.005, stop_lr: 1.0e-4, decay_steps: 5}\n"
         "loss: {type: ener, start_pref_e: 0.02, limit_pref_e: 1, start_pref_f: 1000, limit_pref_f: 1}\n"
         "training:\n"
         "  training_data: {systems: [data/sys_a, data/sys_b], batch_size: [2, 1]}\n"
         "  validation_data: {systems: [data/sys_v], batch_size: 2, numb_btch: 2}\n"
         "  numb_steps: " + std::to_string(steps) + "\n"
         "  seed: 5\n"
         "  disp_freq: 5\n"
         "  save_freq: 10\n"
         "  max_ckpt_keep: 2\n" + extra_training;
}

class TrainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    write_system(dir_ / "data/sys_a", 2, 4, 8, 1);
    write_system(dir_ / "data/sys_b", 3, 6, 6, 2);
    write_system(dir_ / "data/sys_v", 2, 4, 5, 3);
  }
  /// Runs `mlip <args>` in the test folder.
  mlip::test::CommandResult mlip(const std::string& args) { return run_command("cd " + dir_.path() + " && " + kMlip + " " + args); }
  std::string read(const std::string& name) {
    std::ifstream f(dir_ / name);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  TempDir dir_;
};

std::vector<torch::Tensor> parameters_of(const std::string& path) {
  auto m = torch::jit::load(path);
  std::vector<torch::Tensor> out;
  for (const auto& p : m.named_parameters()) out.push_back(p.value.clone());
  return out;
}

TEST_F(TrainTest, SeedMakesRunsReproducibleAndLcurveHasTheSpecifiedShape) {
  write_text(dir_ / "input.yaml", input_yaml(20));
  auto r1 = mlip("train input.yaml -o run1");
  ASSERT_EQ(r1.exit_code, 0) << r1.out << r1.err;
  auto r2 = mlip("train input.yaml -o run2");
  ASSERT_EQ(r2.exit_code, 0) << r2.err;
  const std::string l1 = read("run1/lcurve.out");
  EXPECT_EQ(l1, read("run2/lcurve.out"));
  std::istringstream lines(l1);
  std::string header;
  std::getline(lines, header);
  EXPECT_EQ(header, "# step rmse_val rmse_trn rmse_e_val rmse_e_trn rmse_f_val rmse_f_trn lr");
  std::vector<int> steps;
  for (std::string line; std::getline(lines, line);) {
    std::istringstream ls(line);
    int step;
    ls >> step;
    steps.push_back(step);
    int cols = 1;
    for (double v; ls >> v;) ++cols;
    EXPECT_EQ(cols, 8) << line;
  }
  EXPECT_EQ(steps, (std::vector<int>{1, 5, 10, 15, 20}));
  auto p1 = parameters_of(dir_ / "run1/model.ckpt-20.pt"), p2 = parameters_of(dir_ / "run2/model.ckpt-20.pt");
  ASSERT_EQ(p1.size(), p2.size());
  for (size_t k = 0; k < p1.size(); ++k) EXPECT_TRUE(torch::equal(p1[k], p2[k]));
  // The statistics line and the minimum-norm bias regression are printed.
  EXPECT_NE(r1.out.find("per-atom energy RMSE of the linear fit"), std::string::npos) << r1.out;
  // Rotation: max_ckpt_keep 2 keeps 10 and 20; the pointer and the link name the newest.
  EXPECT_TRUE(fs::exists(dir_ / "run1/model.ckpt-10.pt"));
  EXPECT_EQ(read("run1/checkpoint"), "model.ckpt-20.pt\n");
  EXPECT_EQ(fs::read_symlink(dir_ / "run1/model.ckpt.pt").string(), "model.ckpt-20.pt");
  for (const auto& e : fs::directory_iterator(dir_ / "run1"))
    EXPECT_EQ(e.path().filename().string().find(".mlip-tmp-"), std::string::npos) << "temporary file left: " << e.path();
}

/// The numbers of an lcurve.out or a --step-times file, line by line (comment lines left out).
std::vector<std::vector<double>> lcurve_numbers(const std::string& text) {
  std::vector<std::vector<double>> rows;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    rows.emplace_back(std::istream_iterator<double>(fields), std::istream_iterator<double>());
  }
  return rows;
}

TEST_F(TrainTest, CountOpsWritesEachStepsOperatorCallsAndAutogradNodes) {
  // Without workers every frame is made before the first step, so the counts are the steps'
  // alone and the same in two runs (the sampler is seeded).
  write_text(dir_ / "input.yaml", input_yaml(6, "  data_workers: 0\n"));
  auto plain = mlip("train input.yaml -o plain --step-times plain.txt");
  ASSERT_EQ(plain.exit_code, 0) << plain.out << plain.err;
  for (const auto& row : lcurve_numbers(read("plain.txt"))) EXPECT_EQ(row.size(), 3u);
  std::vector<std::vector<double>> runs[2];
  for (int k = 0; k < 2; ++k) {
    const std::string name = "counted" + std::to_string(k);
    auto r = mlip("train input.yaml -o " + name + " --step-times " + name + ".txt --count-ops");
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_NE(read(name + ".txt").find("operators"), std::string::npos);
    runs[k] = lcurve_numbers(read(name + ".txt"));
  }
  ASSERT_EQ(runs[0].size(), 6u);
  ASSERT_EQ(runs[1].size(), 6u);
  for (size_t s = 0; s < 6; ++s) {
    ASSERT_EQ(runs[0][s].size(), 6u);
    EXPECT_EQ(runs[0][s][0], double(s + 1));
    // A forward, a backward and Adam: hundreds of operator calls, tens of autograd nodes.
    EXPECT_GT(runs[0][s][3], 100) << "step " << s + 1;
    EXPECT_GT(runs[0][s][4], 10) << "step " << s + 1;
    EXPECT_GT(runs[0][s][3], runs[0][s][4]) << "step " << s + 1;
    EXPECT_GE(runs[0][s][5], 0) << "step " << s + 1;
    for (size_t c = 3; c < 6; ++c) EXPECT_EQ(runs[0][s][c], runs[1][s][c]) << "step " << s + 1 << " column " << c;
  }
  // The weights do not depend on counting.
  const auto pa = parameters_of(dir_ / "plain/model.ckpt-6.pt"), pb = parameters_of(dir_ / "counted0/model.ckpt-6.pt");
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t k = 0; k < pa.size(); ++k) EXPECT_TRUE(torch::equal(pa[k], pb[k])) << "parameter " << k;
  // Reads from the device: on the CPU the non-finite guard reads each step's loss (one); the
  // device-generic path (a GPU's) reads nothing else, and the step from static buffers (what a
  // CUDA graph captures) reads nothing at all (docs/device.md "Static shapes").
  for (const auto& [name, reads] : std::vector<std::pair<std::string, double>>{{"generic", 1}, {"static", 0}}) {
    SCOPED_TRACE(name);
    write_text(dir_ / (name + ".yaml"), input_yaml(4, std::string("  data_workers: 0\n") +
                                                          (name == "static" ? "  cuda_graphs: true\n" : "")));
    auto r = run_command("cd " + dir_.path() + " && MLIP_SE_E2_A_PATH=generic " + kMlip + " train " + name +
                         ".yaml -o " + name + " --step-times " + name + ".txt --count-ops");
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    const auto rows = lcurve_numbers(read(name + ".txt"));
    ASSERT_EQ(rows.size(), 4u);
    for (const auto& row : rows) {
      ASSERT_EQ(row.size(), 6u);
      EXPECT_EQ(row[5], reads) << "step " << row[0];
    }
  }
  // The equivariant model on the GPU's code (MLIP_HOST_KERNELS=off: LibTorch's operations, and with
  // MLIP_DEVICE_KERNELS=on the CUDA kernels' host twins): the usual step reads only the guard's
  // loss, the step from static buffers nothing.
  const std::string equivariant = std::regex_replace(
      input_yaml(4, "  data_workers: 0\n"), std::regex("model:\n(  .*\n)+"),
      "model: {type: equivariant, type_map: [O, H], r_max: 4.0, num_features: 4, l_max: 1, num_layers: 2, "
      "correlation: 2, radial_width: 8, seed: 4}\n");
  for (const std::string kernels : {"off", "on"}) {
    for (const auto& [name, reads] : std::vector<std::pair<std::string, double>>{{"eq-usual", 1}, {"eq-static", 0}}) {
      SCOPED_TRACE(name + ", device kernels " + kernels);
      write_text(dir_ / (name + ".yaml"), equivariant + (name == "eq-static" ? "  cuda_graphs: true\n" : ""));
      auto r = run_command("cd " + dir_.path() + " && MLIP_HOST_KERNELS=off MLIP_DEVICE_KERNELS=" + kernels + " " +
                           kMlip + " train " + name + ".yaml -o " + name + kernels + " --step-times " + name +
                           kernels + ".txt --count-ops");
      ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
      const auto rows = lcurve_numbers(read(name + kernels + ".txt"));
      ASSERT_EQ(rows.size(), 4u);
      for (const auto& row : rows) {
        ASSERT_EQ(row.size(), 6u);
        EXPECT_EQ(row[5], reads) << "step " << row[0];
      }
    }
  }
  auto alone = mlip("train input.yaml -o alone --count-ops");
  EXPECT_EQ(alone.exit_code, 2);
  EXPECT_NE(alone.err.find("--count-ops needs --step-times <file>"), std::string::npos) << alone.err;
}

// The kernel switches (models/kernels/host_tensor.h, device_kernels.h) take "on" or "off": another
// value is an error naming the variable and the value, before any step, exit non-zero.
TEST_F(TrainTest, ABadKernelSwitchIsAnErrorNamingTheVariable) {
  write_text(dir_ / "switch.yaml", input_yaml(2));
  for (const std::string variable : {"MLIP_HOST_KERNELS", "MLIP_DEVICE_KERNELS"}) {
    auto r = run_command("cd " + dir_.path() + " && " + variable + "=yes " + kMlip + " train switch.yaml -o " +
                         variable);
    EXPECT_NE(r.exit_code, 0) << variable;
    EXPECT_NE(r.err.find(variable + ": expected \"on\" or \"off\" (or unset), got \"yes\""), std::string::npos)
        << r.err;
    EXPECT_FALSE(fs::exists(fs::path(dir_.path()) / variable / "model.ckpt.pt")) << variable;
  }
}

TEST_F(TrainTest, RestartContinuesExactly) {
  // 200 steps in one run equal 100 steps + --restart + 100 steps: weights and lcurve lines.
  const std::string text = std::regex_replace(input_yaml(200), std::regex("max_ckpt_keep: 2"), "max_ckpt_keep: 100");
  write_text(dir_ / "input.yaml", text);
  ASSERT_EQ(mlip("train input.yaml -o full").exit_code, 0);
  // A second run of the same input, cut back to its state at step 100 (checkpoints after it
  // removed, lcurve truncated), then restarted from the step-100 checkpoint.
  ASSERT_EQ(mlip("train input.yaml -o part").exit_code, 0);
  for (int s = 110; s <= 200; s += 10) fs::remove(dir_ / ("part/model.ckpt-" + std::to_string(s) + ".pt"));
  std::string lc = read("part/lcurve.out");
  lc = lc.substr(0, lc.find("    105 "));
  write_text(dir_ / "part/lcurve.out", lc);
  auto r = mlip("train input.yaml -o part --restart part/model.ckpt-100.pt");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("restarted from part/model.ckpt-100.pt at step 100"), std::string::npos) << r.out;
  EXPECT_EQ(read("part/lcurve.out"), read("full/lcurve.out"));
  EXPECT_EQ(std::count(lc.begin(), lc.end(), '\n'), 22) << "header + step 1 + 20 lines up to step 100";
  auto a = parameters_of(dir_ / "full/model.ckpt-200.pt"), b = parameters_of(dir_ / "part/model.ckpt-200.pt");
  ASSERT_EQ(a.size(), b.size());
  for (size_t k = 0; k < a.size(); ++k)
    EXPECT_TRUE(torch::equal(a[k], b[k])) << "parameter " << k << " differs by " << (a[k] - b[k]).abs().max().item<double>();
}

TEST_F(TrainTest, CacheBudgetAndWorkersDoNotChangeTheTraining) {
  // The water data (192 atoms a frame) when present: every frame cached and made by the training
  // thread, against frames made by 2 worker threads and never cached, and a budget of a few
  // frames with one worker. Same lcurve and weights, bit for bit (docs/data.md "Determinism").
  const std::string water = mlip::test::shared_water_dir();
  // Without it (a clone on its own), synthetic systems large enough that a budget of 1 MB holds
  // only some of their frames: 36 and 30 atoms, about 0.2 MB a made frame at this sel, 10 frames.
  if (water.empty()) {
    std::cout << "[ note ] ../shared/data/water not found: synthetic systems instead\n";
    write_system(dir_ / "data/big_a", 12, 24, 5, 11);
    write_system(dir_ / "data/big_b", 10, 20, 5, 12);
  }
  const std::string systems = water.empty() ? "[data/big_a, data/big_b]" : "[" + water + "/data_0, " + water + "/data_1]";
  const std::string valid = water.empty() ? "[data/sys_v]" : "[" + water + "/data_3]";
  auto text = [&](const std::string& cache, int workers) {
    return "model:\n"
           "  type_map: [O, H]\n"
           "  descriptor: {type: se_e2_a, sel: [16, 32], rcut: 3.5, rcut_smth: 1.0, neuron: [4, 8], axis_neuron: 4,\n"
           "               type_one_side: true, seed: 3}\n"
           "  fitting_net: {neuron: [8, 8], resnet_dt: true, seed: 3}\n"
           "learning_rate: {type: exp, start_lr: 0.005, stop_lr: 1.0e-4, decay_steps: 5}\n"
           "loss: {type: ener, start_pref_e: 0.02, limit_pref_e: 1, start_pref_f: 1000, limit_pref_f: 1}\n"
           "training:\n"
           "  training_data: {systems: " + systems + ", batch_size: 2}\n"
           "  validation_data: {systems: " + valid + ", batch_size: 1, numb_btch: 2}\n"
           "  numb_steps: 40\n  seed: 5\n  disp_freq: 5\n  save_freq: 40\n"
           "  cache_mb: " + cache + "\n  data_workers: " + std::to_string(workers) + "\n";
  };
  // Without workers the frames are made before the first step, all of them (cache_mb: all) or
  // until the cache is full (1 MB, 0 workers; docs/data.md "Frames made before the first step").
  const std::vector<std::pair<std::string, int>> runs = {{"all", 0}, {"0", 2}, {"1", 1}, {"1", 0}};
  for (size_t k = 0; k < runs.size(); ++k) {
    write_text(dir_ / ("in" + std::to_string(k) + ".yaml"), text(runs[k].first, runs[k].second));
    auto r = mlip("train in" + std::to_string(k) + ".yaml -o run" + std::to_string(k));
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    const std::string note = "is smaller than one made frame";
    const size_t first = r.out.find(note);
    if (runs[k].first == "0") {
      // Said once, however many frames were made again.
      EXPECT_NE(first, std::string::npos) << r.out;
      EXPECT_EQ(r.out.find(note, first + 1), std::string::npos) << r.out;
    } else if (runs[k].first == "all") {
      EXPECT_EQ(first, std::string::npos) << r.out;
    }
    EXPECT_NE(r.out.find("waited for data in "), std::string::npos) << r.out;
    const bool made_first = r.out.find("training frames made before the first step") != std::string::npos;
    EXPECT_EQ(made_first, runs[k].second == 0) << r.out;
    if (runs[k].first == "all") {
      EXPECT_NE(r.out.find("waited for data in 0 of 40 steps"), std::string::npos) << r.out;
    }
    if (made_first && runs[k].first == "1") {
      // 1 MB holds some of the frames, not all: the others are made when first used.
      EXPECT_NE(r.out.find("the cache is full"), std::string::npos) << r.out;
    }
  }
  const std::string lcurve = read("run0/lcurve.out");
  EXPECT_EQ(std::count(lcurve.begin(), lcurve.end(), '\n'), 10) << lcurve;
  const auto reference = parameters_of(dir_ / "run0/model.ckpt-40.pt");
  for (size_t k = 1; k < runs.size(); ++k) {
    EXPECT_EQ(read("run" + std::to_string(k) + "/lcurve.out"), lcurve) << "cache_mb " << runs[k].first;
    const auto p = parameters_of(dir_ / ("run" + std::to_string(k) + "/model.ckpt-40.pt"));
    ASSERT_EQ(p.size(), reference.size());
    for (size_t i = 0; i < p.size(); ++i) EXPECT_TRUE(torch::equal(p[i], reference[i])) << "cache_mb " << runs[k].first;
  }
}

TEST_F(TrainTest, TrainingLowersTheLossOfBothModels) {
  // 100 steps at a steady learning rate and prefactors: the validation loss (the frames are
  // never trained on, the raw weights are used) falls well below its value at step 1. A sign
  // error in the loss gradient or in a model's backward makes it rise instead.
  const std::string schedule =
      "learning_rate: {type: exp, start_lr: 0.02, stop_lr: 0.01, decay_steps: 50}\n"
      "loss: {type: ener, start_pref_e: 1, limit_pref_e: 1, start_pref_f: 10, limit_pref_f: 10}\n";
  std::string se = std::regex_replace(input_yaml(400), std::regex("learning_rate:.*\n"), "");
  se = std::regex_replace(se, std::regex("loss:.*\n"), schedule);
  se = std::regex_replace(se, std::regex("disp_freq: 5"), "disp_freq: 400");
  const std::string equivariant = std::regex_replace(
      se, std::regex("model:\n(  .*\n)+"),
      "model: {type: equivariant, type_map: [O, H], r_max: 4.0, num_features: 8, l_max: 1, num_layers: 2,\n"
      "        radial_width: 8, num_bessels: 4, seed: 3}\n");
  for (const auto& [name, text] : {std::pair<std::string, std::string>{"se", se}, {"equivariant", equivariant}}) {
    write_text(dir_ / (name + ".yaml"), text + "  ema_decay: 0\n");
    auto r = mlip("train " + name + ".yaml -o " + name);
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    std::istringstream lcurve(read(name + "/lcurve.out"));
    std::vector<std::vector<double>> rows;
    for (std::string line; std::getline(lcurve, line);) {
      if (line.empty() || line[0] == '#') continue;
      std::istringstream fields(line);
      rows.emplace_back(std::istream_iterator<double>(fields), std::istream_iterator<double>());
    }
    ASSERT_EQ(rows.size(), 2u) << name << ": lines at steps 1 and 400";
    EXPECT_LT(rows[1][1], 0.5 * rows[0][1]) << name << ": rmse_val at step 1 " << rows[0][1] << ", at 400 " << rows[1][1];
  }
}

/// The raw weights a checkpoint holds beside the averaged ones (extra file "weights").
std::vector<torch::Tensor> raw_weights_of(const std::string& path) {
  torch::jit::ExtraFilesMap extra{{"weights", ""}};
  torch::jit::load(path, torch::kCPU, extra);
  std::vector<torch::Tensor> out;
  std::istringstream in(extra["weights"]);
  torch::load(out, in);
  return out;
}

TEST_F(TrainTest, MovingAverageLeavesTheTrajectoryAndCheckpointsHoldTheAverage) {
  // The same run without (ema_decay 0) and with the moving average, a checkpoint every step.
  const std::string text = std::regex_replace(
      std::regex_replace(input_yaml(12), std::regex("save_freq: 10"), "save_freq: 1"), std::regex("max_ckpt_keep: 2"),
      "max_ckpt_keep: 100");
  write_text(dir_ / "raw.yaml", text + "  ema_decay: 0\n");
  write_text(dir_ / "avg.yaml", text + "  ema_decay: 0.8\n");
  auto r = mlip("train raw.yaml -o raw");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.out.find("moving average"), std::string::npos) << r.out;
  auto a = mlip("train avg.yaml -o avg");
  ASSERT_EQ(a.exit_code, 0) << a.out << a.err;
  EXPECT_NE(a.out.find("weights: moving average with ema_decay 0.8"), std::string::npos) << a.out;
  std::vector<torch::Tensor> previous;
  for (int s = 1; s <= 12; ++s) {
    const std::string name = "/model.ckpt-" + std::to_string(s) + ".pt";
    const auto w = parameters_of(dir_ / ("raw" + name));
    const auto raw = raw_weights_of(dir_ / ("avg" + name));
    const auto avg = parameters_of(dir_ / ("avg" + name));
    ASSERT_EQ(raw.size(), w.size());
    ASSERT_EQ(avg.size(), w.size());
    // The optimiser's trajectory is the same with and without the average.
    for (size_t k = 0; k < w.size(); ++k) EXPECT_TRUE(torch::equal(raw[k], w[k])) << "step " << s << " param " << k;
    // The module's parameters follow a_s = d_s a_(s-1) + (1 - d_s) w_s, d_s = min(0.8, (1+s)/(10+s)).
    if (s > 1) {
      const double d = std::min(0.8, (1.0 + s) / (10.0 + s));
      double err = 0, moved = 0;
      for (size_t k = 0; k < w.size(); ++k) {
        err = std::max(err, (avg[k] - (d * previous[k] + (1 - d) * w[k])).abs().max().item<double>());
        moved = std::max(moved, (avg[k] - w[k]).abs().max().item<double>());
      }
      EXPECT_LT(err, 1e-13) << "step " << s;
      EXPECT_GT(moved, 1e-6) << "step " << s << ": the average should lag behind the weights";
    }
    previous = avg;
  }
  // Training columns are the same; the validation columns evaluate the average, so they differ.
  auto columns = [](const std::string& lcurve, std::vector<int> cols) {
    std::istringstream lines(lcurve);
    std::string out;
    for (std::string line; std::getline(lines, line);) {
      if (line[0] == '#') continue;
      std::istringstream ls(line);
      std::vector<std::string> v{std::istream_iterator<std::string>(ls), std::istream_iterator<std::string>()};
      for (int c : cols) out += v[size_t(c)] + " ";
      out += "\n";
    }
    return out;
  };
  const std::string lr = read("raw/lcurve.out"), la = read("avg/lcurve.out");
  EXPECT_EQ(columns(lr, {0, 2, 4, 6, 7}), columns(la, {0, 2, 4, 6, 7}));
  EXPECT_NE(columns(lr, {5}), columns(la, {5}));
  // `mlip test` of a checkpoint evaluates the average: its force RMSE is the one of a model
  // with the averaged parameters, which differs from that of the raw weights.
  auto t_avg = mlip("test -m avg/model.ckpt-12.pt -s data/sys_v");
  auto t_raw = mlip("test -m raw/model.ckpt-12.pt -s data/sys_v");
  ASSERT_EQ(t_avg.exit_code, 0) << t_avg.err;
  EXPECT_NE(t_avg.out.substr(t_avg.out.find("Force  RMSE")), t_raw.out.substr(t_raw.out.find("Force  RMSE")));
}

TEST_F(TrainTest, RestartAcrossEmaSettingsKeepsTheTrajectory) {
  // Adam's trajectory does not depend on the average: a run restarted with the average turned
  // off (or on) at step 10 reaches the raw weights of a run that never had one.
  write_text(dir_ / "raw.yaml", input_yaml(20) + "  ema_decay: 0\n");
  write_text(dir_ / "avg.yaml", input_yaml(20) + "  ema_decay: 0.9\n");
  ASSERT_EQ(mlip("train raw.yaml -o raw").exit_code, 0);
  ASSERT_EQ(mlip("train avg.yaml -o avg").exit_code, 0);
  auto off = mlip("train raw.yaml -o off --restart avg/model.ckpt-10.pt");
  ASSERT_EQ(off.exit_code, 0) << off.err;
  EXPECT_NE(off.out.find("moving average of the weights in avg/model.ckpt-10.pt is dropped"), std::string::npos) << off.out;
  auto on = mlip("train avg.yaml -o on --restart raw/model.ckpt-10.pt");
  ASSERT_EQ(on.exit_code, 0) << on.err;
  EXPECT_NE(on.out.find("has no moving average of the weights"), std::string::npos) << on.out;
  const auto w = parameters_of(dir_ / "raw/model.ckpt-20.pt");
  const auto w_off = parameters_of(dir_ / "off/model.ckpt-20.pt");
  const auto w_on = raw_weights_of(dir_ / "on/model.ckpt-20.pt");
  ASSERT_EQ(w_off.size(), w.size());
  ASSERT_EQ(w_on.size(), w.size());
  for (size_t k = 0; k < w.size(); ++k) {
    EXPECT_TRUE(torch::equal(w_off[k], w[k])) << "param " << k;
    EXPECT_TRUE(torch::equal(w_on[k], w[k])) << "param " << k;
  }
}

TEST_F(TrainTest, SigintSavesACheckpointAndExits130) {
  write_text(dir_ / "input.yaml", input_yaml(100000));
  // Start in the background, wait for the first lcurve line, then Ctrl-C.
  const std::string log = dir_ / "log.txt";
  const std::string run = "sigint_run_" + std::to_string(::getpid());
  const std::string cmd = "cd " + dir_.path() + " && (" + kMlip + " train input.yaml -o " + run + " > " + log +
                          " 2>&1; echo $? > rc.txt) & echo $! > " + (dir_ / "pid.txt");
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  for (int k = 0; k < 600 && read(run + "/lcurve.out").find("      5 ") == std::string::npos; ++k)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_NE(read(run + "/lcurve.out").find("      5 "), std::string::npos) << read("log.txt");
  // Anchored on the binary, so that pkill does not match the shell that runs it.
  ASSERT_EQ(std::system(("pkill -INT -f '^" + kMlip + " train input.yaml -o " + run + "'").c_str()), 0);
  for (int k = 0; k < 600 && !fs::exists(dir_ / "rc.txt"); ++k) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(read("rc.txt"), "130\n") << read("log.txt");
  std::smatch m;
  const std::string out = read("log.txt");
  ASSERT_TRUE(std::regex_search(out, m, std::regex(R"(interrupted at step (\d+): saved (\S+))"))) << out;
  EXPECT_TRUE(fs::exists(dir_ / m[2].str()));
  EXPECT_EQ(read(run + "/checkpoint"), fs::path(m[2].str()).filename().string() + "\n");
}

TEST_F(TrainTest, InitModelFreezeAndTest) {
  write_text(dir_ / "input.yaml", input_yaml(10));
  ASSERT_EQ(mlip("train input.yaml -o first").exit_code, 0);
  auto r = mlip("train input.yaml -o second --init-model first");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find("statistics from"), std::string::npos) << "init-model keeps the statistics";
  EXPECT_NE(read("second/lcurve.out").find("\n      1 "), std::string::npos) << "init-model starts at step 0";

  auto f = mlip("freeze -c second -o frozen.pt");
  ASSERT_EQ(f.exit_code, 0) << f.err;
  torch::jit::ExtraFilesMap extra{{"r_max", ""}, {"type_names", ""}, {"num_types", ""}, {"model_dtype", ""},
                                  {"model_type", ""}, {"mlip_version", ""}, {"config", ""}, {"units", ""}, {"optimizer", ""}};
  torch::jit::load(dir_ / "frozen.pt", torch::kCPU, extra);
  EXPECT_EQ(extra["r_max"], "4.000000");
  EXPECT_EQ(extra["type_names"], "O H");
  EXPECT_EQ(extra["num_types"], "2");
  EXPECT_EQ(extra["model_dtype"], "float64");
  EXPECT_EQ(extra["model_type"], "se_e2_a");
  EXPECT_EQ(extra["units"], "eV Angstrom");
  EXPECT_NE(extra["config"].find("numb_steps: 10"), std::string::npos);
  EXPECT_TRUE(extra["optimizer"].empty()) << "training state must not be frozen";
  torch::jit::ExtraFilesMap raw{{"weights", ""}};
  torch::jit::load(dir_ / "frozen.pt", torch::kCPU, raw);
  EXPECT_TRUE(raw["weights"].empty()) << "the raw weights are training state";

  auto t1 = mlip("test -m frozen.pt -s data/sys_v -d detail_frozen");
  auto t2 = mlip("test -m second/model.ckpt-10.pt -s data/sys_v -d detail_ckpt");
  ASSERT_EQ(t1.exit_code, 0) << t1.err;
  ASSERT_EQ(t2.exit_code, 0) << t2.err;
  EXPECT_NE(t1.out.find("# number of test data : 5"), std::string::npos) << t1.out;
  EXPECT_NE(t1.out.find("Force  RMSE"), std::string::npos);
  // The numbers after the system line are the same for the frozen model and its checkpoint.
  EXPECT_EQ(t1.out.substr(t1.out.find("# number of test data")), t2.out.substr(t2.out.find("# number of test data")));
  EXPECT_EQ(read("detail_frozen.e.out"), read("detail_ckpt.e.out"));
  EXPECT_EQ(read("detail_frozen.f.out"), read("detail_ckpt.f.out"));
  // 1 header + 5 frames; 1 header + 5 * 6 atoms.
  const std::string e_out = read("detail_frozen.e.out"), f_out = read("detail_frozen.f.out");
  EXPECT_EQ(std::count(e_out.begin(), e_out.end(), '\n'), 6);
  EXPECT_EQ(std::count(f_out.begin(), f_out.end(), '\n'), 31);
}

// model.type: equivariant through the same commands: statistics, training (autograd with the
// force loss), an exact restart, freeze and test (frozen == checkpoint).
TEST_F(TrainTest, EquivariantModelTrainsRestartsFreezesAndTests) {
  std::string text = std::regex_replace(input_yaml(20), std::regex("model:\n(  .*\n)+"),
                                        "model: {type: equivariant, type_map: [O, H], r_max: 4.0, num_features: 4, "
                                        "l_max: 1, num_layers: 2, radial_width: 8, seed: 4}\n");
  text = std::regex_replace(text, std::regex("max_ckpt_keep: 2"), "max_ckpt_keep: 10");
  write_text(dir_ / "input.yaml", text);
  auto full = mlip("train input.yaml -o full");
  ASSERT_EQ(full.exit_code, 0) << full.err << full.out;
  EXPECT_NE(full.out.find("model: equivariant, float64, r_max 4 Å, l_max 1 with parity"), std::string::npos) << full.out;
  EXPECT_NE(full.out.find("avg_num_neighbors"), std::string::npos) << full.out;
  auto part = mlip("train input.yaml -o part --restart full/model.ckpt-10.pt");
  ASSERT_EQ(part.exit_code, 0) << part.err;
  auto a = parameters_of(dir_ / "full/model.ckpt-20.pt"), b = parameters_of(dir_ / "part/model.ckpt-20.pt");
  ASSERT_EQ(a.size(), b.size());
  for (size_t k = 0; k < a.size(); ++k) EXPECT_TRUE(torch::equal(a[k], b[k])) << "parameter " << k;
  const std::string lf = read("full/lcurve.out"), lp = read("part/lcurve.out");
  ASSERT_NE(lp.find("     15 "), std::string::npos) << lp;
  EXPECT_EQ(lf.substr(lf.find("\n     15 ") + 1), lp.substr(lp.find("     15 "))) << "lcurve after the restart";
  // The statistics (scale, shift, avg_num_neighbors) travel with the checkpoint and the frozen file.
  auto m = torch::jit::load(dir_ / "full/model.ckpt-20.pt");
  EXPECT_GT(m.attr("avg_num_neighbors").toDouble(), 1.0);
  EXPECT_NE(m.attr("shift").toTensor()[0].item<double>(), 0.0);
  ASSERT_EQ(mlip("freeze -c full -o frozen.pt").exit_code, 0);
  torch::jit::ExtraFilesMap extra{{"model_type", ""}};
  torch::jit::load(dir_ / "frozen.pt", torch::kCPU, extra);
  EXPECT_EQ(extra["model_type"], "equivariant");
  auto t1 = mlip("test -m frozen.pt -s data/sys_v");
  auto t2 = mlip("test -m full/model.ckpt-20.pt -s data/sys_v");
  ASSERT_EQ(t1.exit_code, 0) << t1.err;
  EXPECT_EQ(t1.out.substr(t1.out.find("# number of test data")), t2.out.substr(t2.out.find("# number of test data")));
  // A misspelled key of this model is named, with the nearest known one.
  write_text(dir_ / "bad.yaml", std::regex_replace(text, std::regex("num_layers"), "num_layer"));
  auto bad = mlip("train bad.yaml -o bad");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("model.num_layer: unknown key"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("num_layers"), std::string::npos) << bad.err;
}

// training.cuda_graphs: true on the CPU (docs/device.md "Static shapes"): no capture (said once,
// with the reason), every step from the static buffers (the equivariant model's batches padded
// to bucket sizes, se_e2_a on its device-generic path), training as the usual step does: the
// same learning curve and weights to round-off, both models, two systems of batches of 2 and 1.
TEST_F(TrainTest, CudaGraphsOnTheCpuRunTheStaticStepAndTrainTheSame) {
  // sys_c has as many atoms as sys_a (6) and as many frames a batch (2), in other proportions of
  // O and H: the same batch size, other shapes for the types' tables of se_e2_a.
  write_system(dir_ / "data/sys_c", 3, 3, 6, 4);
  const std::string se_e2_a =
      std::regex_replace(input_yaml(20), std::regex("systems: \\[data/sys_a, data/sys_b\\], batch_size: \\[2, 1\\]"),
                         "systems: [data/sys_a, data/sys_b, data/sys_c], batch_size: [2, 1, 2]");
  ASSERT_NE(se_e2_a.find("data/sys_c"), std::string::npos);
  const std::string equivariant = std::regex_replace(
      se_e2_a, std::regex("model:\n(  .*\n)+"),
      "model: {type: equivariant, type_map: [O, H], r_max: 4.0, num_features: 4, l_max: 1, num_layers: 2, "
      "correlation: 2, radial_width: 8, seed: 4}\n");
  for (const auto& [name, text] :
       std::vector<std::pair<std::string, std::string>>{{"se_e2_a", se_e2_a}, {"equivariant", equivariant}}) {
    SCOPED_TRACE(name);
    write_text(dir_ / (name + "-usual.yaml"), text + "  cuda_graphs: false\n");
    write_text(dir_ / (name + "-static.yaml"), text + "  cuda_graphs: true\n");
    // se_e2_a's usual step on its device-generic path too, so that both compute the same.
    auto usual = run_command("cd " + dir_.path() + " && MLIP_SE_E2_A_PATH=generic " + kMlip + " train " + name +
                             "-usual.yaml -o " + name + "-usual");
    auto fixed = mlip("train " + name + "-static.yaml -o " + name + "-static");
    ASSERT_EQ(usual.exit_code, 0) << usual.out << usual.err;
    ASSERT_EQ(fixed.exit_code, 0) << fixed.out << fixed.err;
    EXPECT_EQ(usual.out.find("static buffers"), std::string::npos) << usual.out;
    EXPECT_NE(fixed.out.find("step: from static buffers (training.cuda_graphs), not captured: "), std::string::npos)
        << fixed.out;
    const auto a = lcurve_numbers(read(name + "-usual/lcurve.out"));
    const auto b = lcurve_numbers(read(name + "-static/lcurve.out"));
    ASSERT_EQ(a.size(), 5u);
    ASSERT_EQ(a.size(), b.size());
    for (size_t r = 0; r < a.size(); ++r) {
      ASSERT_EQ(a[r].size(), b[r].size());
      for (size_t c = 0; c < a[r].size(); ++c)
        EXPECT_NEAR(a[r][c], b[r][c], 1e-3 * std::abs(a[r][c]) + 1e-12) << "lcurve line " << r << " column " << c;
    }
    const auto pa = parameters_of(dir_ / (name + "-usual/model.ckpt-20.pt"));
    const auto pb = parameters_of(dir_ / (name + "-static/model.ckpt-20.pt"));
    ASSERT_EQ(pa.size(), pb.size());
    for (size_t k = 0; k < pa.size(); ++k)
      EXPECT_LT((pa[k] - pb[k]).abs().max().item<double>(), 1e-8 * (1 + pa[k].abs().max().item<double>()))
          << "parameter " << k;
  }
}

/// The number after `label` in mlip test's output ("Energy RMSE/Natoms : 1.2e-03 eV").
double printed(const std::string& out, const std::string& label) {
  std::smatch m;
  if (!std::regex_search(out, m, std::regex(label + " *: *([-+0-9.eE]+)"))) return std::nan("");
  return std::stod(m[1]);
}

TEST_F(TrainTest, CompressMakesAFrozenModelThatTestsAsTheOriginal) {
  // mlip compress (docs/se_e2_a.md "Compression: the embedding nets as tables") from a frozen
  // model and from a training folder: a frozen model whose errors equal the original's, with its
  // header; the shortest distance from the training input (-t) or given.
  write_text(dir_ / "input.yaml", input_yaml(20));
  ASSERT_EQ(mlip("train input.yaml -o run").exit_code, 0);
  ASSERT_EQ(mlip("freeze -c run -o frozen.pt").exit_code, 0);
  auto made = mlip("compress -i frozen.pt -o compressed.pt -t input.yaml");
  ASSERT_EQ(made.exit_code, 0) << made.out << made.err;
  EXPECT_NE(made.out.find("shortest pair distance of the training data"), std::string::npos) << made.out;
  EXPECT_NE(made.out.find("emb_0: ŝ in ["), std::string::npos) << made.out;
  EXPECT_NE(made.out.find("compressed frozen.pt into compressed.pt"), std::string::npos) << made.out;
  torch::jit::ExtraFilesMap extra{{"compression", ""}, {"model_type", ""}};
  auto module = torch::jit::load(dir_ / "compressed.pt", torch::kCPU, extra);
  EXPECT_EQ(extra["model_type"], "se_e2_a");
  EXPECT_NE(extra["compression"].find("step 0.01\nextrapolate 5\ncheck_frequency -1\nmin_distance "), std::string::npos)
      << extra["compression"];
  EXPECT_TRUE(module.hasattr("emb_0_table"));
  auto plain = mlip("test -m frozen.pt -s data/sys_v");
  auto tabled = mlip("test -m compressed.pt -s data/sys_v");
  ASSERT_EQ(tabled.exit_code, 0) << tabled.err;
  for (const std::string label : {"Energy RMSE/Natoms", "Force  RMSE"}) {
    const double a = printed(plain.out, label), b = printed(tabled.out, label);
    EXPECT_NEAR(a, b, 1e-6 * std::abs(a)) << label;
  }
  // From the training folder, the distance given; the grid's options recorded.
  auto given = mlip("compress -i run -o given.pt --min-distance 0.8 -s 0.02 -e 3 -f 100");
  ASSERT_EQ(given.exit_code, 0) << given.err;
  torch::jit::ExtraFilesMap extra2{{"compression", ""}};
  torch::jit::load(dir_ / "given.pt", torch::kCPU, extra2);
  EXPECT_NE(extra2["compression"].find("step 0.02\nextrapolate 3\ncheck_frequency 100\nmin_distance 0.8"),
            std::string::npos)
      << extra2["compression"];
  // Refused: the output is the input; -t and --min-distance together; a bad step; an
  // equivariant model; training systems that are not where the stored input says.
  auto same = mlip("compress -i frozen.pt -o frozen.pt -t input.yaml");
  EXPECT_EQ(same.exit_code, 1);
  EXPECT_NE(same.err.find("that is the model being compressed"), std::string::npos) << same.err;
  auto both = mlip("compress -i frozen.pt -o x.pt -t input.yaml --min-distance 1");
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_NE(both.err.find("-t and --min-distance: give one of them"), std::string::npos) << both.err;
  auto step = mlip("compress -i frozen.pt -o x.pt -s -0.1 --min-distance 1");
  EXPECT_EQ(step.exit_code, 2);
  EXPECT_NE(step.err.find("-s: expected a positive number, got '-0.1'"), std::string::npos) << step.err;
  // Values that gave a model predicting NaN, a table far off, or no end (docs/se_e2_a.md
  // "Compression: the embedding nets as tables"): refused before any table is made.
  for (const auto& [arguments, message] : std::vector<std::pair<std::string, std::string>>{
           {"--min-distance 1e-300", "the shortest pair distance 1e-300 Å: expected at least 0.001 Å"},
           {"--min-distance 1e-6", "the shortest pair distance 1e-06 Å: expected at least 0.001 Å"},
           {"-s 1e300 --min-distance 1", "compress -s 1e+300: the fine grid would have 1 interval(s)"},
           {"-s 1e-9 --min-distance 1", "intervals (-s 1e-09 over ["},
           {"-e 1e9 --min-distance 1", "-e 1e+09), expected at most 2000000 per embedding net"}}) {
    auto refused = mlip("compress -i frozen.pt -o x.pt " + arguments);
    EXPECT_EQ(refused.exit_code, 1) << arguments << ": " << refused.err;
    EXPECT_NE(refused.err.find(message), std::string::npos) << arguments << ": " << refused.err;
    EXPECT_FALSE(fs::exists(dir_ / "x.pt")) << arguments;
  }
  auto elsewhere = run_command("cd / && " + kMlip + " compress -i " + (dir_ / "frozen.pt") + " -o " + (dir_ / "x.pt"));
  EXPECT_EQ(elsewhere.exit_code, 1);
  EXPECT_NE(elsewhere.err.find("does not exist here; give the training input (-t input.yaml)"), std::string::npos)
      << elsewhere.err;
  std::string eq = std::regex_replace(input_yaml(2), std::regex("model:\n(  .*\n)+"),
                                      "model: {type: equivariant, type_map: [O, H], r_max: 4.0, num_features: 4, "
                                      "l_max: 1, num_layers: 1, radial_width: 8, seed: 4}\n");
  write_text(dir_ / "eq.yaml", eq);
  ASSERT_EQ(mlip("train eq.yaml -o eq").exit_code, 0);
  auto equivariant = mlip("compress -i eq -o eqc.pt --min-distance 1");
  EXPECT_EQ(equivariant.exit_code, 1);
  EXPECT_NE(equivariant.err.find("the equivariant model has no compressed form"), std::string::npos) << equivariant.err;
}

// docs/robustness.md "An output is never one of the inputs": train, freeze, compress, test and
// change-bias refuse to write over what they read, by any name, and leave it as it was.
TEST_F(TrainTest, NoCommandWritesOverItsOwnInput) {
  write_text(dir_ / "input.yaml", input_yaml(2));
  ASSERT_EQ(mlip("train input.yaml -o run").exit_code, 0);
  ASSERT_EQ(mlip("freeze -c run -o frozen.pt").exit_code, 0);
  const std::string frame = "3\nProperties=species:S:1:pos:R:3:forces:R:3 energy=-20.5 pbc=\"F F F\"\n"
                            "O 0 0 0 0.1 0 0\nH 0.96 0 0 -0.1 0 0\nH -0.24 0.93 0 0 0 0\n";
  write_text(dir_ / "traj.extxyz", frame + frame);
  fs::create_symlink("frozen.pt", dir_ / "frozen_link.pt");
  fs::create_symlink("input.yaml", dir_ / "input_link.yaml");
  const std::vector<std::string> kept{"input.yaml", "frozen.pt", "traj.extxyz", "run/model.ckpt-2.pt",
                                      "data/sys_v/type.raw", "d.e.out"};
  fs::copy_file(dir_ / "frozen.pt", dir_ / "d.e.out");  // a model whose name is a detail file's
  std::vector<std::string> before;
  for (const auto& f : kept) before.push_back(read(f));
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"train input.yaml -o again --step-times input.yaml",
       "--step-times input.yaml: that is the training input input.yaml"},
      {"train input.yaml -o again --step-times ./input_link.yaml", "that is the training input input.yaml (the same"},
      {"train input.yaml -o data/sys_v --step-times data/sys_v/type.raw",
       "--step-times data/sys_v/type.raw: that is a file of the validation system"},
      {"train input.yaml -o again --init-model run --step-times run/model.ckpt-2.pt",
       "that is the checkpoint to start from run/model.ckpt-2.pt"},
      {"freeze -c run -o run/model.ckpt.pt", "that is the checkpoint being frozen"},
      {"compress -i frozen.pt -o input_link.yaml -t input.yaml", "compress -o input_link.yaml: that is the training input"},
      {"compress -i frozen.pt -o frozen_link.pt -t input.yaml", "that is the model being compressed"},
      {"test -m frozen.pt -s traj.extxyz --xyz traj.extxyz", "--xyz traj.extxyz: that is the system traj.extxyz"},
      {"test -m frozen.pt -s traj.extxyz --xyz frozen_link.pt", "--xyz frozen_link.pt: that is the model frozen.pt"},
      {"test -m d.e.out -s data/sys_v -d d", "-d d: d.e.out: that is the model d.e.out"},
      {"change-bias frozen.pt -s traj.extxyz -o traj.extxyz", "change-bias -o traj.extxyz: that is the system"},
      {"change-bias frozen.pt -b O=-1 -o ./frozen_link.pt", "that is the model being changed"},
  };
  for (const auto& [args, phrase] : cases) {
    const auto r = mlip(args);
    EXPECT_EQ(r.exit_code, 1) << args << "\n" << r.out << r.err;
    EXPECT_NE(r.err.find(phrase), std::string::npos) << args << "\n" << r.err;
  }
  for (size_t k = 0; k < kept.size(); ++k) EXPECT_EQ(read(kept[k]), before[k]) << kept[k] << " changed";
  EXPECT_FALSE(fs::exists(dir_ / "again")) << "a refused training left its output folder";
}

TEST_F(TrainTest, BadInputIsAClearErrorWithExitCode1) {
  write_text(dir_ / "input.yaml", input_yaml(10, "  numb_step: 3\n"));
  auto r = mlip("train input.yaml");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("training.numb_step: unknown key; did you mean 'numb_steps'?"), std::string::npos) << r.err;
  auto missing = mlip("train nothing.yaml");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("nothing.yaml"), std::string::npos);
  auto usage = mlip("train");
  EXPECT_EQ(usage.exit_code, 2);
  write_text(dir_ / "good.yaml", input_yaml(10));
  auto restart = mlip("train good.yaml --restart nowhere");
  EXPECT_EQ(restart.exit_code, 1);
  EXPECT_NE(restart.err.find("nowhere: no such checkpoint"), std::string::npos) << restart.err;
  write_text(dir_ / "mixed.yaml", std::regex_replace(input_yaml(10), std::regex("fitting_net: \\{"),
                                                     "fitting_net: {precision: float32, "));
  auto mixed = mlip("train mixed.yaml");
  EXPECT_EQ(mixed.exit_code, 1);
  EXPECT_NE(mixed.err.find("model.fitting_net.precision: expected the descriptor's precision (\"float64\""),
            std::string::npos) << mixed.err;
  auto freeze = mlip("freeze -c nowhere");
  EXPECT_EQ(freeze.exit_code, 1);
  auto test = mlip("test -m nowhere -s data/sys_v");
  EXPECT_EQ(test.exit_code, 1);
  // A NUL byte inside a key (a JSON input's "\u0000") is shown as \0, and the message goes on
  // after it: what() is a C string, which ended at the NUL.
  write_text(dir_ / "nul.json",
             "{\"model\": {\"type_map\": [\"O\", \"H\"], \"descriptor\": {\"type\": \"se_e2_a\", \"sel\": [4, 8], "
             "\"rcut\": 4.0}, \"fitting_net\": {\"neuron\": [4]}}, \"training\": {\"numb\\u0000steps\": 5}}\n");
  auto nul = mlip("train nul.json");
  EXPECT_EQ(nul.exit_code, 1);
  EXPECT_NE(nul.err.find("training.numb\\0steps: unknown key; did you mean 'numb_steps'?"), std::string::npos)
      << nul.err;
}

}  // namespace

// Config type weights that are all 0 would train with loss 0 (docs/training.md "Weights"): the
// run is refused before its first step, naming the key; one positive weight trains.
TEST_F(TrainTest, ConfigTypeWeightsThatAreAllZeroAreRefused) {
  write_text(dir_ / "zero.yaml", input_yaml(2, "  config_type_weights: {Default: 0}\n"));
  auto refused = mlip("train zero.yaml -o zero");
  EXPECT_EQ(refused.exit_code, 1) << refused.out << refused.err;
  EXPECT_NE(refused.err.find("training.config_type_weights: every config type of the training frames weighs 0 "
                             "(Default: 0)"),
            std::string::npos)
      << refused.err;
  EXPECT_FALSE(fs::exists(dir_ / "zero/lcurve.out"));
  write_text(dir_ / "half.yaml", input_yaml(2, "  config_type_weights: {Default: 0.5}\n"));
  auto trained = mlip("train half.yaml -o half");
  EXPECT_EQ(trained.exit_code, 0) << trained.err;
}
