// An output is never one of the command's inputs (docs/robustness.md "An output is never one of
// the inputs"): archive::check_output_is_not_an_input against the same file by every name a user
// can give it, and the files a data-system folder holds.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "archive/output_not_input.h"
#include "test_util.h"

namespace fs = std::filesystem;
using mlip::archive::check_output_is_not_an_input;
using mlip::archive::check_outputs_differ;
using mlip::test::error_of;
using mlip::test::TempDir;
using mlip::test::write_text;

namespace {

/// Runs `f` with the working directory `dir`, then returns to the one before.
template <typename F>
void in_folder(const std::string& dir, F f) {
  const fs::path before = fs::current_path();
  fs::current_path(dir);
  f();
  fs::current_path(before);
}

}  // namespace

TEST(OutputNotInput, TheSameFileByAnyNameIsRefused) {
  TempDir dir;
  write_text(dir / "b.pt", "model");
  write_text(dir / "other.pt", "model");
  fs::create_symlink("b.pt", dir / "link.pt");
  ASSERT_EQ(::link((dir / "b.pt").c_str(), (dir / "hard.pt").c_str()), 0);
  const std::vector<mlip::archive::ReadPath> inputs{{dir / "a.pt", "the model"}, {dir / "b.pt", "the model"}};
  EXPECT_EQ(error_of([&] { check_output_is_not_an_input(dir / "b.pt", "model-devi -o " + (dir / "b.pt"), inputs); }),
            "model-devi -o " + (dir / "b.pt") + ": that is the model " + (dir / "b.pt") +
                ", which this command reads; expected another file name (" + (dir / "b.pt") + " is left as it is)");
  for (const std::string& name : {dir / "link.pt", dir / "hard.pt", dir.path() + "/./b.pt",
                                  dir.path() + "/../" + fs::path(dir.path()).filename().string() + "/b.pt"})
    EXPECT_NE(error_of([&] { check_output_is_not_an_input(name, "-o " + name, inputs); }).find(
                  "that is the model " + (dir / "b.pt")),
              std::string::npos)
        << name;
  EXPECT_NE(error_of([&] { check_output_is_not_an_input(dir / "link.pt", "-o link.pt", inputs); })
                .find("(the same file by another name)"),
            std::string::npos);
  // Relative names from the folder: "./b.pt" against "b.pt".
  in_folder(dir.path(), [&] {
    EXPECT_NE(error_of([&] { check_output_is_not_an_input("./b.pt", "-o ./b.pt", {{"b.pt", "the trajectory"}}); })
                  .find("that is the trajectory b.pt"),
              std::string::npos);
  });
  // Other files, files not there yet, and no inputs are no overlap.
  EXPECT_EQ(error_of([&] { check_output_is_not_an_input(dir / "other.pt", "-o", inputs); }), "(no error)");
  EXPECT_EQ(error_of([&] { check_output_is_not_an_input(dir / "new.pt", "-o", inputs); }), "(no error)");
  EXPECT_EQ(error_of([&] { check_output_is_not_an_input(dir / "b.pt", "-o", {{"", "none"}}); }), "(no error)");
  EXPECT_EQ(mlip::test::read_file(dir / "b.pt"), "model");
}

TEST(OutputNotInput, FilesOfASystemFolderAreRefused) {
  TempDir dir;
  write_text(dir / "sys/type.raw", "0\n");
  write_text(dir / "sys/type_map.raw", "O\n");
  write_text(dir / "sys/set.000/coord.npy", "x");
  write_text(dir / "sys/notes.txt", "x");
  const std::vector<mlip::archive::ReadPath> inputs{{dir / "sys", "the system"}};
  for (const std::string& name : {std::string("sys/type.raw"), std::string("sys/set.000/coord.npy")})
    EXPECT_NE(error_of([&] { check_output_is_not_an_input(dir / name, "-o " + name, inputs); })
                  .find("that is a file of the system " + (dir / "sys")),
              std::string::npos)
        << name;
  // A file of another kind in it, or a new file, is the user's to write.
  EXPECT_EQ(error_of([&] { check_output_is_not_an_input(dir / "sys/notes.txt", "-o", inputs); }), "(no error)");
  EXPECT_EQ(error_of([&] { check_output_is_not_an_input(dir / "sys/devi.raw", "-o", inputs); }), "(no error)");
  // A folder beside it whose name starts the same is not inside it.
  write_text(dir / "sys2/type.raw", "0\n");
  EXPECT_EQ(error_of([&] { check_output_is_not_an_input(dir / "sys2/type.raw", "-o", inputs); }), "(no error)");
}

TEST(OutputNotInput, StreamsAreNotChecked) {
  TempDir dir;
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0600), 0);
  EXPECT_EQ(error_of([&] { check_output_is_not_an_input(dir / "fifo", "-o", {{dir / "fifo", "the model"}}); }),
            "(no error)");
  EXPECT_EQ(error_of([&] { check_output_is_not_an_input("/dev/null", "-o", {{"/dev/null", "the model"}}); }),
            "(no error)");
}

TEST(OutputNotInput, TwoOutputsOfOneCommandDiffer) {
  TempDir dir;
  EXPECT_EQ(error_of([&] { check_outputs_differ(dir / "a.out", "-o a.out", dir.path() + "/./a.out", "--candidates ./a.out"); }),
            "--candidates ./a.out: that is also -o a.out; expected another file name (each output is a file of its own)");
  write_text(dir / "a.out", "x");
  fs::create_symlink("a.out", dir / "b.out");
  EXPECT_NE(error_of([&] { check_outputs_differ(dir / "a.out", "-o a.out", dir / "b.out", "--candidates b.out"); }),
            "(no error)");
  EXPECT_EQ(error_of([&] { check_outputs_differ(dir / "a.out", "-o", dir / "c.out", "--candidates"); }), "(no error)");
  EXPECT_EQ(error_of([&] { check_outputs_differ("/dev/null", "-o", "/dev/null", "--candidates"); }), "(no error)");
}
