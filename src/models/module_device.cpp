#include "models/module_device.h"

#include <set>
#include <string>

namespace mlip::models {

namespace {

void move_plain_tensors(torch::jit::Module& module, const torch::Device& device) {
  std::set<std::string> managed;  // parameters and buffers: Module::to has moved them
  for (const auto& p : module.named_parameters(false)) managed.insert(p.name);
  for (const auto& b : module.named_buffers(false)) managed.insert(b.name);
  for (const auto& a : module.named_attributes(false)) {
    if (!a.value.isTensor() || managed.count(a.name)) continue;
    const at::Tensor t = a.value.toTensor();
    if (t.defined() && t.device() != device) module.setattr(a.name, t.to(device));
  }
  for (auto child : module.children()) move_plain_tensors(child, device);
}

}  // namespace

void move_module(torch::jit::Module& module, const torch::Device& device) {
  module.to(device);
  move_plain_tensors(module, device);
}

}  // namespace mlip::models
