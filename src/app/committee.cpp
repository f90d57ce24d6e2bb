#include "app/committee.h"

#include <fcntl.h>
#include <sched.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <thread>
#include <vector>

#include "app/cli.h"
#include "app/command_paths.h"
#include "archive/model_archive.h"
#include "archive/output_file.h"
#include "archive/run_lock.h"
#include "error.h"

extern char** environ;

namespace fs = std::filesystem;

namespace mlip::app {

std::string member_folder(const std::string& output_dir, int member) {
  const fs::path dir = output_dir.empty() ? fs::path(".") : fs::path(output_dir);
  return (dir / ("model_" + std::to_string(member))).string();
}

std::string member_source(const std::string& path, int member) {
  const std::string own = (fs::path(path) / ("model_" + std::to_string(member))).string();
  std::error_code ec;
  return fs::is_directory(own, ec) ? own : path;
}

namespace {

/// `path` with ".model_<member>" before its extension ("times.txt" -> "times.model_2.txt"), so
/// that the members of a committee write their own files. A FIFO or a device is kept as it is.
std::string member_file(const std::string& path, int member) {
  const archive::TargetKind kind = archive::output_target_kind(path);
  if (kind != archive::TargetKind::kAbsent && kind != archive::TargetKind::kRegularFile) return path;
  fs::path file(path);
  const std::string extension = file.extension().string();
  file.replace_filename(file.stem().string() + ".model_" + std::to_string(member) + extension);
  return file.string();
}

}  // namespace

train::TrainOptions member_options(const train::TrainOptions& committee, int member) {
  train::TrainOptions options = committee;
  options.output_dir = member_folder(committee.output_dir, member);
  if (!options.restart.empty()) options.restart = member_source(committee.restart, member);
  if (!options.init_model.empty()) options.init_model = member_source(committee.init_model, member);
  if (!options.finetune.empty()) options.finetune = member_source(committee.finetune, member);
  if (!options.step_times.empty()) options.step_times = member_file(committee.step_times, member);
  options.seed_offset = uint64_t(member);
  return options;
}

void check_member_sources(const train::TrainOptions& committee, int size) {
  for (int k = 0; k < size; ++k) {
    const train::TrainOptions member = member_options(committee, k);
    const bool restart = !member.restart.empty();
    const std::string& source = restart ? member.restart : member.init_model;
    if (source.empty()) return;
    const std::string given = restart ? "--restart " + committee.restart : "--init-model " + committee.init_model;
    try {
      check_checkpoint_path(source, restart ? "the checkpoint to restart from" : "the checkpoint to start from");
      archive::resolve_checkpoint(source);
    } catch (const Error& e) {
      throw Error("model_" + std::to_string(k) + ": " + given + ": " + e.what() + " (member k takes " +
                  (restart ? committee.restart : committee.init_model) + "/model_k where that folder exists)");
    }
  }
}

int usable_cores() {
  const char* omp = std::getenv("OMP_NUM_THREADS");
  if (omp != nullptr && std::atoi(omp) > 0) return std::atoi(omp);
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return std::max(1, int(std::thread::hardware_concurrency()));
}

CommitteePlan plan_committee(int size, int jobs_asked, int cores) {
  CommitteePlan plan;
  plan.jobs = std::max(1, std::min(size, jobs_asked > 0 ? jobs_asked : cores));
  plan.threads = std::max(1, cores / plan.jobs);
  return plan;
}

namespace {

using Clock = std::chrono::steady_clock;

std::atomic<int> g_committee_signal{0};
extern "C" void on_committee_signal(int sig) { g_committee_signal = sig; }

/// While alive, SIGINT and SIGTERM are caught (not ending this process) and kept for take(),
/// which the committee's loop forwards to its members. The previous handlers come back when it
/// is destroyed.
class CaughtSignals {
 public:
  CaughtSignals() {
    g_committee_signal = 0;
    struct sigaction action {};
    action.sa_handler = on_committee_signal;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, &previous_int_);
    sigaction(SIGTERM, &action, &previous_term_);
  }
  ~CaughtSignals() {
    sigaction(SIGINT, &previous_int_, nullptr);
    sigaction(SIGTERM, &previous_term_, nullptr);
  }
  CaughtSignals(const CaughtSignals&) = delete;
  CaughtSignals& operator=(const CaughtSignals&) = delete;

