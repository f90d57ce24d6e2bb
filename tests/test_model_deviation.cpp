// `mlip model-devi` (docs/active_learning.md): the deviations against a direct computation with
// LibTorch's reductions, DeePMD-kit's file layout, a committee that mixes both model types
// through the real program, and its refusals.
#include <gtest/gtest.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/script.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <sstream>

#include "archive/model_archive.h"
#include "compat/blas_kernels.h"
#include "data/load.h"
#include "data/neighbor_list.h"
#include "frozen/frame_graph.h"
#include "frozen/model_deviation.h"
#include "models/torchscript_inference.h"
#include "test_util.h"

namespace fs = std::filesystem;

namespace {

using mlip::frozen::FrameDeviation;
using mlip::models::InferenceResult;
using mlip::test::contains;
using mlip::test::run_command;
using mlip::test::TempDir;
using mlip::test::write_system;
using mlip::test::write_text;

/// The eight numbers of DeePMD-kit's row (after the step) computed with LibTorch: population
/// standard deviations over the models (dim 0), forces [M, N, 3], virials per atom [M, 9],
/// energies per atom [M]; and each atom's force deviation.
struct Expected {
  std::vector<double> columns;  // max_v min_v avg_v max_f min_f avg_f devi_e
  torch::Tensor atoms;          // [N]
};

Expected expected_deviation(const std::vector<InferenceResult>& predictions, int64_t natoms,
                            std::optional<double> relative, std::optional<double> relative_v) {
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  std::vector<torch::Tensor> forces, virials, energies;
  for (const auto& p : predictions) {
    forces.push_back(torch::tensor(p.forces, f64).reshape({natoms, 3}));
    virials.push_back(torch::tensor(std::vector<double>(p.virial.begin(), p.virial.end()), f64) / double(natoms));
    energies.push_back(torch::tensor({p.energy / double(natoms)}, f64));
  }
  const auto f = torch::stack(forces), v = torch::stack(virials), e = torch::cat(energies);
  auto atoms = f.std(0, /*unbiased=*/false).norm(2, -1);
  if (relative) atoms = atoms / (f.mean(0).norm(2, -1) + *relative);
  auto devi_v = v.std(0, false);
  if (relative_v) devi_v = devi_v / (v.mean(0).norm() + *relative_v);
  return {{devi_v.max().item<double>(), devi_v.min().item<double>(), devi_v.norm().item<double>() / 3.0,
           atoms.max().item<double>(), atoms.min().item<double>(), atoms.mean().item<double>(),
           e.std(0, false).item<double>()},
          atoms};
}

std::vector<double> columns_of(const FrameDeviation& d) {
  return {d.max_devi_v, d.min_devi_v, d.avg_devi_v, d.max_devi_f, d.min_devi_f, d.avg_devi_f, d.devi_e};
}

TEST(ModelDeviation, EveryColumnAndOptionEqualsADirectComputation) {
  torch::manual_seed(3);
  const int64_t natoms = 7;
  for (int models : {2, 4})
    for (auto relative : {std::optional<double>(), std::optional<double>(0.0), std::optional<double>(1.5)})
      for (auto relative_v : {std::optional<double>(), std::optional<double>(0.3)}) {
        std::vector<InferenceResult> predictions(static_cast<size_t>(models));
        for (auto& p : predictions) {
          const auto f = torch::randn({natoms * 3}, torch::kFloat64), v = torch::randn({9}, torch::kFloat64) * 4;
          p.energy = -30 + torch::randn({1}, torch::kFloat64).item<double>();
          p.forces.assign(f.data_ptr<double>(), f.data_ptr<double>() + natoms * 3);
          for (int c = 0; c < 9; ++c) p.virial[size_t(c)] = v[c].item<double>();
        }
        const FrameDeviation d = mlip::frozen::frame_deviation(predictions, natoms, relative, relative_v);
        const Expected want = expected_deviation(predictions, natoms, relative, relative_v);
        const auto got = columns_of(d);
        for (size_t k = 0; k < got.size(); ++k)
          EXPECT_NEAR(got[k], want.columns[k], 1e-12 * std::abs(want.columns[k])) << "column " << k;
        ASSERT_EQ(int64_t(d.atom_devi_f.size()), natoms);
        for (int64_t a = 0; a < natoms; ++a)
          EXPECT_NEAR(d.atom_devi_f[size_t(a)], want.atoms[a].item<double>(), 1e-12 * want.atoms[a].item<double>());
      }
}

TEST(ModelDeviation, IdenticalModelsDeviateByZero) {
  InferenceResult p;
  p.energy = -12.5;
  p.forces = {0.1, -0.2, 0.3, 1.0, 2.0, -3.0};
  p.virial = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  const auto d = mlip::frozen::frame_deviation({p, p, p}, 2, std::nullopt, std::nullopt);
  for (double v : columns_of(d)) EXPECT_EQ(v, 0.0);
}

TEST(ModelDeviation, HeaderAndRowsAreDeepmdKitsLayout) {
  EXPECT_EQ(mlip::frozen::deviation_header("data/sys", false),
            "# data/sys\n#       step         max_devi_v         min_devi_v         avg_devi_v         max_devi_f"
            "         min_devi_f         avg_devi_f             devi_e\n");
  EXPECT_TRUE(contains(mlip::frozen::deviation_header("s", true), "             devi_e      atm_devi_f(N)\n"));
  FrameDeviation d;
  d.max_devi_v = 1.5e-3, d.min_devi_v = 2e-5, d.avg_devi_v = 7.25e-4, d.max_devi_f = 0.125, d.min_devi_f = 1e-3;
  d.avg_devi_f = 0.05, d.devi_e = 3.5e-4, d.atom_devi_f = {0.125, 1e-3};
  EXPECT_EQ(
      mlip::frozen::deviation_row(40, d, false),
      "          40       1.500000e-03       2.000000e-05       7.250000e-04       1.250000e-01       1.000000e-03"
      "       5.000000e-02       3.500000e-04\n");
  EXPECT_TRUE(
      contains(mlip::frozen::deviation_row(40, d, true), "3.500000e-04       1.250000e-01       1.000000e-03\n"));
}

/// A committee of two se_e2_a models (float64 and float32) and an equivariant one with another
/// cutoff, trained for a few steps, through `mlip model-devi`: the file against each model's own
/// predictions and the direct computation, at the printed precision.
class ModelDeviationCommand : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // The reference predictions below come from this process: the same BLAS kernels as mlip's
    // (docs/device.md), so that the float32 model predicts here what it predicts there.
    mlip::compat::use_the_cpus_blas_kernels();
    dir_ = new TempDir();
    write_system(*dir_ / "data/sys_a", 2, 4, 6, 1);
    write_system(*dir_ / "data/sys_b", 3, 6, 4, 2);
    const std::string training =
        "learning_rate: {type: exp, start_lr: 0.005, stop_lr: 1.0e-4, decay_steps: 5}\n"
        "loss: {type: ener, start_pref_e: 0.02, limit_pref_e: 1, start_pref_f: 1000, limit_pref_f: 1}\n"
        "training:\n  training_data: {systems: [data/sys_a], batch_size: 2}\n"
        "  numb_steps: 4\n  seed: SEED\n  disp_freq: 4\n  save_freq: 4\n";
    auto se = [&](int seed, const std::string& precision) {
      return "model:\n  type_map: [O, H]\n"
             "  descriptor: {type: se_e2_a, sel: [8, 16], rcut: 4.0, rcut_smth: 1.0, neuron: [4, 8], axis_neuron: 4,\n"
             "               seed: " +
             std::to_string(seed) + ", precision: " + precision +
             "}\n"
             "  fitting_net: {neuron: [8, 8], seed: " +
             std::to_string(seed) + ", precision: " + precision + "}\n" +
             std::regex_replace(training, std::regex("SEED"), std::to_string(seed));
    };
    write_text(*dir_ / "m0.yaml", se(1, "float64"));
    write_text(*dir_ / "m1.yaml", se(2, "float32"));
    write_text(*dir_ / "m2.yaml",
               "model: {type: equivariant, type_map: [O, H], r_max: 3.5, num_features: 4, l_max: 1, num_layers: 2,\n"
               "        radial_width: 8, seed: 3}\n" +
                   std::regex_replace(training, std::regex("SEED"), "3"));
    for (int k = 0; k < 3; ++k) {
      const std::string m = "m" + std::to_string(k);
      const auto trained = mlip("train " + m + ".yaml -o run" + std::to_string(k) + " && " + MLIP_EXE +
                                " freeze -c run" + std::to_string(k) + " -o " + m + ".pt");
      ASSERT_EQ(trained.exit_code, 0) << trained.out << trained.err;
    }
  }
  static void TearDownTestSuite() { delete dir_; }

  static mlip::test::CommandResult mlip(const std::string& args) {
    return run_command("cd " + dir_->path() + " && " + MLIP_EXE + " " + args);
  }

  /// Each model's prediction of every frame of `system`, through its TorchScript forward.
  static std::vector<std::vector<InferenceResult>> predictions(const std::string& system, int64_t& natoms) {
    std::vector<std::vector<InferenceResult>> out;               // [frame][model]
    torch::jit::GraphOptimizerEnabledGuard plain_graphs(false);  // as mlip model-devi runs them
    for (int k = 0; k < 3; ++k) {
      mlip::archive::ExtraFiles extra;
      auto module = mlip::archive::load_model(*dir_ / ("m" + std::to_string(k) + ".pt"), extra);
      module.eval();
      auto type_map = mlip::archive::stored_type_names(extra);
      const double cutoff = std::stod(extra["r_max"]);
      mlip::models::TorchScriptInference inference(
          module, torch::kCPU, extra["model_dtype"] == "float32" ? torch::kFloat32 : torch::kFloat64, cutoff);
      auto systems = mlip::data::load_systems({*dir_ / system}, type_map, "", mlip::data::Loading::kStreamed, {});
      const auto& sys = systems.at(0);
      natoms = sys.natoms();
      mlip::data::NeighborListBuilder<double> builder;
      mlip::frozen::FrameGraph graph;
      out.resize(size_t(sys.nframes));
      for (int64_t f = 0; f < sys.nframes; ++f) {
        const auto frame = sys.frame(f);
        mlip::frozen::make_frame_graph(sys, frame, cutoff, builder, graph);
        mlip::models::Request request;
        request.graph = &graph.graph;
        out[size_t(f)].push_back(inference.evaluate(request));
      }
    }
    return out;
  }

  static TempDir* dir_;
};
TempDir* ModelDeviationCommand::dir_ = nullptr;

