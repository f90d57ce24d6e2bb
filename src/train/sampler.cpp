#include "train/sampler.h"

#include <algorithm>
#include <numeric>
#include <sstream>

#include "error.h"

namespace mlip::train {

std::vector<double> system_probabilities(const std::vector<int64_t>& nbatch, const std::string& auto_prob,
                                         const std::vector<double>& sys_probs, const std::string& key) {
  const size_t n = nbatch.size();
  std::vector<double> p(n, 0.0);
  if (!sys_probs.empty()) {
    if (sys_probs.size() != n)
      throw Error(key + ".sys_probs: expected " + std::to_string(n) + " probabilities (one per system), got " +
                  std::to_string(sys_probs.size()));
    p = sys_probs;
  } else if (auto_prob == "prob_uniform") {
    std::fill(p.begin(), p.end(), 1.0);
  } else if (auto_prob == "prob_sys_size") {
    for (size_t s = 0; s < n; ++s) p[s] = double(nbatch[s]);
  } else if (auto_prob.rfind("prob_sys_size;", 0) == 0) {
    std::stringstream blocks(auto_prob.substr(14));
    std::string block;
    std::vector<bool> covered(n, false);
    while (std::getline(blocks, block, ';')) {
      long a = 0, b = 0;
      double w = 0;
      char c1 = 0, c2 = 0;
      std::stringstream bs(block);
      if (!(bs >> a >> c1 >> b >> c2 >> w) || c1 != ':' || c2 != ':' || a < 0 || b <= a || size_t(b) > n || w < 0)
        throw Error(key + ".auto_prob: expected blocks \"a:b:w\" with 0 <= a < b <= " + std::to_string(n) +
                    " and w >= 0, got \"" + block + "\"");
      double size = 0;
      for (long s = a; s < b; ++s) size += double(nbatch[size_t(s)]);
      for (long s = a; s < b; ++s) {
        if (covered[size_t(s)])
          throw Error(key + ".auto_prob: system " + std::to_string(s) + " is in two blocks of \"" + auto_prob + "\"");
        covered[size_t(s)] = true;
        p[size_t(s)] = size > 0 ? w * double(nbatch[size_t(s)]) / size : 0.0;
      }
    }
  } else {
    throw Error(key + ".auto_prob: expected \"prob_sys_size\", \"prob_uniform\" or \"prob_sys_size;a:b:w;...\", got \"" +
                auto_prob + "\"");
  }
  double total = 0;
  for (double v : p) {
    if (!(v >= 0)) throw Error(key + ".sys_probs: expected non-negative probabilities");
    total += v;
  }
  if (!(total > 0)) throw Error(key + ": every system has probability 0");
  for (double& v : p) v /= total;
  return p;
}

SystemSampler::SystemSampler(std::vector<int64_t> frames, std::vector<int64_t> batch,
                             std::vector<double> probabilities, uint64_t seed, int ranks)
    : ranks_(ranks), frames_(std::move(frames)), batch_(std::move(batch)), probabilities_(std::move(probabilities)),
      order_(frames_.size()), cursor_(frames_.size(), 0), rng_(seed) {
  if (frames_.size() != batch_.size() || frames_.size() != probabilities_.size() || frames_.empty())
    throw Error("sampler: expected one frame count, batch size and probability per system");
  if (ranks_ < 1) throw Error("sampler: expected at least one rank, got " + std::to_string(ranks_));
  double acc = 0;
  for (double p : probabilities_) cumulative_.push_back(acc += p);
  for (size_t s = 0; s < frames_.size(); ++s) {
    if (frames_[s] <= 0) throw Error("sampler: system " + std::to_string(s) + " has no frames");
    padded_.push_back((frames_[s] + ranks_ - 1) / ranks_ * ranks_);
    batch_[s] = std::max<int64_t>(1, std::min(batch_[s], padded_[s] / ranks_));
    reshuffle(s);
  }
}

uint64_t SystemSampler::below(uint64_t n) {
  // Rejection sampling: unbiased and independent of the standard library's distributions.
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x;
  do x = rng_();
  while (x >= limit);
  return x % n;
}

void SystemSampler::reshuffle(size_t s) {
  auto& o = order_[s];
  o.resize(size_t(frames_[s]));
  std::iota(o.begin(), o.end(), int64_t(0));
  for (size_t i = o.size(); i > 1; --i) std::swap(o[i - 1], o[size_t(below(i))]);
  for (int64_t k = 0; k < padding(s); ++k) o.push_back(o[size_t(k % frames_[s])]);
  cursor_[s] = 0;
}

SystemSampler::Batch SystemSampler::next() {
  Batch b;
  const double u = double(rng_() >> 11) * 0x1.0p-53 * cumulative_.back();
  b.system = size_t(std::upper_bound(cumulative_.begin(), cumulative_.end(), u) - cumulative_.begin());
  if (b.system >= frames_.size()) b.system = frames_.size() - 1;
  while (probabilities_[b.system] <= 0) b.system = (b.system + 1) % frames_.size();
  const size_t s = b.system;
  const int64_t global = batch_[s] * ranks_;
  if (cursor_[s] + global > padded_[s]) reshuffle(s);
  b.frames.assign(order_[s].begin() + cursor_[s], order_[s].begin() + cursor_[s] + global);
  cursor_[s] += global;
  return b;
}

std::vector<int64_t> SystemSampler::shard(const Batch& batch, int rank) const {
  const size_t per_rank = batch.frames.size() / size_t(ranks_);
  return {batch.frames.begin() + std::ptrdiff_t(per_rank * size_t(rank)),
          batch.frames.begin() + std::ptrdiff_t(per_rank * size_t(rank + 1))};
}

std::string SystemSampler::state() const {
  std::ostringstream o;
  o << rng_ << "\n" << frames_.size() << "\n";
  for (size_t s = 0; s < frames_.size(); ++s) {
    o << cursor_[s] << " " << order_[s].size();
    for (auto v : order_[s]) o << " " << v;
    o << "\n";
  }
  return o.str();
}

void SystemSampler::set_state(const std::string& state) {
  std::istringstream in(state);
  size_t n = 0;
  in >> rng_ >> n;
  if (!in || n != frames_.size())
    throw Error("sampler: the checkpoint's sampler state is for " + std::to_string(n) + " systems, the input has " +
                std::to_string(frames_.size()));
  for (size_t s = 0; s < n; ++s) {
    size_t len = 0;
    in >> cursor_[s] >> len;
    if (!in || int64_t(len) != padded_[s])
      throw Error("sampler: the checkpoint's system " + std::to_string(s) + " has " + std::to_string(len) +
                  " frames per pass, the input's has " + std::to_string(padded_[s]) + " over " +
                  std::to_string(ranks_) + " rank(s)");
    order_[s].resize(len);
    for (auto& v : order_[s]) in >> v;
  }
  if (!in) throw Error("sampler: malformed sampler state in the checkpoint");
}

}  // namespace mlip::train
