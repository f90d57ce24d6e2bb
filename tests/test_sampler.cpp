#include "train/sampler.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

#include "error.h"
#include "test_util.h"

namespace {

using mlip::train::system_probabilities;
using mlip::train::SystemSampler;

TEST(SystemProbabilities, AllAutoProbForms) {
  const std::vector<int64_t> nbatch = {10, 30, 20, 40};
  auto p = system_probabilities(nbatch, "prob_sys_size", {}, "training.training_data");
  EXPECT_DOUBLE_EQ(p[0], 0.1);
  EXPECT_DOUBLE_EQ(p[3], 0.4);
  p = system_probabilities(nbatch, "prob_uniform", {}, "k");
  for (double v : p) EXPECT_DOUBLE_EQ(v, 0.25);
  // [0, 2) gets weight 0.6 split 10:30; [2, 4) gets 0.4 split 20:40.
  p = system_probabilities(nbatch, "prob_sys_size;0:2:0.6;2:4:0.4", {}, "k");
  EXPECT_DOUBLE_EQ(p[0], 0.15);
  EXPECT_DOUBLE_EQ(p[1], 0.45);
  EXPECT_NEAR(p[2], 0.4 / 3, 1e-15);
  EXPECT_NEAR(p[3], 0.8 / 3, 1e-15);
  p = system_probabilities(nbatch, "prob_uniform", {1, 1, 2, 0}, "k");  // sys_probs override
  EXPECT_DOUBLE_EQ(p[2], 0.5);
  EXPECT_DOUBLE_EQ(p[3], 0.0);
}

TEST(SystemProbabilities, BadInputNamesTheKey) {
  const std::vector<int64_t> nbatch = {1, 2};
  using mlip::test::error_of;
  EXPECT_EQ(error_of([&] { system_probabilities(nbatch, "prob_sizes", {}, "training.training_data"); }),
            "training.training_data.auto_prob: expected \"prob_sys_size\", \"prob_uniform\" or "
            "\"prob_sys_size;a:b:w;...\", got \"prob_sizes\"");
  EXPECT_NE(error_of([&] { system_probabilities(nbatch, "prob_sys_size;0:3:1", {}, "k"); }).find("0 <= a < b <= 2"),
            std::string::npos);
  EXPECT_NE(error_of([&] { system_probabilities(nbatch, "prob_sys_size", {1}, "k"); }).find("expected 2 probabilities"),
            std::string::npos);
  EXPECT_NE(error_of([&] { system_probabilities(nbatch, "prob_sys_size", {0, 0}, "k"); }).find("probability 0"),
            std::string::npos);
}

TEST(SystemSampler, EveryPassVisitsEachFrameOnceAndFrequenciesFollowTheProbabilities) {
  SystemSampler s({10, 7}, {2, 3}, {0.25, 0.75}, 42);
  std::map<size_t, int> draws;
  std::vector<std::multiset<int64_t>> pass(2);
  for (int k = 0; k < 20000; ++k) {
    auto b = s.next();
    ++draws[b.system];
    EXPECT_EQ(b.frames.size(), b.system == 0 ? 2u : 3u);
    for (auto f : b.frames) {
      EXPECT_GE(f, 0);
      EXPECT_LT(f, b.system == 0 ? 10 : 7);
      pass[b.system].insert(f);
    }
    // System 0: 5 batches make one pass over its 10 frames, each exactly once.
    if (b.system == 0 && pass[0].size() == 10) {
      EXPECT_EQ(std::set<int64_t>(pass[0].begin(), pass[0].end()).size(), 10u);
      pass[0].clear();
    }
  }
  EXPECT_NEAR(draws[0] / 20000.0, 0.25, 0.015);
}

TEST(SystemSampler, SeedReproducesAndStateRestoresExactly) {
  SystemSampler a({10, 7}, {2, 3}, {0.5, 0.5}, 7), b({10, 7}, {2, 3}, {0.5, 0.5}, 7);
  for (int k = 0; k < 13; ++k) EXPECT_EQ(a.next().frames, b.next().frames);
  const std::string state = a.state();
  std::vector<SystemSampler::Batch> expected;
  for (int k = 0; k < 50; ++k) expected.push_back(a.next());
  SystemSampler c({10, 7}, {2, 3}, {0.5, 0.5}, 999);
  c.set_state(state);
  for (int k = 0; k < 50; ++k) {
    auto got = c.next();
    EXPECT_EQ(got.system, expected[size_t(k)].system);
    EXPECT_EQ(got.frames, expected[size_t(k)].frames);
  }
  SystemSampler d({10}, {2}, {1.0}, 1);
  EXPECT_THROW(d.set_state(state), mlip::Error);
}

// docs/distributed.md "Batch size and learning rate": W ranks with batch b draw, step for step, the global batch of one
// rank with batch W*b, and the shards of the ranks partition it.
TEST(SystemSampler, RanksShardTheGlobalBatchOfOneRank) {
  const std::vector<int64_t> frames = {190, 40};
  const std::vector<double> p = {0.7, 0.3};
  SystemSampler one(frames, {2, 4}, p, 17, 1);
  SystemSampler two(frames, {1, 2}, p, 17, 2);
  for (int step = 0; step < 500; ++step) {  // several passes: reshuffles stay in step too
    const auto a = one.next(), b = two.next();
    ASSERT_EQ(a.system, b.system);
    ASSERT_EQ(a.frames, b.frames) << "step " << step;
    auto joined = two.shard(b, 0);
    const auto second = two.shard(b, 1);
    EXPECT_EQ(joined.size(), size_t(two.batch(b.system)));
    joined.insert(joined.end(), second.begin(), second.end());
    EXPECT_EQ(joined, b.frames);
  }
  EXPECT_EQ(two.padding(0), 0);
}

// As torch's DistributedSampler: a pass over n frames is padded to a multiple of W by repeating
// frames; every frame is seen at least once per pass.
TEST(SystemSampler, PadsAPassToAMultipleOfTheRanks) {
  SystemSampler s({15}, {1}, {1.0}, 5, 2);
  EXPECT_EQ(s.padding(0), 1);
  std::map<int64_t, int> seen;
  for (int step = 0; step < 8; ++step)
    for (auto f : s.next().frames) ++seen[f];
  ASSERT_EQ(seen.size(), 15u);
  int twice = 0;
  for (auto& [f, n] : seen) twice += n == 2;
  EXPECT_EQ(twice, 1);
  // Fewer frames than ranks: every rank still gets a frame (the same one).
  SystemSampler tiny({1}, {4}, {1.0}, 5, 3);
  EXPECT_EQ(tiny.padding(0), 2);
  EXPECT_EQ(tiny.batch(0), 1);
  const auto b = tiny.next();
  EXPECT_EQ(b.frames, (std::vector<int64_t>{0, 0, 0}));
  EXPECT_EQ(tiny.shard(b, 2), (std::vector<int64_t>{0}));
}

TEST(SystemSampler, StateOfAnotherRankCountIsRefused) {
  SystemSampler two({15}, {1}, {1.0}, 5, 2);
  SystemSampler one({15}, {1}, {1.0}, 5, 1);
  EXPECT_NE(mlip::test::error_of([&] { one.set_state(two.state()); }).find("16 frames per pass"), std::string::npos);
}

}  // namespace
