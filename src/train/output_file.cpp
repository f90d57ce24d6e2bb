#include "train/output_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>

#include "error.h"

namespace fs = std::filesystem;

namespace mlip::train {
namespace {

std::string folder_of(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  return parent.empty() ? "." : parent.string();
}

/// fsync of a folder, so that a rename in it survives a power loss. Some file systems refuse
/// fsync on folders (EINVAL); that is not an error of the write.
void sync_folder(const std::string& folder) {
  const int fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

std::string process_name(const std::string& pid) {
  std::ifstream f("/proc/" + pid + "/comm");
  std::string name;
  std::getline(f, name);
  return name;
}

}  // namespace

std::string system_reason(int errnum) { return std::strerror(errnum); }

int write_fully(int fd, std::string_view bytes) noexcept {
  const char* p = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return ENOSPC;  // a regular file that takes no byte is full
    p += n;
    left -= size_t(n);
  }
  return 0;
}

OutputFile::OutputFile(std::string path, Mode mode, std::string what)
    : path_(std::move(path)), what_(std::move(what)), mode_(mode) {
  std::error_code ec;
  if (fs::is_directory(path_, ec))
    throw Error(path_ + ": cannot write " + what_ + " (a folder of that name exists; expected a file path)");
  if (mode_ == Mode::kReplace) {
    temporary_ = path_ + ".tmp-" + std::to_string(::getpid());
    fd_ = ::open(temporary_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  } else {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  }
  if (fd_ < 0) fail("cannot write", errno);
}

OutputFile::~OutputFile() { discard(); }

void OutputFile::discard() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!temporary_.empty()) ::unlink(temporary_.c_str());
  temporary_.clear();
}

void OutputFile::fail(const std::string& doing, int errnum) {
  discard();
  throw Error(path_ + ": " + doing + " " + what_ + " (" + system_reason(errnum) + ")");
}

void OutputFile::write(std::string_view bytes) {
  if (fd_ < 0) throw Error(path_ + ": cannot write " + what_ + " (the file was closed after an earlier error)");
  const int errnum = write_fully(fd_, bytes);
  if (errnum != 0) fail("cannot write", errnum);
}

void OutputFile::sync() {
  if (fd_ >= 0 && ::fsync(fd_) != 0 && errno != EINVAL) fail("cannot write", errno);
}

void OutputFile::commit() {
  if (fd_ < 0) throw Error(path_ + ": cannot write " + what_ + " (the file was closed after an earlier error)");
  sync();
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("cannot write", errno);
  if (mode_ == Mode::kReplace) {
    if (::rename(temporary_.c_str(), path_.c_str()) != 0) fail("cannot write", errno);
    temporary_.clear();
    sync_folder(folder_of(path_));
  }
}

void write_file_atomically(const std::string& path, std::string_view bytes, const std::string& what) {
  OutputFile file(path, OutputFile::Mode::kReplace, what);
  file.write(bytes);
  file.commit();
}

int remove_stale_temporaries(const std::string& folder) {
  static const std::regex kTemporary(R"(.+\.tmp-([0-9]+))");
  const std::string self = process_name("self");
  std::error_code ec;
  int removed = 0;
  for (const auto& entry : fs::directory_iterator(folder.empty() ? "." : folder, ec)) {
    std::smatch m;
    const std::string name = entry.path().filename().string();
    if (!std::regex_match(name, m, kTemporary)) continue;
    const std::string pid = m[1];
    if (pid == std::to_string(::getpid())) continue;
    // A process of that id that is an mlip too may still be writing it: leave it.
    const bool running = ::kill(pid_t(std::stol(pid)), 0) == 0 || errno == EPERM;
    if (running && process_name(pid) == self) continue;
    std::error_code remove_ec;
    if (fs::remove(entry.path(), remove_ec)) ++removed;
  }
  return removed;
}

void prepare_output_folder(const std::string& folder, const std::string& given) {
  const std::string dir = folder.empty() ? "." : folder;
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    throw Error(given + ": cannot use " + dir + " as the output folder (a file of that name exists)");
  fs::create_directories(dir, ec);
  if (ec) throw Error(given + ": cannot create the output folder " + dir + " (" + ec.message() + ")");
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    throw Error(given + ": cannot write into the output folder " + dir + " (" + system_reason(errno) + ")");
}

}  // namespace mlip::train