/// The numbers of a model_devi.out's rows, per system block: [block][row][column].
std::vector<std::vector<std::vector<double>>> read_blocks(const std::string& text, std::vector<std::string>& names) {
  std::vector<std::vector<std::vector<double>>> blocks;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("# ", 0) == 0 && !contains(line, "step")) {
      names.push_back(line.substr(2));
      blocks.emplace_back();
    } else if (!line.empty() && line[0] != '#') {
      std::istringstream row(line);
      std::vector<double> values;
      for (double v; row >> v;) values.push_back(v);
      blocks.back().push_back(values);
    }
  }
  return blocks;
}

TEST_F(ModelDeviationCommand, AMixedCommitteeWritesEachSystemsDeviationsAtThePrintedPrecision) {
  const auto run = mlip(
      "model-devi -m m0.pt m1.pt m2.pt -s data/sys_a data/sys_b -o devi.out -f 10 --atomic "
      "--relative 1.0 --relative_v 0.5");
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_TRUE(contains(run.out, "3 model(s), 2 system(s); wrote devi.out")) << run.out;
  std::vector<std::string> names;
  const auto blocks = read_blocks(mlip::test::read_file(*dir_ / "devi.out"), names);
  ASSERT_EQ(blocks.size(), 2u);
  for (size_t s = 0; s < 2; ++s) {
    SCOPED_TRACE(names[s]);
    EXPECT_TRUE(contains(names[s], s == 0 ? "sys_a" : "sys_b"));
    int64_t natoms = 0;
    const auto all = predictions(s == 0 ? "data/sys_a" : "data/sys_b", natoms);
    ASSERT_EQ(blocks[s].size(), all.size());
    for (size_t f = 0; f < all.size(); ++f) {
      const auto& row = blocks[s][f];
      ASSERT_EQ(int64_t(row.size()), 8 + natoms);
      EXPECT_EQ(row[0], double(10 * f));
      const Expected want = expected_deviation(all[f], natoms, 1.0, 0.5);
      for (size_t k = 0; k < 7; ++k)
        EXPECT_NEAR(row[1 + k], want.columns[k], 6e-7 * std::abs(want.columns[k]) + 1e-300);
      for (int64_t a = 0; a < natoms; ++a)
        EXPECT_NEAR(row[size_t(8 + a)], want.atoms[a].item<double>(), 6e-7 * want.atoms[a].item<double>());
      EXPECT_GT(want.columns[3], 0.0) << "models trained from different seeds disagree";
    }
  }
}

