// Checked, atomic file writing (archive/output_file.h). The full-disk and read-only cases run
// through the CLI in tests/robustness/check_full_disk.py (they need root to mount a tmpfs).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "test_util.h"
#include "archive/output_file.h"

namespace fs = std::filesystem;
using mlip::test::contains;
using mlip::test::error_of;
using mlip::test::TempDir;
using mlip::archive::OutputFile;

namespace {

std::vector<std::string> names_in(const std::string& folder) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(folder)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

/// The id of a process that has ended.
pid_t ended_pid() {
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  waitpid(pid, nullptr, 0);
  return pid;
}

}  // namespace

TEST(OutputFile, ReplaceKeepsTheOldContentUntilCommit) {
  TempDir dir;
  mlip::test::write_text(dir / "f.txt", "old");
  {
    OutputFile f(dir / "f.txt", OutputFile::Mode::kReplace, "the test file");
    f.write("new ");
    f.write("content");
    EXPECT_EQ(mlip::test::read_file(dir / "f.txt"), "old");
    EXPECT_EQ(names_in(dir.path()).size(), 2u);  // f.txt and its temporary file
    f.commit();
  }
  EXPECT_EQ(mlip::test::read_file(dir / "f.txt"), "new content");
  EXPECT_EQ(names_in(dir.path()), std::vector<std::string>{"f.txt"});
}

TEST(OutputFile, ReplaceWithoutCommitLeavesTheOldFileAndNoTemporary) {
  TempDir dir;
  mlip::test::write_text(dir / "f.txt", "old");
  {
    OutputFile f(dir / "f.txt", OutputFile::Mode::kReplace, "the test file");
    f.write("half");
  }  // e.g. an exception between the writes
  EXPECT_EQ(mlip::test::read_file(dir / "f.txt"), "old");
  EXPECT_EQ(names_in(dir.path()), std::vector<std::string>{"f.txt"});
}

TEST(OutputFile, AppendWritesEachPieceAtOnce) {
  TempDir dir;
  mlip::test::write_text(dir / "log", "a\n");
  OutputFile f(dir / "log", OutputFile::Mode::kAppend, "the log");
  f.write("b\n");
  EXPECT_EQ(mlip::test::read_file(dir / "log"), "a\nb\n");  // on disk before commit
  f.commit();
  EXPECT_TRUE(contains(error_of([&] { f.write("c\n"); }), "the file was closed"));
}

TEST(OutputFile, ErrorsNameTheFileWhatItHoldsAndTheReason) {
  TempDir dir;
  fs::create_directory(dir / "folder");
  EXPECT_EQ(error_of([&] { OutputFile(dir / "folder", OutputFile::Mode::kReplace, "the frozen model"); }),
            dir / "folder" + ": cannot write the frozen model (a folder of that name exists; expected a file path)");
  EXPECT_EQ(error_of([&] { mlip::archive::write_file_atomically(dir / "missing/f", "x", "the pointer"); }),
            dir / "missing/f" + ": cannot write the pointer (No such file or directory)");
  EXPECT_TRUE(names_in(dir.path()) == std::vector<std::string>{"folder"});
}

TEST(OutputFile, StaleTemporariesOfEndedProcessesAreRemoved) {
  TempDir dir;
  const std::string dead = std::to_string(ended_pid()), mine = std::to_string(getpid());
  // mlip's temporaries of an ended process go; its own running one stays, and so does every
  // file mlip's naming did not make: a user's "mydata.tmp-1" (pid 1 is no mlip), other names,
  // and a folder of a temporary's name.
  for (const std::string& name :
       {"model.ckpt-5.pt.mlip-tmp-" + dead, "checkpoint.mlip-tmp-" + dead, "lcurve.out.mlip-tmp-" + mine,
        "mydata.tmp-" + dead, std::string("mydata.tmp-1"), std::string("notes.mlip-tmp-x"), std::string("data.txt")})
    mlip::test::write_text(dir / name, "x");
  fs::create_directory(dir / ("folder.mlip-tmp-" + dead));
  fs::create_symlink("data.txt", dir / ("model.ckpt.pt.mlip-tmp-" + dead));
  EXPECT_EQ(mlip::archive::remove_stale_temporaries(dir.path()), 3);
  std::vector<std::string> kept{"data.txt", "folder.mlip-tmp-" + dead, "lcurve.out.mlip-tmp-" + mine,
                                "mydata.tmp-" + dead, "mydata.tmp-1", "notes.mlip-tmp-x"};
  std::sort(kept.begin(), kept.end());
  EXPECT_EQ(names_in(dir.path()), kept);
  EXPECT_EQ(mlip::archive::temporary_name("run/lcurve.out"), "run/lcurve.out.mlip-tmp-" + mine);
}

