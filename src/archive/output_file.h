#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace mlip::archive {

/// What an output path names now, following symbolic links.
enum class TargetKind {
  kAbsent,           ///< nothing (or a dangling link): the file is created
  kRegularFile,      ///< a regular file in an ordinary folder
  kProcessFile,      ///< a regular file reached through /dev or /proc (/dev/stdout redirected to a file)
  kFolder,           ///< a folder
  kCharacterDevice,  ///< /dev/null, /dev/zero, a terminal
  kBlockDevice,      ///< a disk or partition
  kFifo,             ///< a named pipe (mkfifo)
  kSocket,           ///< a Unix socket
  kOther,            ///< anything else stat reports
};

/// The kind of `path`, as stat(2) sees it after following links. A regular file is a
/// kProcessFile when the folder holding the name is /dev (but not /dev/shm) or lies under /proc:
/// renaming onto such a name would replace a system link (/dev/stdout, /dev/fd/1).
TargetKind output_target_kind(const std::string& path);

/// The kind in words, with its article: "a character device", "a FIFO".
std::string describe(TargetKind kind);

/// What an output does with an existing target that is not a regular file.
enum class SpecialTarget {
  /// Refused: what mlip reads back or what must be a whole file (models, checkpoints, the
  /// `checkpoint` pointer, lcurve.out).
  kRefuse,
  /// A FIFO, a character device (/dev/null, a terminal) or a kProcessFile (/dev/stdout) is
  /// opened for writing as it is (no O_CREAT, no O_TRUNC, appending) and written into as a
  /// stream, never renamed over. Block devices, sockets and folders are still refused. For text
  /// streams: step times, test detail files.
  kStream,
};

/// Checks before any work that `path` can be written under `special`; returns whether it will be
/// written as a stream. Throws mlip::Error naming `given` (the option and path, "freeze -o
/// /dev/null") and `holds` ("models", "the step times"), e.g. `freeze -o /dev/null: is a character
/// device, not a regular file; mlip writes models to regular files only`.
bool check_output_target(const std::string& path, SpecialTarget special, const std::string& given,
                         const std::string& holds);

/// Files that mlip writes (checkpoints, frozen models, lcurve.out, test detail files), written
/// through checked system calls (docs/robustness.md "Writing files"): every write, fsync and
/// close is checked, and a failure is an mlip::Error naming the file, what it holds and the
/// system's reason, e.g. `run/model.ckpt-100.pt: cannot write the checkpoint (No space left on
/// device)`.
///
/// Existing targets that are not regular files (docs/robustness.md "Special files") are never
/// renamed over, truncated or replaced: per SpecialTarget they are refused, or written into as a
/// stream. A symbolic link to a regular file is a regular file here (kReplace replaces the link).
class OutputFile {
 public:
  enum class Mode {
    /// Written to temporary_name(path) in the same folder and renamed onto `path` by commit(): the
    /// old file stays whole until then. Destroyed without commit(), the temporary file is removed.
    kReplace,
    /// Appended to `path` in place (created when absent).
    kAppend,
  };

  /// Opens the file. `what` names its content in messages ("the learning curve"). `special`
  /// decides what an existing target that is not a regular file gets (check_output_target).
  OutputFile(std::string path, Mode mode, std::string what, SpecialTarget special = SpecialTarget::kRefuse);
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  /// Writes all of `bytes` (kAppend: straight to the file, so a line is on disk when this returns).
  void write(std::string_view bytes);
  /// Flushes the written bytes to the disk (fsync).
  void sync();
  /// kReplace: fsync, close, rename onto the path, fsync the folder. kAppend, and a stream:
  /// fsync (where the file has one) and close.
  void commit();

  const std::string& path() const { return path_; }
  /// Whether the target is written into as a stream (a FIFO, a character device), not replaced.
  bool streaming() const { return streaming_; }

 private:
  [[noreturn]] void fail(const std::string& doing, int errnum);
  void discard() noexcept;

  std::string path_, temporary_, what_;
  Mode mode_;
  SpecialTarget special_;
  bool streaming_ = false;
  int fd_ = -1;
};

/// Writes `bytes` to `path` through an OutputFile in kReplace mode: `path` holds either its old
/// content or all of `bytes`, never a part (a stream under SpecialTarget::kStream gets them
/// written into it).
void write_file_atomically(const std::string& path, std::string_view bytes, const std::string& what,
                           SpecialTarget special = SpecialTarget::kRefuse);

/// Writes all of `bytes` to the open file descriptor `fd`, retrying after signals and short
/// writes. Returns 0, or the errno of the write that failed (ENOSPC when a write took no byte).
int write_fully(int fd, std::string_view bytes) noexcept;

/// The system's words for an errno value ("No space left on device").
std::string system_reason(int errnum);

/// The name this process writes `path` under before renaming it onto `path`:
/// `<path>.mlip-tmp-<pid>`, a name no user file has by chance.
std::string temporary_name(const std::string& path);

/// Removes the temporary files (temporary_name's `<name>.mlip-tmp-<pid>`, regular files or links)
/// in `folder` left by mlip processes that no longer run (killed while writing); nothing else,
/// whatever its name. Returns how many were removed. Errors are ignored (best effort).
int remove_stale_temporaries(const std::string& folder);

/// Makes sure `folder` exists (creating it and its parents) and is a writable folder. `given`
/// names where it came from in messages (`-o run`). Throws mlip::Error with the reason (and
/// leaves no folder it made). Returns the folders it created, outermost first (empty when
/// `folder` existed), for remove_empty_folders when the command is refused before it writes.
std::vector<std::string> prepare_output_folder(const std::string& folder, const std::string& given);

/// Removes `folders` (prepare_output_folder's list, outermost first) from the innermost out, each
/// only while it is empty: a refused run leaves no empty folder behind, and nothing written is
/// touched. Errors are ignored.
void remove_empty_folders(const std::vector<std::string>& folders) noexcept;

}  // namespace mlip::archive