TEST_F(ModelDeviationCommand, FramesWithoutLabelsAsAnMdTrajectoryWritesThem) {
  const std::string frame = "3\nProperties=species:S:1:pos:R:3 pbc=\"F F F\"\nO 0 0 0\nH 0.96 0 0\nH -0.24 0.93 0\n";
  write_text(*dir_ / "traj.xyz", frame + frame + frame);
  const auto run = mlip("model-devi -m m0.pt m1.pt -s traj.xyz -o traj.out -f 5");
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  std::vector<std::string> names;
  const auto blocks = read_blocks(mlip::test::read_file(*dir_ / "traj.out"), names);
  ASSERT_EQ(blocks.size(), 1u);
  ASSERT_EQ(blocks[0].size(), 3u);
  EXPECT_EQ(blocks[0][2][0], 10.0);
  // The same frame, the same deviations, the first time as the third.
  EXPECT_EQ(std::vector<double>(blocks[0][0].begin() + 1, blocks[0][0].end()),
            std::vector<double>(blocks[0][2].begin() + 1, blocks[0][2].end()));
  EXPECT_GT(blocks[0][0][4], 0.0) << "max_devi_f of models from different seeds";
}

/// --select: the printed counts equal a selection on the file's max_devi_f, and the candidates
/// are those frames, positions as read.
TEST_F(ModelDeviationCommand, SelectionWritesTheFramesBetweenTheTrustLevels) {
  ASSERT_EQ(mlip("model-devi -m m0.pt m1.pt m2.pt -s data/sys_a -o all.out").exit_code, 0);
  std::vector<std::string> names;
  const auto rows = read_blocks(mlip::test::read_file(*dir_ / "all.out"), names).at(0);
  std::vector<double> max_f;
  for (const auto& row : rows) max_f.push_back(row.at(4));
  std::vector<double> sorted = max_f;
  std::sort(sorted.begin(), sorted.end());
  // Levels between the printed values (a level equal to one would meet its unprinted digits):
  // one frame below, three within, two at or above.
  const double lo = (sorted[0] + sorted[1]) / 2, hi = (sorted[3] + sorted[4]) / 2;
  ASSERT_LT(sorted[0], sorted[1]);
  ASSERT_LT(sorted[3], sorted[4]);
  char levels[64];
  std::snprintf(levels, sizeof(levels), "%.17g %.17g", lo, hi);
  const auto run = mlip("model-devi -m m0.pt m1.pt m2.pt -s data/sys_a -o sel.out --select " + std::string(levels) +
                        " --candidates cand.xyz");
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  int64_t below = 0, within = 0, above = 0;
  std::vector<size_t> chosen;
  for (size_t f = 0; f < max_f.size(); ++f) {
    if (max_f[f] < lo)
      ++below;
    else if (max_f[f] >= hi)
      ++above;
    else
      ++within, chosen.push_back(f);
  }
  EXPECT_EQ(below, 1);
  EXPECT_EQ(within, 3);
  EXPECT_EQ(above, 2);
  const std::regex counts(
      R"(below \S+: (\d+) frame\(s\); in \[\S+, \S+\): (\d+), written to cand.xyz; at or above \S+: (\d+))");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(run.out, m, counts)) << run.out;
  EXPECT_EQ(std::stoll(m[1]), below);
  EXPECT_EQ(std::stoll(m[2]), within);
  EXPECT_EQ(std::stoll(m[3]), above);
  std::vector<std::string> type_map = {"O", "H"};
  const auto candidates =
      mlip::data::load_systems({*dir_ / "cand.xyz"}, type_map, "", mlip::data::Loading::kInMemory, {});
  auto source = mlip::data::load_systems({*dir_ / "data/sys_a"}, type_map, "", mlip::data::Loading::kInMemory, {});
  ASSERT_EQ(candidates.size(), 1u);
  ASSERT_EQ(candidates[0].nframes, within);
  for (size_t k = 0; k < chosen.size(); ++k) {
    const auto a = candidates[0].frame(int64_t(k)), b = source[0].frame(int64_t(chosen[k]));
    ASSERT_EQ(a.coord.size(), b.coord.size());
    for (size_t i = 0; i < a.coord.size(); ++i) EXPECT_NEAR(a.coord[i], b.coord[i], 1e-9);
  }
}

