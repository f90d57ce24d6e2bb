#include "archive/model_archive.h"

#include <caffe2/serialize/inline_container.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "archive/output_file.h"
#include "archive/sha256.h"
#include "error.h"

namespace mlip::archive {
namespace {

const char* const kMetadataKeys[] = {"r_max", "type_names", "num_types", "model_dtype", "model_type",
                               "mlip_version", "config", "units"};
/// What `mlip freeze` adds (models/capabilities.h, models/settings_record.h), and `mlip
/// compress` (frozen/compress.h).
const char* const kFrozenKeys[] = {"capabilities", "inference_settings", "compression"};
/// Where a model came from, written when it applies and copied with the metadata: `finetune` (a
/// model trained with --finetune: what it took from which model) and `change_bias` (its energy
/// shifts changed by `mlip change-bias`).
const char* const kProvenanceKeys[] = {"finetune", "change_bias"};
const char* const kTrainingKeys[] = {"step",       "sampler",  "val_sampler", "optimizer", "mlip_checkpoint",
                               "world_size", "weights", "ema_updates"};

/// The extra file holding the checksum, and the archive's records the checksum leaves out: the
/// checksum itself, and the id that LibTorch 2 derives from all records' names and CRCs.
constexpr const char* kChecksumFile = "checksum";
constexpr const char* kChecksumRecord = "extra/checksum";
constexpr const char* kSerializationIdRecord = ".data/serialization_id";

/// SHA-256 over every record of a TorchScript archive (names sorted; each name, its length and
/// its bytes), except the checksum and the serialization id (docs/robustness.md "Checksums").
std::string archive_digest(caffe2::serialize::PyTorchStreamReader& reader) {
  std::vector<std::string> names = reader.getAllRecords();
  std::sort(names.begin(), names.end());
  Sha256 hash;
  for (const std::string& name : names) {
    if (name == kChecksumRecord || name == kSerializationIdRecord) continue;
    auto [data, size] = reader.getRecord(name);
    const uint64_t length = size;
    hash.update(name);
    hash.update(std::string_view("\0", 1));
    hash.update(std::string_view(reinterpret_cast<const char*>(&length), sizeof length));
    hash.update(std::string_view(static_cast<const char*>(data.get()), size));
  }
  return "sha256:" + hash.hex_digest();
}

/// Whether every record of `first` is in `second` with the same bytes (records of `second`
/// alone, such as the checksum, are not looked at).
bool same_records(const std::string& first, const std::string& second) {
  std::istringstream in_first(first), in_second(second);
  caffe2::serialize::PyTorchStreamReader a(&in_first), b(&in_second);
  for (const std::string& name : a.getAllRecords()) {
    if (name == kSerializationIdRecord) continue;
    if (!b.hasRecord(name)) return false;
    auto [data_a, size_a] = a.getRecord(name);
    auto [data_b, size_b] = b.getRecord(name);
    if (size_a != size_b || std::memcmp(data_a.get(), data_b.get(), size_a) != 0) return false;
  }
  return true;
}

/// The stored checksum of an archive, or "" when it has none.
std::string stored_checksum(caffe2::serialize::PyTorchStreamReader& reader) {
  if (!reader.hasRecord(kChecksumRecord)) return "";
  auto [data, size] = reader.getRecord(kChecksumRecord);
  return std::string(static_cast<const char*>(data.get()), size);
}

std::string read_whole_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot read (" + system_reason(errno) + ")");
  std::ostringstream bytes;
  bytes << in.rdbuf();
  if (in.bad()) throw Error(path + ": cannot read (" + system_reason(errno) + ")");
  return bytes.str();
}

}  // namespace

const std::vector<std::string>& model_metadata_keys() {
  static const std::vector<std::string> keys(std::begin(kMetadataKeys), std::end(kMetadataKeys));
  return keys;
}

ExtraFiles model_metadata(const ExtraFiles& extra, const std::string& source, const std::string& kind) {
  ExtraFiles meta;
  for (const std::string& k : model_metadata_keys()) {
    auto it = extra.find(k);
    if (it == extra.end()) throw Error(source + ": the " + kind + " lacks '" + k + "' metadata");
    meta[k] = it->second;
  }
  for (const char* k : kProvenanceKeys) {
    auto it = extra.find(k);
    if (it != extra.end()) meta[k] = it->second;
  }
  return meta;
}

