#pragma once

#include <stdexcept>
#include <string>

namespace mlip {

/// The one exception type of the project. Messages name the file, key or value, what was
/// expected and what was found, e.g.
/// `training.batch_size: expected a positive integer or "auto", got -3`.
class Error : public std::runtime_error {
 public:
  /// A NUL byte in the message (from a user's file: a key, a value) is written as "\0": what()
  /// is a C string, and the message would end at it.
  explicit Error(const std::string& message) : std::runtime_error(without_nul(message)) {}

  /// An error that every rank of a distributed run raises at once, with the same message (e.g.
  /// ranks that disagree on the input): printed once, by rank 0.
  static Error on_every_rank(const std::string& message) {
    Error error(message);
    error.every_rank_ = true;
    return error;
  }
  bool raised_on_every_rank() const { return every_rank_; }

 private:
  static std::string without_nul(const std::string& message) {
    if (message.find('\0') == std::string::npos) return message;
    std::string out;
    for (char c : message) {
      if (c == '\0')
        out += "\\0";
      else
        out += c;
    }
    return out;
  }

  bool every_rank_ = false;
};

}  // namespace mlip
