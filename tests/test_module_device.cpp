// models::move_module against Module::to: every tensor of a module, plain attributes and
// submodules' included, ends on the target device, and parameters keep their identity. The
// CPU case moves to PyTorch's "meta" device; the CUDA case skips where no device is visible.
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/script.h>

#include "models/module_device.h"

namespace {

/// A model's statistics as plain tensor attributes, one in a submodule, and a number.
torch::jit::Module make_statistics_module() {
  torch::jit::Module inner("Inner");
  inner.register_attribute("statistic", c10::TensorType::get(), torch::ones({3}, torch::kFloat64));
  torch::jit::Module outer("Outer");
  outer.register_attribute("scale", c10::TensorType::get(), torch::ones({2}, torch::kFloat32));
  outer.register_attribute("cutoff", c10::FloatType::get(), 3.5);
  outer.register_module("inner", inner);
  return outer;
}

// PyTorch's "meta" device (shapes without storage) stands in for a GPU: Module::to cannot move
// parameters there (set_data refuses the change of tensor type), but plain attributes move.
TEST(MoveModule, MovesPlainTensorAttributesThatModuleToLeavesBehind) {
  const torch::Device meta(torch::kMeta);
  auto module = make_statistics_module();
  module.to(meta);
  EXPECT_TRUE(module.attr("scale").toTensor().device().is_cpu()) << "what Module::to alone does";
  mlip::models::move_module(module, meta);
  EXPECT_TRUE(module.attr("scale").toTensor().is_meta());
  EXPECT_TRUE(module.attr("inner").toModule().attr("statistic").toTensor().is_meta());
  EXPECT_EQ(module.attr("scale").toTensor().scalar_type(), torch::kFloat32);
  EXPECT_DOUBLE_EQ(module.attr("cutoff").toDouble(), 3.5);
}

TEST(MoveModule, MovesEveryTensorToCudaAndKeepsParameters) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible (or this build has no CUDA)";
  auto module = make_statistics_module();
  module.register_parameter("weight", torch::zeros({2, 2}).requires_grad_(), false);
  module.register_buffer("counts", torch::zeros({4}, torch::kInt64));
  const torch::Tensor weight = module.attr("weight").toTensor();
  mlip::models::move_module(module, torch::kCUDA);
  for (const auto& a : module.named_attributes(true))
    if (a.value.isTensor()) EXPECT_TRUE(a.value.toTensor().is_cuda()) << a.name << " is on " << a.value.toTensor().device();
  // Moved in place, as Module::to does: a reference taken before (an optimiser's) sees the move.
  EXPECT_TRUE(weight.is_cuda());
  EXPECT_TRUE(module.attr("weight").toTensor().is_same(weight));
  mlip::models::move_module(module, torch::kCPU);
  for (const auto& a : module.named_attributes(true))
    if (a.value.isTensor()) EXPECT_TRUE(a.value.toTensor().device().is_cpu()) << a.name << " is on " << a.value.toTensor().device();
}

}  // namespace
