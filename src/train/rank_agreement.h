#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <utility>
#include <vector>

#include "data/system.h"
#include "dist/communicator.h"
#include "train/config.h"

namespace mlip::train {

/// One thing every rank of a run must agree on: a key ("training.seed", "data.training[0]") and
/// its value as text.
using AgreementItem = std::pair<std::string, std::string>;

/// What the ranks of a run must agree on (docs/distributed.md "Ranks that disagree"): every key
/// of the input file, flattened to paths (`learning_rate.start_lr`, `model.neuron[1]`), with
/// numbers compared by value (1e-3 and 0.001 agree) and quoting ignored, except the per-rank
/// resources (training.cache_mb, training.data_workers, training.device) and '_' comments;
/// then each training and validation system's name (relative to the input's folder), atoms
/// and frames. Throws mlip::Error when the input text is not YAML.
std::vector<AgreementItem> agreement_items(const TrainConfig& config, const std::vector<data::System>& training,
                                           const std::vector<data::System>& validation);

/// Collective: every rank passes its items; returns when all ranks' items are equal. Otherwise
/// every rank throws the same mlip::Error (Error::on_every_rank, printed once by rank 0) that
/// names the first key that differs and the ranks' values:
/// `ranks disagree on training.seed: rank 0 has 10, rank 1 has 11 (...)`. The exchange uses
/// all-reduces of int64 tensors on `device` (the device the gradients' all-reduces use).
void check_ranks_agree(dist::Communicator& comm, const std::vector<AgreementItem>& items, const c10::Device& device);

/// The message check_ranks_agree raises for the items of all ranks (`by_rank[r]` is rank r's),
/// or "" when they agree.
std::string disagreement(const std::vector<std::vector<AgreementItem>>& by_rank);

}  // namespace mlip::train
