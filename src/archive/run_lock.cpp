#include "archive/run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <utility>

#include "archive/output_file.h"
#include "error.h"

namespace fs = std::filesystem;

namespace mlip::archive {
namespace {

/// How often a lock file that was removed and created again while being locked is tried again.
constexpr int kLockTries = 5;
/// The longest command line a lock file keeps, in characters.
constexpr std::size_t kMaxCommandChars = 200;
/// The most bytes of a lock file read back (its description is a few lines).
constexpr std::size_t kMaxDescriptionBytes = 4096;

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[64] = {};
  std::strftime(text, sizeof(text), "%Y-%m-%d %H:%M:%S UTC", &utc);
  return text;
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "unknown";
  return name;
}

/// This process's command line from /proc/self/cmdline: the program by its file name, the words
/// joined by spaces (line breaks inside words become spaces), cut at kMaxCommandChars.
std::string command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  const std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string text;
  std::size_t start = 0;
  bool first = true;
  while (start < raw.size()) {
    std::size_t end = raw.find('\0', start);
    if (end == std::string::npos) end = raw.size();
    std::string word = raw.substr(start, end - start);
    if (first) word = fs::path(word).filename().string();
    text += (first ? "" : " ") + word;
    first = false;
    start = end + 1;
  }
  for (char& c : text)
    if (c == '\n' || c == '\r') c = ' ';
  if (text.size() > kMaxCommandChars) text = text.substr(0, kMaxCommandChars - 3) + "...";
  return text.empty() ? "unknown" : text;
}

/// The lock file's text for `holder`: one `<key> <value>` line per field.
std::string description_text(const LockHolder& holder) {
  return "pid " + holder.pid + "\nhost " + holder.host + "\nstarted " + holder.started + "\ncommand " + holder.command +
         "\n";
}

LockHolder parse_description(const std::string& text) {
  LockHolder holder;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const std::size_t space = line.find(' ');
    if (space == std::string::npos) continue;
    const std::string key = line.substr(0, space), value = line.substr(space + 1);
    if (key == "pid") holder.pid = value;
    if (key == "host") holder.host = value;
    if (key == "started") holder.started = value;
    if (key == "command") holder.command = value;
  }
  return holder;
}

/// The first kMaxDescriptionBytes of the open file `fd`, from its start ("" when unreadable).
std::string read_description(int fd) {
  std::string text(kMaxDescriptionBytes, '\0');
  std::size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::pread(fd, text.data() + got, text.size() - got, off_t(got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += std::size_t(n);
  }
  text.resize(got);
  return text;
}

/// Whether `path` still names the file open as `fd` (a releasing process may have removed it).
bool names_open_file(const std::string& path, int fd) {
  struct stat open_file {};
  struct stat named {};
  if (::fstat(fd, &open_file) != 0 || ::stat(path.c_str(), &named) != 0) return false;
  return open_file.st_dev == named.st_dev && open_file.st_ino == named.st_ino;
}

/// Whether flock's errno says that the file system does not lock.
bool flock_unsupported(int errnum) {
#if ENOTSUP != EOPNOTSUPP
  if (errnum == ENOTSUP) return true;
#endif
  return errnum == ENOLCK || errnum == EOPNOTSUPP || errnum == ENOSYS;
}

/// Whether `folder` (canonical) is /dev (but not /dev/shm) or lies under it or /proc: no lock
/// file belongs there.
bool is_system_folder(const std::string& folder) {
  auto under = [&](const std::string& root) { return folder == root || folder.rfind(root + "/", 0) == 0; };
  return (under("/dev") && !under("/dev/shm")) || under("/proc");
}

}  // namespace

std::string LockHolder::describe() const {
  if (empty()) return "its description is not written yet";
  return "pid " + pid + " on host " + host + " since " + started + ": " + command;
}

LockHolder read_lock_holder(const std::string& lock_file) {
  const int fd = ::open(lock_file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return LockHolder();
  const LockHolder holder = parse_description(read_description(fd));
  ::close(fd);
  return holder;
}

LockHolder this_process_holder() {
  LockHolder holder;
  holder.pid = std::to_string(::getpid());
  holder.host = host_name();
  holder.started = utc_now();
  holder.command = command_line();
  return holder;
}

RunLock::~RunLock() { release(); }

RunLock::RunLock(RunLock&& other) noexcept
    : path_(std::move(other.path_)), fd_(std::exchange(other.fd_, -1)), created_(std::move(other.created_)) {
  other.path_.clear();
  other.created_.clear();
}

RunLock& RunLock::operator=(RunLock&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    other.path_.clear();
    fd_ = std::exchange(other.fd_, -1);
    created_ = std::move(other.created_);
    other.created_.clear();
  }
  return *this;
}

void RunLock::release() noexcept {
  if (fd_ >= 0) {
    // Removed while still locked, so that no other process can lock this file after us; one that
    // opened it before is told by names_open_file and opens the path again.
    if (names_open_file(path_, fd_)) ::unlink(path_.c_str());
    ::close(fd_);
    fd_ = -1;
    path_.clear();
  }
  remove_empty_folders(created_);
  created_.clear();
}