  /// The signal caught since the last call, or 0.
  int take() { return g_committee_signal.exchange(0); }

 private:
  struct sigaction previous_int_ {};
  struct sigaction previous_term_ {};
};

/// One member of the committee as the parent sees it.
struct Member {
  int index = 0;
  std::string name;    ///< "model_2"
  std::string folder;  ///< <output>/model_2
  std::string log;     ///< <output>/model_2/train.log
  pid_t pid = -1;      ///< while running
  Clock::time_point start;
  enum class State { kWaiting, kRunning, kSucceeded, kFailed, kInterrupted } state = State::kWaiting;
};

std::string seconds_text(Clock::duration elapsed) {
  std::ostringstream text;
  text << std::fixed << std::setprecision(1) << std::chrono::duration<double>(elapsed).count() << " s";
  return text.str();
}

/// The path of this process's executable (the members run it).
std::string this_executable() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec)
    throw Error("/proc/self/exe: cannot find this program to start the committee's members (" + ec.message() + ")");
  return exe.string();
}

/// The command line of member `member` after the program's name: `train <input> --committee N
/// --member k -o <output>` and the committee's other options. Each member trains alone, whatever
/// a launcher's environment says (a committee under several ranks is refused before this).
std::vector<std::string> member_arguments(const CommitteeLaunch& launch, int member) {
  const train::TrainOptions& options = launch.options;
  std::vector<std::string> args = {"train",    launch.input,           "--committee", std::to_string(launch.size),
                                   "--member", std::to_string(member), "-o",          options.output_dir};
  auto pass = [&args](const char* name, const std::string& value) {
    if (value.empty()) return;
    args.push_back(name);
    args.push_back(value);
  };
  pass("--restart", options.restart);
  pass("--init-model", options.init_model);
  pass("--finetune", options.finetune);
  pass("--step-times", options.step_times);
  if (options.count_ops) args.push_back("--count-ops");
  pass("--device", options.device);
  pass("--distributed", "off");
  return args;
}

/// This process's environment with OMP_NUM_THREADS=<threads>.
std::vector<std::string> member_environment(int threads) {
  std::vector<std::string> env;
  for (char** entry = environ; *entry != nullptr; ++entry)
    if (std::strncmp(*entry, "OMP_NUM_THREADS=", 16) != 0) env.emplace_back(*entry);
  env.push_back("OMP_NUM_THREADS=" + std::to_string(threads));
  return env;
}

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  for (std::string& s : strings) pointers.push_back(s.data());
  pointers.push_back(nullptr);
  return pointers;
}

/// Starts `exe args...` with `env`, its standard output and error going to `log` (appended to
/// when `append`, else replaced). Returns its process id; throws mlip::Error when it cannot start.
pid_t start_process(const std::string& exe, std::vector<std::string> args, std::vector<std::string> env,
                    const std::string& log, bool append) {
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | (append ? O_APPEND : O_TRUNC), 0644);
  if (fd < 0) throw Error(log + ": cannot write the member's log (" + std::strerror(errno) + ")");
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_adddup2(&files, fd, STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&files, fd, STDERR_FILENO);
  // The member starts with SIGINT and SIGTERM at their defaults and unblocked (the trainer
  // installs its own handlers), whatever this process inherited.
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  sigset_t defaults, none;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGINT);
  sigaddset(&defaults, SIGTERM);
  sigemptyset(&none);
  posix_spawnattr_setsigdefault(&attributes, &defaults);
  posix_spawnattr_setsigmask(&attributes, &none);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  args.insert(args.begin(), exe);
  std::vector<char*> argv = c_strings(args), envp = c_strings(env);
  pid_t pid = -1;
  const int error = posix_spawn(&pid, exe.c_str(), &files, &attributes, argv.data(), envp.data());
  posix_spawnattr_destroy(&attributes);
  posix_spawn_file_actions_destroy(&files);
  ::close(fd);
  if (error != 0) throw Error(exe + ": cannot start the member (" + std::strerror(error) + ")");
  return pid;
}

