// `mlip plot` as users run it (docs/training.md "Pictures"): through the real program, with the
// Python found when mlip was configured, whatever python3 comes first on PATH; every failure an
// `mlip plot: error:` line naming the path or the interpreter, never a Python traceback.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <string>

#include "test_util.h"

namespace fs = std::filesystem;

namespace {

using mlip::test::CommandResult;
using mlip::test::contains;
using mlip::test::run_command;
using mlip::test::TempDir;
using mlip::test::write_text;

const char* kHeader = "#  step  rmse_val  rmse_trn  rmse_e_val  rmse_e_trn  rmse_f_val  rmse_f_trn  lr\n";

/// An lcurve.out of `rows` rows with positive RMSEs.
std::string lcurve(int rows) {
  std::string text = kHeader;
  for (int k = 0; k < rows; ++k) {
    const double s = 1.0 / (1 + k);
    text += std::to_string(100 * k) + " " + std::to_string(2 * s) + " " + std::to_string(2.1 * s) + " " +
            std::to_string(0.01 * s) + " " + std::to_string(0.011 * s) + " " + std::to_string(0.5 * s) + " " +
            std::to_string(0.52 * s) + " 1e-3\n";
  }
  return text;
}

CommandResult plot(const std::string& arguments, const std::string& environment = "") {
  return run_command(environment + " " + std::string(MLIP_EXE) + " plot " + arguments);
}

/// Failed with exit 1, one `mlip plot: error:` line holding `phrase`, and no traceback.
void expect_error(const CommandResult& r, const std::string& phrase) {
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_TRUE(contains(r.err, "mlip plot: error: ")) << r.err;
  EXPECT_TRUE(contains(r.err, phrase)) << r.err << "\n  missing: " << phrase;
  EXPECT_FALSE(contains(r.err, "Traceback")) << r.err;
}

class Plot : public ::testing::Test {
 protected:
  void SetUp() override {
    // A python3 first on PATH without matplotlib, as pyenv or conda put there: passed over.
    fs::create_directories(tmp_ / "bin");
    write_text(tmp_ / "bin/python3",
               "#!/bin/sh\necho 'Traceback (most recent call last):' >&2\n"
               "echo \"ModuleNotFoundError: No module named 'matplotlib'\" >&2\nexit 1\n");
    fs::permissions(tmp_ / "bin/python3", fs::perms::owner_all);
    path_ = "PATH='" + (tmp_ / "bin") + ":'\"$PATH\" ";
    write_text(tmp_ / "lcurve.out", lcurve(5));
  }
  std::string at(const std::string& name) const { return "'" + (tmp_ / name) + "'"; }
  TempDir tmp_;
  std::string path_;
};

}  // namespace

TEST_F(Plot, DrawsWithTheConfiguredPythonWhateverComesFirstOnPath) {
  const CommandResult r = plot("-l " + at("lcurve.out") + " -o " + at("out"), path_);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "wrote ")) << r.out;
  ASSERT_TRUE(fs::exists(tmp_ / "out/lcurve.png"));
  EXPECT_GT(fs::file_size(tmp_ / "out/lcurve.png"), 1000u);
}

TEST_F(Plot, AnInterpreterThatFailsIsNamedWithoutItsTraceback) {
  expect_error(plot("-l " + at("lcurve.out"), "MLIP_PYTHON=" + at("bin/python3")),
               "the Python " + (tmp_ / "bin/python3") + " (MLIP_PYTHON) failed (exit 1): ModuleNotFound");
  expect_error(plot("-l " + at("lcurve.out"), "MLIP_PYTHON=/nonexistent/python3"),
               "cannot run the Python /nonexistent/python3 (MLIP_PYTHON)");
}

TEST_F(Plot, BadLearningCurvesAreNamed) {
  write_text(tmp_ / "binary.out", std::string("#step lr\n\0\x01\x02", 12));
  expect_error(plot("-l " + at("binary.out")), "binary.out: a binary file (it holds NUL bytes)");
  write_text(tmp_ / "header_only.out", kHeader);
  expect_error(plot("-l " + at("header_only.out")), "header_only.out: no rows yet (the header only): nothing to draw");
  write_text(tmp_ / "words.out", lcurve(2) + "300 hello 3\n" + lcurve(2).substr(std::string(kHeader).size()));
  expect_error(plot("-l " + at("words.out")), "words.out: line 4: expected 8 numbers");
  std::string nan_rows = kHeader;
  for (int k = 0; k < 3; ++k) nan_rows += std::to_string(k) + " nan nan nan nan nan nan 1e-3\n";
  write_text(tmp_ / "nan.out", nan_rows);
  expect_error(plot("-l " + at("nan.out")), "is NaN, infinite or 0: nothing to draw");
  expect_error(plot("-l " + at("nowhere.out")), "nowhere.out: no such file");
  expect_error(plot("-t " + at("nowhere")), "nowhere.e_peratom.out: no such file");
}

TEST_F(Plot, ALastLineCutShortIsSkippedWithANote) {
  const std::string full = lcurve(5);
  write_text(tmp_ / "cut.out", full + "600 0.3 0.31");  // a run still writing its line
  const CommandResult r = plot("-l " + at("cut.out") + " -o " + at("cut"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "mlip plot: note: ")) << r.err;
  EXPECT_TRUE(contains(r.err, "line 7 is cut short")) << r.err;
  EXPECT_TRUE(fs::exists(tmp_ / "cut/lcurve.png"));
}

TEST_F(Plot, OutputsThatAreNoFolderAreRefused) {
  write_text(tmp_ / "a_file", "x\n");
  expect_error(plot("-l " + at("lcurve.out") + " -o " + at("a_file")), "a_file: is a file, expected a folder");
  ASSERT_EQ(::mkfifo((tmp_ / "a_fifo").c_str(), 0600), 0);
  expect_error(plot("-l " + at("lcurve.out") + " -o " + at("a_fifo")), "a_fifo: is a FIFO, expected a folder");
  // A picture's own name in the folder: a FIFO (would block or fail unseekable), a folder, and the
  // learning curve being drawn, each refused by name, the input kept.
  fs::create_directories(tmp_ / "pictures");
  ASSERT_EQ(::mkfifo((tmp_ / "pictures/lcurve.png").c_str(), 0600), 0);
  expect_error(plot("-l " + at("lcurve.out") + " -o " + at("pictures")), "pictures/lcurve.png: is a FIFO");
  fs::create_directories(tmp_ / "folders/lcurve.png");
  expect_error(plot("-l " + at("lcurve.out") + " -o " + at("folders")), "folders/lcurve.png: is a folder");
  fs::create_directories(tmp_ / "same");
  const std::string text = mlip::test::read_file(tmp_ / "lcurve.out");
  write_text(tmp_ / "same/lcurve.png", text);
  expect_error(plot("-l " + at("same/lcurve.png") + " -o " + at("same")),
               "same/lcurve.png: that is " + (tmp_ / "same/lcurve.png") + ", which mlip plot reads");
  EXPECT_EQ(mlip::test::read_file(tmp_ / "same/lcurve.png"), text);
}

TEST_F(Plot, NothingToDrawIsAUsageError) {
  const CommandResult r = plot("-o " + at("out"));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "nothing to draw")) << r.err;
  EXPECT_TRUE(contains(r.err, "usage: mlip plot")) << r.err;
}
