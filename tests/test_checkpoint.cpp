// Checkpoints and frozen models (archive/model_archive.h, frozen/freeze.h): the checksum they carry, verified on load.
#include <gtest/gtest.h>
#include <torch/script.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "models/capabilities.h"
#include "test_util.h"
#include "archive/model_archive.h"
#include "frozen/freeze.h"

using mlip::test::contains;
using mlip::test::error_of;
using mlip::test::TempDir;
namespace frozen = mlip::frozen;
namespace archive = mlip::archive;

namespace {

torch::jit::Module small_module() {
  torch::jit::Module m("small");
  m.register_parameter("w", torch::arange(1000, torch::kFloat64), false);
  m.define("def forward(self, x: Tensor) -> Tensor:\n  return x * self.w\n");
  return m;
}

// A model section `mlip freeze` can read back (it writes the model's capabilities from it).
const std::string kConfig =
    "model:\n  type_map: [O, H]\n"
    "  descriptor: {type: se_e2_a, sel: [12, 24], rcut: 6.0, rcut_smth: 1.0, neuron: [4, 8], axis_neuron: 4}\n"
    "  fitting_net: {neuron: [8, 8]}\n";

const archive::ExtraFiles kMetadata = {{"model_type", "se_e2_a"}, {"r_max", "6.0"}, {"type_names", "O H"},
                                     {"num_types", "2"}, {"model_dtype", "float64"}, {"mlip_version", "test"},
                                     {"config", kConfig}, {"units", "eV Angstrom"}};

void write(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

}  // namespace

TEST(Checkpoint, ASavedModelLoadsWithItsMetadataAndChecksum) {
  TempDir dir;
  archive::save_module_atomically(small_module(), kMetadata, dir / "m.pt", "the model");
  archive::ExtraFiles extra;
  torch::jit::Module loaded = archive::load_model(dir / "m.pt", extra);
  EXPECT_EQ(extra.at("type_names"), "O H");
  EXPECT_TRUE(torch::equal(loaded.attr("w").toTensor(), torch::arange(1000, torch::kFloat64)));
  // The same module serialises to the same bytes (the checksum is reproducible).
  EXPECT_EQ(archive::serialize_module(small_module(), kMetadata), mlip::test::read_file(dir / "m.pt"));
  // Plain LibTorch reads the checksum as an extra file.
  torch::jit::ExtraFilesMap files{{"checksum", ""}};
  torch::jit::load(dir / "m.pt", torch::kCPU, files);
  EXPECT_EQ(files["checksum"].rfind("sha256:", 0), 0u);
  EXPECT_EQ(files["checksum"].size(), 7u + 64u);
}

TEST(Checkpoint, AChangedByteInAStoredTensorIsRefused) {
  TempDir dir;
  const std::string bytes = archive::serialize_module(small_module(), kMetadata);
  // The tensor's 8000 bytes are 0.0, 1.0, ... 999.0; change one in the middle of them.
  const double value = 500.0;
  const size_t at = bytes.find(std::string(reinterpret_cast<const char*>(&value), sizeof value));
  ASSERT_NE(at, std::string::npos);
  std::string damaged = bytes;
  damaged[at + 7] ^= 0x01;
  write(dir / "damaged.pt", damaged);
  // LibTorch alone accepts the file and gives another weight.
  torch::jit::Module plain = torch::jit::load(dir / "damaged.pt");
  EXPECT_NE(plain.attr("w").toTensor()[500].item<double>(), 500.0);
  archive::ExtraFiles extra;
  EXPECT_TRUE(contains(error_of([&] { archive::load_model(dir / "damaged.pt", extra); }),
                       dir / "damaged.pt" + ": damaged: its contents do not match the checksum"));
}

TEST(Checkpoint, AChangedExtraFileIsRefused) {
  TempDir dir;
  std::string bytes = archive::serialize_module(small_module(), kMetadata);
  const size_t at = bytes.find("eV Angstrom");
  ASSERT_NE(at, std::string::npos);
  bytes[at] = 'm';  // "mV Angstrom"
  write(dir / "units.pt", bytes);
  archive::ExtraFiles extra;
  EXPECT_TRUE(contains(error_of([&] { archive::load_model(dir / "units.pt", extra); }), "damaged"));
}

TEST(Checkpoint, AWrongChecksumIsPrintedWholeWithWhereItDiffers) {
  // The stored digest changed in its last hex digit: both digests printed in full (cut to a
  // prefix they looked the same), and where they part.
  TempDir dir;
  std::string bytes = archive::serialize_module(small_module(), kMetadata);
  const size_t at = bytes.find("sha256:");
  ASSERT_NE(at, std::string::npos);
  const std::string stored = bytes.substr(at, 7 + 64);
  std::string changed = stored;
  changed.back() = changed.back() == '0' ? '1' : '0';
  bytes.replace(at, changed.size(), changed);
  write(dir / "digest.pt", bytes);
  archive::ExtraFiles extra;
  const std::string message = error_of([&] { archive::load_model(dir / "digest.pt", extra); });
  EXPECT_TRUE(contains(message, "damaged: its contents do not match the checksum stored in it (stored " + changed +
                                    ", computed " + stored + ": they differ from character 71 on)"))
      << message;
}

TEST(Checkpoint, AModelWithoutChecksumOrMetadataIsRefused) {
  TempDir dir;
  torch::jit::ExtraFilesMap files(kMetadata.begin(), kMetadata.end());
  small_module().save(dir / "old.pt", files);
  archive::ExtraFiles extra;
  EXPECT_TRUE(contains(error_of([&] { archive::load_model(dir / "old.pt", extra); }), "old.pt: no checksum"));
  small_module().save(dir / "bare.pt");
  EXPECT_TRUE(contains(error_of([&] { archive::load_model(dir / "bare.pt", extra); }), "without mlip's metadata"));
  write(dir / "text.pt", "not a zip");
  EXPECT_TRUE(contains(error_of([&] { archive::load_model(dir / "text.pt", extra); }), "not a TorchScript model"));
  EXPECT_TRUE(contains(error_of([&] { archive::load_model(dir / "missing.pt", extra); }),
                       "missing.pt: cannot read (No such file or directory)"));
}

TEST(Checkpoint, FreezeRefusesToWriteOntoTheCheckpoint) {
  TempDir dir;
  archive::save_module_atomically(small_module(), kMetadata, dir / "model.ckpt-1.pt", "the checkpoint");
  std::filesystem::create_symlink("model.ckpt-1.pt", dir / "model.ckpt.pt");
  const std::string before = mlip::test::read_file(dir / "model.ckpt-1.pt");
  for (const std::string& output : {dir / "model.ckpt-1.pt", dir / "model.ckpt.pt"})
    EXPECT_TRUE(contains(error_of([&] { frozen::freeze(dir / "model.ckpt-1.pt", output); }),
                         "that is the checkpoint being frozen"));
  EXPECT_EQ(mlip::test::read_file(dir / "model.ckpt-1.pt"), before);
  frozen::freeze(dir / "model.ckpt-1.pt", dir / "frozen.pt");
  archive::ExtraFiles extra;
  archive::load_model(dir / "frozen.pt", extra);
  EXPECT_EQ(extra.at("model_type"), "se_e2_a");
  // The frozen model carries its capabilities (docs/deploy.md "Capabilities"), the checkpoint not.
  ASSERT_EQ(extra.count("capabilities"), 1u);
  const auto caps = mlip::models::Capabilities::parse(extra.at("capabilities"), "frozen.pt");
  EXPECT_EQ(caps.model_type, "se_e2_a");
  EXPECT_EQ(caps.type_map, (std::vector<std::string>{"O", "H"}));
  EXPECT_EQ(caps.dtype, "float64");
  EXPECT_DOUBLE_EQ(caps.cutoff, 6.0);
  EXPECT_EQ(caps.message_layers, 1);
  EXPECT_EQ(caps.inference, std::vector<std::string>{"cpu"});
  archive::ExtraFiles checkpoint_extra;
  archive::load_model(dir / "model.ckpt-1.pt", checkpoint_extra);
  EXPECT_EQ(checkpoint_extra.count("capabilities"), 0u);
}
