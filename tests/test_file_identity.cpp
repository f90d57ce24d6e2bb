// A streamed file's identity (src/data/file_identity.h): special files are refused without
// blocking, and a file replaced, resized, rewritten or turned into a FIFO is told apart from the
// one recorded at start, with a message naming it and what changed (docs/data.md "Files that
// change during training").
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "data/file_identity.h"
#include "test_util.h"

namespace fs = std::filesystem;
using mlip::data::check_unchanged;
using mlip::data::FileIdentity;
using mlip::data::OpenedFile;
using mlip::data::regular_file_identity;
using mlip::test::contains;
using mlip::test::error_of;
using mlip::test::TempDir;
using mlip::test::write_text;

namespace {

/// Sets the modification time of `path` to `seconds` after the epoch.
void set_mtime(const std::string& path, long seconds) {
  const struct timespec times[2] = {{seconds, 0}, {seconds, 0}};
  ASSERT_EQ(utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
}

}  // namespace

TEST(FileIdentity, RecordsTheFileAndSeesNoChangeInAnUnchangedOne) {
  TempDir tmp;
  write_text(tmp / "a.npy", "0123456789");
  const FileIdentity at_start = regular_file_identity(tmp / "a.npy");
  EXPECT_EQ(at_start.size, 10);
  EXPECT_NE(at_start.inode, 0u);
  const OpenedFile opened(tmp / "a.npy", at_start);
  EXPECT_GE(opened.fd(), 0);
  EXPECT_TRUE(opened.identity() == at_start);
  EXPECT_EQ(error_of([&] { check_unchanged(tmp / "a.npy", at_start, regular_file_identity(tmp / "a.npy")); }),
            "(no error)");
}

TEST(FileIdentity, SpecialFilesAreRefusedWithoutBlocking) {
  TempDir tmp;
  ASSERT_EQ(mkfifo((tmp / "fifo").c_str(), 0600), 0);
  // No writer ever opens the FIFO: a blocking open would hang here.
  std::string msg = error_of([&] { OpenedFile f(tmp / "fifo"); });
  EXPECT_TRUE(contains(msg, tmp / "fifo" + ": is a FIFO (named pipe), expected a regular file")) << msg;
  msg = error_of([&] { regular_file_identity(tmp / "fifo"); });
  EXPECT_TRUE(contains(msg, "is a FIFO")) << msg;
  msg = error_of([&] { regular_file_identity("/dev/null"); });
  EXPECT_TRUE(contains(msg, "/dev/null: is a character device")) << msg;
  msg = error_of([&] { OpenedFile f(tmp.path()); });
  EXPECT_TRUE(contains(msg, ": is a folder")) << msg;
  msg = error_of([&] { regular_file_identity(tmp / "missing"); });
  EXPECT_TRUE(contains(msg, tmp / "missing: cannot open file (No such file or directory)")) << msg;
}

TEST(FileIdentity, ChangesAreNamed) {
  TempDir tmp;
  const std::string path = tmp / "coord.npy";
  write_text(path, "0123456789");
  set_mtime(path, 1700000000);
  const FileIdentity at_start = regular_file_identity(path);

  // Replaced by a file of the same size and time: another inode.
  write_text(tmp / "other", "abcdefghij");
  set_mtime(tmp / "other", 1700000000);
  fs::rename(tmp / "other", path);
  std::string msg = error_of([&] { OpenedFile f(path, at_start); });
  EXPECT_TRUE(contains(msg, path + ": changed since it was opened at start (replaced by another file")) << msg;
  EXPECT_TRUE(contains(msg, "data files must not change during a run")) << msg;
  EXPECT_FALSE(contains(msg, "size")) << msg;

  // Grown in place, and rewritten in place (same size, a later time).
  const FileIdentity second = regular_file_identity(path);
  write_text(path, "abcdefghijKLM");
  set_mtime(path, 1700000000);
  msg = error_of([&] { OpenedFile f(path, second); });
  EXPECT_TRUE(contains(msg, "(size 10 -> 13 bytes)")) << msg;
  const FileIdentity third = regular_file_identity(path);
  write_text(path, "ABCDEFGHIJKLM");
  set_mtime(path, 1700000060);
  msg = error_of([&] { OpenedFile f(path, third); });
  EXPECT_TRUE(contains(msg, "(modified 2023-11-14 22:13:20.000000000 UTC -> 2023-11-14 22:14:20.000000000 UTC)")) << msg;

  // Replaced by a FIFO: refused without blocking, saying what it now is.
  fs::remove(path);
  ASSERT_EQ(mkfifo(path.c_str(), 0600), 0);
  msg = error_of([&] { OpenedFile f(path, third); });
  EXPECT_TRUE(contains(msg, path + ": changed since it was opened at start (now a FIFO (named pipe), was a "
                                   "regular file)"))
      << msg;

  // Removed.
  fs::remove(path);
  msg = error_of([&] { OpenedFile f(path, third); });
  EXPECT_TRUE(contains(msg, path + ": cannot open file (No such file or directory); it was there at start")) << msg;
}