/// The last `count` non-empty lines of the file at `path`, each indented by four spaces.
std::string last_lines(const std::string& path, std::size_t count) {
  std::ifstream in(path);
  std::deque<std::string> kept;
  for (std::string line; std::getline(in, line);) {
    // A progress bar or a line cut off by a crash: keep the text after the last carriage return.
    const std::size_t cr = line.find_last_of('\r');
    if (cr != std::string::npos) line = line.substr(cr + 1);
    if (line.empty()) continue;
    kept.push_back(line);
    if (kept.size() > count) kept.pop_front();
  }
  std::string text;
  for (const std::string& line : kept) text += "    " + line + "\n";
  return text.empty() ? "    (the log is empty)\n" : text;
}

/// The last line of the file at `path` that contains `text`, or "".
std::string last_line_with(const std::string& path, const std::string& text) {
  std::ifstream in(path);
  std::string found;
  for (std::string line; std::getline(in, line);)
    if (line.find(text) != std::string::npos) found = line;
  return found;
}

std::vector<std::string> words_of(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> words;
  for (std::string word; in >> word;) words.push_back(word);
  return words;
}

/// The last line of a learning curve: its step, and its energy and force errors in words
/// ("rmse_e_val 1.2e-03, rmse_f_val 1.1e-01": validation errors when it has them, else training
/// ones). Empty without one.
struct CurveEnd {
  std::string step;
  std::string errors;
};

CurveEnd last_curve_line(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> names, values;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("#", 0) == 0) {
      names = words_of(line.substr(1));
    } else if (!words_of(line).empty()) {
      values = words_of(line);
    }
  }
  CurveEnd end;
  if (values.empty() || names.size() != values.size()) return end;
  end.step = values[0];
  for (const char* kind : {"rmse_e", "rmse_f"}) {
    for (const char* set : {"_val", "_trn"}) {
      const auto at = std::find(names.begin(), names.end(), std::string(kind) + set);
      if (at == names.end()) continue;
      end.errors += (end.errors.empty() ? "" : ", ") + *at + " " + values[std::size_t(at - names.begin())];
      break;
    }
  }
  return end;
}

/// Prints how member `m` ended (its wait status) and records it in m.state.
void report_end(Member& m, int status, const std::string& lcurve_name) {
  const std::string took = seconds_text(Clock::now() - m.start);
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (code == kExitOk) {
    m.state = Member::State::kSucceeded;
    const CurveEnd curve = last_curve_line((fs::path(m.folder) / lcurve_name).string());
    std::cout << m.name << ": finished" << (curve.step.empty() ? "" : " step " + curve.step) << " in " << took
              << (curve.errors.empty() ? "" : ", " + curve.errors) << " (" << m.log << ")\n";
  } else if (code == 130 || code == 143) {
    m.state = Member::State::kInterrupted;
    const std::string saved = last_line_with(m.log, "interrupted at step");
    std::cout << m.name << ": interrupted (exit code " << code << ") after " << took
              << (saved.empty() ? "" : ": " + saved) << " (" << m.log << ")\n";
  } else {
    m.state = Member::State::kFailed;
    std::cout << m.name << ": failed";
    if (WIFEXITED(status))
      std::cout << " (exit code " << code << ")";
    else if (WIFSIGNALED(status))
      std::cout << " (killed by signal " << WTERMSIG(status) << ", " << strsignal(WTERMSIG(status)) << ")";
    std::cout << " after " << took << "; the end of " << m.log << ":\n" << last_lines(m.log, 5);
  }
  std::cout.flush();
}

/// Starts member `m`; a member that cannot start is reported and counted as failed.
void start_member(Member& m, const CommitteeLaunch& launch, const std::string& exe) {
  try {
    m.start = Clock::now();
    m.pid = start_process(exe, member_arguments(launch, m.index), member_environment(launch.plan.threads), m.log,
                          !launch.options.restart.empty());
    m.state = Member::State::kRunning;
    std::cout << m.name << ": started (pid " << m.pid << ")" << std::endl;
  } catch (const Error& e) {
    m.state = Member::State::kFailed;
    std::cout << m.name << ": failed to start: " << e.what() << std::endl;
  }
}

/// The names of the members in `state`, separated by commas.
std::string names_in(const std::vector<Member>& members, Member::State state) {
  std::string names;
  for (const Member& m : members)
    if (m.state == state) names += (names.empty() ? "" : ", ") + m.name;
  return names;
}

