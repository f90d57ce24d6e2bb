// `mlip plot`: PNG pictures of a training run and of `mlip test`'s results (docs/training.md
// "Pictures"), drawn by matplotlib through the script tools/mlip_plot.py, which the executable
// carries.
#pragma once

#include <string>
#include <vector>

namespace mlip::app {

/// The text of tools/mlip_plot.py (generated at build time).
extern const char* const kPlotScript;

/// Writes the plotting script to a private temporary file and runs it with `python` (the
/// MLIP_PYTHON environment variable, else python3 on PATH) and `arguments`; returns its exit
/// code. Throws mlip::Error when Python cannot be started.
int run_plot_script(const std::vector<std::string>& arguments);

}  // namespace mlip::app
