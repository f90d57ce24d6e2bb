// Frozen models from earlier versions (docs/deploy.md "Frozen models from earlier versions"):
// the models of tests/data/frozen_0.1, frozen by mlip 0.1.0 before models carried their
// inference settings, load, evaluate as their own TorchScript forward did in plain PyTorch when
// they were made (reference.json), through the model's own inference and through the TorchScript
// forward; and MD reads no training input: neither keys the input reader would refuse nor
// renamed keys stop a model from loading.
#include <gtest/gtest.h>

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "archive/model_archive.h"
#include "md/potential.h"
#include "models/inference_registry.h"
#include "potential_test_util.h"
#include "test_util.h"

namespace fs = std::filesystem;

namespace mlip {
namespace {

const fs::path kFixture = fs::path(MLIP_SOURCE_DIR) / "tests" / "data" / "frozen_0.1";

/// A model's outputs on the reference frame, float64.
struct Outputs {
  double energy = 0;
  std::vector<double> forces;  // [N * 3] eV/Å
  std::vector<double> virial;  // [9] eV
  std::string dtype;
};

struct Reference {
  test::Frame frame;
  std::map<std::string, Outputs> models;
};

std::vector<double> numbers(const YAML::Node& node) { return node.as<std::vector<double>>(); }

const Reference& reference() {
  static const Reference ref = [] {
    Reference r;
    const YAML::Node root = YAML::LoadFile((kFixture / "reference.json").string());  // JSON is YAML
    const YAML::Node frame = root["frame"];
    r.frame.pos = numbers(frame["positions"]);
    r.frame.cell = numbers(frame["cell"]);
    for (const auto& s : frame["symbols"]) r.frame.types.push_back(s.as<std::string>() == "O" ? 0 : 1);
    for (const auto& kv : root["models"]) {
      Outputs o;
      o.energy = kv.second["energy"].as<double>();
      o.forces = numbers(kv.second["forces"]);
      o.virial = numbers(kv.second["virial"]);
      o.dtype = kv.second["dtype"].as<std::string>();
      r.models[kv.first.as<std::string>()] = o;
    }
    return r;
  }();
  return ref;
}

/// The model at `path` on the whole reference frame (every atom owned, the periodic images as
/// ghosts folded by id), with the ghosts' forces returned to their atoms.
Outputs evaluate(const std::string& path, md::Evaluation evaluation) {
  const test::Frame& f = reference().frame;
  std::vector<int64_t> all(size_t(f.natoms()));
  for (int64_t i = 0; i < f.natoms(); ++i) all[size_t(i)] = i;
  const test::RankAtoms r = test::rank_atoms(f, all);
  md::Potential potential(path, "cpu", evaluation);
  md::LocalAtoms atoms{r.pos.data(), r.types.data(), int64_t(r.types.size()), r.nlocal};
  atoms.ids = r.owner.data();
  md::Results out;
  potential.compute(atoms, false, false, out);
  Outputs o;
  o.energy = out.energy;
  o.forces.assign(size_t(f.natoms()) * 3, 0.0);
  for (size_t k = 0; k < r.owner.size(); ++k)
    for (int d = 0; d < 3; ++d) o.forces[size_t(r.owner[k] * 3 + d)] += out.forces[k * 3 + size_t(d)];
  o.virial.assign(out.virial.begin(), out.virial.end());
  o.dtype = potential.dtype();
  return o;
}

double largest(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

/// Relative differences as check_ase.py measures them: the largest difference over the largest
/// reference value (float64 1e-10, float32 1e-4: the precision of the arithmetic, not of the model).
void expect_same(const Outputs& got, const Outputs& want, const std::string& what) {
  const double tol = want.dtype == "float64" ? 1e-10 : 1e-4;
  EXPECT_EQ(got.dtype, want.dtype) << what;
  EXPECT_LE(std::abs(got.energy - want.energy) / std::abs(want.energy), tol)
      << what << ": energy " << got.energy << " against " << want.energy;
  ASSERT_EQ(got.forces.size(), want.forces.size()) << what;
  double df = 0, dv = 0;
  for (size_t k = 0; k < got.forces.size(); ++k) df = std::max(df, std::abs(got.forces[k] - want.forces[k]));
  for (size_t k = 0; k < 9; ++k) dv = std::max(dv, std::abs(got.virial[k] - want.virial[k]));
  EXPECT_LE(df / largest(want.forces), tol) << what << ": forces differ by " << df << " eV/Å";
  EXPECT_LE(dv / largest(want.virial), tol) << what << ": virial differs by " << dv << " eV";
}

class FrozenCompat : public ::testing::TestWithParam<std::string> {};

TEST_P(FrozenCompat, LoadsAndEvaluatesAsWhenFrozen) {
  const std::string name = GetParam();
  const std::string path = (kFixture / (name + ".pt")).string();
  ASSERT_TRUE(fs::exists(path)) << path;
  archive::ExtraFiles extra;
  archive::load_model(path, extra);
  // Made before records existed: this is the path of every model users froze with 0.1.0.
  EXPECT_EQ(extra.count("inference_settings"), 0u) << path;
  const Outputs& want = reference().models.at(name);
  expect_same(evaluate(path, md::Evaluation::kAuto), want, name + " (own inference)");
  expect_same(evaluate(path, md::Evaluation::kTorchScript), want, name + " (TorchScript forward)");
}

INSTANTIATE_TEST_SUITE_P(Models, FrozenCompat, ::testing::Values("se64", "se64c", "eq32"));

TEST(FrozenCompat, LegacyRecordHoldsTheTrainedSettings) {
  archive::ExtraFiles extra;
  archive::load_model((kFixture / "se64.pt").string(), extra);
  const models::SettingsRecord se = models::frozen_settings(extra, "se64.pt");
  EXPECT_EQ(se.text("model_type", ""), "se_e2_a");
  EXPECT_EQ(se.words("type_map", {}), (std::vector<std::string>{"O", "H"}));
  EXPECT_EQ(se.number("rcut", 0), 4.0);
  EXPECT_EQ(se.integers("neuron", {}), (std::vector<int64_t>{8, 16, 32}));
  EXPECT_EQ(se.integer("axis_neuron", 0), 4);
  EXPECT_FALSE(se.flag("type_one_side", true));
  EXPECT_EQ(se.integers("fitting_neuron", {}), (std::vector<int64_t>{32, 32}));
  archive::load_model((kFixture / "eq32.pt").string(), extra);
  const models::SettingsRecord eq = models::frozen_settings(extra, "eq32.pt");
  EXPECT_EQ(eq.integer("num_features", 0), 8);
  EXPECT_EQ(eq.integer("num_layers", 0), 2);
  EXPECT_EQ(eq.integer("message_layers", 0), 2);
  EXPECT_EQ(eq.integer("correlation", 0), 2);
  EXPECT_TRUE(eq.flag("readout_every_layer", false));
  EXPECT_EQ(eq.number("cutoff", 0), 4.0);
}

/// A copy of `name`.pt at `out` with its stored training input's text passed through `edit`
/// and, when `record`, the settings record this version reads from it stored as
/// `inference_settings` (as `mlip freeze` now writes it).
void rewrite(const std::string& name, const fs::path& out, const std::function<std::string(std::string)>& edit,
             bool record) {
  archive::ExtraFiles extra;
  torch::jit::Module module = archive::load_model((kFixture / (name + ".pt")).string(), extra);
  if (record) extra["inference_settings"] = models::frozen_settings(extra, name).to_text();
  extra["config"] = edit(extra["config"]);
  extra.erase("checksum");
  archive::save_module_atomically(module, extra, out.string(), "the test model");
}

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
  return text;
}

// The strict input reader refuses unknown keys; a model whose stored input has one (as a later
// version's input might) loads all the same: MD does not read the input with it.
TEST(FrozenCompat, KeysTheInputReaderRefusesDoNotMatter) {
  const test::TempDir dir;
  const fs::path path = dir / "se64_extra_key.pt";
  rewrite("se64", path, [](std::string c) { return replaced(c, "rcut_smth:", "a_later_key: 1, rcut_smth:"); }, false);
  archive::ExtraFiles extra;
  archive::load_model(path.string(), extra);
  ASSERT_NE(extra["config"].find("a_later_key"), std::string::npos);
  expect_same(evaluate(path.string(), md::Evaluation::kAuto), reference().models.at("se64"), "se64 with a later key");
}

// A model key renamed in the training input (rcut -> r_cut, neuron -> widths, num_features ->
// channels): a model carrying its settings record loads and evaluates as before, as it reads
// only the record.
TEST(FrozenCompat, RenamedInputKeysDoNotMatterWithARecord) {
  const test::TempDir dir;
  for (const std::string name : {"se64", "se64c", "eq32"}) {
    const fs::path path = dir / (name + "_renamed.pt");
    rewrite(name, path,
            [](std::string c) {
              for (auto [from, to] : {std::pair{"rcut", "r_cut"}, {"neuron", "widths"}, {"num_features", "channels"},
                                      {"num_layers", "layers"}, {"correlation", "body_order"}})
                c = replaced(c, from, to);
              return c;
            },
            true);
    expect_same(evaluate(path.string(), md::Evaluation::kAuto), reference().models.at(name), name + " renamed");
  }
}

TEST(FrozenCompat, RecordsAreReadTolerantly) {
  models::SettingsRecord r = models::SettingsRecord::parse(
      "mlip inference settings 7\nmodel_type: se_e2_a\nrcut: 4.5\na_key_of_a_later_version: anything\n\n", "r");
  EXPECT_EQ(r.version(), 7);
  EXPECT_EQ(r.number("rcut", 0), 4.5);
  EXPECT_EQ(r.number("rcut_smth", 0.5), 0.5);  // absent: the default
  const std::string bad = test::error_of([&] { r.integer("rcut", 0); });
  EXPECT_NE(bad.find("r: rcut: expected an integer, got \"4.5\""), std::string::npos) << bad;
  const std::string header = test::error_of([] { models::SettingsRecord::parse("rcut: 4\n", "model.pt"); });
  EXPECT_NE(header.find("model.pt: line 1: expected \"mlip inference settings <version>\""), std::string::npos)
      << header;
  models::SettingsRecord w("w");
  w.set_number("rcut", 0.1 + 0.2);
  w.set_words("type_map", {"O", "H"});
  const models::SettingsRecord back = models::SettingsRecord::parse(w.to_text(), "w");
  EXPECT_EQ(back.number("rcut", 0), 0.1 + 0.2);  // 17 digits: the same double
  EXPECT_EQ(back.words("type_map", {}), (std::vector<std::string>{"O", "H"}));
}

// Two values of one setting compare as values (fine-tuning, docs/training.md "Fine-tuning"):
// mlip 0.1 stored the cutoff as "4.000000" and the input's text as written.
TEST(FrozenCompat, SettingsCompareAsValues) {
  using models::SettingsRecord;
  EXPECT_TRUE(SettingsRecord::same_value("4.000000", "4"));
  EXPECT_TRUE(SettingsRecord::same_value("4.0", "4.000000"));
  EXPECT_TRUE(SettingsRecord::same_value("1.0e-4", "0.0001"));
  EXPECT_TRUE(SettingsRecord::same_value("8 16 32", "8.0 16 3.2e1"));
  EXPECT_TRUE(SettingsRecord::same_value("true", "true"));
  // std::to_string's six decimals of 4.1234567 are that number rounded; both ways round.
  EXPECT_TRUE(SettingsRecord::same_value("4.123457", "4.1234567"));
  EXPECT_TRUE(SettingsRecord::same_value("4.1234567", "4.123457"));
  EXPECT_FALSE(SettingsRecord::same_value("4.000000", "4.5"));
  EXPECT_FALSE(SettingsRecord::same_value("4.123457", "4.1234"));
  EXPECT_FALSE(SettingsRecord::same_value("8 16", "8 16 32"));
  EXPECT_FALSE(SettingsRecord::same_value("true", "false"));
}

// The record of a model frozen by mlip 0.1 completed with what its reader takes for the keys
// that version did not write (models::completed_settings): the equivariant model's num_bessels,
// absent from eq32.pt's stored input, is the reader's default.
TEST(FrozenCompat, CompletedSettingsAddWhatTheReaderTakes) {
  archive::ExtraFiles extra;
  torch::jit::Module module = archive::load_model((kFixture / "eq32.pt").string(), extra);
  const models::SettingsRecord record = models::frozen_settings(extra, "eq32.pt");
  EXPECT_FALSE(record.has("num_bessels"));
  const models::SettingsRecord completed = models::completed_settings(record, module);
  EXPECT_EQ(completed.integer("num_bessels", -1), 8);
  EXPECT_EQ(completed.integer("num_features", -1), 8);  // given in its input: kept
  for (const auto& [key, value] : record.values()) EXPECT_EQ(completed.text(key, ""), value) << key;
}

}  // namespace
}  // namespace mlip