/// Prints the summary line of the committee and returns the exit code.
int summarise(const std::vector<Member>& members, const CommitteeLaunch& launch, Clock::duration elapsed, int signal) {
  int succeeded = 0;
  for (const Member& m : members) succeeded += m.state == Member::State::kSucceeded;
  const int size = int(members.size());
  std::cout << "committee: " << succeeded << " of " << size << " models trained in " << seconds_text(elapsed) << " ("
            << member_folder(launch.options.output_dir, 0)
            << (size > 1 ? " ... " + member_folder(launch.options.output_dir, size - 1) : "") << ")\n";
  std::cout.flush();
  const std::string failed = names_in(members, Member::State::kFailed);
  if (signal != 0) {
    const std::string waiting = names_in(members, Member::State::kWaiting);
    const std::string output = launch.options.output_dir.empty() ? "." : launch.options.output_dir;
    std::cerr << "mlip: " << (signal == SIGINT ? "interrupted (SIGINT)" : "terminated (SIGTERM)")
              << ": passed on to the running members, which save a checkpoint and stop"
              << (failed.empty() ? "" : "; failed: " + failed);
    if (waiting.empty())
      std::cerr << "; continue them all with --restart " << output << "\n";
    else
      std::cerr << "; not started: " << waiting << ". Continue a stopped member with --committee " << launch.size
                << " --member k --restart " << output << ", start the others with --committee " << launch.size
                << " --member k\n";
    return 128 + signal;
  }
  if (!failed.empty()) {
    std::cerr << "mlip: error: committee: " << failed << " failed (" << size - succeeded << " of " << size
              << "); see the log in each one's folder\n";
    return kExitError;
  }
  return kExitOk;
}

}  // namespace

int run_committee(const CommitteeLaunch& launch) {
  const std::string exe = this_executable();
  const std::string& output = launch.options.output_dir;
  // The committee's folder is this process's while the members run (each member locks its own
  // model_k); the lock's descriptor is not inherited by them (O_CLOEXEC).
  const std::string dir = output.empty() ? "." : output;
  const archive::RunLock lock = archive::RunLock::for_folder(dir, "-o " + dir);
  std::vector<Member> members(std::size_t(launch.size));
  std::vector<std::string> created;  // member folders made here: removed again if the committee is refused
  try {
    for (int k = 0; k < launch.size; ++k) {
      Member& m = members[std::size_t(k)];
      m.index = k;
      m.name = "model_" + std::to_string(k);
      m.folder = member_folder(output, k);
      m.log = (fs::path(m.folder) / "train.log").string();
      for (const std::string& folder : archive::prepare_output_folder(m.folder, "-o " + output))
        created.push_back(folder);
      // A member folder held by another run (a `--member k` job of the same committee) is refused
      // now, before its train.log is replaced; the member itself takes the lock when it starts.
      archive::RunLock::for_folder(m.folder, "-o " + m.folder).release();
    }
  } catch (...) {
    archive::remove_empty_folders(created);
    throw;
  }
  std::cout << "committee of " << launch.size << " models in " << member_folder(output, 0)
            << (launch.size > 1 ? " ... " + member_folder(output, launch.size - 1) : "") << ": " << launch.plan.jobs
            << " at a time, " << launch.plan.threads << " thread" << (launch.plan.threads > 1 ? "s" : "")
            << " each; logs in <folder>/train.log" << std::endl;

  CaughtSignals signals;
  const Clock::time_point start = Clock::now();
  std::size_t next = 0;
  int running = 0, signal = 0;
  for (;;) {
    if (const int caught = signals.take()) {
      signal = caught;
      std::cout << "mlip: " << strsignal(caught) << ": passed on to the running members; waiting for them to save "
                << "a checkpoint" << std::endl;
      for (const Member& m : members)
        if (m.state == Member::State::kRunning) ::kill(m.pid, caught);
    }
    for (; signal == 0 && running < launch.plan.jobs && next < members.size(); ++next) {
      start_member(members[next], launch, exe);
      running += members[next].state == Member::State::kRunning;
    }
    if (running == 0) break;
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid == 0 || (pid < 0 && errno == EINTR)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    if (pid < 0) throw Error(std::string("waiting for the committee's members failed (") + std::strerror(errno) + ")");
    for (Member& m : members) {
      if (m.state != Member::State::kRunning || m.pid != pid) continue;
      report_end(m, status, launch.lcurve_name);
      --running;
    }
  }
  return summarise(members, launch, Clock::now() - start, signal);
}

}  // namespace mlip::app
