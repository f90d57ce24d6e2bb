#include "train/learning_curve.h"

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "error.h"

namespace fs = std::filesystem;

namespace mlip::train {

using archive::OutputFile;
using archive::SpecialTarget;
using archive::system_reason;
using archive::write_file_atomically;

LearningCurve::LearningCurve(const std::string& path, Columns columns, std::optional<int64_t> continue_after_step)
    : columns_(columns) {
  std::error_code ec;
  if (!continue_after_step || !fs::exists(path, ec)) {
    write_file_atomically(path, header(columns), "the learning curve");
  } else {
    std::ifstream old(path, std::ios::binary);
    std::ostringstream text;
    text << old.rdbuf();
    if (!old) throw Error(path + ": cannot read the learning curve to continue it (" + system_reason(errno) + ")");
    write_file_atomically(path, lcurve_up_to(text.str(), *continue_after_step), "the learning curve");
  }
  file_ = std::make_unique<OutputFile>(path, OutputFile::Mode::kAppend, "the learning curve");
}

std::string LearningCurve::header(Columns columns) {
  const bool has_val = columns.validation;
  std::string header = "# step";
  header += has_val ? " rmse_val rmse_trn rmse_e_val rmse_e_trn rmse_f_val rmse_f_trn" : " rmse_trn rmse_e_trn rmse_f_trn";
  if (columns.virial) header += has_val ? " rmse_v_val rmse_v_trn" : " rmse_v_trn";
  if (columns.charge) header += has_val ? " rmse_q_val rmse_q_trn" : " rmse_q_trn";
  return header + " lr\n";
}

void LearningCurve::write_line(int64_t step, double learning_rate, const CurveErrors& training,
                               const CurveErrors* validation) {
  char line[512];
  std::string text;
  std::snprintf(line, sizeof(line), "%7ld", long(step));
  text += line;
  auto column = [&](double value) {
    std::snprintf(line, sizeof(line), "   %11.4e", value);
    text += line;
  };
  if (validation) column(validation->loss);
  column(training.loss);
  if (validation) column(validation->energy);
  column(training.energy);
  if (validation) column(validation->force);
  column(training.force);
  if (columns_.virial) {
    if (validation) column(validation->virial);
    column(training.virial);
  }
  if (columns_.charge) {
    if (validation) column(validation->charge);
    column(training.charge);
  }
  std::snprintf(line, sizeof(line), "   %10.3e\n", learning_rate);
  text += line;
  file_->write(text);
}

std::string lcurve_up_to(const std::string& text, int64_t step) {
  std::istringstream in(text);
  std::string kept, line;
  while (std::getline(in, line)) {
    if (in.eof()) break;  // no newline: the last line was cut
    if (!line.empty() && line[0] == '#') {
      kept += line + "\n";
      continue;
    }
    std::istringstream fields(line);
    int64_t line_step = 0;
    if (fields >> line_step && line_step <= step) kept += line + "\n";
  }
  return kept;
}

void write_step_times(const std::string& path, int64_t steps_before, const std::vector<StepTime>& times) {
  const bool counted = !times.empty() && times[0].operations.has_value();
  std::string text =
      "# step ms (forward, backward and update of each step) making_ms (of which making frames: reading them and "
      "the model's per-frame input, docs/data.md)";
  text += counted ? " operators (LibTorch operator calls of the step) autograd_nodes (run by its backward passes) "
                    "device_reads (calls a GPU's host waits for; train/operation_counter.h)\n"
                  : "\n";
  for (size_t k = 0; k < times.size(); ++k) {
    text += std::to_string(steps_before + int64_t(k) + 1) + " " + std::to_string(times[k].step_ms) + " " +
            std::to_string(times[k].making_ms);
    if (counted) {
      const OperationCounts n = times[k].operations.value_or(OperationCounts{-1, -1, -1});
      text += " " + std::to_string(n.operators) + " " + std::to_string(n.autograd_nodes) + " " +
              std::to_string(n.device_reads);
    }
    text += "\n";
  }
  write_file_atomically(path, text, "the step times", SpecialTarget::kStream);  // a FIFO: streamed
}

}  // namespace mlip::train
