#include "train/checkpoint_store.h"

#include <torch/serialize.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <regex>
#include <sstream>

#include "archive/output_file.h"
#include "dist/simple_ddp.h"
#include "article.h"
#include "error.h"
#include "models/module_device.h"
#include "train/adam_state.h"
#include "archive/model_archive.h"

namespace fs = std::filesystem;

namespace mlip::train {

using archive::check_output_target;
using archive::ExtraFiles;
using archive::load_model;
using archive::save_module_atomically;
using archive::SpecialTarget;
using archive::stored_type_names;
using archive::write_file_atomically;

CheckpointStore::CheckpointStore(std::string output_dir, std::string prefix, int64_t max_keep)
    : output_dir_(std::move(output_dir)), prefix_(std::move(prefix)), max_keep_(max_keep) {}

std::string CheckpointStore::path(int64_t step) const {
  return (fs::path(output_dir_) / (prefix_ + "-" + std::to_string(step) + ".pt")).string();
}

std::string CheckpointStore::save(const TrainingState& state, const ExtraFiles& metadata, int64_t step) const {
  ExtraFiles extra = metadata;
  extra["mlip_checkpoint"] = "1";
  extra["step"] = std::to_string(step);
  extra["world_size"] = std::to_string(state.comm->size());
  extra["sampler"] = state.sampler->state();
  if (state.validation_sampler) extra["val_sampler"] = state.validation_sampler->state();
  extra["optimizer"] = save_adam_state(*state.optimizer);
  const std::string file = path(step);
  if (state.ema) {
    // The module's parameters are the averaged weights (what test, freeze and --init-model
    // use); the raw ones the optimiser steps travel beside them for --restart.
    std::ostringstream raw;
    std::vector<torch::Tensor> host;
    for (const auto& p : *state.parameters) host.push_back(p.detach().to(torch::kCPU));
    torch::save(host, raw);
    extra["weights"] = raw.str();
    extra["ema_updates"] = std::to_string(state.ema->updates());
  }
  {
    // Written from host copies (docs/device.md "Checkpoints"): a checkpoint made on a GPU loads
    // on a machine without one.
    AveragedWeights averaged(state.ema);
    torch::jit::Module& module = state.model->module();
    if (state.device.is_cpu()) {
      save_module_atomically(module, extra, file, "the checkpoint");
    } else {
      torch::jit::Module host = module.deepcopy();
      models::move_module(host, torch::kCPU);
      save_module_atomically(host, extra, file, "the checkpoint");
    }
  }
  point_to_newest(file);
  remove_oldest();
  return file;
}

void CheckpointStore::point_to_newest(const std::string& path) const {
  const fs::path dir = output_dir_;
  write_file_atomically((dir / "checkpoint").string(), fs::path(path).filename().string() + "\n",
                        "the pointer to the newest checkpoint");
  // <save_ckpt>.pt: a link to the newest checkpoint (replaced atomically).
  const fs::path link = dir / (prefix_ + ".pt");
  const fs::path tmp_link = archive::temporary_name((dir / (prefix_ + ".pt")).string());
  check_output_target(link.string(), SpecialTarget::kRefuse, link.string(), "the link to the newest checkpoint");
  std::error_code ec;
  fs::remove(tmp_link, ec);
  fs::create_symlink(fs::path(path).filename(), tmp_link, ec);
  if (!ec) fs::rename(tmp_link, link, ec);
  if (ec) {
    fs::remove(tmp_link, ec);
    throw Error(link.string() + ": cannot write the link to the newest checkpoint (" + ec.message() + ")");
  }
}

void CheckpointStore::remove_oldest() const {
  std::error_code ec;
  std::vector<std::pair<int64_t, fs::path>> found;
  const std::regex pattern(std::regex_replace(prefix_, std::regex(R"([.^$|()\[\]{}*+?\\])"), R"(\$&)") +
                           R"(-(\d+)\.pt)");
  for (const auto& entry : fs::directory_iterator(fs::path(output_dir_), ec)) {
    std::smatch m;
    const std::string name = entry.path().filename().string();
    if (std::regex_match(name, m, pattern)) found.emplace_back(std::stoll(m[1]), entry.path());
  }
  std::sort(found.begin(), found.end());
  for (size_t k = 0; k + size_t(std::max<int64_t>(max_keep_, 1)) < found.size(); ++k) fs::remove(found[k].second, ec);
}

namespace {

/// A checkpoint's weights belong to its types in its order: they go to an input's model only when
/// its type map is the same list (docs/training.md "Restarting"). `option`: "--restart" or
/// "--init-model", for the message.
void check_same_types(const std::string& path, const std::vector<std::string>& saved,
                      const std::vector<std::string>& input, const std::string& option) {
  if (saved == input) return;
  auto listed = [](const std::vector<std::string>& names) {
    std::string out = "[";
    for (size_t k = 0; k < names.size(); ++k) out += (k ? ", " : "") + names[k];
    return out + "]";
  };
  std::string message = option + " " + path + ": the checkpoint was trained with type_map " + listed(saved) +
                        ", the input's model has " + listed(input);
  auto saved_sorted = saved, input_sorted = input;
  std::sort(saved_sorted.begin(), saved_sorted.end());
  std::sort(input_sorted.begin(), input_sorted.end());
  if (saved_sorted == input_sorted)
    message += ": the weights of each type id would serve another element; write model.type_map: " + listed(saved) +
               " in the input (the data's types are matched by name, so only the model's order changes)";
  else
    message += "; the types of a trained model cannot change: train a new model for " + listed(input);
  throw Error(message);
}

/// Copies the weights and statistics of the checkpoint module `loaded` (read from `path`) into
/// the freshly built `model` (same architecture required: every tensor attribute of `loaded`
/// must exist in `model` with the same shape; float attributes are set as they are).
void copy_module_attributes(const std::string& path, const torch::jit::Module& loaded, torch::jit::Module& model) {
  auto mine = model.named_attributes(false);
  for (const auto& item : loaded.named_attributes(false)) {
    if (item.value.isDouble()) {  // e.g. the equivariant model's avg_num_neighbors
      model.setattr(item.name, item.value);
      continue;
    }
    if (!item.value.isTensor()) continue;
    bool matched = false;
    for (const auto& m : mine)
      if (m.name == item.name && m.value.isTensor()) {
        auto dst = m.value.toTensor();
        auto src = item.value.toTensor();
        if (dst.sizes() != src.sizes())
          throw Error(path + ": '" + item.name + "' has shape " + c10::str(src.sizes()) + ", the input's model has " +
                      c10::str(dst.sizes()) + " (different sel, neuron or type_map?)");
        torch::NoGradGuard guard;
        dst.copy_(src);
        matched = true;
      }
    if (!matched) throw Error(path + ": '" + item.name + "' is not part of the input's model");
  }
}

/// --restart of a checkpoint written with a moving average: its module holds the averages (now
/// in `state.model`), its `weights` extra file the raw weights, which go into the parameters.
void restore_raw_weights(const std::string& path, ExtraFiles& extra, const torch::jit::Module& loaded,
                         TrainingState& state) {
  std::vector<torch::Tensor>& params = *state.parameters;
  // The raw weights are stored in the order of the module's parameters: that order must be
  // the input's model's, name by name.
  std::vector<std::string> saved, mine;
  for (const auto& p : loaded.named_parameters(false)) saved.push_back(p.name);
  for (const auto& p : state.model->module().named_parameters(false)) mine.push_back(p.name);
  if (saved != mine) throw Error(path + ": its parameters are not those of the input's model, in the same order");
  std::vector<torch::Tensor> raw;
  std::istringstream in(extra["weights"]);
  torch::load(raw, in, state.device);
  if (raw.size() != params.size())
    throw Error(path + ": " + std::to_string(raw.size()) + " raw weight tensors, the input's model has " +
                std::to_string(params.size()));
  if (state.ema) state.ema->reset(extra.count("ema_updates") ? std::stoll(extra["ema_updates"]) : 0);
  else if (state.comm->rank() == 0)
    std::cout << "note: training.ema_decay is 0: the moving average of the weights in " << path
              << " is dropped, and training continues from the raw weights\n";
  torch::NoGradGuard guard;
  for (size_t k = 0; k < raw.size(); ++k) {
    if (raw[k].sizes() != params[k].sizes())
      throw Error(path + ": raw weight " + std::to_string(k) + " has shape " + c10::str(raw[k].sizes()) +
                  ", the input's model has " + c10::str(params[k].sizes()));
    params[k].detach().copy_(raw[k]);
  }
}

/// --restart: the samplers continue where the checkpoint's run was, when it ran over as many
/// ranks as this one; otherwise the frame order starts afresh.
void restore_samplers(ExtraFiles& extra, TrainingState& state) {
  const bool root = state.comm->rank() == 0;
  const std::string ranks = extra.count("world_size") ? extra["world_size"] : "1";
  if (ranks == std::to_string(state.comm->size())) {
    state.sampler->set_state(extra["sampler"]);
    if (state.validation_sampler && extra.count("val_sampler")) state.validation_sampler->set_state(extra["val_sampler"]);
  } else if (root) {
    std::cout << "note: the checkpoint was written by a run over " << ranks << " rank(s), this one has "
              << state.comm->size() << ": the frame order starts afresh (weights and optimiser continue)\n";
  }
}

}  // namespace

int64_t restore_training_state(const std::string& given, RestoreMode mode, const std::string& model_type,
                               const std::vector<std::string>& type_map, TrainingState& state) {
  const bool full = mode == RestoreMode::kRestart;
  const bool root = state.comm->rank() == 0;
  const std::string path = archive::resolve_checkpoint(given);
  ExtraFiles extra;
  torch::jit::Module loaded = load_model(path, extra);
  if (extra["model_type"] != model_type)
    throw Error(path + ": " + with_article(extra["model_type"]) + " model, the input asks for " + model_type);
  check_same_types(path, stored_type_names(extra), type_map, full ? "--restart" : "--init-model");
  copy_module_attributes(path, loaded, state.model->module());
  if (state.metadata != nullptr)
    for (const char* key : {"finetune", "change_bias"})
      if (extra.count(key)) (*state.metadata)[key] = extra[key];
  if (!full) return 0;
  if (extra.count("step") == 0) throw Error(path + ": a frozen model, not a checkpoint: --restart needs a checkpoint");
  const int64_t step = std::stoll(extra["step"]);
  // A checkpoint with a moving average holds it as the module's parameters and the raw weights
  // under "weights"; one without holds the raw weights only (the average starts from them).
  if (extra.count("weights")) {
    restore_raw_weights(path, extra, loaded, state);
  } else if (state.ema) {
    state.ema->reset(0);
    if (root)
      std::cout << "note: " << path << " has no moving average of the weights (written with ema_decay 0): "
                << "the average starts from its weights, with the warm-up of a fresh one\n";
  }
  // Onto this run's device, wherever it was written.
  load_adam_state(*state.optimizer, extra["optimizer"], state.device, path);
  restore_samplers(extra, state);
  if (root) std::cout << "restarted from " << path << " at step " << step << "\n";
  return step;
}

void broadcast_start_state(dist::Communicator& comm, torch::jit::Module& module) {
  std::vector<torch::Tensor> state;
  std::vector<std::string> scalars;
  for (const auto& a : module.named_attributes(false)) {
    if (a.value.isTensor()) state.push_back(a.value.toTensor());
    if (a.value.isDouble()) scalars.push_back(a.name);
  }
  auto values = torch::empty({int64_t(scalars.size())}, torch::kFloat64);
  for (size_t k = 0; k < scalars.size(); ++k) values[int64_t(k)] = module.attr(scalars[k]).toDouble();
  if (!scalars.empty()) state.push_back(values);
  dist::broadcast_tensors(comm, state);
  for (size_t k = 0; k < scalars.size(); ++k) module.setattr(scalars[k], values[int64_t(k)].item<double>());
}

}  // namespace mlip::train