TEST(OutputFile, OutputFolders) {
  TempDir dir;
  mlip::archive::prepare_output_folder(dir / "a/b", "-o a/b");
  EXPECT_TRUE(fs::is_directory(dir / "a/b"));
  mlip::test::write_text(dir / "file", "x");
  EXPECT_EQ(error_of([&] { mlip::archive::prepare_output_folder(dir / "file", "-o file"); }),
            "-o file: cannot use " + dir / "file" + " as the output folder (a file of that name exists)");
  EXPECT_EQ(error_of([&] { mlip::archive::prepare_output_folder(dir / "file/sub", "-o file/sub"); }),
            "-o file/sub: cannot create the output folder " + dir / "file/sub" + " (Not a directory)");
}

// ---- special files (docs/robustness.md "Special files"): never renamed over, truncated or
// replaced; refused, or written into as a stream where the output allows it.

namespace {

using mlip::archive::SpecialTarget;
using mlip::archive::TargetKind;

bool is_character_device(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISCHR(st.st_mode);
}

bool is_fifo(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISFIFO(st.st_mode);
}

/// Reads everything written into the FIFO `path` on a thread (the writer's open waits for it).
class FifoReader {
 public:
  explicit FifoReader(std::string path)
      : path_(path), thread_([this, path] { text_ = mlip::test::read_file(path); }) {}
  /// What was written, once the writer closed the FIFO.
  std::string text() {
    if (thread_.joinable()) thread_.join();
    return text_;
  }
  ~FifoReader() {
    if (!thread_.joinable()) return;
    // When the writer failed before opening the FIFO, the reader still waits: open and close it.
    const int fd = ::open(path_.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
    thread_.join();
  }

 private:
  std::string path_, text_;
  std::thread thread_;
};

}  // namespace

TEST(OutputFile, TargetKinds) {
  TempDir dir;
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0644), 0);
  mlip::test::write_text(dir / "file", "x");
  fs::create_symlink(dir / "file", dir / "link");
  fs::create_symlink(dir / "gone", dir / "dangling");
  using mlip::archive::output_target_kind;
  EXPECT_EQ(output_target_kind(dir / "missing"), TargetKind::kAbsent);
  EXPECT_EQ(output_target_kind(dir / "dangling"), TargetKind::kAbsent);
  EXPECT_EQ(output_target_kind(dir / "file"), TargetKind::kRegularFile);
  EXPECT_EQ(output_target_kind(dir / "link"), TargetKind::kRegularFile);
  EXPECT_EQ(output_target_kind(dir / "fifo"), TargetKind::kFifo);
  EXPECT_EQ(output_target_kind(dir.path()), TargetKind::kFolder);
  EXPECT_EQ(output_target_kind("/dev/null"), TargetKind::kCharacterDevice);
  // /proc/self/fd/N of a regular file: a regular file, but renaming onto its name would replace
  // a system link.
  const int fd = ::open((dir / "file").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(output_target_kind("/proc/self/fd/" + std::to_string(fd)), TargetKind::kProcessFile);
  ::close(fd);
}

TEST(OutputFile, RefusesToReplaceDevicesAndFifos) {
  TempDir dir;
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0644), 0);
  EXPECT_EQ(error_of([&] { mlip::archive::write_file_atomically("/dev/null", "model", "the frozen model"); }),
            "/dev/null: is a character device, not a regular file; mlip writes the frozen model to regular files only");
  EXPECT_TRUE(is_character_device("/dev/null"));
  EXPECT_EQ(error_of([&] { OutputFile(dir / "fifo", OutputFile::Mode::kAppend, "the learning curve"); }),
            dir / "fifo" + ": is a FIFO, not a regular file; mlip writes the learning curve to regular files only");
  EXPECT_TRUE(is_fifo(dir / "fifo"));
  EXPECT_EQ(names_in(dir.path()), std::vector<std::string>{"fifo"});  // no temporary file left
  // The check made before any work names the option.
  EXPECT_EQ(error_of([&] {
              mlip::archive::check_output_target("/dev/null", SpecialTarget::kRefuse, "freeze -o /dev/null", "models");
            }),
            "freeze -o /dev/null: is a character device, not a regular file; mlip writes models to regular files only");
  EXPECT_TRUE(is_character_device("/dev/null"));
}

