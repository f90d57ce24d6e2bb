#pragma once

#include <torch/script.h>

#include <map>
#include <string>
#include <vector>

namespace mlip::archive {

/// Extra files stored beside the TorchScript module in checkpoints and frozen models
/// (docs/deploy.md: r_max, type_names, num_types, model_dtype, model_type, mlip_version, config,
/// units; frozen models add capabilities; checkpoints add step, sampler, val_sampler, optimizer).
using ExtraFiles = std::map<std::string, std::string>;

/// The extra files every checkpoint carries and `mlip freeze` copies into the frozen model.
const std::vector<std::string>& model_metadata_keys();

/// The extra files of model_metadata_keys() out of `extra` (what a frozen model copies from the
/// checkpoint or model it is made from), and the provenance files `finetune` and `change_bias`
/// where `extra` has them. A missing one is an mlip::Error "<source>: the <kind>
/// lacks '<key>' metadata".
ExtraFiles model_metadata(const ExtraFiles& extra, const std::string& source, const std::string& kind);

/// The module and its extra files as the bytes of a TorchScript archive, with one more extra
/// file, `checksum`: "sha256:<hex>" over every other record of the archive (docs/robustness.md
/// "Checksums"). Plain PyTorch loads the archive as any other.
std::string serialize_module(const torch::jit::Module& module, const ExtraFiles& extra);

/// Writes serialize_module's archive to `path` atomically (archive/output_file.h): to a
/// temporary name in the same folder, synced, then renamed, so `path` is never a part of a file;
/// a failed write is an mlip::Error naming `path`, `what` ("the checkpoint") and the reason.
void save_module_atomically(const torch::jit::Module& module, const ExtraFiles& extra, const std::string& path,
                            const std::string& what);

/// Loads a checkpoint or frozen model with the extra files it holds. Throws mlip::Error naming
/// the file when it is not a model of this project, has no checksum, or its contents do not
/// match its checksum (damaged).
torch::jit::Module load_model(const std::string& path, ExtraFiles& extra);

/// The model's type names as a checkpoint or frozen model stores them (the `type_names` extra
/// file: names separated by spaces), in type-id order; empty when absent.
std::vector<std::string> stored_type_names(const ExtraFiles& extra);

/// The checkpoint file a user means: a file as given; a folder holding a `checkpoint` pointer;
/// or a save_ckpt prefix whose `<prefix>.pt` link exists. Throws mlip::Error when none exists.
std::string resolve_checkpoint(const std::string& given);

}  // namespace mlip::archive
