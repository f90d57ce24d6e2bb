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
};

}  // namespace mlip