TEST(OutputFile, StreamsIntoFifosAndCharacterDevices) {
  TempDir dir;
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0644), 0);
  EXPECT_TRUE(mlip::archive::check_output_target(dir / "fifo", SpecialTarget::kStream, "--step-times", "the step times"));
  EXPECT_FALSE(mlip::archive::check_output_target(dir / "new", SpecialTarget::kStream, "--step-times", "the step times"));
  {
    FifoReader reader(dir / "fifo");
    mlip::archive::write_file_atomically(dir / "fifo", "1 2.5\n2 2.4\n", "the step times", SpecialTarget::kStream);
    EXPECT_EQ(reader.text(), "1 2.5\n2 2.4\n");
  }
  EXPECT_TRUE(is_fifo(dir / "fifo"));
  {
    FifoReader reader(dir / "fifo");
    OutputFile f(dir / "fifo", OutputFile::Mode::kReplace, "the force detail file", SpecialTarget::kStream);
    EXPECT_TRUE(f.streaming());
    f.write("a\n");
    f.write("b\n");
    f.commit();
    EXPECT_EQ(reader.text(), "a\nb\n");
  }
  EXPECT_TRUE(is_fifo(dir / "fifo"));
  EXPECT_EQ(names_in(dir.path()), std::vector<std::string>{"fifo"});
  mlip::archive::write_file_atomically("/dev/null", "discarded\n", "the step times", SpecialTarget::kStream);
  EXPECT_TRUE(is_character_device("/dev/null"));
  // A full stream device is an error naming it, as a full disk is.
  if (is_character_device("/dev/full")) {
    EXPECT_EQ(error_of([&] { mlip::archive::write_file_atomically("/dev/full", "x", "the step times", SpecialTarget::kStream); }),
              "/dev/full: cannot write the step times (No space left on device)");
  }
}

TEST(OutputFile, StreamsStillRefuseFoldersSocketsAndProcessLinksWhenRefusing) {
  TempDir dir;
  const std::string socket_path = dir / "sock";
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::snprintf(address.sun_path, sizeof address.sun_path, "%s", socket_path.c_str());
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  EXPECT_EQ(error_of([&] {
              mlip::archive::check_output_target(socket_path, SpecialTarget::kStream, "--step-times " + socket_path,
                                               "the step times");
            }),
            "--step-times " + socket_path +
                ": is a socket; mlip writes the step times to regular files, FIFOs and character devices only");
  ::close(fd);
  EXPECT_TRUE(contains(error_of([&] {
                         mlip::archive::check_output_target(dir.path(), SpecialTarget::kStream, "-d x", "detail files");
                       }),
                       "a folder of that name exists"));
  // /dev/stdout redirected to a regular file: its name is a system link, never renamed over.
  mlip::test::write_text(dir / "out", "");
  const int out = ::open((dir / "out").c_str(), O_WRONLY);
  ASSERT_GE(out, 0);
  const std::string link = "/proc/self/fd/" + std::to_string(out);
  EXPECT_TRUE(contains(error_of([&] { mlip::archive::write_file_atomically(link, "x", "the frozen model"); }),
                       "reached through a link in /dev or /proc"));
  mlip::archive::write_file_atomically(link, "streamed\n", "the step times", SpecialTarget::kStream);
  ::close(out);
  EXPECT_EQ(mlip::test::read_file(dir / "out"), "streamed\n");
}

TEST(OutputFile, RegularFilesAndLinksToThemAreStillReplaced) {
  TempDir dir;
  mlip::test::write_text(dir / "target", "old");
  fs::create_symlink("target", dir / "link");
  mlip::archive::write_file_atomically(dir / "link", "new", "the pointer");
  EXPECT_EQ(mlip::test::read_file(dir / "link"), "new");
  EXPECT_FALSE(fs::is_symlink(dir / "link"));  // the link was replaced, as before; its target kept
  EXPECT_EQ(mlip::test::read_file(dir / "target"), "old");
}
