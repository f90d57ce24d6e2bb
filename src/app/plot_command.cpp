#include "app/plot_command.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>

#include "error.h"

extern char** environ;

#ifndef MLIP_PLOT_PYTHON
#define MLIP_PLOT_PYTHON "python3"
#endif

namespace mlip::app {

namespace {

/// A private temporary file holding the plotting script; removed when this goes.
class ScriptFile {
 public:
  ScriptFile() {
    const char* tmp = std::getenv("TMPDIR");
    path_ = std::string(tmp != nullptr && *tmp ? tmp : "/tmp") + "/mlip_plot_XXXXXX.py";
    const int fd = ::mkstemps(path_.data(), 3);
    if (fd < 0) throw Error(path_ + ": cannot create the plotting script (" + std::strerror(errno) + ")");
    const std::string text = kPlotScript;
    const bool written = ::write(fd, text.data(), text.size()) == ssize_t(text.size());
    ::close(fd);
    if (!written) {
      ::unlink(path_.c_str());
      throw Error(path_ + ": cannot write the plotting script (disk full?)");
    }
  }
  ~ScriptFile() { ::unlink(path_.c_str()); }
  ScriptFile(const ScriptFile&) = delete;
  ScriptFile& operator=(const ScriptFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

/// The last non-empty line of `text`.
std::string last_line(const std::string& text) {
  std::istringstream in(text);
  std::string line, last;
  while (std::getline(in, line))
    if (line.find_first_not_of(" \t\r") != std::string::npos) last = line;
  return last;
}

}  // namespace

std::string plot_python() {
  const char* chosen = std::getenv("MLIP_PYTHON");
  return chosen != nullptr && *chosen ? chosen : MLIP_PLOT_PYTHON;
}

int run_plot_script(const std::vector<std::string>& arguments) {
  const ScriptFile script;
  const std::string python = plot_python();
  const char* chosen = std::getenv("MLIP_PYTHON");
  const std::string which = python + (chosen != nullptr && *chosen ? " (MLIP_PYTHON)" : "");
  std::vector<std::string> argv_text = {python, script.path()};
  argv_text.insert(argv_text.end(), arguments.begin(), arguments.end());
  std::vector<char*> argv;
  for (auto& a : argv_text) argv.push_back(a.data());
  argv.push_back(nullptr);
  // The script's standard error comes through a pipe: its own `mlip plot:` lines are passed on,
  // anything else (Python failing at start, a traceback) becomes one line naming the interpreter.
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) throw Error(std::string("plot: cannot make a pipe (") + std::strerror(errno) + ")");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 2);
  posix_spawn_file_actions_addclose(&actions, pipe_fds[0]);
  pid_t pid = 0;
  const int started = ::posix_spawnp(&pid, python.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(pipe_fds[1]);
  if (started != 0) {
    ::close(pipe_fds[0]);
    std::fprintf(stderr,
                 "mlip plot: error: cannot run the Python %s (%s): mlip plot needs Python 3 with matplotlib and "
                 "numpy (Debian: python3-matplotlib; or set MLIP_PYTHON)\n",
                 which.c_str(), std::strerror(started));
    return 1;
  }
  std::string errors;
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::read(pipe_fds[0], buffer, sizeof buffer);
    if (n > 0)
      errors.append(buffer, size_t(n));
    else if (n == 0 || errno != EINTR)
      break;
  }
  ::close(pipe_fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  const bool own_lines = errors.find("mlip plot: ") != std::string::npos &&
                         errors.find("Traceback (most recent call last)") == std::string::npos;
  if (own_lines || (code == 0 && errors.empty())) {
    std::fputs(errors.c_str(), stderr);
    return code;
  }
  // Not the script's own words: Python did not start it, or it failed unexpectedly.
  const std::string detail = last_line(errors);
  if (WIFSIGNALED(status))
    std::fprintf(stderr, "mlip plot: error: the Python %s ended by signal %d%s%s\n", which.c_str(), WTERMSIG(status),
                 detail.empty() ? "" : ": ", detail.c_str());
  else if (code != 0)
    std::fprintf(stderr,
                 "mlip plot: error: the Python %s failed (exit %d)%s%s; mlip plot needs Python 3 with matplotlib and "
                 "numpy (set MLIP_PYTHON to choose another)\n",
                 which.c_str(), code, detail.empty() ? "" : ": ", detail.c_str());
  else
    std::fputs(errors.c_str(), stderr);  // warnings of a run that drew its pictures
  return code == 0 ? 0 : 1;
}

}  // namespace mlip::app
