#pragma once

#include <torch/script.h>

#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "models/model.h"
#include "models/settings_record.h"

namespace mlip::train {

/// A trained model that `mlip train --finetune <path>` starts from (docs/training.md
/// "Fine-tuning"): a frozen model, compressed model or checkpoint of the input's model type.
struct Pretrained {
  std::string path;                         ///< the file read (a folder resolved to its checkpoint)
  std::map<std::string, std::string> extra;  ///< its extra files (metadata)
  torch::jit::Module module;                 ///< its weights and statistics, on the CPU
  models::SettingsRecord record;             ///< its settings (docs/deploy.md "Inference settings")
  std::vector<std::string> type_map;         ///< its elements in type-id order
};

/// Reads the model at `given` (file, training folder or save_ckpt prefix). Throws mlip::Error
/// when it is not an mlip model, is damaged, is of another model type than `model_type`, or its
/// type cannot be fine-tuned.
Pretrained read_pretrained(const std::string& given, const std::string& model_type);

/// Throws mlip::Error naming the first setting of the input's model (its settings record,
/// models::inference_record) that differs from the pretrained model's, with both values: every
/// setting but the type map and the precision fixes a weight's shape or meaning.
void check_finetune_settings(const Pretrained& pretrained, const models::SettingsRecord& input);

/// Starts `model` (freshly built for the input, its statistics just computed from `frames`)
/// from the pretrained weights: every weight and statistic the two share by role and element
/// (models/pretrained_weights.h); the added elements keep what the fresh model has. Then the
/// per-type energy shift: the pretrained shifts of the shared elements and the fresh fit's of
/// the added ones (`keep_pretrained_shifts`, model.e0s: fit), or the input's E0s (isolated,
/// given), changed by the least-squares fit of the residual energies of `frames`
/// (models/energy_shift.h), so that the count-weighted energy errors of the start model on them
/// sum to zero. Prints what it did to `log`; returns the provenance text the checkpoints and
/// frozen model carry as `finetune`.
std::string start_from_pretrained(const Pretrained& pretrained, models::Model& model,
                                  const std::vector<models::StatisticsFrames>& frames, bool keep_pretrained_shifts,
                                  std::ostream& log);

}  // namespace mlip::train