TEST_F(ModelDeviationCommand, RefusesOneModelMismatchedTypeMapsAndBadLevels) {
  const auto one = mlip("model-devi -m m0.pt -s data/sys_a");
  EXPECT_EQ(one.exit_code, 2);
  EXPECT_TRUE(contains(one.err, "expected two or more models, got 1")) << one.err;
  const auto level = mlip("model-devi -m m0.pt m1.pt -s data/sys_a --relative -1");
  EXPECT_EQ(level.exit_code, 2);
  EXPECT_TRUE(contains(level.err, "--relative: expected a number >= 0")) << level.err;
  write_text(*dir_ / "swapped.yaml",
             std::regex_replace(mlip::test::read_file(*dir_ / "m0.yaml"), std::regex("\\[O, H\\]"), "[H, O]"));
  const auto swapped = mlip("train swapped.yaml -o run-swapped && " + std::string(MLIP_EXE) +
                            " freeze -c run-swapped -o swapped.pt && " + MLIP_EXE +
                            " model-devi -m m0.pt swapped.pt -s data/sys_a -o kept.out");
  EXPECT_EQ(swapped.exit_code, 1);
  EXPECT_TRUE(contains(swapped.err, "the models must have the same type map")) << swapped.err;
  EXPECT_TRUE(contains(swapped.err, "[O H]") && contains(swapped.err, "[H O]")) << swapped.err;
}

