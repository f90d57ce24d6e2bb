#pragma once

#include <torch/script.h>

#include <map>
#include <string>

namespace mlip::train {

/// Extra files stored beside the TorchScript module in checkpoints and frozen models
/// (docs/deploy.md: r_max, type_names, num_types, model_dtype, model_type, mlip_version, config,
/// units; checkpoints add step, sampler, val_sampler, optimizer).
using ExtraFiles = std::map<std::string, std::string>;

/// Writes the module and extra files to `path` atomically: to a temporary name in the same
/// folder, flushed to disk, then renamed, so a crash never leaves a corrupt file at `path`.
void save_module_atomically(const torch::jit::Module& module, const ExtraFiles& extra, const std::string& path);

/// Writes a text file atomically (temporary name, fsync, rename).
void write_file_atomically(const std::string& path, const std::string& text);

/// The checkpoint file a user means: a file as given; a folder holding a `checkpoint` pointer;
/// or a save_ckpt prefix whose `<prefix>.pt` link exists. Throws mlip::Error when none exists.
std::string resolve_checkpoint(const std::string& given);

/// Loads a checkpoint or frozen model with the extra files it holds (those named in `wanted`
/// that are present). Throws mlip::Error naming the file when it is not a model of this project.
torch::jit::Module load_model(const std::string& path, ExtraFiles& extra);

/// `mlip freeze`: the checkpoint's module with the docs/deploy.md metadata, without training state.
void freeze(const std::string& checkpoint, const std::string& output);

}  // namespace mlip::train
