#include "models/se_e2_a/compress.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "data/load.h"
#include "data/neighbor_list.h"
#include "models/se_e2_a/env_matrix.h"
#include "models/se_e2_a/se_e2_a.h"
#include "models/se_e2_a/se_e2_a_evaluator.h"
#include "model_test_util.h"
#include "test_util.h"

// A compressed se_e2_a (its embedding nets as tables; docs/se_e2_a.md "Compression: the
// embedding nets as tables") against the model it was made from: the MD evaluation on water
// frames, the compressed module's own TorchScript forward, pairs beyond the tables, and forces
// against finite differences of the compressed energy.

namespace {

using mlip::models::PackedEnv;
using mlip::models::SeAConfig;
using mlip::models::SeAEvaluator;
using mlip::test::Frame;

/// Water frames: the shared DFT set's data_3 (192 atoms) when present, else random boxes.
std::vector<Frame> water_frames(int count) {
  std::vector<Frame> frames;
  const std::string dir = mlip::test::shared_water_dir();
  if (!dir.empty()) {
    std::vector<std::string> type_map = {"O", "H"};
    const auto systems = mlip::data::load_systems({dir + "/data_3"}, type_map);
    const auto& system = systems.at(0);
    for (int k = 0; k < count && k < system.nframes; ++k) {
      const auto frame = system.frame(k * 7 % system.nframes);
      Frame f;
      f.pos = frame.coord;
      f.cell = frame.box;
      f.types.assign(system.types.begin(), system.types.end());
      frames.push_back(f);
    }
    return frames;
  }
  std::cout << "[ note ] ../shared/data/water not found: random frames instead\n";
  for (int k = 0; k < count; ++k) frames.push_back(mlip::test::random_frame(96, true, 31 + k, 9.85, {0, 0, 0}, 0.9, 0.34));
  return frames;
}

/// DeePMD-kit's water settings (examples/water/input.yaml), or a two-sided variant with
/// resnet_dt embedding nets.
SeAConfig water_config(const std::string& precision, bool two_side) {
  SeAConfig c;
  c.type_map = {"O", "H"};
  c.sel = {46, 92};
  c.rcut = 6.0;
  c.rcut_smth = 0.5;
  c.neuron = two_side ? std::vector<int64_t>{8, 16, 32} : std::vector<int64_t>{25, 50, 100};
  c.axis_neuron = two_side ? 4 : 16;
  c.type_one_side = !two_side;
  c.resnet_dt = two_side;
  c.fitting_neuron = two_side ? std::vector<int64_t>{32, 32} : std::vector<int64_t>{240, 240, 240};
  c.precision = precision;
  c.seed = 3;
  c.fitting_seed = 4;
  return c;
}

template <typename Real>
mlip::data::NeighborList<Real> neighbors(const Frame& f, double rcut) {
  std::vector<Real> pos(f.pos.begin(), f.pos.end());
  mlip::data::NeighborListBuilder<Real> builder;
  return builder.build(pos.data(), f.natoms(), f.cell.empty() ? nullptr : f.cell.data(), f.pbc, rcut);
}

/// The model with statistics of the frames (as training sets them) and a bias.
torch::jit::Module model_with_statistics(const SeAConfig& c, const std::vector<Frame>& frames) {
  auto model = mlip::models::build_se_e2_a(c);
  mlip::models::EnvStat stat(2, c.nslots());
  for (const auto& f : frames) {
    const auto nl = neighbors<double>(f, c.rcut);
    stat.add(mlip::models::compute_env_matrix<double>(nl, f.types, {c.rcut, c.rcut_smth, c.sel}), f.types);
  }
  model.setattr("davg", stat.davg().to(c.dtype()));
  model.setattr("dstd", stat.dstd().to(c.dtype()));
  model.setattr("bias", torch::tensor({-93.5, -187.2}, torch::kFloat64).to(c.dtype()));
  for (auto p : model.parameters()) p.requires_grad_(false);
  return model;
}

/// The shortest pair distance within rcut over the frames, Å.
double shortest_distance(const std::vector<Frame>& frames, const SeAConfig& c) {
  double shortest = c.rcut;
  for (const auto& f : frames) {
    const PackedEnv packed = PackedEnv::from_neighbor_list<double>(neighbors<double>(f, c.rcut), f.types, c);
    for (const auto& group : packed.groups) {
      const double* v = group.vec.data_ptr<double>();
      for (int64_t p = 0; p < group.vec.size(0); ++p)
        shortest = std::min(shortest, std::sqrt(v[p * 3] * v[p * 3] + v[p * 3 + 1] * v[p * 3 + 1] + v[p * 3 + 2] * v[p * 3 + 2]));
    }
  }
  return shortest;
}

template <typename Real>
SeAEvaluator::Evaluation evaluate(const SeAConfig& c, torch::jit::Module& module, const Frame& f) {
  SeAEvaluator path(c, module);
  return path.evaluate(PackedEnv::from_neighbor_list<Real>(neighbors<Real>(f, c.rcut), f.types, c), f.types,
                       f.natoms());
}

struct Differences {
  double energy_per_atom = 0;  // eV/atom
  double force = 0;            // eV/Å, largest over the components
  double virial = 0;           // eV, largest over the components
};

Differences compare(const SeAEvaluator::Evaluation& a, const SeAEvaluator::Evaluation& b, int natoms) {
  Differences d;
  d.energy_per_atom = std::abs(a.energy - b.energy) / natoms;
  for (size_t k = 0; k < a.forces.size(); ++k) d.force = std::max(d.force, std::abs(a.forces[k] - b.forces[k]));
  for (size_t k = 0; k < 9; ++k) d.virial = std::max(d.virial, std::abs(a.virial[k] - b.virial[k]));
  return d;
}

template <typename Real>
class CompressedSeA : public ::testing::Test {};
using Reals = ::testing::Types<float, double>;
TYPED_TEST_SUITE(CompressedSeA, Reals);

TYPED_TEST(CompressedSeA, MatchesTheModelItWasMadeFrom) {
  // The bounds at the default grid (step 0.01, extrapolate 5): float64 within 1e-7
  // eV/atom and 1e-5 eV/Å; float32 within what its own rounding gives the uncompressed model
  // against float64 (the same bounds scaled by float32's epsilon over float64's would be 0:
  // instead, twice the uncompressed float32 model's own distance from its float64 twin).
  using Real = TypeParam;
  const bool is_float = std::is_same_v<Real, float>;
  const auto frames = water_frames(3);
  for (bool two_side : {false, true}) {
    SCOPED_TRACE(two_side ? "two-sided nets, resnet_dt" : "DeePMD-kit's water settings");
    const SeAConfig c = water_config(is_float ? "float32" : "float64", two_side);
    auto model = model_with_statistics(c, frames);
    mlip::models::CompressOptions options;
    options.min_distance = shortest_distance(frames, c);
    std::ostringstream log;
    auto compressed = mlip::models::compress_se_e2_a(c, model, options, log);
    EXPECT_NE(log.str().find("emb_"), std::string::npos) << log.str();
    EXPECT_TRUE(compressed.hasattr("compression_step"));

    // float32: the uncompressed float32 model against its float64 twin sets the scale.
    Differences allowed{1e-7, 1e-5, 1e-4};
    if (is_float) {
      SeAConfig c64 = c;
      c64.precision = "float64";
      auto model64 = model_with_statistics(c64, frames);
      for (const auto& p : model.named_parameters()) model64.attr(p.name).toTensor().copy_(p.value);
      Differences own = compare(evaluate<float>(c, model, frames[0]), evaluate<double>(c64, model64, frames[0]),
                                frames[0].natoms());
      allowed = {2 * own.energy_per_atom, 2 * own.force, 2 * own.virial};
      std::cout << "[ float32 ] uncompressed float32 against float64: " << own.energy_per_atom << " eV/atom, "
                << own.force << " eV/Å, virial " << own.virial << " eV\n";
    }
    for (const auto& f : frames) {
      const auto exact = evaluate<Real>(c, model, f);
      const auto tabled = evaluate<Real>(c, compressed, f);
      EXPECT_EQ(tabled.beyond_tables, 0);
      const Differences d = compare(tabled, exact, f.natoms());
      std::cout << "[ compressed ] " << (two_side ? "two-sided " : "") << c.precision << ": " << d.energy_per_atom
                << " eV/atom, " << d.force << " eV/Å, virial " << d.virial << " eV\n";
      EXPECT_LE(d.energy_per_atom, allowed.energy_per_atom);
      EXPECT_LE(d.force, allowed.force);
      EXPECT_LE(d.virial, allowed.virial);
      // The compressed module's TorchScript forward (plain PyTorch) computes the same function.
      const auto script = mlip::test::run_deploy(compressed, f, c.rcut, c.dtype());
      const double rel = is_float ? 1e-5 : 1e-10;
      EXPECT_NEAR(script.energy, tabled.energy, rel * std::abs(tabled.energy));
      const auto native = torch::tensor(tabled.forces, torch::kFloat64).reshape({-1, 3});
      EXPECT_LT((script.forces - native).abs().max().template item<double>(), is_float ? 1e-3 : 1e-9);
    }
  }
}

TEST(CompressedSeA, PairsBeyondTheTablesAreCountedAndEvaluatedExactly) {
  // A table made for pairs no closer than 1.2 Å and without a coarse part (extrapolate 1): the
  // O-H bonds (about 1 Å) lie beyond it. They are counted, and go through the exact nets, so the
  // compressed model still equals the uncompressed one.
  const auto frames = water_frames(1);
  const SeAConfig c = water_config("float64", false);
  auto model = model_with_statistics(c, frames);
  mlip::models::CompressOptions options;
  options.min_distance = 1.2;
  options.extrapolate = 1;
  std::ostringstream log;
  auto compressed = mlip::models::compress_se_e2_a(c, model, options, log);
  const auto grid = mlip::models::TableGrid::unpack(compressed.attr("emb_1_grid").toTensor().data_ptr<double>());
  // Expected: pairs (both directions) whose normalised input is beyond the grid of their net.
  const Frame& f = frames[0];
  const PackedEnv packed = PackedEnv::from_neighbor_list<double>(neighbors<double>(f, c.rcut), f.types, c);
  const auto davg = model.attr("davg").toTensor(), dstd = model.attr("dstd").toTensor();
  int64_t expected = 0;
  for (int64_t t = 0; t < 2; ++t) {
    const auto g = mlip::models::TableGrid::unpack(
        compressed.attr(mlip::models::embedding_net_name(c, t) + "_grid").toTensor().data_ptr<double>());
    const auto& group = packed.groups[size_t(t)];
    const double* r = group.r.data_ptr<double>();
    for (int64_t i = 0; i < f.natoms(); ++i) {
      const int ti = f.types[size_t(i)];
      for (int64_t p = group.offsets[size_t(i)]; p < group.offsets[size_t(i + 1)]; ++p) {
        const double s = (r[p * 4] - davg[ti][0].item<double>()) / dstd[ti][0].item<double>();
        if (s > g.max) ++expected;
      }
    }
  }
  ASSERT_GT(expected, 0) << "the frame should have pairs closer than 1.2 Å (upper " << grid.upper << ")";
  const auto exact = evaluate<double>(c, model, f);
  const auto tabled = evaluate<double>(c, compressed, f);
  EXPECT_EQ(tabled.beyond_tables, expected);
  const Differences d = compare(tabled, exact, f.natoms());
  EXPECT_LE(d.energy_per_atom, 1e-7);
  EXPECT_LE(d.force, 1e-5);
  const auto script = mlip::test::run_deploy(compressed, f, c.rcut, c.dtype());
  EXPECT_NEAR(script.energy, tabled.energy, 1e-10 * std::abs(tabled.energy));
}

TEST(CompressedSeA, ForcesAreTheGradientOfTheCompressedEnergy) {
  // Central differences of the compressed model's energy (its own function, tables and all)
  // against its forces, for atoms moved across many grid nodes.
  const auto frames = water_frames(1);
  const SeAConfig c = water_config("float64", true);
  auto model = model_with_statistics(c, frames);
  mlip::models::CompressOptions options;
  options.min_distance = shortest_distance(frames, c);
  options.step = 0.05;  // coarser: the differences cross fewer nodes per step, the test is the same
  std::ostringstream log;
  auto compressed = mlip::models::compress_se_e2_a(c, model, options, log);
  Frame f = frames[0];
  const auto at = evaluate<double>(c, compressed, f);
  const double h = 1e-5;
  double worst = 0;
  for (int atom : {0, 1, 2, 5, 17}) {
    for (int x = 0; x < 3; ++x) {
      Frame plus = f, minus = f;
      plus.pos[size_t(atom * 3 + x)] += h;
      minus.pos[size_t(atom * 3 + x)] -= h;
      const double numeric =
          -(evaluate<double>(c, compressed, plus).energy - evaluate<double>(c, compressed, minus).energy) / (2 * h);
      worst = std::max(worst, std::abs(numeric - at.forces[size_t(atom * 3 + x)]));
    }
  }
  // h^2 f''' / 6 with E of order 10^2 eV and its third derivatives of order 10: about 1e-9; the
  // energies' rounding over 2h: 1e-13 x 1e4 / 1e-5 = 1e-7.
  EXPECT_LT(worst, 1e-6);
}

}  // namespace
