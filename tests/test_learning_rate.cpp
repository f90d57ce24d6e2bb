#include "train/learning_rate.h"

#include <gtest/gtest.h>

#include <cmath>

#include "error.h"

namespace {

using mlip::train::ExpLearningRate;

TEST(ExpLearningRate, DecaysToStopLrAtTheLastStep) {
  ExpLearningRate lr;
  lr.start_lr = 1e-3;
  lr.stop_lr = 3.51e-8;
  lr.decay_steps = 5000;
  lr.numb_steps = 1000000;
  lr.validate();
  EXPECT_DOUBLE_EQ(lr.at(0), 1e-3);
  EXPECT_DOUBLE_EQ(lr.at(4999), 1e-3);  // constant within a decay period
  EXPECT_NEAR(lr.at(5000), 1e-3 * lr.rate(), 1e-18);
  // r^(numb_steps/decay_steps) = stop/start, so the last period reaches stop_lr.
  EXPECT_NEAR(lr.at(1000000) / 3.51e-8, 1.0, 1e-9);
  EXPECT_GE(lr.at(2000000), 3.51e-8 * (1 - 1e-12));  // never below stop_lr
}

TEST(ExpLearningRate, ExplicitDecayRateAndWarmup) {
  ExpLearningRate lr;
  lr.start_lr = 2e-3;
  lr.stop_lr = 1e-5;
  lr.decay_steps = 10;
  lr.decay_rate = 0.5;
  lr.warmup_steps = 4;
  lr.warmup_start_factor = 0.25;
  lr.numb_steps = 100;
  lr.validate();
  EXPECT_DOUBLE_EQ(lr.at(0), 0.25 * 2e-3);
  EXPECT_DOUBLE_EQ(lr.at(2), 0.25 * 2e-3 + 0.75 * 2e-3 * 2.0 / 4.0);
  EXPECT_DOUBLE_EQ(lr.at(4), 2e-3);
  EXPECT_DOUBLE_EQ(lr.at(13), 2e-3);
  EXPECT_DOUBLE_EQ(lr.at(14), 1e-3);
  EXPECT_DOUBLE_EQ(lr.at(34), 2.5e-4);
  EXPECT_DOUBLE_EQ(lr.at(99), 1e-5);  // clamped at stop_lr
}

TEST(ExpLearningRate, ScaleByWorker) {
  EXPECT_DOUBLE_EQ(mlip::train::scale_by_worker("linear", 8), 8.0);
  EXPECT_DOUBLE_EQ(mlip::train::scale_by_worker("sqrt", 4), 2.0);
  EXPECT_DOUBLE_EQ(mlip::train::scale_by_worker("none", 4), 1.0);
  try {
    mlip::train::scale_by_worker("cubic", 4);
    FAIL();
  } catch (const mlip::Error& e) {
    EXPECT_STREQ(e.what(), "learning_rate.scale_by_worker: expected one of linear, sqrt, none, got 'cubic'");
  }
  ExpLearningRate lr;
  lr.scale = 4.0;
  EXPECT_DOUBLE_EQ(lr.at(0), 4.0 * lr.start_lr);
}

TEST(ExpLearningRate, ValidateNamesTheKey) {
  ExpLearningRate lr;
  lr.start_lr = -1;
  try {
    lr.validate();
    FAIL();
  } catch (const mlip::Error& e) {
    EXPECT_NE(std::string(e.what()).find("learning_rate.start_lr: expected a positive number, got -1"), std::string::npos);
  }
  lr.start_lr = 1e-3;
  lr.decay_steps = 0;
  EXPECT_THROW(lr.validate(), mlip::Error);
}

}  // namespace
