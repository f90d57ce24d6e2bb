#include "train/learning_rate.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "error.h"

namespace mlip::train {

void ExpLearningRate::validate() const {
  auto fail = [](const std::string& key, const std::string& expected, double got) {
    std::ostringstream msg;
    msg << "learning_rate." << key << ": expected " << expected << ", got " << got;
    throw Error(msg.str());
  };
  if (!(start_lr > 0) || !std::isfinite(start_lr)) fail("start_lr", "a positive number", start_lr);
  if (!(stop_lr > 0) || !std::isfinite(stop_lr)) fail("stop_lr", "a positive number", stop_lr);
  if (stop_lr > start_lr) {
    // The rate would never leave stop_lr (lr = max(stop_lr, ...)); a rising rate is not what
    // the exp schedule means.
    std::ostringstream bound;
    bound << "at most start_lr (" << start_lr << ")";
    fail("stop_lr", bound.str(), stop_lr);
  }
  if (decay_steps <= 0) fail("decay_steps", "a positive integer", double(decay_steps));
  if (warmup_steps < 0) fail("warmup_steps", "a non-negative integer", double(warmup_steps));
  if (warmup_start_factor < 0 || warmup_start_factor > 1)
    fail("warmup_start_factor", "a number in [0, 1]", warmup_start_factor);
  if (decay_rate > 1) fail("decay_rate", "a number in (0, 1]", decay_rate);
  if (numb_steps <= warmup_steps && decay_rate <= 0)
    fail("warmup_steps", "fewer than training.numb_steps (" + std::to_string(numb_steps) + ")",
         double(warmup_steps));
}

double ExpLearningRate::rate() const {
  if (decay_rate > 0) return decay_rate;
  const double periods = double(numb_steps - warmup_steps) / double(decay_steps);
  return std::exp(std::log(stop_lr / start_lr) / periods);
}

double ExpLearningRate::at(int64_t step) const {
  double lr;
  if (step < warmup_steps) {
    const double f = warmup_start_factor;
    lr = f * start_lr + (1.0 - f) * start_lr * double(step) / double(warmup_steps);
  } else {
    const double k = std::floor(double(step - warmup_steps) / double(decay_steps));
    lr = std::max(stop_lr, start_lr * std::pow(rate(), k));
  }
  return lr * scale;
}

double scale_by_worker(const std::string& mode, int world_size) {
  if (mode == "linear") return double(world_size);
  if (mode == "sqrt") return std::sqrt(double(world_size));
  if (mode == "none") return 1.0;
  throw Error("learning_rate.scale_by_worker: expected one of linear, sqrt, none, got '" + mode + "'");
}

}  // namespace mlip::train
