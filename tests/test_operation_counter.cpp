#include <gtest/gtest.h>
#include <torch/script.h>

#include <thread>

#include "error.h"
#include "train/operation_counter.h"

namespace {

using mlip::train::OperationCounter;

/// Adds two small tensors `n` times.
void add_times(int n) {
  const torch::Tensor a = torch::ones({3}), b = torch::ones({3});
  for (int k = 0; k < n; ++k) (void)torch::add(a, b);
}

TEST(OperationCounter, CountsTheCallsOfItsThreadInProportion) {
  OperationCounter counter;
  const torch::Tensor a = torch::ones({3}), b = torch::ones({3});
  EXPECT_GE(counter.counts().operators, 2);  // the two tensors made
  int64_t before = counter.counts().operators;
  (void)torch::add(a, b);
  const int64_t one = counter.counts().operators - before;
  EXPECT_GE(one, 1);
  before = counter.counts().operators;
  for (int k = 0; k < 10; ++k) (void)torch::add(a, b);
  EXPECT_EQ(counter.counts().operators - before, 10 * one);
  EXPECT_EQ(counter.counts().autograd_nodes, 0);
}

TEST(OperationCounter, AnOperatorsOwnCallsAreNotCounted) {
  // The CPU's batched product selects each of the 64 matrices (a select and an as_strided
  // each); a GPU's is one call. Counted: the one call made here.
  const torch::Tensor a = torch::rand({64, 2, 3}), b = torch::rand({64, 3, 2});
  OperationCounter counter;
  (void)torch::bmm(a, b);
  EXPECT_EQ(counter.counts().operators, 1);
  (void)torch::matmul(a, b);  // a composite operator: counted once as well
  EXPECT_EQ(counter.counts().operators, 2);
}

TEST(OperationCounter, DeviceReadsAreCountedWhereverTheyAre) {
  const torch::Tensor x = torch::tensor({0.0, 1.0, 2.0, 0.0});
  OperationCounter counter;
  (void)x.sum().item<double>();  // a scalar read
  EXPECT_EQ(counter.counts().device_reads, 1);
  (void)x.nonzero();  // an output size read from the device
  EXPECT_EQ(counter.counts().device_reads, 2);
  (void)x.masked_select(x > 0);  // its nonzero inside is the one read
  EXPECT_GE(counter.counts().device_reads, 3);
  const int64_t reads = counter.counts().device_reads;
  (void)(x * 2).sum();  // no read
  EXPECT_EQ(counter.counts().device_reads, reads);
}

TEST(OperationCounter, OtherThreadsAreNotCounted) {
  OperationCounter counter;
  const int64_t before = counter.counts().operators;
  std::thread worker([] { add_times(50); });
  worker.join();
  EXPECT_EQ(counter.counts().operators, before);
}

TEST(OperationCounter, BackwardPassesCountTheirNodes) {
  OperationCounter counter;
  const torch::Tensor x = torch::rand({4}, torch::kFloat64).requires_grad_();
  const torch::Tensor y = (x * x).sin().sum();
  const int64_t operators_before = counter.counts().operators;
  EXPECT_EQ(counter.counts().autograd_nodes, 0);
  y.backward();
  // SumBackward, SinBackward, MulBackward and the gradient's accumulation at least; each node's
  // own operator calls are counted too.
  EXPECT_GE(counter.counts().autograd_nodes, 3);
  EXPECT_GT(counter.counts().operators, operators_before);
}

TEST(OperationCounter, OneAtATimeAndNothingCountedAfterwards) {
  int64_t counted = 0;
  {
    OperationCounter counter;
    EXPECT_THROW(OperationCounter second, mlip::Error);
    add_times(5);
    counted = counter.counts().operators;
    EXPECT_GE(counted, 5);
  }
  OperationCounter fresh;  // starts at zero, and the first one's callback is gone
  EXPECT_EQ(fresh.counts().operators, 0);
  add_times(5);
  EXPECT_EQ(fresh.counts().operators, counted);
}

}  // namespace
