// A run owns its output folder (archive/run_lock.h, docs/robustness.md "A run owns its output
// folder"): the lock refused to a second process while held, gone after release, taken over from a
// process that died, not inherited by child processes; and through the real `mlip`: a second
// `train -o` into a running run's folder refused, a killed run's lock taken over, and `freeze -o`,
// `compress -o`, `test -d`, `--xyz`, `train -o` and `train --committee` refused while this process
// holds their output. Waits are on files appearing, never on the machine's speed.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <map>
#include <regex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "archive/run_lock.h"
#include "error.h"
#include "test_util.h"

namespace fs = std::filesystem;

namespace {

using mlip::archive::LockHolder;
using mlip::archive::read_lock_holder;
using mlip::archive::RunLock;
using mlip::test::CommandResult;
using mlip::test::contains;
using mlip::test::error_of;
using mlip::test::read_file;
using mlip::test::run_command;
using mlip::test::TempDir;
using mlip::test::write_system;
using mlip::test::write_text;
const std::string kMlip = MLIP_EXE;

std::string host_name() {
  char name[256] = {};
  ::gethostname(name, sizeof(name) - 1);
  return name;
}

std::string pid_text(pid_t pid) { return std::to_string(pid); }

/// What a child process (fork, no exec) reports of its attempt to lock: its exit code 0 when refused
/// with mlip::Error (the message through a pipe), 3 when it got the lock.
struct ChildAttempt {
  int exit_code = -1;
  std::string message;
};

template <typename F>
ChildAttempt attempt_in_child(F&& lock) {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) return {};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(pipe_fds[0]);
    int code = 3;
    std::string message;
    try {
      RunLock taken = lock();
      if (!taken.held()) code = 4;
    } catch (const mlip::Error& e) {
      message = e.what();
      code = 0;
    }
    if (!message.empty() && ::write(pipe_fds[1], message.data(), message.size()) < 0) code = 5;
    ::_exit(code);
  }
  ::close(pipe_fds[1]);
  ChildAttempt result;
  char buffer[4096];
  for (ssize_t n; (n = ::read(pipe_fds[0], buffer, sizeof(buffer))) > 0;) result.message.append(buffer, size_t(n));
  ::close(pipe_fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

/// The id of a child process that took `lock_folder`'s lock and died without releasing it (its
/// lock file left behind, as after kill -9).
pid_t died_holding(const std::string& lock_folder) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    try {
      RunLock lock = RunLock::for_folder(lock_folder, "-o " + lock_folder);
      ::_exit(lock.held() ? 0 : 1);  // _exit: no destructor, the lock file stays
    } catch (...) {
      ::_exit(2);
    }
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? pid : -1;
}

std::vector<std::string> names_in(const std::string& folder) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(folder, ec)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

const std::regex kUtcTime(R"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC)");

// ---- the library

TEST(RunLock, ASecondProcessIsRefusedNamingTheFolderAndTheHolder) {
  TempDir dir;
  const std::string folder = dir / "run";
  RunLock lock = RunLock::for_folder(folder, "-o run");
  ASSERT_TRUE(lock.held());
  EXPECT_EQ(lock.path(), folder + "/.mlip.lock");
  EXPECT_TRUE(fs::is_regular_file(folder + "/.mlip.lock"));

  const ChildAttempt second = attempt_in_child([&] { return RunLock::for_folder(folder, "-o run"); });
  EXPECT_EQ(second.exit_code, 0) << "the second lock was not refused: " << second.message;
  const std::string expected_start = "-o run: the folder is in use by another mlip run (pid " + pid_text(::getpid()) +
                                     " on host " + host_name() + " since ";
  EXPECT_EQ(second.message.rfind(expected_start, 0), 0u) << second.message;
  EXPECT_TRUE(std::regex_search(second.message, kUtcTime)) << second.message;
  EXPECT_TRUE(contains(second.message, ": test_run_lock")) << second.message;  // the holder's command line
  EXPECT_TRUE(contains(second.message, "); wait for it to end, or write to another folder")) << second.message;

  lock.release();
  EXPECT_FALSE(lock.held());
  EXPECT_FALSE(fs::exists(folder + "/.mlip.lock"));
  EXPECT_TRUE(names_in(folder).empty());
  // Free again: another process takes it (and leaves nothing behind).
  EXPECT_EQ(attempt_in_child([&] { return RunLock::for_folder(folder, "-o run"); }).exit_code, 3);
  EXPECT_TRUE(names_in(folder).empty());
  RunLock again = RunLock::for_folder(folder, "-o run");
  EXPECT_TRUE(again.held());
}

