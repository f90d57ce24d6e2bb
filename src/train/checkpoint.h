#pragma once

#include <string>

#include "archive/model_archive.h"

namespace mlip::train {

/// The checkpoint file a user means: a file as given; a folder holding a `checkpoint` pointer;
/// or a save_ckpt prefix whose `<prefix>.pt` link exists. Throws mlip::Error when none exists.
std::string resolve_checkpoint(const std::string& given);

/// `mlip freeze`: the checkpoint's module with the docs/deploy.md metadata and the model's
/// capabilities (models/capabilities.h), without training state. Refuses an output that is the
/// checkpoint itself.
void freeze(const std::string& checkpoint, const std::string& output);

}  // namespace mlip::train