TEST_F(ModelDeviationCommand, AnOutputThatIsAnInputIsRefusedAndTheInputKept) {
  // docs/robustness.md "An output is never one of the inputs": the models, a trajectory file, a
  // system folder's files, by any name; and the two outputs are not one file.
  const std::string frame = "3\nProperties=species:S:1:pos:R:3 pbc=\"F F F\"\nO 0 0 0\nH 0.96 0 0\nH -0.24 0.93 0\n";
  write_text(*dir_ / "kept/traj.extxyz", frame + frame);
  ASSERT_EQ(mlip("model-devi -m m0.pt m1.pt -s data/sys_a -o kept/devi.out").exit_code, 0);
  fs::copy_file(*dir_ / "m1.pt", *dir_ / "kept/m1.pt");
  fs::create_symlink("m1.pt", *dir_ / "kept/link.pt");
  const std::vector<std::string> files{"kept/m1.pt", "kept/traj.extxyz", "data/sys_a/type.raw", "kept/devi.out"};
  std::vector<std::string> before;
  for (const auto& f : files) before.push_back(mlip::test::read_file(*dir_ / f));
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"-m m0.pt kept/m1.pt -s data/sys_a -o kept/m1.pt", "-o kept/m1.pt: that is the model kept/m1.pt"},
      {"-m m0.pt kept/m1.pt -s data/sys_a -o ./kept/m1.pt", "that is the model kept/m1.pt"},
      {"-m m0.pt kept/m1.pt -s data/sys_a -o kept/link.pt", "that is the model kept/m1.pt (the same file by another name)"},
      {"-m m0.pt m1.pt -s kept/traj.extxyz -o kept/traj.extxyz", "that is the system kept/traj.extxyz"},
      {"-m m0.pt m1.pt -s kept/traj.extxyz -o x.out --select 0 1 --candidates kept/traj.extxyz",
       "--candidates kept/traj.extxyz: that is the system kept/traj.extxyz"},
      {"-m m0.pt m1.pt -s data/sys_a -o data/sys_a/type.raw", "that is a file of the system data/sys_a"},
      {"-m m0.pt m1.pt -s data/sys_a -o kept/devi.out --select 0 1 --candidates kept/devi.out",
       "--candidates kept/devi.out: that is also -o kept/devi.out"},
  };
  for (const auto& [args, phrase] : cases) {
    const auto r = mlip("model-devi " + args);
    EXPECT_EQ(r.exit_code, 1) << args << "\n" << r.out << r.err;
    EXPECT_TRUE(contains(r.err, phrase)) << args << "\n" << r.err;
  }
  for (size_t k = 0; k < files.size(); ++k)
    EXPECT_EQ(mlip::test::read_file(*dir_ / files[k]), before[k]) << files[k] << " changed";
  EXPECT_FALSE(fs::exists(*dir_ / "x.out"));
}

