// Charge labels (docs/long_range.md "Charge labels"), run as a user would: a long-range model of
// each type trained with loss.start_pref_q on a system with charge.npy learns charges nearer the
// labels than the same run without the charge loss; lcurve.out has the rmse_q columns; `mlip test`
// reports the charge errors and writes the labels beside the predictions in .q.out; a charge loss
// without charges to train, or without labels, is refused by name; 2 ranks (torchrun) give 1
// rank's curve. Tiny data and a few steps:
// nothing here depends on the machine's speed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "data/npy.h"
#include "test_util.h"

namespace {

using mlip::test::CommandResult;
using mlip::test::contains;
using mlip::test::read_file;
using mlip::test::run_command;
using mlip::test::TempDir;
using mlip::test::write_system;
using mlip::test::write_text;
const std::string kMlip = MLIP_EXE;

constexpr int kOxygens = 3, kHydrogens = 6, kFrames = 6;

/// The labels: O -0.8 e, H +0.4 e, each frame's moved by a little (and still neutral).
std::vector<double> charge_labels() {
  std::vector<double> q;
  for (int f = 0; f < kFrames; ++f) {
    for (int a = 0; a < kOxygens; ++a) q.push_back(-0.8 - 0.02 * f);
    for (int a = 0; a < kHydrogens; ++a) q.push_back(0.4 + 0.01 * f);
  }
  return q;
}

std::string model_section(const std::string& type) {
  if (type == "se_e2_a")
    return "model:\n  type_map: [O, H]\n"
           "  descriptor: {type: se_e2_a, sel: [8, 16], rcut: 4.0, rcut_smth: 1.0, neuron: [4, 8], axis_neuron: 4,\n"
           "               seed: 3, precision: float64}\n"
           "  fitting_net: {neuron: [8, 8], seed: 3, precision: float64}\n"
           "  long_range: {sigma: 1.0}\n";
  return "model: {type: equivariant, type_map: [O, H], r_max: 4.0, num_features: 4, l_max: 1, num_layers: 2,\n"
         "        radial_width: 8, long_range: {sigma: 1.0}}\n";
}

std::string input(const std::string& model, double pref_q, const std::string& systems = "[data/sys]") {
  std::ostringstream out;
  out << model << "learning_rate: {type: exp, start_lr: 0.02, stop_lr: 0.02, decay_steps: 10}\n"
      << "loss: {type: ener, start_pref_e: 0.02, limit_pref_e: 1, start_pref_f: 1, limit_pref_f: 1, start_pref_q: "
      << pref_q << ", limit_pref_q: " << pref_q << "}\n"
      << "training:\n  training_data: {systems: " << systems << ", batch_size: 2}\n"
      << "  numb_steps: 100\n  seed: 5\n  disp_freq: 25\n  save_freq: 100\n";
  return out.str();
}

/// The numbers of a file's lines that do not start with '#', column `column` (0-based).
std::vector<double> column_of(const std::string& text, size_t column) {
  std::vector<double> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string field;
    for (size_t k = 0; k <= column && fields >> field; ++k)
      if (k == column) out.push_back(std::stod(field));
  }
  return out;
}

/// The number after "<what> : " in `mlip test`'s report (its last such line: the average).
double reported(const std::string& report, const std::string& what) {
  const size_t at = report.rfind(what);
  if (at == std::string::npos) return NAN;
  return std::stod(report.substr(report.find(':', at) + 1));
}

class ChargeLabels : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    write_system(dir_ / "data/sys", kOxygens, kHydrogens, kFrames, 11);
    mlip::data::write_npy(dir_ / "data/sys/set.000/charge.npy", {kFrames, kOxygens + kHydrogens}, charge_labels());
    write_system(dir_ / "data/unlabelled", kOxygens, kHydrogens, 2, 12);
  }
  CommandResult mlip(const std::string& args) {
    return run_command("cd " + dir_.path() + " && OMP_NUM_THREADS=1 " + kMlip + " " + args);
  }
  /// Trains `name` from input(`model`, pref_q), freezes and tests it; the test's report.
  std::string train_and_test(const std::string& name, double pref_q) {
    write_text(dir_ / (name + ".yaml"), input(model_section(GetParam()), pref_q));
    const CommandResult run = mlip("train " + name + ".yaml -o " + name);
    EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
    EXPECT_EQ(mlip("freeze -c " + name + " -o " + name + ".pt").exit_code, 0);
    const CommandResult tested = mlip("test -m " + name + ".pt -s data/sys -d " + name);
    EXPECT_EQ(tested.exit_code, 0) << tested.out << tested.err;
    return tested.out;
  }
  TempDir dir_;
};

