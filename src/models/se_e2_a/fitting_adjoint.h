#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "models/kernels/layer_rule.h"

namespace mlip::models {

/// One se_e2_a fitting net (docs/se_e2_a.md: hidden layers of the layer rule, then a linear output
/// E = x_L wout + bout) on a set of rows, with dE/dx carried along, and the exact adjoint of
/// both (docs/training_path.md, step 3). The rows are atoms of one type, gathered by index from
/// [rows, width] arrays of the whole batch.
///
/// Each layer is one GEMM over all the rows (threaded by the BLAS), followed by its element-wise
/// steps in one loop; no tensor is created. The weight gradients of both sweeps of the adjoint
/// are one GEMM per layer, [dL/dg; x]^T [c; dL/dz] over 2n rows. Column sums run in row order,
/// so the result does not depend on the number of threads.
template <typename R>
class FittingAdjoint {
 public:
  /// The parameters: w[l] [in, out], b[l] [out], idt[l] [out] (undefined without resnet_dt),
  /// wout [width, 1], bout [1]; contiguous tensors of dtype R, shared with the module.
  /// backward() adds to their .grad() (created as zeros when undefined). With model.long_range
  /// also wq [width, 1] and bq [1], the charge output (docs/long_range.md "The charge heads");
  /// undefined without.
  struct Params {
    std::vector<at::Tensor> w, b, idt;
    at::Tensor wout, bout;
    at::Tensor wq, bq;
  };

  /// layers: the hidden layers (layer_rule.h).
  explicit FittingAdjoint(std::vector<Layer> layers) : layers_(std::move(layers)) {}

  /// With the parameters p, for r < n: e[index[r]] = E(x_r) (without the type's energy bias) and
  /// dedx[index[r] * in0 + k] = dE/dx_r[k], with x_r = x[index[r] * in0 + k], in0 = layers[0].in.
  /// Keeps the activations for backward(), and `index`, which must stay valid until then.
  ///
  /// With the charge output (p.wq defined): `q` (when not null) gets q[index[r]] = x_L wq + bq,
  /// the raw charge; `seed` (when not null) weighs it into the derivative, dedx = d(E + seed ·
  /// q)/dx with seed[index[r]] of each row: ∂E_long/∂q̃ from the long-range term, for an MD step
  /// (backward() is then refused: the training path with charges is the device-generic one).
  void forward(const Params& p, const R* x, const int64_t* index, int64_t n, R* e, R* dedx, R* q = nullptr,
               const R* seed = nullptr);

  /// After forward(): given gbar = dL/d(dE/dx) and ebar = dL/dE at the same rows (same layout
  /// as dedx and e), writes dL/dx into xbar (same layout as x) and adds dL/d(parameters) to the
  /// parameters' .grad(). The parameters must not have changed since forward().
  void backward(const R* gbar, const R* ebar, R* xbar);

 private:
  std::vector<Layer> layers_;
  std::vector<at::Tensor> w_, b_, idt_;  // of the last forward()
  at::Tensor wout_, bout_;
  bool seeded_ = false;  // the last forward() had charge seeds: no backward()
  const int64_t* index_ = nullptr;
  int64_t n_ = 0;
  // s_[l] [2n, in_l]: rows n.. hold the layer input x_l (forward), rows ..n dL/d(dE/dx_l)
  // (backward). t_[l] [2n, out_l]: rows ..n hold c_l = dE/dz_l (forward), rows n.. dL/dz_l.
  std::vector<std::vector<R>> s_, t_;
  std::vector<std::vector<R>> y_;   // [n, out_l] tanh(z_l)
  std::vector<std::vector<R>> g_;   // [n, in_l] dE/dx_l; g_[L] [n, width] holds wout per row
  std::vector<std::vector<R>> yb_;  // [n, out_l] dL/dy_l from the first sweep of the adjoint
  std::vector<R> xl_;               // [n, width] output of the last hidden layer
  std::vector<R> top_, xbar_, xnext_;  // backward() scratch
};

}  // namespace mlip::models
