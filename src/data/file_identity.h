#pragma once

#include <cstdint>
#include <string>

namespace mlip::data {

/// What tells one state of a file from another: which file it is and the size and modification
/// time it had. Recorded when a streamed file is opened at start and compared on every later
/// read (docs/data.md "Files that change during training"). A file rewritten in place with the
/// same size and its modification time set back is not told apart (nothing short of reading
/// it all would).
struct FileIdentity {
  /// The file system holding the file (st_dev).
  uint64_t device = 0;
  /// The file's number on that file system (st_ino); a file replaced by another (a copy moved
  /// over it) has another.
  uint64_t inode = 0;
  /// Length, bytes.
  int64_t size = 0;
  /// Last modification, nanoseconds since 1970-01-01 UTC.
  int64_t modified_ns = 0;
  /// The file type bits of st_mode (S_IFREG for a regular file).
  uint32_t kind = 0;

  bool operator==(const FileIdentity& other) const;
  bool operator!=(const FileIdentity& other) const { return !(*this == other); }
};

/// The identity of the regular file at `path` (stat, following links), without opening it:
/// a FIFO is never opened, so it cannot block. Throws mlip::Error naming the file when it is
/// missing or is not a regular file (a FIFO, a device, a socket, a folder).
FileIdentity regular_file_identity(const std::string& path);

/// A file opened read-only for one read of a streamed file, closed when the object dies. A
/// special file is refused before it is opened (stat), the open does not block on a FIFO
/// swapped in meanwhile (O_NONBLOCK), and the identity is that of the descriptor actually
/// opened (fstat), not of whatever the path names a moment later.
class OpenedFile {
 public:
  /// Opens `path`; throws mlip::Error naming it when it cannot be opened or is not a regular
  /// file.
  explicit OpenedFile(const std::string& path);
  /// Opens `path` and checks that it is the file recorded as `at_start` (check_unchanged).
  OpenedFile(const std::string& path, const FileIdentity& at_start);
  ~OpenedFile();
  OpenedFile(const OpenedFile&) = delete;
  OpenedFile& operator=(const OpenedFile&) = delete;

  int fd() const { return fd_; }
  const FileIdentity& identity() const { return identity_; }

 private:
  int fd_ = -1;
  FileIdentity identity_;
};

/// The identity of an open descriptor (fstat); `path` names it in messages.
FileIdentity identity_of(int fd, const std::string& path);

/// Throws mlip::Error naming `path` and what differs when `now` is not `at_start`, e.g.
/// `set.000/coord.npy: changed since it was opened at start (size 1234 -> 5678 bytes, modified
/// 2026-11-26 00:12:01.250000000 UTC -> 2026-11-26 00:14:33.000000000 UTC); ...`.
void check_unchanged(const std::string& path, const FileIdentity& at_start, const FileIdentity& now);

/// "a FIFO", "a folder", "a character device", ...: what a file of `kind` (st_mode & S_IFMT) is.
std::string file_kind_name(uint32_t kind);

}  // namespace mlip::data
