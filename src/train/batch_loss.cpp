#include "train/batch_loss.h"

#include "error.h"

namespace mlip::train {

namespace {

/// batch_loss with prefactors of type P: double (numbers in the kernels) or a zero-dimensional
/// tensor (read from memory); the same operations either way. docs/training.md "Loss".
template <typename P>
BatchLoss loss_of(const models::Prediction& prediction, const BatchLabels& labels, const P& pe, const P& pf,
                  const P& pv, const P& pq, int64_t natoms) {
  const double n = double(natoms), frames = double(labels.energy.size(0));
  const auto zero = torch::zeros({}, labels.energy.options());
  const auto de = prediction.energy - labels.energy;
  const auto& w = labels.weights;
  auto loss = pe * (w * de * de).mean() / n;
  const auto e2 = (de * de).sum() / (n * n);
  auto f2 = zero, v2 = zero, q2 = zero;
  if (labels.forces.defined()) {
    const auto df = prediction.forces.to(torch::kFloat64) - labels.forces;
    loss = loss + pf * (w * (df * df).sum({1, 2})).mean() / (3 * n);
    f2 = (df * df).sum();
  }
  if (labels.virial.defined()) {
    const auto dv = prediction.virial.to(torch::kFloat64).reshape({-1, 9}) - labels.virial;
    loss = loss + pv * (w * (dv * dv).mean(1)).mean() / n;
    v2 = (dv * dv).mean(1).sum() / (n * n);
  }
  if (labels.charges.defined()) {
    // docs/long_range.md "Charge labels": the mean square charge error of each frame's atoms.
    if (!prediction.charges.defined())
      throw Error("the loss has charge labels (loss.start_pref_q), but the model predicts no charges");
    const auto dq = prediction.charges.to(torch::kFloat64) - labels.charges;
    loss = loss + pq * (w * (dq * dq).mean(1)).mean();
    q2 = (dq * dq).sum();
  }
  return {loss, torch::stack({loss.detach() * frames, e2.detach(), f2.detach(), v2.detach(), q2.detach()})};
}

}  // namespace

BatchLoss batch_loss(const models::Prediction& prediction, const BatchLabels& labels, double prefactor_e,
                     double prefactor_f, double prefactor_v, double prefactor_q, int64_t natoms) {
  return loss_of(prediction, labels, prefactor_e, prefactor_f, prefactor_v, prefactor_q, natoms);
}

BatchLoss batch_loss(const models::Prediction& prediction, const BatchLabels& labels, const torch::Tensor& prefactors,
                     int64_t natoms) {
  if (labels.charges.defined()) throw Error("batch_loss: charge labels in a static step (a model with charges has none)");
  return loss_of(prediction, labels, prefactors[0], prefactors[1], prefactors[2], prefactors[0], natoms);
}

}  // namespace mlip::train