std::string serialize_module(const torch::jit::Module& module, const ExtraFiles& extra) {
  torch::jit::ExtraFilesMap files(extra.begin(), extra.end());
  files.erase(kChecksumFile);
  std::ostringstream first_stream;
  module.save(first_stream, files);
  const std::string first = first_stream.str();
  {
    std::istringstream in(first);
    caffe2::serialize::PyTorchStreamReader reader(&in);
    files[kChecksumFile] = archive_digest(reader);
  }
  std::ostringstream second;
  module.save(second, files);
  std::string archive = second.str();
  // The digest was taken of the first archive: the second must hold the same records.
  if (!same_records(first, archive))
    throw Error("saving a model: LibTorch wrote different records for the same module twice; cannot checksum it");
  return archive;
}

void save_module_atomically(const torch::jit::Module& module, const ExtraFiles& extra, const std::string& path,
                            const std::string& what) {
  std::string archive;
  try {
    archive = serialize_module(module, extra);
  } catch (const c10::Error& e) {
    throw Error(path + ": cannot write " + what + " (LibTorch: " + e.what_without_backtrace() + ")");
  }
  write_file_atomically(path, archive, what);
}

std::vector<std::string> stored_type_names(const ExtraFiles& extra) {
  std::vector<std::string> names;
  const auto it = extra.find("type_names");
  if (it == extra.end()) return names;
  std::istringstream in(it->second);
  for (std::string name; in >> name;) names.push_back(name);
  return names;
}

torch::jit::Module load_model(const std::string& path, ExtraFiles& extra) {
  const std::string archive = read_whole_file(path);
  std::string stored, actual;
  try {
    std::istringstream in(archive);
    caffe2::serialize::PyTorchStreamReader reader(&in);
    stored = stored_checksum(reader);
    if (!stored.empty()) actual = archive_digest(reader);
  } catch (const c10::Error& e) {
    throw Error(path + ": not a TorchScript model, or a damaged one (" +
                std::string(e.what_without_backtrace()).substr(0, 200) + ")");
  }
  torch::jit::ExtraFilesMap files;
  for (const char* k : kMetadataKeys) files[k] = "";
  for (const char* k : kTrainingKeys) files[k] = "";
  for (const char* k : kFrozenKeys) files[k] = "";
  for (const char* k : kProvenanceKeys) files[k] = "";
  torch::jit::Module module;
  try {
    std::istringstream in(archive);
    module = torch::jit::load(in, torch::kCPU, files);
  } catch (const c10::Error& e) {
    throw Error(path + ": not a TorchScript model, or a damaged one (" +
                std::string(e.what_without_backtrace()).substr(0, 200) + ")");
  }
  if (files["model_type"].empty())
    throw Error(path + ": a TorchScript file without mlip's metadata (model_type); expected a checkpoint or a model frozen by 'mlip freeze'");
  if (stored.empty())
    throw Error(path + ": no checksum (extra/checksum) in the file; expected a checkpoint or frozen model written by mlip " +
                "0.5 or later, which carry one (docs/robustness.md)");
  if (stored != actual) {
    // Both in full, and where they part: digests cut short may look the same.
    size_t first = 0;
    while (first < stored.size() && first < actual.size() && stored[first] == actual[first]) ++first;
    throw Error(path + ": damaged: its contents do not match the checksum stored in it (stored " + stored +
                ", computed " + actual + ": they differ from character " + std::to_string(first + 1) +
                " on); use another checkpoint");
  }
  extra.clear();
  for (auto& [k, v] : files)
    if (!v.empty()) extra[k] = v;
  return module;
}

std::string resolve_checkpoint(const std::string& given) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_regular_file(given, ec)) return given;
  if (fs::is_directory(given, ec)) {
    std::ifstream pointer(fs::path(given) / "checkpoint");
    std::string name;
    if (pointer && std::getline(pointer, name) && !name.empty()) {
      const fs::path p = fs::path(given) / name;
      if (fs::is_regular_file(p, ec)) return p.string();
      throw Error(given + "/checkpoint: points to " + name + ", which does not exist");
    }
    throw Error(given + ": a folder without a 'checkpoint' pointer file (expected a checkpoint file or a training folder)");
  }
  if (fs::is_regular_file(given + ".pt", ec)) return given + ".pt";
  throw Error(given + ": no such checkpoint (expected a checkpoint file, e.g. model.ckpt-1000.pt, or a training folder)");
}

}  // namespace mlip::archive
