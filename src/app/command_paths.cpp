#include "app/command_paths.h"

#include <sys/stat.h>

#include <cstdio>
#include <filesystem>

#include "byte_size.h"
#include "error.h"
#include "archive/output_file.h"

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

void check_training_outputs(const train::TrainConfig& config, const train::TrainOptions& options) {
  using archive::check_output_target;
  using archive::SpecialTarget;
  if (!options.step_times.empty())
    check_output_target(options.step_times, SpecialTarget::kStream, "--step-times " + options.step_times,
                        "the step times");
  const fs::path dir = options.output_dir.empty() ? fs::path(".") : fs::path(options.output_dir);
  const std::string lcurve = (dir / config.disp_file).string();
  check_output_target(lcurve, SpecialTarget::kRefuse, lcurve, "the learning curve");
  const std::string pointer = (dir / "checkpoint").string();
  check_output_target(pointer, SpecialTarget::kRefuse, pointer, "the pointer to the newest checkpoint");
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

void check_test_detail_outputs(const std::string& prefix) {
  for (const char* suffix : {".e.out", ".e_peratom.out", ".f.out", ".f_elements.out", ".v.out"}) {
    const std::string path = prefix + suffix;
    archive::check_output_target(path, archive::SpecialTarget::kStream, "-d " + prefix + ": " + path,
                               "test detail files");
  }
}

}  // namespace mlip::app
