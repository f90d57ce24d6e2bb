// `mlip plot`: PNG pictures of a training run and of `mlip test`'s results (docs/training.md
// "Pictures"), drawn by matplotlib through the script tools/mlip_plot.py, which the executable
// carries.
#pragma once

#include <string>
#include <vector>

namespace mlip::app {

/// The text of tools/mlip_plot.py (generated at build time).
extern const char* const kPlotScript;

/// The Python `mlip plot` runs: the MLIP_PYTHON environment variable, else the one with
/// matplotlib found when mlip was configured (CMake's MLIP_PLOT_PYTHON), else python3 on PATH.
std::string plot_python();

/// Writes the plotting script to a private temporary file and runs it with plot_python() and
/// `arguments`; returns its exit code (1 for any failure). Every failure is printed as
/// `mlip plot: error: ...` lines: the script's own, or one naming the interpreter when Python
/// could not start it or it ended otherwise (never a Python traceback).
int run_plot_script(const std::vector<std::string>& arguments);

}  // namespace mlip::app