RunLock RunLock::take(const std::string& lock_file, const std::string& given, const std::string& in_use,
                      const std::string& other, bool quiet_when_unwritable) {
  const fs::path parent = fs::path(lock_file).parent_path();
  const std::string folder = parent.empty() ? "." : parent.string();
  for (int attempt = 0; attempt < kLockTries; ++attempt) {
    // O_CLOEXEC: a child process (a committee's member) must not hold the lock.
    const int fd = ::open(lock_file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
    if (fd < 0) {
      const int errnum = errno;
      struct stat link {};
      if (errnum == ELOOP && ::lstat(lock_file.c_str(), &link) == 0 && S_ISLNK(link.st_mode))
        throw Error(given + ": cannot lock " + lock_file + " (it is a symbolic link; mlip's lock files are regular "
                    "files that mlip makes itself, so this one was put there by hand: remove it)");
      const bool unwritable =
          errnum == EROFS || ((errnum == EACCES || errnum == EPERM) && ::access(folder.c_str(), W_OK) != 0);
      if (quiet_when_unwritable && unwritable) return RunLock();  // the write itself reports it
      throw Error(given + ": cannot lock " + lock_file + " (" + system_reason(errnum) + ")");
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      throw Error(given + ": cannot lock " + lock_file + " (it is not a regular file; mlip's lock files are)");
    }
    int rc = 0;
    do {
      rc = ::flock(fd, LOCK_EX | LOCK_NB);
    } while (rc != 0 && errno == EINTR);
    if (rc != 0) {
      const int errnum = errno;
      if (errnum == EWOULDBLOCK || errnum == EAGAIN) {
        const LockHolder holder = parse_description(read_description(fd));
        ::close(fd);
        throw Error(given + ": " + in_use + " (" + holder.describe() + "); wait for it to end, or write to another " +
                    other);
      }
      if (flock_unsupported(errnum)) {
        // An empty file is the one just created here: no use leaving it.
        if (st.st_size == 0) ::unlink(lock_file.c_str());
        ::close(fd);
        std::cout << "note: " << given << ": cannot lock " << lock_file << " (" << system_reason(errnum)
                  << "); a second run writing here at the same time would not be noticed" << std::endl;
        return RunLock();
      }
      ::close(fd);
      throw Error(given + ": cannot lock " + lock_file + " (" + system_reason(errnum) + ")");
    }
    // A process releasing its lock removes the file before closing it: when this one was opened
    // before that, the lock is on a file no longer there, and the path is opened again.
    if (!names_open_file(lock_file, fd)) {
      ::close(fd);
      continue;
    }
    const LockHolder previous = parse_description(read_description(fd));
    if (!previous.empty())
      std::cout << "note: " << given << ": took over the lock left by pid " << previous.pid << " on host "
                << previous.host << " (started " << previous.started << "), which no longer runs" << std::endl;
    // The description is for messages only: a full disk that refuses it still leaves the lock held
    // (the run's own writes then report the disk).
    if (::ftruncate(fd, 0) == 0) {
      const std::string text = description_text(this_process_holder());
      if (::lseek(fd, 0, SEEK_SET) == 0) write_fully(fd, text);
    }
    return RunLock(lock_file, fd);
  }
  throw Error(given + ": cannot lock " + lock_file + " (it was removed and created again " +
              std::to_string(kLockTries) + " times while locking it; another mlip run is starting or ending there)");
}

RunLock RunLock::for_folder(const std::string& folder, const std::string& given) {
  const std::string dir = folder.empty() ? "." : folder;
  const std::vector<std::string> created = prepare_output_folder(dir, given);
  try {
    RunLock lock = take((fs::path(dir) / ".mlip.lock").string(), given, "the folder is in use by another mlip run",
                        "folder", false);
    lock.created_ = created;
    return lock;
  } catch (...) {
    remove_empty_folders(created);
    throw;
  }
}

RunLock RunLock::for_output(const std::string& path, const std::string& given) {
  const fs::path target(path);
  const std::string name = target.filename().string();
  if (name.empty() || name == "." || name == "..") return RunLock();
  // Only a regular file, or a name not taken yet: streams (/dev/null, a FIFO) are written into as
  // they are, and other special files are refused by the write's own checks.
  const TargetKind kind = output_target_kind(path);
  if (kind != TargetKind::kAbsent && kind != TargetKind::kRegularFile) return RunLock();
  const std::string folder = target.parent_path().empty() ? "." : target.parent_path().string();
  std::error_code ec;
  if (!fs::is_directory(folder, ec)) return RunLock();  // the write names the missing folder
  const fs::path canonical = fs::canonical(folder, ec);
  if (ec || is_system_folder(canonical.string())) return RunLock();
  return take((fs::path(folder) / ("." + name + ".mlip.lock")).string(), given,
              path + " is being written by another mlip run", "file", true);
}

}  // namespace mlip::archive
