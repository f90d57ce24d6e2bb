#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "archive/output_file.h"
#include "train/operation_counter.h"

namespace mlip::train {

/// The root mean square errors of one set (training or validation) on one line of lcurve.out.
struct CurveErrors {
  double loss = 0;    ///< square root of the mean loss per frame (weighted by the prefactors)
  double energy = 0;  ///< eV per atom
  double force = 0;   ///< eV/Å, over force components
  double virial = 0;  ///< eV per atom, over the 9 components
  double charge = 0;  ///< e, over atoms (charge labels)
};

/// lcurve.out, the learning curve (docs/training.md "Output"): a header line starting with '#',
/// then one line per displayed step: the step, the RMSEs (validation before training in each
/// pair, when there is validation data) and the learning rate. Written by rank 0 only.
class LearningCurve {
 public:
  /// Which columns the curve has.
  struct Columns {
    bool validation = false;  ///< rmse_*_val columns (there is validation data)
    bool virial = false;      ///< rmse_v columns (some training system has virial labels)
    bool charge = false;      ///< rmse_q columns (the loss has charge labels)
  };

  /// Opens the curve at `path` for appending. Without `continue_after_step` (a fresh run), or when
  /// no file is there: a new file holding the header. With it (--restart from that step): the
  /// existing file cut back to its lines up to that step (the lines logged after it come
  /// again). Throws mlip::Error when the old file cannot be read or the new one written.
  LearningCurve(const std::string& path, Columns columns, std::optional<int64_t> continue_after_step);

  /// The header line ("# step rmse_val rmse_trn ... lr\n") of a curve with these columns.
  static std::string header(Columns columns);

  /// Appends the line of `step`: `validation` null when the curve has no validation columns;
  /// `learning_rate` the step's rate.
  void write_line(int64_t step, double learning_rate, const CurveErrors& training, const CurveErrors* validation);
  /// Flushes the lines written so far to the disk (before a checkpoint, so that a restart finds
  /// the curve up to its step).
  void sync() { file_->sync(); }
  /// Flushes and closes the file (the end of training).
  void commit() { file_->commit(); }

 private:
  Columns columns_;
  std::unique_ptr<archive::OutputFile> file_;
};

/// The lines of an lcurve.out text up to and including `step`: comment lines, and data lines
/// whose first column (the step) is at most `step`; a last line cut by a crash (no newline) is
/// left out.
std::string lcurve_up_to(const std::string& text, int64_t step);

/// The wall time of one training step (the `--step-times` file).
struct StepTime {
  double step_ms = 0;    ///< forward, backward and update of the step, ms
  double making_ms = 0;  ///< of which making frames (reading them and the model's per-frame input), ms
  /// What the step asked of LibTorch (`--count-ops`; absent without it).
  std::optional<OperationCounts> operations;
};

/// Writes the `--step-times` file at `path` (a regular file, or a FIFO streamed into): a comment
/// line, then "step step_ms making_ms" per step, the first being step `steps_before + 1`, and
/// "operators autograd_nodes device_reads" after them when the first step's were counted
/// (`--count-ops`).
void write_step_times(const std::string& path, int64_t steps_before, const std::vector<StepTime>& times);

}  // namespace mlip::train
