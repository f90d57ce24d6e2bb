// Host data copied to a device without waiting (src/models/host_to_device.h): the copy holds the
// host's values (on a device whatever the host does to them afterwards), copy_ in the
// destination's dtype; on the CPU the tensor itself, as `.to`. On a GPU (label gpu) the copies make the host wait for
// nothing (train/host_wait_check.h), where `.to(device)` of the same pageable tensor does.
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <type_traits>

#include "models/host_to_device.h"
#include "train/host_wait_check.h"

namespace {

template <typename T>
class HostToDeviceTest : public ::testing::Test {};
using Dtypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(HostToDeviceTest, Dtypes);

torch::ScalarType dtype_of(bool is_double) { return is_double ? torch::kFloat64 : torch::kFloat32; }

/// The checks on `device`: values, the host changed afterwards, a strided source, copy_ with a
/// dtype conversion, int64 index tables.
void check_on(const torch::Device& device, torch::ScalarType dtype) {
  auto host = torch::arange(0, 1000, torch::TensorOptions().dtype(dtype)).mul_(0.37);
  const auto expected = host.clone();
  auto copy = mlip::models::to_device_without_waiting(host, device);
  if (!device.is_cpu()) host.fill_(-1);  // a copy: taken from the host's values at the call
  EXPECT_EQ(copy.device(), device);
  EXPECT_EQ(copy.scalar_type(), dtype);
  EXPECT_TRUE(torch::equal(copy.cpu(), expected));

  const auto strided = expected.reshape({100, 10}).t();
  EXPECT_TRUE(torch::equal(mlip::models::to_device_without_waiting(strided, device).cpu(), strided));

  auto index = torch::arange(0, 77, torch::kInt64);
  EXPECT_TRUE(torch::equal(mlip::models::to_device_without_waiting(index, device).cpu(), index));

  auto into = torch::zeros({1000}, torch::TensorOptions().dtype(torch::kFloat64).device(device));
  mlip::models::copy_without_waiting(into, expected);
  EXPECT_TRUE(torch::equal(into.cpu(), expected.to(torch::kFloat64)));
}

TYPED_TEST(HostToDeviceTest, CopiesTheHostsValuesOnTheCpu) {
  check_on(torch::kCPU, dtype_of(std::is_same_v<TypeParam, double>));
}

TYPED_TEST(HostToDeviceTest, CopiesTheHostsValuesOnCuda) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible: the CUDA copies are not checked here";
  check_on(torch::Device(torch::kCUDA, 0), dtype_of(std::is_same_v<TypeParam, double>));
}

TYPED_TEST(HostToDeviceTest, OnCudaTheHostWaitsForNothing) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible: the host's waits are not checked here";
  const torch::Device cuda(torch::kCUDA, 0);
  const auto dtype = dtype_of(std::is_same_v<TypeParam, double>);
  const auto host = torch::rand({4096}, torch::TensorOptions().dtype(dtype));
  auto into = torch::zeros({4096}, torch::TensorOptions().dtype(dtype).device(cuda));
  // Work queued before the copies: the plain copy would wait for it.
  auto busy = torch::rand({2048, 2048}, torch::TensorOptions().dtype(dtype).device(cuda));
  for (int k = 0; k < 4; ++k) busy = busy.matmul(busy).tanh_();
  {
    mlip::train::HostWaitCheck no_waits;
    EXPECT_NO_THROW(mlip::models::to_device_without_waiting(host, cuda));
    EXPECT_NO_THROW(mlip::models::copy_without_waiting(into, host));
    // The check itself: a plain copy of pageable memory is a wait.
    EXPECT_ANY_THROW(host.to(cuda));
  }
  EXPECT_TRUE(torch::equal(into.cpu(), host));
}

}  // namespace
