#include "data/file_identity.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <vector>

#include "error.h"

namespace mlip::data {

namespace {

FileIdentity from_stat(const struct stat& st) {
  FileIdentity id;
  id.device = uint64_t(st.st_dev);
  id.inode = uint64_t(st.st_ino);
  id.size = int64_t(st.st_size);
  id.modified_ns = int64_t(st.st_mtim.tv_sec) * 1000000000 + int64_t(st.st_mtim.tv_nsec);
  id.kind = uint32_t(st.st_mode & S_IFMT);
  return id;
}

void require_regular(const std::string& path, const FileIdentity& id) {
  if (id.kind != S_IFREG)
    throw Error(path + ": is " + file_kind_name(id.kind) +
                ", expected a regular file (mlip reads data files more than once, at any offset)");
}

/// "2026-11-26 00:12:01.250000000 UTC" (to the nanosecond: two writes within a millisecond
/// differ).
std::string time_text(int64_t ns) {
  const time_t seconds = time_t(ns / 1000000000);
  struct tm utc {};
  gmtime_r(&seconds, &utc);
  char text[64];
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S", &utc);
  char fraction[16];
  std::snprintf(fraction, sizeof fraction, ".%09d", int(ns % 1000000000));
  return std::string(text) + fraction + " UTC";
}

}  // namespace

bool FileIdentity::operator==(const FileIdentity& other) const {
  return device == other.device && inode == other.inode && size == other.size && modified_ns == other.modified_ns &&
         kind == other.kind;
}

std::string file_kind_name(uint32_t kind) {
  switch (kind) {
    case S_IFREG: return "a regular file";
    case S_IFDIR: return "a folder";
    case S_IFIFO: return "a FIFO (named pipe)";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    case S_IFSOCK: return "a socket";
    case S_IFLNK: return "a symbolic link";
    default: return "a special file";
  }
}

FileIdentity regular_file_identity(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw Error(path + ": cannot open file (" + std::strerror(errno) + ")");
  const FileIdentity id = from_stat(st);
  require_regular(path, id);
  return id;
}

FileIdentity identity_of(int fd, const std::string& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw Error(path + ": cannot read file (" + std::strerror(errno) + ")");
  return from_stat(st);
}

OpenedFile::OpenedFile(const std::string& path) {
  // A special file is refused before it is opened (opening a device may do something), and
  // O_NONBLOCK covers one swapped in between: opening a FIFO for reading would otherwise wait
  // for a writer, for ever.
  regular_file_identity(path);
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd_ < 0) throw Error(path + ": cannot open file (" + std::strerror(errno) + ")");
  try {
    identity_ = identity_of(fd_, path);
    require_regular(path, identity_);
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

OpenedFile::OpenedFile(const std::string& path, const FileIdentity& at_start) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) check_unchanged(path, at_start, from_stat(st));
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd_ < 0)
    throw Error(path + ": cannot open file (" + std::strerror(errno) +
                "); it was there at start: mlip reads frames from disk as it runs, so its data files must not "
                "change during a run");
  try {
    identity_ = identity_of(fd_, path);
    check_unchanged(path, at_start, identity_);
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

OpenedFile::~OpenedFile() {
  if (fd_ >= 0) ::close(fd_);
}

void check_unchanged(const std::string& path, const FileIdentity& at_start, const FileIdentity& now) {
  if (now == at_start) return;
  std::vector<std::string> what;
  if (now.kind != at_start.kind) {
    what.push_back("now " + file_kind_name(now.kind) + ", was " + file_kind_name(at_start.kind));
  } else {
    if (now.device != at_start.device || now.inode != at_start.inode)
      what.push_back("replaced by another file (inode " + std::to_string(at_start.inode) + " -> " +
                     std::to_string(now.inode) + ")");
    if (now.size != at_start.size)
      what.push_back("size " + std::to_string(at_start.size) + " -> " + std::to_string(now.size) + " bytes");
    if (now.modified_ns != at_start.modified_ns)
      what.push_back("modified " + time_text(at_start.modified_ns) + " -> " + time_text(now.modified_ns));
  }
  std::string list;
  for (size_t k = 0; k < what.size(); ++k) list += (k ? ", " : "") + what[k];
  throw Error(path + ": changed since it was opened at start (" + list +
              "); mlip reads frames from disk as it runs, so its data files must not change during a run");
}

}  // namespace mlip::data