TEST(RunLock, TheDescriptionNamesPidHostTimeAndCommand) {
  TempDir dir;
  const RunLock lock = RunLock::for_folder(dir / "created/below", "-o x");  // the folder is made
  ASSERT_TRUE(lock.held());
  const LockHolder holder = read_lock_holder(lock.path());
  EXPECT_EQ(holder.pid, pid_text(::getpid()));
  EXPECT_EQ(holder.host, host_name());
  EXPECT_TRUE(std::regex_match(holder.started, kUtcTime)) << holder.started;
  EXPECT_EQ(holder.command.rfind("test_run_lock", 0), 0u) << holder.command;
  EXPECT_LE(holder.command.size(), 200u);
  EXPECT_TRUE(contains(read_file(lock.path()), "pid " + pid_text(::getpid()) + "\n")) << read_file(lock.path());
  EXPECT_EQ(LockHolder().describe(), "its description is not written yet");
}

TEST(RunLock, MovingKeepsOneHolderAndTheDestructorReleases) {
  TempDir dir;
  std::string lock_file;
  {
    RunLock first = RunLock::for_folder(dir.path(), "-o .");
    lock_file = first.path();
    RunLock second(std::move(first));
    EXPECT_FALSE(first.held());  // NOLINT(bugprone-use-after-move): moved from is empty
    EXPECT_TRUE(second.held());
    RunLock third;
    third = std::move(second);
    EXPECT_TRUE(third.held());
    EXPECT_TRUE(fs::exists(lock_file));
  }
  EXPECT_FALSE(fs::exists(lock_file));
}

TEST(RunLock, ALockFileThatIsALinkIsRefusedAsALink) {
  // Said as what it is, not as the system's "Too many levels of symbolic links"; the link and
  // what it points to are left alone.
  TempDir dir;
  fs::create_directories(dir / "run");
  mlip::test::write_text(dir / "elsewhere", "a user's file\n");
  fs::create_symlink(dir / "elsewhere", dir / "run/.mlip.lock");
  EXPECT_EQ(mlip::test::error_of([&] { RunLock::for_folder(dir / "run", "-o run"); }),
            "-o run: cannot lock " + (dir / "run/.mlip.lock") +
                " (it is a symbolic link; mlip's lock files are regular files that mlip makes itself, so this one "
                "was put there by hand: remove it)");
  EXPECT_TRUE(fs::is_symlink(dir / "run/.mlip.lock"));
  EXPECT_EQ(mlip::test::read_file(dir / "elsewhere"), "a user's file\n");
  // A dangling link too.
  fs::remove(dir / "elsewhere");
  EXPECT_TRUE(contains(mlip::test::error_of([&] { RunLock::for_folder(dir / "run", "-o run"); }),
                       "(it is a symbolic link;"));
}

TEST(RunLock, AFolderItMadeIsRemovedWhenTheRunLeavesItEmpty) {
  // docs/robustness.md "A refused run leaves nothing behind": the folders for_folder made go with
  // the lock when nothing was written there; a folder with a file stays, and so does one that
  // existed before.
  TempDir dir;
  { RunLock lock = RunLock::for_folder(dir / "a/b/c", "-o a/b/c"); }
  EXPECT_FALSE(fs::exists(dir / "a"));
  {
    RunLock lock = RunLock::for_folder(dir / "d/e", "-o d/e");
    mlip::test::write_text(dir / "d/e/lcurve.out", "#\n");
  }
  EXPECT_TRUE(fs::exists(dir / "d/e/lcurve.out"));
  EXPECT_FALSE(fs::exists(dir / "d/e/.mlip.lock"));
  fs::create_directories(dir / "there");
  { RunLock lock = RunLock::for_folder(dir / "there/new", "-o there/new"); }
  EXPECT_TRUE(fs::is_directory(dir / "there"));
  EXPECT_FALSE(fs::exists(dir / "there/new"));
  { RunLock lock = RunLock::for_folder(dir / "there", "-o there"); }
  EXPECT_TRUE(fs::is_directory(dir / "there"));
}

