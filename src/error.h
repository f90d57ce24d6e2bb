#pragma once

#include <stdexcept>
#include <string>

namespace mlip {

/// The one exception type of the project. Messages name the file, key or value, what was
/// expected and what was found, e.g.
/// `training.batch_size: expected a positive integer or "auto", got -3`.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}

  /// An error that every rank of a distributed run raises at once, with the same message (e.g.
  /// ranks that disagree on the input): printed once, by rank 0.
  static Error on_every_rank(const std::string& message) {
    Error error(message);
    error.every_rank_ = true;
    return error;
  }
  bool raised_on_every_rank() const { return every_rank_; }

 private:
  bool every_rank_ = false;
};

}  // namespace mlip
