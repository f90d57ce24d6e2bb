#include "data/deepmd_system.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

#include "data/deepmd_layout.h"
#include "data/file_identity.h"
#include "data/npy.h"
#include "error.h"

namespace fs = std::filesystem;

namespace mlip::data {

namespace {

std::vector<std::string> read_tokens(const std::string& path) {
  regular_file_identity(path);  // a FIFO would block the read below
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot open file (" + std::strerror(errno) + ")");
  std::vector<std::string> tokens;
  std::string t;
  while (in >> t) tokens.push_back(t);
  return tokens;
}

std::vector<int> read_type_raw(const std::string& path) {
  std::vector<std::string> tokens = read_tokens(path);
  if (tokens.empty()) {
    throw Error(path + ": expected one integer type id per atom, got an empty file");
  }
  std::vector<int> types;
  types.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string& tok = tokens[i];
    bool ok = !tok.empty() && tok.size() <= 9 &&
              tok.find_first_not_of("0123456789") == std::string::npos;
    if (!ok) {
      throw Error(path + ": expected a non-negative integer type id for atom " +
                  std::to_string(i) + ", got '" + tok + "'");
    }
    types.push_back(std::stoi(tok));
  }
  return types;
}

/// Frames [first, first + count) of an opened array, per_frame values each.
std::vector<double> read_frames(const NpyFile& a, int64_t first, int64_t count, int64_t per_frame) {
  const int64_t rows_per_frame = per_frame / a.row_size();
  return read_npy_rows(a, first * rows_per_frame, count * rows_per_frame);
}

/// The opened .npy arrays of each set, indexed by set and SetArray.
using SetFiles = std::vector<std::array<NpyFile, kSetArrays>>;

/// A DeePMD system folder of .npy files, for open_deepmd_layout; keeps the arrays it opens.
class NpyStorage : public DeepmdStorage {
 public:
  explicit NpyStorage(std::string dir) : dir_(std::move(dir)) {}

  std::string root() const override { return dir_; }
  std::string join(const std::string& parent, const std::string& name) const override { return parent + "/" + name; }
  std::string where(const std::string& path) const override { return path; }
  bool exists(const std::string& path) const override { return fs::exists(path); }

  std::vector<std::string> set_names() const override {
    std::vector<std::string> sets;
    for (const auto& entry : fs::directory_iterator(dir_)) {
      const std::string name = entry.path().filename().string();
      if (entry.is_directory() && name.rfind("set.", 0) == 0) sets.push_back(name);
    }
    std::sort(sets.begin(), sets.end());
    return sets;
  }

  std::vector<int> read_type_ids(const std::string& path) const override { return read_type_raw(path); }
  std::vector<std::string> read_type_names(const std::string& path) const override { return read_tokens(path); }

  std::vector<int64_t> open_array(size_t set, SetArray which, const std::string& path) override {
    if (files_.size() <= set) files_.resize(set + 1);
    NpyFile& file = files_[set][size_t(which)];
    file = open_npy(path);
    return file.shape;
  }

  void check_root() const override {
    if (!fs::is_directory(dir_)) {
      throw Error(dir_ + ": not a folder (expected a DeePMD system folder holding type.raw)");
    }
    const std::string type_path = dir_ + "/type.raw";
    if (!fs::exists(type_path)) {
      throw Error(type_path + ": not found (a DeePMD system folder needs type.raw)");
    }
  }

  std::string container() const override { return "folder"; }
  std::string without_box() const override { return "the system folder has an empty file 'nopbc'"; }

  /// The arrays opened so far, moved out.
  SetFiles take_files() { return std::move(files_); }

 private:
  std::string dir_;
  SetFiles files_;
};

/// Reads the frames of a DeePMD npy system: each frame from the set that holds it.
class NpyFrameReader : public FrameReader {
 public:
  NpyFrameReader(std::string dir, DeepmdLayout layout, SetFiles files)
      : dir_(std::move(dir)), layout_(std::move(layout)), files_(std::move(files)) {}

  Frame read(int64_t frame) const override {
    return read_naming_frame(dir_, frame, where(frame), [&] {
      const auto [s, f] = layout_.locate(frame);
      if (s == files_.size())
        throw Error("beyond the system's " + std::to_string(layout_.total_frames()) + " frames");
      return layout_.read_frame([&, s = s, f = f](SetArray which, int64_t per_frame) {
        return read_frames(files_[s][size_t(which)], f, 1, per_frame);
      });
    });
  }

  std::string where(int64_t frame) const override {
    const auto [s, f] = layout_.locate(frame);
    if (s == files_.size()) return "";
    return "row " + std::to_string(f) + " of " + layout_.set_paths[s];
  }

 private:
  std::string dir_;
  DeepmdLayout layout_;
  SetFiles files_;
};

}  // namespace

System open_deepmd_system(const std::string& dir, const std::vector<std::string>& type_map, const LabelKeys& keys) {
  NpyStorage storage(dir);
  System sys;
  DeepmdLayout layout = open_deepmd_layout(storage, type_map, keys, sys);
  sys.reader = std::make_shared<NpyFrameReader>(dir, std::move(layout), storage.take_files());
  return sys;
}

System read_deepmd_system(const std::string& dir, const std::vector<std::string>& type_map, const LabelKeys& keys) {
  System sys = open_deepmd_system(dir, type_map, keys);
  sys.load_all();
  return sys;
}

}  // namespace mlip::data
