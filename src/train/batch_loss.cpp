#include "train/batch_loss.h"

namespace mlip::train {

BatchLoss batch_loss(const models::Prediction& prediction, const BatchLabels& labels, const torch::Tensor& prefactors,
                     int64_t natoms) {
  const double n = double(natoms), frames = double(labels.energy.size(0));
  const auto zero = torch::zeros({}, labels.energy.options());
  const auto de = prediction.energy - labels.energy;
  const auto& w = labels.weights;
  auto loss = prefactors[0] * (w * de * de).mean() / n;
  const auto e2 = (de * de).sum() / (n * n);
  auto f2 = zero, v2 = zero;
  if (labels.forces.defined()) {
    const auto df = prediction.forces.to(torch::kFloat64) - labels.forces;
    loss = loss + prefactors[1] * (w * (df * df).sum({1, 2})).mean() / (3 * n);
    f2 = (df * df).sum();
  }
  if (labels.virial.defined()) {
    const auto dv = prediction.virial.to(torch::kFloat64).reshape({-1, 9}) - labels.virial;
    loss = loss + prefactors[2] * (w * (dv * dv).mean(1)).mean() / n;
    v2 = (dv * dv).mean(1).sum() / (n * n);
  }
  return {loss, torch::stack({loss.detach() * frames, e2.detach(), f2.detach(), v2.detach()})};
}

}  // namespace mlip::train