TEST_F(ModelDeviationCommand, StepsBeyondTheLargestAreRefused) {
  // Frame k's step is k * -f: 5e18 x 5 frames does not fit in a step (it printed wrapped,
  // negative steps); a count beyond 2^53 is not a whole number a double holds.
  const auto big = mlip("model-devi -m m0.pt m1.pt -s data/sys_a -o big.out -f 5000000000000000000");
  EXPECT_EQ(big.exit_code, 1) << big.out << big.err;
  EXPECT_TRUE(contains(big.err, "model-devi -f 5000000000000000000: the step of the last frame of")) << big.err;
  EXPECT_TRUE(contains(big.err, "9223372036854775807")) << big.err;
  EXPECT_FALSE(fs::exists(*dir_ / "big.out"));
  const auto huge = mlip("model-devi -m m0.pt m1.pt -s data/sys_a -o big.out -f 1e19");
  EXPECT_EQ(huge.exit_code, 2) << huge.err;
  EXPECT_TRUE(contains(huge.err, "expected a positive integer of at most 9007199254740992 (or its digits, up to "
                                 "9223372036854775807), got '1e19'"))
      << huge.err;
  const auto digits = mlip("model-devi -m m0.pt m1.pt -s data/sys_a -o big.out -f 10000000000000000000");
  EXPECT_EQ(digits.exit_code, 2) << digits.err;
  EXPECT_TRUE(contains(digits.err, "expected a positive integer of at most 9223372036854775807, got "
                                   "'10000000000000000000'"))
      << digits.err;
  // The largest that fits: 6 frames, steps up to 5 x f.
  const auto fits = mlip("model-devi -m m0.pt m1.pt -s data/sys_a -o fits.out -f 1000000000000000000");
  ASSERT_EQ(fits.exit_code, 0) << fits.err;
  std::vector<std::string> names;
  const auto blocks = read_blocks(mlip::test::read_file(*dir_ / "fits.out"), names);
  ASSERT_EQ(blocks.at(0).size(), 6u);
  EXPECT_TRUE(contains(mlip::test::read_file(*dir_ / "fits.out"), "\n5000000000000000000 ")) << "the last step";
}

}  // namespace
