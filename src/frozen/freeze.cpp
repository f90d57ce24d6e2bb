#include "frozen/freeze.h"

#include <filesystem>

#include "archive/model_archive.h"
#include "archive/output_file.h"
#include "archive/output_not_input.h"
#include "error.h"
#include "models/registry.h"

namespace fs = std::filesystem;

namespace mlip::frozen {

void freeze(const std::string& checkpoint, const std::string& output) {
  const std::string source = archive::resolve_checkpoint(checkpoint);
  archive::check_output_is_not_an_input(output, "freeze -o " + output, {{source, "the checkpoint being frozen"}});
  archive::remove_stale_temporaries(fs::path(output).parent_path().string());
  archive::ExtraFiles extra;
  torch::jit::Module module = archive::load_model(source, extra);
  archive::ExtraFiles meta = archive::model_metadata(extra, checkpoint, "checkpoint");
  // What MD checks at load and rebuilds the model's computation from, so that it needs no
  // training input (docs/deploy.md "Capabilities", "Inference settings"). The training input is
  // read here, by the version that trained the model (or a later one reading its keys).
  const auto settings = models::parse_model_settings(meta["config"], source + " (its training input)");
  meta["capabilities"] = models::capabilities_of(*settings).to_text();
  meta["inference_settings"] = models::inference_record(*settings, module).to_text();
  module.eval();
  for (const auto& p : module.parameters()) p.requires_grad_(false);
  archive::save_module_atomically(module, meta, output, "the frozen model");
}

}  // namespace mlip::frozen