TEST_P(ChargeLabels, TheChargeLossMovesTheChargesToTheLabels) {
  const std::string with = train_and_test("with", 10.0), without = train_and_test("without", 0.0);
  // The learning curve has the charge columns when the loss uses the labels, and they fall.
  const std::string curve = read_file(dir_ / "with/lcurve.out");
  ASSERT_TRUE(contains(curve, "rmse_f_trn rmse_q_trn lr")) << curve;
  EXPECT_FALSE(contains(read_file(dir_ / "without/lcurve.out"), "rmse_q")) << "no charge loss, no charge columns";
  const std::vector<double> rmse_q = column_of(curve, 4);
  ASSERT_EQ(rmse_q.size(), 5u) << curve;  // steps 1, 25, 50, 75, 100
  EXPECT_LT(rmse_q.back(), 0.5 * rmse_q.front()) << curve;

  // mlip test reports the charge errors of both; the charge loss made them smaller.
  const double q_with = reported(with, "Charge RMSE"), q_without = reported(without, "Charge RMSE");
  ASSERT_TRUE(std::isfinite(q_with)) << with;
  ASSERT_TRUE(std::isfinite(q_without)) << without;
  std::cout << GetParam() << ": charge RMSE " << q_with << " e with the charge loss, " << q_without << " e without\n";
  EXPECT_LT(q_with, 0.5 * q_without) << with << without;
  EXPECT_NEAR(q_with, rmse_q.back(), 0.25 * rmse_q.back()) << "the test's RMSE near the curve's last";

  // .q.out: the label, then the prediction, then the element; the labels as written, the
  // predictions summing to zero in each frame, their RMSE the reported one.
  const std::string details = read_file(dir_ / "with.q.out");
  EXPECT_EQ(details.substr(0, details.find('\n')), "# data_q pred_q (e) element");
  const std::vector<double> data = column_of(details, 0), predicted = column_of(details, 1);
  const std::vector<double> labels = charge_labels();
  ASSERT_EQ(data.size(), labels.size());
  ASSERT_EQ(predicted.size(), labels.size());
  double square = 0;
  for (size_t k = 0; k < labels.size(); ++k) {
    EXPECT_NEAR(data[k], labels[k], 1e-9) << k;
    square += (predicted[k] - labels[k]) * (predicted[k] - labels[k]);
  }
  EXPECT_NEAR(std::sqrt(square / double(labels.size())), q_with, 1e-6 * std::max(1.0, q_with));
  const int n = kOxygens + kHydrogens;
  for (int f = 0; f < kFrames; ++f) {
    double sum = 0;
    for (int a = 0; a < n; ++a) sum += predicted[size_t(f * n + a)];
    EXPECT_NEAR(sum, 0.0, 1e-6) << "frame " << f;
  }
}

TEST_P(ChargeLabels, AChargeLossWithoutChargesOrLabelsIsRefused) {
  const std::string short_range = GetParam() == "se_e2_a"
                                      ? model_section("se_e2_a").substr(0, model_section("se_e2_a").find("  long_range"))
                                      : model_section("equivariant").replace(
                                            model_section("equivariant").find(", long_range: {sigma: 1.0}"),
                                            std::string(", long_range: {sigma: 1.0}").size(), "");
  ASSERT_FALSE(contains(short_range, "long_range"));
  write_text(dir_ / "short.yaml", input(short_range, 1.0));
  CommandResult run = mlip("train short.yaml -o short");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_TRUE(contains(run.err, "loss.start_pref_q: expected 0 for a model without charges")) << run.err;
  write_text(dir_ / "unlabelled.yaml", input(model_section(GetParam()), 1.0, "[data/unlabelled]"));
  run = mlip("train unlabelled.yaml -o unlabelled");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_TRUE(contains(run.err, "loss.start_pref_q: the charge loss needs charge labels, but no training system has "
                                "them"))
      << run.err;
}

// Across ranks (the real torchrun, tools/torchrun): 2 ranks of batch 1 give the learning curve
// of 1 rank of batch 2, charge columns included (the charge error sums and the atom counts are
// reduced over the ranks, for training and for validation).
TEST_P(ChargeLabels, TwoRanksGiveOneRanksCurve) {
  const char* torchrun = std::getenv("MLIP_TORCHRUN");
  if (torchrun == nullptr || std::string(torchrun).empty()) GTEST_SKIP() << "MLIP_TORCHRUN is not set";
  for (const int batch : {2, 1}) {
    std::string text = input(model_section(GetParam()), 10.0);
    text.replace(text.find("batch_size: 2"), 13, "batch_size: " + std::to_string(batch));
    text.replace(text.find("decay_steps: 10}"), 16, "decay_steps: 10, scale_by_worker: none}");
    text.replace(text.find("numb_steps: 100"), 15, "numb_steps: 20");
    text.replace(text.find("disp_freq: 25"), 13, "disp_freq: 5");
    text += "  validation_data: {systems: [data/sys], batch_size: 1, numb_btch: 2}\n";
    write_text(dir_ / ("b" + std::to_string(batch) + ".yaml"), text);
  }
  const CommandResult one = mlip("train b2.yaml -o one");
  ASSERT_EQ(one.exit_code, 0) << one.out << one.err;
  const CommandResult ranks = run_command("cd " + dir_.path() + " && OMP_NUM_THREADS=1 " + torchrun +
                                          " --nproc-per-node=2 --no-python " + kMlip + " train b1.yaml -o ranks");
  ASSERT_EQ(ranks.exit_code, 0) << ranks.out << ranks.err;
  const std::string a = read_file(dir_ / "one/lcurve.out"), b = read_file(dir_ / "ranks/lcurve.out");
  ASSERT_TRUE(contains(a, "rmse_q_val rmse_q_trn lr")) << a;
  EXPECT_EQ(a.substr(0, a.find('\n')), b.substr(0, b.find('\n')));
  for (size_t column = 1; column <= 9; ++column) {
    const std::vector<double> x = column_of(a, column), y = column_of(b, column);
    ASSERT_EQ(x.size(), 5u) << a;
    ASSERT_EQ(y.size(), x.size()) << b;
    for (size_t k = 0; k < x.size(); ++k)
      EXPECT_NEAR(x[k], y[k], 1e-3 * std::abs(x[k])) << "column " << column << ", line " << k << "\n" << a << b;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, ChargeLabels, ::testing::Values("se_e2_a", "equivariant"));

}  // namespace
