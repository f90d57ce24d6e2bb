// Checked, atomic file writing (train/output_file.h). The full-disk and read-only cases run
// through the CLI in tests/robustness/check_full_disk.py (they need root to mount a tmpfs).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "test_util.h"
#include "train/output_file.h"

namespace fs = std::filesystem;
using mlip::test::contains;
using mlip::test::error_of;
using mlip::test::TempDir;
using mlip::train::OutputFile;

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
  EXPECT_EQ(error_of([&] { mlip::train::write_file_atomically(dir / "missing/f", "x", "the pointer"); }),
            dir / "missing/f" + ": cannot write the pointer (No such file or directory)");
  EXPECT_TRUE(names_in(dir.path()) == std::vector<std::string>{"folder"});
}

TEST(OutputFile, StaleTemporariesOfEndedProcessesAreRemoved) {
  TempDir dir;
  const std::string dead = std::to_string(ended_pid()), mine = std::to_string(getpid());
  for (const std::string& name : {"model.ckpt-5.pt.tmp-" + dead, "checkpoint.tmp-" + dead, "lcurve.out.tmp-" + mine,
                                  std::string("notes.tmp-x"), std::string("data.txt")})
    mlip::test::write_text(dir / name, "x");
  EXPECT_EQ(mlip::train::remove_stale_temporaries(dir.path()), 2);
  EXPECT_EQ(names_in(dir.path()), (std::vector<std::string>{"data.txt", "lcurve.out.tmp-" + mine, "notes.tmp-x"}));
}

TEST(OutputFile, OutputFolders) {
  TempDir dir;
  mlip::train::prepare_output_folder(dir / "a/b", "-o a/b");
  EXPECT_TRUE(fs::is_directory(dir / "a/b"));
  mlip::test::write_text(dir / "file", "x");
  EXPECT_EQ(error_of([&] { mlip::train::prepare_output_folder(dir / "file", "-o file"); }),
            "-o file: cannot use " + dir / "file" + " as the output folder (a file of that name exists)");
  EXPECT_EQ(error_of([&] { mlip::train::prepare_output_folder(dir / "file/sub", "-o file/sub"); }),
            "-o file/sub: cannot create the output folder " + dir / "file/sub" + " (Not a directory)");
}
