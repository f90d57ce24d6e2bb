#include "app/plot_command.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "error.h"

extern char** environ;

namespace mlip::app {

int run_plot_script(const std::vector<std::string>& arguments) {
  const char* tmp = std::getenv("TMPDIR");
  std::string path = std::string(tmp != nullptr && *tmp ? tmp : "/tmp") + "/mlip_plot_XXXXXX.py";
  const int fd = ::mkstemps(path.data(), 3);
  if (fd < 0) throw Error(path + ": cannot create the plotting script (" + std::strerror(errno) + ")");
  const std::string text = kPlotScript;
  const bool written = ::write(fd, text.data(), text.size()) == ssize_t(text.size());
  ::close(fd);
  if (!written) {
    ::unlink(path.c_str());
    throw Error(path + ": cannot write the plotting script (disk full?)");
  }
  const char* env_python = std::getenv("MLIP_PYTHON");
  const std::string python = env_python != nullptr && *env_python ? env_python : "python3";
  std::vector<std::string> argv_text = {python, path};
  argv_text.insert(argv_text.end(), arguments.begin(), arguments.end());
  std::vector<char*> argv;
  for (auto& a : argv_text) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int started = ::posix_spawnp(&pid, python.c_str(), nullptr, nullptr, argv.data(), environ);
  if (started != 0) {
    ::unlink(path.c_str());
    throw Error("plot: cannot run '" + python + "' (" + std::strerror(started) +
                "): mlip plot needs Python 3 with matplotlib (Debian: python3-matplotlib; or set MLIP_PYTHON)");
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  ::unlink(path.c_str());
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  throw Error("plot: " + python + " ended by signal " + std::to_string(WTERMSIG(status)));
}

}  // namespace mlip::app
