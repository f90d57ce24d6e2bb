#include "frozen/compress.h"

#include <cmath>
#include <filesystem>
#include <iomanip>
#include <sstream>

#include "archive/model_archive.h"
#include "archive/output_file.h"
#include "archive/output_not_input.h"
#include "data/load.h"
#include "data/neighbor_stat.h"
#include "error.h"
#include "models/capabilities.h"
#include "models/inference_registry.h"
#include "models/registry.h"
#include "train/config.h"

namespace fs = std::filesystem;

namespace mlip::frozen {

using train::TrainConfig;
using train::load_train_config;
using train::parse_train_config;

namespace {

/// The shortest pair distance within `rcut` over every frame of the training systems of the
/// training input (-t, else the one stored in the model), Å.
double shortest_distance(const CompressRequest& request, const std::string& stored_input, const std::string& source,
                         double rcut, std::ostream& log) {
  const TrainConfig config =
      request.training_input.empty()
          ? parse_train_config(stored_input, source + " (its training input)", fs::current_path().string())
          : load_train_config(request.training_input);
  const std::string from = request.training_input.empty() ? "the training input stored in " + source : request.training_input;
  for (const auto& system : config.training_data.systems) {
    std::error_code ec;
    if (!fs::exists(system, ec))
      throw Error("compress: the training system " + system + " (from " + from +
                  ") does not exist here; give the training input (-t input.yaml) or the shortest pair distance "
                  "of the training data (--min-distance, Å; mlip neighbor-stat prints it as min_nbor_dist)");
  }
  std::vector<std::string> type_map = config.model->type_map;
  auto systems = data::load_systems(config.training_data.systems, type_map, "", data::Loading::kStreamed,
                                    config.training_data.keys);
  const data::NeighborStat stat = data::neighbor_stat(systems, int(type_map.size()), rcut, -1, "the model's rcut");
  if (!std::isfinite(stat.min_distance))
    throw Error("compress: no two atoms of the training data of " + from + " are within the model's rcut; nothing to tabulate");
  int64_t frames = 0;
  for (const auto& s : systems) frames += s.nframes;
  log << "compress: shortest pair distance of the training data " << std::fixed << std::setprecision(6)
      << stat.min_distance << " Å (" << stat.min_where << "; " << frames << " frames of " << from << ")\n";
  return stat.min_distance;
}

}  // namespace

void compress(const CompressRequest& request, std::ostream& log) {
  std::error_code ec;
  const std::string source = fs::is_regular_file(request.input, ec) ? request.input : archive::resolve_checkpoint(request.input);
  archive::check_output_is_not_an_input(request.output, "compress -o " + request.output,
                                        {{source, "the model being compressed"},
                                         {request.training_input, "the training input"}});
  archive::remove_stale_temporaries(fs::path(request.output).parent_path().string());
  archive::ExtraFiles extra;
  torch::jit::Module module = archive::load_model(source, extra);
  archive::ExtraFiles meta = archive::model_metadata(extra, source, "model");
  // The model's settings as frozen (docs/deploy.md "Inference settings"); a checkpoint's (no
  // record yet) from the training input it stores, read as `mlip freeze` reads it.
  const models::SettingsRecord record = models::stored_settings(extra, module, source);
  const models::InferenceEntry* entry = models::find_inference(meta["model_type"]);
  if (entry == nullptr || !entry->compress)
    throw Error("compress: " + source + ": the " + meta["model_type"] +
                " model has no compressed form (mlip compresses se_e2_a, whose embedding nets become tables)");
  models::CompressOptions options = request.options;
  if (!(options.min_distance > 0))
    options.min_distance = shortest_distance(request, meta["config"], source, record.number("cutoff", 0.0), log);
  std::ostringstream tables;
  torch::jit::Module compressed = entry->compress(record, module, options, tables);
  log << tables.str();
  meta["capabilities"] = models::capabilities_from(record).to_text();
  meta["inference_settings"] = record.to_text();
  std::ostringstream header;
  header << std::setprecision(17) << "step " << options.step << "\nextrapolate " << options.extrapolate
         << "\ncheck_frequency " << options.check_frequency << "\nmin_distance " << options.min_distance
         << "\ncompressed_from " << source << "\ntables:\n" << tables.str();
  meta["compression"] = header.str();
  archive::save_module_atomically(compressed, meta, request.output, "the compressed model");
}

}  // namespace mlip::frozen
