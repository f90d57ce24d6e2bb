// The stop flag read a step late (src/train/lagged_flag.h): each call returns the previous call's
// value, on the CPU and (label gpu) from a CUDA device without LibTorch waiting for the device
// (train/host_wait_check.h); a value of the wrong kind is an error naming what was found.
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include "test_util.h"
#include "train/host_wait_check.h"
#include "train/lagged_flag.h"

namespace {

/// Feeds 0, 2, 0, 0, 1, 0 (made on `device`) and checks that each call answers the one before.
void check_sequence(const torch::Device& device, bool check_waits) {
  mlip::train::LaggedFlag flag;
  const std::vector<double> values{0, 2, 0, 0, 1, 0};
  bool previous = false;
  for (size_t k = 0; k < values.size(); ++k) {
    SCOPED_TRACE("call " + std::to_string(k));
    const auto value = torch::full({1}, values[k], torch::TensorOptions().dtype(torch::kFloat64).device(device));
    bool got = false;
    {
      mlip::train::HostWaitCheck no_waits(check_waits);
      got = flag.exchange(value);
    }
    EXPECT_EQ(got, previous);
    previous = values[k] > 0;
  }
}

TEST(LaggedFlag, AnswersThePreviousCallOnTheCpu) { check_sequence(torch::kCPU, false); }

TEST(LaggedFlag, AnswersThePreviousCallFromCudaWithoutWaiting) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible: the CUDA copies are not checked here";
  check_sequence(torch::Device(torch::kCUDA, 0), true);
}

TEST(LaggedFlag, AValueOfTheWrongKindIsAnError) {
  mlip::train::LaggedFlag flag;
  const std::string two = mlip::test::error_of([&] { flag.exchange(torch::zeros({2}, torch::kFloat64)); });
  EXPECT_NE(two.find("expected one float64 value, got 2 of Double"), std::string::npos) << two;
  const std::string single = mlip::test::error_of([&] { flag.exchange(torch::zeros({1}, torch::kFloat32)); });
  EXPECT_NE(single.find("got 1 of Float"), std::string::npos) << single;
}

}  // namespace
