#pragma once

#include <string>
#include <vector>

namespace mlip::archive {

/// Who holds a run lock, as the lock file describes its holder (docs/robustness.md "A run owns its
/// output folder"). The file holds one `<key> <value>` line per field.
struct LockHolder {
  std::string pid;      ///< the holder's process id, in decimal; empty: the description is not written (yet)
  std::string host;     ///< the host name of the machine it runs on (gethostname)
  std::string started;  ///< when it took the lock, UTC: "2026-11-29 10:01:02 UTC"
  std::string command;  ///< its command line, words joined by spaces, cut at about 200 characters

  /// Whether nothing was read (no file, an empty file: its holder is between creating and writing it).
  bool empty() const { return pid.empty(); }
  /// The holder in words for messages: "pid 1234 on host vm1 since 2026-11-29 10:01:02 UTC: mlip
  /// train input.yaml -o run", or "its description is not written yet" when empty().
  std::string describe() const;
};

/// The holder described in the lock file at `lock_file`; empty when it is absent, unreadable or
/// not written yet.
LockHolder read_lock_holder(const std::string& lock_file);

/// This process as a lock file describes it: its pid, host name, the time now and its command line
/// (/proc/self/cmdline; the program by its file name).
LockHolder this_process_holder();

/// A run's claim on what it writes, so that two mlip runs never write into the same output folder
/// (or the same output file) at the same time (docs/robustness.md "A run owns its output folder").
///
/// The lock is flock(2) on a lock file (`<folder>/.mlip.lock`, `<folder>/.<name>.mlip.lock`) that
/// describes the holder (LockHolder). The kernel drops the lock when its process ends, however it
/// ends: a lock file whose lock can be taken was left by a process that no longer runs, and is taken
/// over with a note. The descriptor is opened with O_CLOEXEC: child processes (a committee's members)
/// do not hold it. Released (the file removed, then closed) by release() or the destructor.
///
/// An empty RunLock (default-constructed, moved from, or returned where nothing can be locked)
/// holds nothing.
class RunLock {
 public:
  RunLock() = default;
  ~RunLock();
  RunLock(RunLock&& other) noexcept;
  RunLock& operator=(RunLock&& other) noexcept;
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

  /// Locks the output folder `folder` ("" is "."), creating it first when needed
  /// (prepare_output_folder); the folders it created are removed again on release() if the run
  /// left them empty (a refused run leaves nothing behind). `given` names it in messages ("-o run"). Throws mlip::Error when
  /// another running process holds it: `-o run: the folder is in use by another mlip run (pid 1234
  /// on host vm1 since 2026-11-29 10:01:02 UTC: mlip train input.yaml -o run); wait for it to end,
  /// or write to another folder`, and when the lock file cannot be opened (naming it and the
  /// system's reason). On a file system without flock it prints a note and returns an empty lock.
  static RunLock for_folder(const std::string& folder, const std::string& given);

  /// Locks the single output `path` (a frozen model, a test detail prefix) through
  /// `<folder of path>/.<file name of path>.mlip.lock`. Throws mlip::Error when another running
  /// process holds it: `-o frozen.pt: frozen.pt is being written by another mlip run (...); wait for
  /// it to end, or write to another file`. Returns an empty lock, leaving the messages to the write
  /// itself, when the folder does not exist or cannot be written, when `path` names a stream or
  /// other special file (/dev/null, a FIFO), or when it lies in /dev or /proc.
  static RunLock for_output(const std::string& path, const std::string& given);

  /// Whether this object holds a lock.
  bool held() const { return fd_ >= 0; }
  /// The lock file's path while held, else "".
  const std::string& path() const { return path_; }
  /// Removes the lock file (when it is still the one locked) and closes it, which drops the lock,
  /// then the folders for_folder created, where empty. Nothing when empty.
  void release() noexcept;

 private:
  RunLock(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  /// Takes the lock on `lock_file`; `in_use` is the refusal's text before the holder's
  /// description, `other` what to write to instead ("folder", "file"). `quiet_when_unwritable`:
  /// a folder where the lock file cannot be created gives an empty lock instead of an error.
  static RunLock take(const std::string& lock_file, const std::string& given, const std::string& in_use,
                      const std::string& other, bool quiet_when_unwritable);

  std::string path_;
  int fd_ = -1;
  /// The output folders for_folder created, outermost first (archive::prepare_output_folder).
  std::vector<std::string> created_;
};

}  // namespace mlip::archive
