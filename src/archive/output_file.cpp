#include "archive/output_file.h"

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

namespace mlip::archive {
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

/// Whether `folder` (canonical) is a system folder whose entries mlip must never rename over:
/// /dev (its links /dev/stdout, /dev/fd) and /proc; /dev/shm is ordinary scratch space.
bool is_system_folder(const std::string& folder) {
  auto under = [&](const std::string& root) { return folder == root || folder.rfind(root + "/", 0) == 0; };
  return (under("/dev") && !under("/dev/shm")) || under("/proc");
}

}  // namespace

TargetKind output_target_kind(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return TargetKind::kAbsent;
  if (S_ISDIR(st.st_mode)) return TargetKind::kFolder;
  if (S_ISCHR(st.st_mode)) return TargetKind::kCharacterDevice;
  if (S_ISBLK(st.st_mode)) return TargetKind::kBlockDevice;
  if (S_ISFIFO(st.st_mode)) return TargetKind::kFifo;
  if (S_ISSOCK(st.st_mode)) return TargetKind::kSocket;
  if (!S_ISREG(st.st_mode)) return TargetKind::kOther;
  std::error_code ec;
  const fs::path folder = fs::weakly_canonical(fs::path(folder_of(path)), ec);
  if (!ec && is_system_folder(folder.string())) return TargetKind::kProcessFile;
  return TargetKind::kRegularFile;
}

std::string describe(TargetKind kind) {
  switch (kind) {
    case TargetKind::kAbsent: return "absent";
    case TargetKind::kRegularFile: return "a regular file";
    case TargetKind::kProcessFile: return "a file reached through a link in /dev or /proc";
    case TargetKind::kFolder: return "a folder";
    case TargetKind::kCharacterDevice: return "a character device";
    case TargetKind::kBlockDevice: return "a block device";
    case TargetKind::kFifo: return "a FIFO";
    case TargetKind::kSocket: return "a socket";
    case TargetKind::kOther: return "not a regular file";
  }
  return "not a regular file";
}

bool check_output_target(const std::string& path, SpecialTarget special, const std::string& given,
                         const std::string& holds) {
  const TargetKind kind = output_target_kind(path);
  switch (kind) {
    case TargetKind::kAbsent:
    case TargetKind::kRegularFile:
      return false;
    case TargetKind::kFolder:
      throw Error(given + ": cannot write " + holds + " (a folder of that name exists; expected a file path)");
    case TargetKind::kCharacterDevice:
    case TargetKind::kFifo:
    case TargetKind::kProcessFile:
      if (special == SpecialTarget::kStream) return true;
      throw Error(given + ": is " + describe(kind) + ", not a regular file; mlip writes " + holds +
                  " to regular files only");
    default:
      break;
  }
  throw Error(given + ": is " + describe(kind) + "; mlip writes " + holds + " to regular files" +
              (special == SpecialTarget::kStream ? ", FIFOs and character devices only" : " only"));
}

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

OutputFile::OutputFile(std::string path, Mode mode, std::string what, SpecialTarget special)
    : path_(std::move(path)), what_(std::move(what)), mode_(mode), special_(special) {
  streaming_ = check_output_target(path_, special_, path_, what_);
  if (streaming_) {
    // Written into as it is: a FIFO blocks here until a reader opens it, as `cmd > fifo` does.
    fd_ = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_NOCTTY | O_CLOEXEC);
  } else if (mode_ == Mode::kReplace) {
    temporary_ = temporary_name(path_);
    // A file of that name (this process id's) can only be a leftover: never open a FIFO or a
    // device planted there.
    ::unlink(temporary_.c_str());
    fd_ = ::open(temporary_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
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
  if (mode_ == Mode::kReplace && !streaming_) {
    // The target may have changed since the file was opened: still never rename over a special file.
    const TargetKind now = output_target_kind(path_);
    if (now != TargetKind::kAbsent && now != TargetKind::kRegularFile) {
      ::unlink(temporary_.c_str());
      temporary_.clear();
      throw Error(path_ + ": cannot write " + what_ + " (it became " + describe(now) +
                  " while being written; mlip renames only onto regular files)");
    }
    if (::rename(temporary_.c_str(), path_.c_str()) != 0) fail("cannot write", errno);
    temporary_.clear();
    sync_folder(folder_of(path_));
  }
}

void write_file_atomically(const std::string& path, std::string_view bytes, const std::string& what,
                           SpecialTarget special) {
  OutputFile file(path, OutputFile::Mode::kReplace, what, special);
  file.write(bytes);
  file.commit();
}

std::string temporary_name(const std::string& path) { return path + ".mlip-tmp-" + std::to_string(::getpid()); }

int remove_stale_temporaries(const std::string& folder) {
  // Only names temporary_name makes: a user's file that merely ends in ".tmp-<number>" is not
  // mlip's to remove.
  static const std::regex kTemporary(R"(.+\.mlip-tmp-([0-9]+))");
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
    // A regular file or a link (the link to the newest checkpoint), never a folder.
    std::error_code type_ec;
    const fs::file_type type = fs::symlink_status(entry.path(), type_ec).type();
    if (type != fs::file_type::regular && type != fs::file_type::symlink) continue;
    std::error_code remove_ec;
    if (fs::remove(entry.path(), remove_ec)) ++removed;
  }
  return removed;
}

std::vector<std::string> prepare_output_folder(const std::string& folder, const std::string& given) {
  const std::string dir = folder.empty() ? "." : folder;
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    throw Error(given + ": cannot use " + dir + " as the output folder (a file of that name exists)");
  // The folders that do not exist yet, outermost first.
  std::vector<std::string> missing;
  for (fs::path p = fs::path(dir).lexically_normal(); !p.empty() && p != p.root_path(); p = p.parent_path()) {
    if (p.filename() == "." || p.filename() == ".." || fs::symlink_status(p, ec).type() != fs::file_type::not_found)
      break;
    missing.insert(missing.begin(), p.string());
  }
  fs::create_directories(dir, ec);
  if (ec) {
    remove_empty_folders(missing);
    throw Error(given + ": cannot create the output folder " + dir + " (" + ec.message() + ")");
  }
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    const int errnum = errno;
    remove_empty_folders(missing);
    throw Error(given + ": cannot write into the output folder " + dir + " (" + system_reason(errnum) + ")");
  }
  return missing;
}

void remove_empty_folders(const std::vector<std::string>& folders) noexcept {
  // rmdir(2) removes only an empty folder: one that holds anything stays, and so do those around it.
  for (auto it = folders.rbegin(); it != folders.rend(); ++it) ::rmdir(it->c_str());
}

}  // namespace mlip::archive
