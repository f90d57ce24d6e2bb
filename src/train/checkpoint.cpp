#include "train/checkpoint.h"

#include <filesystem>
#include <fstream>

#include "archive/output_file.h"
#include "error.h"
#include "models/capabilities.h"
#include "models/registry.h"

namespace fs = std::filesystem;

namespace mlip::train {

using archive::ExtraFiles;
using archive::load_model;
using archive::remove_stale_temporaries;
using archive::save_module_atomically;

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

void freeze(const std::string& checkpoint, const std::string& output) {
  const std::string source = resolve_checkpoint(checkpoint);
  std::error_code ec;
  if (fs::equivalent(source, output, ec))
    throw Error("freeze -o " + output + ": that is the checkpoint being frozen (" + source +
                "); expected another file name, e.g. frozen_model.pt");
  remove_stale_temporaries(fs::path(output).parent_path().string());
  ExtraFiles extra;
  torch::jit::Module module = load_model(source, extra);
  ExtraFiles meta;
  for (const std::string& k : archive::model_metadata_keys()) {
    auto it = extra.find(k);
    if (it == extra.end()) throw Error(checkpoint + ": the checkpoint lacks '" + k + "' metadata");
    meta[k] = it->second;
  }
  // What MD checks at load, so that it needs no training input (docs/deploy.md "Capabilities").
  const auto settings = models::parse_model_settings(meta["config"], source + " (its training input)");
  meta["capabilities"] = models::capabilities_of(*settings).to_text();
  module.eval();
  for (const auto& p : module.parameters()) p.requires_grad_(false);
  save_module_atomically(module, meta, output, "the frozen model");
}

}  // namespace mlip::train
