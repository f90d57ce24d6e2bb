#include "app/command_paths.h"

#include <sys/stat.h>

#include <cstdio>
#include <filesystem>

#include "byte_size.h"
#include "error.h"
#include "archive/model_archive.h"
#include "archive/output_file.h"
#include "models/model.h"

namespace fs = std::filesystem;

namespace mlip::app {
namespace {

/// The kind of an existing input (following links), or nullptr-like kAbsent when stat fails.
archive::TargetKind input_kind(const std::string& path) {
  const archive::TargetKind kind = archive::output_target_kind(path);
  // For reading, a file reached through /dev or /proc (/dev/stdin from a file) is a file.
  return kind == archive::TargetKind::kProcessFile ? archive::TargetKind::kRegularFile : kind;
}

}  // namespace

void check_input_file(const std::string& path, const std::string& holds, std::uintmax_t max_bytes) {
  const archive::TargetKind kind = input_kind(path);
  if (kind == archive::TargetKind::kAbsent) return;
  if (kind == archive::TargetKind::kFolder)
    throw Error(path + ": cannot read " + holds + " (it is a folder; expected a file)");
  if (kind != archive::TargetKind::kRegularFile)
    throw Error(path + ": cannot read " + holds + " (it is " + archive::describe(kind) +
                ", not a regular file; mlip reads input files from regular files only)");
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && std::uintmax_t(st.st_size) > max_bytes)
    throw Error(path + ": cannot read " + holds + " (it is " + bytes_in_words(double(st.st_size)) +
                "; " + holds + " is read whole and may be at most " + bytes_in_words(double(max_bytes)) +
                ": is this the right file?)");
}

void check_input_path(const std::string& path, const std::string& holds) {
  const archive::TargetKind kind = input_kind(path);
  if (kind == archive::TargetKind::kAbsent || kind == archive::TargetKind::kRegularFile ||
      kind == archive::TargetKind::kFolder)
    return;
  throw Error(path + ": cannot read " + holds + " (it is " + archive::describe(kind) +
              "; expected a regular file or a folder)");
}

void check_checkpoint_path(const std::string& path, const std::string& holds) {
  check_input_path(path, holds);
  if (input_kind(path) != archive::TargetKind::kFolder) return;
  const std::string pointer = (fs::path(path) / "checkpoint").string();
  const archive::TargetKind kind = input_kind(pointer);
  if (kind != archive::TargetKind::kAbsent && kind != archive::TargetKind::kRegularFile)
    throw Error(pointer + ": cannot read the pointer to the newest checkpoint (it is " + archive::describe(kind) +
                ", not a regular file)");
}

namespace {

/// What `mlip train` reads: its input, the model it starts from, its data systems.
std::vector<archive::ReadPath> training_inputs(const train::TrainConfig& config, const train::TrainOptions& options) {
  std::vector<archive::ReadPath> inputs{{config.input_path, "the training input"},
                                        {config.model->e0s.file, "model.e0s.isolated's file"}};
  for (const auto& [given, holds] : {std::pair{options.restart, "the checkpoint to restart from"},
                                     std::pair{options.init_model, "the checkpoint to start from"},
                                     std::pair{options.finetune, "the model to fine-tune"}})
    if (!given.empty()) inputs.push_back(model_inputs({given}, holds).at(0));
  for (const auto& system : config.training_data.systems) inputs.push_back({system, "the training system"});
  if (config.validation_data)
    for (const auto& system : config.validation_data->systems) inputs.push_back({system, "the validation system"});
  return inputs;
}

}  // namespace

void check_training_outputs(const train::TrainConfig& config, const train::TrainOptions& options) {
  using archive::check_output_target;
  using archive::SpecialTarget;
  const std::vector<archive::ReadPath> inputs = training_inputs(config, options);
  if (!options.step_times.empty()) {
    check_output_target(options.step_times, SpecialTarget::kStream, "--step-times " + options.step_times,
                        "the step times");
    archive::check_output_is_not_an_input(options.step_times, "--step-times " + options.step_times, inputs);
  }
  const fs::path dir = options.output_dir.empty() ? fs::path(".") : fs::path(options.output_dir);
  const std::string lcurve = (dir / config.disp_file).string();
  check_output_target(lcurve, SpecialTarget::kRefuse, lcurve, "the learning curve");
  archive::check_output_is_not_an_input(lcurve, "training.disp_file: " + lcurve, inputs);
  const std::string pointer = (dir / "checkpoint").string();
  check_output_target(pointer, SpecialTarget::kRefuse, pointer, "the pointer to the newest checkpoint");
  archive::check_output_is_not_an_input(pointer, pointer + " (the pointer to the newest checkpoint)", inputs);
  const std::string link = (dir / (config.save_ckpt + ".pt")).string();
  check_output_target(link, SpecialTarget::kRefuse, link, "the link to the newest checkpoint");
  // The checkpoints of an earlier run in that folder, which this one may write again.
  const fs::path stem = dir / config.save_ckpt;
  const std::string prefix = stem.filename().string() + "-";
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(stem.parent_path().empty() ? fs::path(".") : stem.parent_path(), ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() > prefix.size() + 3 && name.rfind(prefix, 0) == 0 && name.substr(name.size() - 3) == ".pt")
      check_output_target(entry.path().string(), SpecialTarget::kRefuse, entry.path().string(), "checkpoints");
  }
}

void check_test_detail_outputs(const std::string& prefix, const std::vector<archive::ReadPath>& inputs) {
  for (const char* suffix : {".e.out", ".e_peratom.out", ".f.out", ".f_elements.out", ".v.out", ".q.out", ".dipole.out"}) {
    const std::string path = prefix + suffix;
    archive::check_output_target(path, archive::SpecialTarget::kStream, "-d " + prefix + ": " + path,
                               "test detail files");
    archive::check_output_is_not_an_input(path, "-d " + prefix + ": " + path, inputs);
  }
}

std::vector<archive::ReadPath> model_inputs(const std::vector<std::string>& models, const std::string& holds) {
  std::vector<archive::ReadPath> inputs;
  for (const std::string& model : models) {
    std::string file = model;
    try {
      file = archive::resolve_checkpoint(model);  // a training folder: the checkpoint it points to
    } catch (const std::exception&) {
      // Left to the model's reader, whose message names what is wrong.
    }
    inputs.push_back({file, holds});
  }
  return inputs;
}

}  // namespace mlip::app
