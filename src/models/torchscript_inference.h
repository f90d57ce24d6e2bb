#pragma once

#include <torch/script.h>

#include <string>

#include "models/inference.h"

namespace mlip::models {

/// A frozen model's TorchScript forward(data) (docs/deploy.md "Interface") as an Inference: any
/// model, on the module's device, with autograd for the forces. It evaluates an AtomGraph given
/// by positions (AtomGraph::positions, cell and shifts; the vectors are not read); `mlip test`
/// and the MD layer both call it.
class TorchScriptInference : public Inference {
 public:
  /// module: the frozen module, already on `device`; dtype: its parameters' (kFloat32 or
  /// kFloat64); cutoff: its r_max, Å.
  TorchScriptInference(torch::jit::Module module, torch::Device device, torch::Dtype dtype, double cutoff);

  std::string describe() const override { return "TorchScript forward"; }
  double cutoff() const override { return cutoff_; }
  InferenceInputs inputs() const override;
  InferenceResult evaluate(const Request& request) override;

 private:
  torch::jit::Module module_;
  torch::Device device_;
  torch::Dtype dtype_;
  double cutoff_;
};

}  // namespace mlip::models