TEST(RunLock, ALockLeftByADeadProcessIsTakenOverWithANote) {
  TempDir dir;
  const std::string folder = dir / "run";
  const pid_t dead = died_holding(folder);
  ASSERT_GT(dead, 0);
  ASSERT_TRUE(fs::exists(folder + "/.mlip.lock"));
  EXPECT_EQ(read_lock_holder(folder + "/.mlip.lock").pid, pid_text(dead));

  testing::internal::CaptureStdout();
  RunLock lock;
  const std::string error = error_of([&] { lock = RunLock::for_folder(folder, "-o run"); });
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_EQ(error, "(no error)");
  ASSERT_TRUE(lock.held());
  EXPECT_TRUE(std::regex_search(
      out, std::regex("^note: -o run: took over the lock left by pid " + pid_text(dead) + " on host " + host_name() +
                      R"( \(started \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC\), which no longer runs\n$)")))
      << out;
  EXPECT_EQ(read_lock_holder(lock.path()).pid, pid_text(::getpid()));
  lock.release();

  // A lock file written by hand for a process that has ended: the same.
  write_text(folder + "/.mlip.lock", "pid 999999\nhost elsewhere\nstarted 2020-01-02 03:04:05 UTC\ncommand mlip x\n");
  testing::internal::CaptureStdout();
  RunLock second = RunLock::for_folder(folder, "-o run");
  const std::string note = testing::internal::GetCapturedStdout();
  EXPECT_EQ(note,
            "note: -o run: took over the lock left by pid 999999 on host elsewhere (started 2020-01-02 03:04:05 UTC), "
            "which no longer runs\n");
  EXPECT_TRUE(second.held());
}

TEST(RunLock, AChildProcessDoesNotInheritTheLock) {
  TempDir dir;
  const RunLock lock = RunLock::for_folder(dir / "run", "-o run");
  ASSERT_TRUE(lock.held());
  // The shell started here lists its open files: the lock file is not among them (O_CLOEXEC).
  const CommandResult shell = run_command("ls -l /proc/$$/fd/");
  ASSERT_EQ(shell.exit_code, 0) << shell.err;
  EXPECT_TRUE(contains(shell.out, "->")) << shell.out;  // it lists links at all
  EXPECT_FALSE(contains(shell.out, ".mlip.lock")) << shell.out;
}

TEST(RunLock, AnOutputIsLockedBesideItAndStreamsAreNot) {
  TempDir dir;
  const std::string model = dir / "frozen.pt";
  RunLock lock = RunLock::for_output(model, "-o frozen.pt");
  ASSERT_TRUE(lock.held());
  EXPECT_EQ(lock.path(), dir / ".frozen.pt.mlip.lock");
  EXPECT_FALSE(fs::exists(model));  // the output itself is not made here
  const ChildAttempt second = attempt_in_child([&] { return RunLock::for_output(model, "-o frozen.pt"); });
  EXPECT_EQ(second.exit_code, 0) << second.message;
  EXPECT_EQ(second.message.rfind("-o frozen.pt: " + model + " is being written by another mlip run (pid " +
                                     pid_text(::getpid()) + " on host " + host_name() + " since ",
                                 0),
            0u)
      << second.message;
  EXPECT_TRUE(contains(second.message, "); wait for it to end, or write to another file")) << second.message;
  lock.release();
  EXPECT_TRUE(names_in(dir.path()).empty());

  // Nothing to lock: a stream, a FIFO, a name in /dev, a folder that does not exist (not made).
  EXPECT_FALSE(RunLock::for_output("/dev/null", "-o /dev/null").held());
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0644), 0);
  EXPECT_FALSE(RunLock::for_output(dir / "fifo", "-d fifo").held());
  EXPECT_FALSE(RunLock::for_output("/dev/mlip_no_such_file", "-o x").held());
  EXPECT_FALSE(RunLock::for_output(dir / "missing/frozen.pt", "-o x").held());
  EXPECT_FALSE(fs::exists(dir / "missing"));
  EXPECT_EQ(names_in(dir.path()), std::vector<std::string>{"fifo"});
}

