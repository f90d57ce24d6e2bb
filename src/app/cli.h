#pragma once

#include <string>
#include <vector>

namespace mlip::app {

/// Exit codes of the command line.
constexpr int kExitOk = 0;
constexpr int kExitError = 1;  ///< bad input, failed run
constexpr int kExitUsage = 2;  ///< unknown command or flag, missing argument

/// Runs `mlip <args...>` (args without the program name) and returns the exit code. Writes
/// results to stdout and errors to stderr as `mlip: error: <message>`.
int run_cli(const std::vector<std::string>& args);

}  // namespace mlip::app
