// lcurve.out (train/learning_curve.h): its header, its lines, and its cut back at --restart.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "test_util.h"
#include "train/learning_curve.h"

using mlip::test::TempDir;
namespace train = mlip::train;

namespace {

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(LearningCurve, HeaderNamesTheColumnsOfTheRun) {
  EXPECT_EQ(train::LearningCurve::header({false, false}), "# step rmse_trn rmse_e_trn rmse_f_trn lr\n");
  EXPECT_EQ(train::LearningCurve::header({true, false}),
            "# step rmse_val rmse_trn rmse_e_val rmse_e_trn rmse_f_val rmse_f_trn lr\n");
  EXPECT_EQ(train::LearningCurve::header({false, true}), "# step rmse_trn rmse_e_trn rmse_f_trn rmse_v_trn lr\n");
  EXPECT_EQ(train::LearningCurve::header({true, true}),
            "# step rmse_val rmse_trn rmse_e_val rmse_e_trn rmse_f_val rmse_f_trn rmse_v_val rmse_v_trn lr\n");
}

TEST(LearningCurve, WritesLinesAndCutsThemBackOnRestart) {
  TempDir dir;
  const std::string path = dir / "lcurve.out";
  const train::LearningCurve::Columns columns{true, true};
  const train::CurveErrors trn{1.0, 2.0, 3.0, 4.0}, val{0.5, 0.25, 0.125, 0.0625};
  {
    train::LearningCurve curve(path, columns, std::nullopt);
    curve.write_line(5, 1e-3, trn, &val);
    curve.write_line(10, 5e-4, trn, &val);
    curve.commit();
  }
  const std::string header = train::LearningCurve::header(columns);
  const std::string line5 =
      "      5    5.0000e-01    1.0000e+00    2.5000e-01    2.0000e+00    1.2500e-01"
      "    3.0000e+00    6.2500e-02    4.0000e+00    1.000e-03\n";
  ASSERT_EQ(read(path).substr(0, header.size() + line5.size()), header + line5);
  // --restart from step 5: the line of step 10 comes again, so it is cut off.
  {
    train::LearningCurve curve(path, columns, 5);
    curve.commit();
  }
  EXPECT_EQ(read(path), header + line5);
  // A fresh run starts a new file.
  {
    train::LearningCurve curve(path, columns, std::nullopt);
    curve.commit();
  }
  EXPECT_EQ(read(path), header);
}

TEST(LearningCurve, UpToKeepsCommentsAndFinishedLinesAtMostTheStep) {
  EXPECT_EQ(train::lcurve_up_to("# a\n1 x\n2 y\n# b\n3 z\n", 2), "# a\n1 x\n2 y\n# b\n");
  // A line cut by a crash (no newline) is left out.
  EXPECT_EQ(train::lcurve_up_to("# a\n1 x\n2 y", 5), "# a\n1 x\n");
}

TEST(LearningCurve, StepTimesNumberTheStepsAfterTheStart) {
  TempDir dir;
  const std::string path = dir / "times.txt";
  train::write_step_times(path, 10, {{1.5, 0.25}, {2.0, 0.0}});
  const std::string text = read(path);
  EXPECT_EQ(text.substr(text.find('\n') + 1), "11 1.500000 0.250000\n12 2.000000 0.000000\n");
}

TEST(LearningCurve, StepTimesWithCountsAddTwoColumns) {
  TempDir dir;
  const std::string path = dir / "times.txt";
  train::write_step_times(path, 0,
                          {{1.5, 0.25, train::OperationCounts{812, 97, 0}}, {2.0, 0.0, train::OperationCounts{790, 95, 2}}});
  const std::string text = read(path);
  EXPECT_NE(text.substr(0, text.find('\n')).find("operators"), std::string::npos) << text;
  EXPECT_EQ(text.substr(text.find('\n') + 1), "1 1.500000 0.250000 812 97 0\n2 2.000000 0.000000 790 95 2\n");
}

}  // namespace