// ---- through the real mlip

/// A tiny training input: se_e2_a on the test's small systems, `steps` steps, lcurve lines and
/// checkpoints every `every` steps.
std::string input_yaml(int steps, int every) {
  return "model:\n"
         "  type_map: [O, H]\n"
         "  descriptor: {type: se_e2_a, sel: [8, 16], rcut: 4.0, rcut_smth: 1.0, neuron: [4, 8],\n"
         "               axis_neuron: 4, type_one_side: true, seed: 3, precision: float64}\n"
         "  fitting_net: {neuron: [8, 8], resnet_dt: true, seed: 3, precision: float64}\n"
         "learning_rate: {type: exp, start_lr: 0.005, stop_lr: 1.0e-4, decay_steps: 5}\n"
         "loss: {type: ener, start_pref_e: 0.02, limit_pref_e: 1, start_pref_f: 1000, limit_pref_f: 1}\n"
         "training:\n"
         "  training_data: {systems: [data/sys_a], batch_size: 2}\n"
         "  validation_data: {systems: [data/sys_v], batch_size: 2, numb_btch: 1}\n"
         "  numb_steps: " +
         std::to_string(steps) + "\n  seed: 5\n  disp_freq: " + std::to_string(every) +
         "\n  save_freq: " + std::to_string(every) + "\n";
}

