#include "models/model.h"

#include <torch/csrc/autograd/autograd.h>

#include "error.h"

namespace mlip::models {

std::vector<torch::Tensor> Model::pack(const SystemAtoms&, const std::vector<const FrameInput*>&) {
  throw Error("model " + settings().type + ": its batches have no static shapes (docs/device.md \"Static shapes\")");
}

Prediction Model::predict_packed(const SystemAtoms&, const std::vector<torch::Tensor>&, bool) {
  throw Error("model " + settings().type + ": its batches have no static shapes (docs/device.md \"Static shapes\")");
}

void backward_through_graph(const Prediction& outputs, const torch::Tensor& grad_energy,
                            const torch::Tensor& grad_forces, const torch::Tensor& grad_virial,
                            const torch::Tensor& grad_charges, const std::vector<torch::Tensor>& inputs) {
  std::vector<torch::Tensor> roots, grads;
  const std::pair<const torch::Tensor*, const torch::Tensor*> parts[] = {
      {&outputs.energy, &grad_energy},
      {&outputs.forces, &grad_forces},
      {&outputs.virial, &grad_virial},
      {&outputs.charges, &grad_charges}};
  for (const auto& [output, grad] : parts)
    if (grad->defined() && output->defined() && output->requires_grad()) {
      roots.push_back(*output);
      grads.push_back(grad->to(output->scalar_type()).reshape(output->sizes()));
    }
  if (!roots.empty()) torch::autograd::backward(roots, grads, c10::nullopt, false, inputs);
}

}  // namespace mlip::models
