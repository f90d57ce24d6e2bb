#pragma once

#include <string>

namespace mlip::frozen {

/// `mlip freeze`: the checkpoint's module (a file, a training folder or a save_ckpt prefix:
/// archive::resolve_checkpoint) with the docs/deploy.md metadata, the model's capabilities
/// (models/capabilities.h) and its inference settings (models/settings_record.h), without
/// training state. Refuses an output that is the checkpoint itself.
void freeze(const std::string& checkpoint, const std::string& output);

}  // namespace mlip::frozen