/// Every file in `folder` with its inode, size and modification time.
std::map<std::string, std::tuple<ino_t, off_t, int64_t>> snapshot(const std::string& folder) {
  std::map<std::string, std::tuple<ino_t, off_t, int64_t>> files;
  for (const std::string& name : names_in(folder)) {
    struct stat st {};
    if (::stat((folder + "/" + name).c_str(), &st) == 0)
      files[name] = {st.st_ino, st.st_size, int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
  }
  return files;
}

class RunLockCli : public ::testing::Test {
 protected:
  void SetUp() override {
    write_system(dir_ / "data/sys_a", 2, 4, 8, 1);
    write_system(dir_ / "data/sys_v", 2, 4, 5, 3);
    write_text(dir_ / "short.yaml", input_yaml(2, 2));
  }
  void TearDown() override {
    if (background_ > 0) {
      ::kill(background_, SIGKILL);
      ::waitpid(background_, nullptr, 0);
    }
  }
  /// Runs `mlip <args>` in the test folder.
  CommandResult mlip(const std::string& args) { return run_command("cd " + dir_.path() + " && " + kMlip + " " + args); }
  /// Starts `mlip <args...>` in the test folder in the background, its output into <name>.out and .err.
  pid_t start_mlip(const std::vector<std::string>& args, const std::string& name) {
    std::vector<std::string> words = {kMlip};
    words.insert(words.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& w : words) argv.push_back(w.data());
    argv.push_back(nullptr);
    const std::string out = dir_ / (name + ".out"), err = dir_ / (name + ".err");
    const pid_t pid = ::fork();
    if (pid == 0) {
      const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const int in = ::open("/dev/null", O_RDONLY);
      if (o < 0 || e < 0 || in < 0 || ::chdir(dir_.path().c_str()) != 0) ::_exit(126);
      ::dup2(in, 0);
      ::dup2(o, 1);
      ::dup2(e, 2);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    return pid;
  }
  std::string read(const std::string& name) const { return read_file(dir_ / name); }
  TempDir dir_;
  pid_t background_ = -1;
};

// A second `mlip train -o X` while a first runs there: refused, naming X and the first run's pid,
// the first run's files untouched. After kill -9 of the first, a third run takes the lock over.
TEST_F(RunLockCli, ASecondTrainIntoARunningFolderIsRefusedAndAKilledRunsLockIsTakenOver) {
  // Many steps, one lcurve line (step 1) and no checkpoint until it is killed: its files stay as
  // they are while the second run tries.
  write_text(dir_ / "long.yaml", input_yaml(100000000, 100000000));
  background_ = start_mlip({"train", "long.yaml", "-o", "X"}, "first");
  ASSERT_GT(background_, 0);
  const std::string first_pid = pid_text(background_);
  auto ready = [&] {
    return contains(read("X/.mlip.lock"), "pid " + first_pid + "\n") &&
           std::regex_search(read("X/lcurve.out"), std::regex("\n +1 "));
  };
  for (int k = 0; k < 2400 && !ready() && ::waitpid(background_, nullptr, WNOHANG) == 0; ++k)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(ready()) << read("first.out") << read("first.err");
  const auto before = snapshot(dir_ / "X");
  const std::string lcurve = read("X/lcurve.out");

  const CommandResult second = mlip("train short.yaml -o X");
  EXPECT_EQ(second.exit_code, 1) << second.out << second.err;
  EXPECT_TRUE(contains(second.err, "mlip: error: -o X: the folder is in use by another mlip run (pid " + first_pid +
                                       " on host " + host_name() + " since "))
      << second.err;
  EXPECT_TRUE(contains(second.err, ": mlip train long.yaml -o X); wait for it to end, or write to another folder"))
      << second.err;
  EXPECT_EQ(snapshot(dir_ / "X"), before);
  EXPECT_EQ(read("X/lcurve.out"), lcurve);
  EXPECT_EQ(::waitpid(background_, nullptr, WNOHANG), 0) << "the first run ended: " << read("first.err");

  ASSERT_EQ(::kill(background_, SIGKILL), 0);
  ASSERT_EQ(::waitpid(background_, nullptr, 0), background_);
  background_ = -1;
  EXPECT_TRUE(fs::exists(dir_ / "X/.mlip.lock"));  // left by the killed run

  const CommandResult third = mlip("train short.yaml -o X");
  ASSERT_EQ(third.exit_code, 0) << third.out << third.err;
  EXPECT_TRUE(contains(
      third.out, "note: -o X: took over the lock left by pid " + first_pid + " on host " + host_name() + " (started "))
      << third.out;
  EXPECT_TRUE(contains(third.out, "), which no longer runs\n")) << third.out;
  EXPECT_TRUE(fs::exists(dir_ / "X/model.ckpt-2.pt"));
  EXPECT_FALSE(fs::exists(dir_ / "X/.mlip.lock"));  // released at the end
}

// Outputs that this process holds: every command that would write them is refused, naming the path
// and this process; once released, the command runs and leaves no lock file behind.
TEST_F(RunLockCli, CommandsRefuseOutputsHeldByAnotherProcess) {
  const CommandResult trained = mlip("train short.yaml -o run");
  ASSERT_EQ(trained.exit_code, 0) << trained.out << trained.err;
  EXPECT_FALSE(fs::exists(dir_ / "run/.mlip.lock"));
  const std::string me = "(pid " + pid_text(::getpid()) + " on host " + host_name() + " since ";
  fs::create_directories(dir_ / "out");

  {
    const RunLock held = RunLock::for_output(dir_ / "out/frozen.pt", "-o frozen.pt");
    ASSERT_TRUE(held.held());
    const CommandResult freeze = mlip("freeze -c run -o out/frozen.pt");
    EXPECT_EQ(freeze.exit_code, 1) << freeze.out << freeze.err;
    const std::string refused = "mlip: error: -o out/frozen.pt: out/frozen.pt is being written by another mlip run ";
    EXPECT_TRUE(contains(freeze.err, refused + me)) << freeze.err;
    EXPECT_FALSE(fs::exists(dir_ / "out/frozen.pt"));
  }
  const CommandResult freeze = mlip("freeze -c run -o out/frozen.pt");
  ASSERT_EQ(freeze.exit_code, 0) << freeze.err;
  EXPECT_EQ(names_in(dir_ / "out"), std::vector<std::string>{"frozen.pt"});

  {
    const RunLock held = RunLock::for_output(dir_ / "out/small.pt", "-o small.pt");
    const CommandResult compress = mlip("compress -i out/frozen.pt -o out/small.pt");
    EXPECT_EQ(compress.exit_code, 1) << compress.out << compress.err;
    EXPECT_TRUE(contains(compress.err, "-o out/small.pt: out/small.pt is being written by another mlip run " + me))
        << compress.err;
    EXPECT_FALSE(fs::exists(dir_ / "out/small.pt"));
  }

  {
    const RunLock held = RunLock::for_output(dir_ / "out/detail", "-d detail");
    const CommandResult test = mlip("test -m out/frozen.pt -s data/sys_v -d out/detail");
    EXPECT_EQ(test.exit_code, 1) << test.out << test.err;
    EXPECT_TRUE(contains(test.err, "mlip: error: -d out/detail: out/detail is being written by another mlip run " + me))
        << test.err;
    EXPECT_FALSE(fs::exists(dir_ / "out/detail.e.out"));
  }
  {
    const RunLock held = RunLock::for_output(dir_ / "out/pred.extxyz", "--xyz pred.extxyz");
    const CommandResult test = mlip("test -m out/frozen.pt -s data/sys_v --xyz out/pred.extxyz");
    EXPECT_EQ(test.exit_code, 1) << test.out << test.err;
    EXPECT_TRUE(contains(test.err, "--xyz out/pred.extxyz: out/pred.extxyz is being written by another mlip run " + me))
        << test.err;
  }
  const CommandResult test = mlip("test -m out/frozen.pt -s data/sys_v -d out/detail --xyz /dev/null");
  ASSERT_EQ(test.exit_code, 0) << test.err;
  EXPECT_TRUE(fs::exists(dir_ / "out/detail.e.out"));
  EXPECT_FALSE(fs::exists(dir_ / "out/.detail.mlip.lock"));

  {
    const RunLock held = RunLock::for_folder(dir_ / "locked", "-o locked");
    const CommandResult train = mlip("train short.yaml -o locked");
    EXPECT_EQ(train.exit_code, 1) << train.out << train.err;
    EXPECT_TRUE(contains(train.err, "mlip: error: -o locked: the folder is in use by another mlip run " + me))
        << train.err;
    const CommandResult committee = mlip("train short.yaml --committee 2 -o locked");
    EXPECT_EQ(committee.exit_code, 1) << committee.out << committee.err;
    EXPECT_TRUE(contains(committee.err, "mlip: error: -o locked: the folder is in use by another mlip run " + me))
        << committee.err;
    EXPECT_EQ(names_in(dir_ / "locked"), std::vector<std::string>{".mlip.lock"});  // no lcurve.out, no model_0
  }
  {
    // One member's folder held (a `--member 1` job running): the committee is refused before it
    // replaces that member's train.log.
    fs::create_directories(dir_ / "member/model_1");
    mlip::test::write_text(dir_ / "member/model_1/train.log", "the running member's log\n");
    const RunLock held = RunLock::for_folder(dir_ / "member/model_1", "-o member/model_1");
    const CommandResult committee = mlip("train short.yaml --committee 2 -o member");
    EXPECT_EQ(committee.exit_code, 1) << committee.out << committee.err;
    EXPECT_TRUE(contains(committee.err, "-o member/model_1: the folder is in use by another mlip run " + me))
        << committee.err;
    EXPECT_EQ(mlip::test::read_file(dir_ / "member/model_1/train.log"), "the running member's log\n");
  }
  // Free: the committee runs, its parent and members each holding and releasing their folder.
  const CommandResult committee = mlip("train short.yaml --committee 2 -o locked");
  ASSERT_EQ(committee.exit_code, 0) << committee.out << committee.err;
  for (const char* lock : {"locked/.mlip.lock", "locked/model_0/.mlip.lock", "locked/model_1/.mlip.lock"})
    EXPECT_FALSE(fs::exists(dir_ / lock)) << lock;
  EXPECT_TRUE(fs::exists(dir_ / "locked/model_1/model.ckpt-2.pt"));
}

}  // namespace
