#include "train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "error.h"

namespace fs = std::filesystem;

namespace mlip::train {
namespace {

const char* kMetadataKeys[] = {"r_max", "type_names", "num_types", "model_dtype", "model_type",
                               "mlip_version", "config", "units"};
const char* kTrainingKeys[] = {"step",       "sampler",  "val_sampler", "optimizer", "mlip_checkpoint",
                               "world_size", "weights", "ema_updates"};

void fsync_path(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

std::string temp_name(const std::string& path) {
  return path + ".tmp-" + std::to_string(::getpid());
}

void commit(const std::string& tmp, const std::string& path) {
  fsync_path(tmp);
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    throw Error(path + ": cannot write (" + ec.message() + ")");
  }
  const fs::path parent = fs::path(path).parent_path();
  fsync_path(parent.empty() ? "." : parent.string());
}

}  // namespace

void save_module_atomically(const torch::jit::Module& module, const ExtraFiles& extra, const std::string& path) {
  const std::string tmp = temp_name(path);
  torch::jit::ExtraFilesMap files(extra.begin(), extra.end());
  try {
    module.save(tmp, files);
  } catch (const c10::Error& e) {
    std::error_code ec;
    fs::remove(tmp, ec);
    throw Error(path + ": cannot write the model (" + e.what_without_backtrace() + ")");
  }
  commit(tmp, path);
}

void write_file_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = temp_name(path);
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << text;
    if (!f) throw Error(path + ": cannot write");
  }
  commit(tmp, path);
}

std::string resolve_checkpoint(const std::string& given) {
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

torch::jit::Module load_model(const std::string& path, ExtraFiles& extra) {
  torch::jit::ExtraFilesMap files;
  for (const char* k : kMetadataKeys) files[k] = "";
  for (const char* k : kTrainingKeys) files[k] = "";
  torch::jit::Module module;
  try {
    module = torch::jit::load(path, torch::kCPU, files);
  } catch (const c10::Error& e) {
    throw Error(path + ": not a TorchScript model (" + std::string(e.what_without_backtrace()).substr(0, 200) + ")");
  }
  if (files["model_type"].empty())
    throw Error(path + ": a TorchScript file without mlip's metadata (model_type); expected a checkpoint or a model frozen by 'mlip freeze'");
  extra.clear();
  for (auto& [k, v] : files)
    if (!v.empty()) extra[k] = v;
  return module;
}

void freeze(const std::string& checkpoint, const std::string& output) {
  ExtraFiles extra;
  torch::jit::Module module = load_model(resolve_checkpoint(checkpoint), extra);
  ExtraFiles meta;
  for (const char* k : kMetadataKeys) {
    auto it = extra.find(k);
    if (it == extra.end()) throw Error(checkpoint + ": the checkpoint lacks '" + std::string(k) + "' metadata");
    meta[k] = it->second;
  }
  module.eval();
  for (const auto& p : module.parameters()) p.requires_grad_(false);
  save_module_atomically(module, meta, output);
}

}  // namespace mlip::train
