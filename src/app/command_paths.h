#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "archive/output_not_input.h"
#include "train/config.h"
#include "train/trainer.h"

namespace mlip::app {

/// The checks a command makes of the paths it will read and write before its work starts
/// (docs/robustness.md "Special files" and "Messages about inputs"), so that a path that cannot
/// be used fails at once, in the project's words, and nothing is lost or replaced.

/// The largest input file a command reads whole (a training input, a LAMMPS script): a file
/// larger than this is not one (/dev/zero's like, a data file given by mistake).
constexpr std::uintmax_t kMaxInputFileBytes = std::uintmax_t(64) << 20;

/// Checks that `path`, an input file read whole (`holds`: "the training input"), is a regular
/// file (or a link to one) of at most `max_bytes`. A missing file is left to the reader (its
/// message says so). Throws mlip::Error naming the path, e.g. `/dev/zero: cannot read the
/// training input (it is a character device, not a regular file)`.
void check_input_file(const std::string& path, const std::string& holds,
                      std::uintmax_t max_bytes = kMaxInputFileBytes);

/// Checks that `path`, an input that may be a file or a folder (a checkpoint or training folder,
/// a data system), is one of the two: a FIFO, a device or a socket is refused, naming the path.
void check_input_path(const std::string& path, const std::string& holds);

/// Checks a checkpoint or model path (`freeze -c`, `test -m`, `--restart`, `--init-model`) as
/// check_input_path does, and, for a training folder, its `checkpoint` pointer file: reading a
/// FIFO there would wait for ever.
void check_checkpoint_path(const std::string& path, const std::string& holds);

/// Checks every file `mlip train` will write (rank 0) before the training starts: --step-times
/// (written into as a stream when it is a FIFO or a character device), and in the output folder
/// the learning curve, the `checkpoint` pointer, the `<save_ckpt>.pt` link and the existing
/// `<save_ckpt>-<step>.pt` checkpoints (refused when not regular files). The step times, the
/// learning curve and the pointer must not be one of the files the training reads (its input,
/// the model it starts from, its systems).
void check_training_outputs(const train::TrainConfig& config, const train::TrainOptions& options);

/// Checks the detail files of `mlip test -d <prefix>` (written into as streams when FIFOs or
/// character devices), none of which may be one of `inputs` (archive::check_output_is_not_an_input).
void check_test_detail_outputs(const std::string& prefix, const std::vector<archive::ReadPath>& inputs);

/// The files `models` (frozen models, checkpoints or training folders) name, as inputs for
/// archive::check_output_is_not_an_input that hold `holds`: a training folder by the checkpoint it
/// points to.
std::vector<archive::ReadPath> model_inputs(const std::vector<std::string>& models,
                                            const std::string& holds = "the model");

}  // namespace mlip::app
