#pragma once

#include <string>
#include <string_view>

namespace mlip::train {

/// Files that mlip writes (checkpoints, frozen models, lcurve.out, test detail files), written
/// through checked system calls (docs/robustness.md "Writing files"): every write, fsync and
/// close is checked, and a failure is an mlip::Error naming the file, what it holds and the
/// system's reason, e.g. `run/model.ckpt-100.pt: cannot write the checkpoint (No space left on
/// device)`.
class OutputFile {
 public:
  enum class Mode {
    /// Written to `<path>.tmp-<pid>` in the same folder and renamed onto `path` by commit(): the
    /// old file stays whole until then. Destroyed without commit(), the temporary file is removed.
    kReplace,
    /// Appended to `path` in place (created when absent).
    kAppend,
  };

  /// Opens the file. `what` names its content in messages ("the learning curve").
  OutputFile(std::string path, Mode mode, std::string what);
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  /// Writes all of `bytes` (kAppend: straight to the file, so a line is on disk when this returns).
  void write(std::string_view bytes);
  /// Flushes the written bytes to the disk (fsync).
  void sync();
  /// kReplace: fsync, close, rename onto the path, fsync the folder. kAppend: fsync and close.
  void commit();

  const std::string& path() const { return path_; }

 private:
  [[noreturn]] void fail(const std::string& doing, int errnum);
  void discard() noexcept;

  std::string path_, temporary_, what_;
  Mode mode_;
  int fd_ = -1;
};

/// Writes `bytes` to `path` through an OutputFile in kReplace mode: `path` holds either its old
/// content or all of `bytes`, never a part.
void write_file_atomically(const std::string& path, std::string_view bytes, const std::string& what);

/// Writes all of `bytes` to the open file descriptor `fd`, retrying after signals and short
/// writes. Returns 0, or the errno of the write that failed (ENOSPC when a write took no byte).
int write_fully(int fd, std::string_view bytes) noexcept;

/// The system's words for an errno value ("No space left on device").
std::string system_reason(int errnum);

/// Removes the `<name>.tmp-<pid>` files in `folder` left by mlip processes that no longer run
/// (killed while writing). Returns how many were removed. Errors are ignored (best effort).
int remove_stale_temporaries(const std::string& folder);

/// Makes sure `folder` exists (creating it and its parents) and is a writable folder. `given`
/// names where it came from in messages (`-o run`). Throws mlip::Error with the reason.
void prepare_output_folder(const std::string& folder, const std::string& given);

}  // namespace mlip::train
