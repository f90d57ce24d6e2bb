#include "models/equivariant/edge_forces.h"

#include <torch/csrc/autograd/custom_function.h>

#include "error.h"
#include "models/kernels/host_tensor.h"

namespace mlip::models {
namespace {

/// The tables' tensors contiguous (the host loops read them by pointer).
EdgeGeometryTables contiguous(const EdgeGeometryTables& t) {
  EdgeGeometryTables c = t;
  for (auto* x : {&c.basis_jacobian, &c.y_jacobian, &c.pair_edge, &c.i, &c.j, &c.d, &c.edge_frame})
    if (x->defined()) *x = x->contiguous();
  return c;
}

/// ∂E/∂d_e [E, 3] (LibTorch operations).
torch::Tensor edge_gradient_ops(const torch::Tensor& gb, const torch::Tensor& gy, const EdgeGeometryTables& t) {
  return (gy.unsqueeze(2) * t.y_jacobian).sum(1).index_add(0, t.pair_edge, (gb.unsqueeze(2) * t.basis_jacobian).sum(1));
}

std::pair<torch::Tensor, torch::Tensor> forward_ops(const torch::Tensor& gb, const torch::Tensor& gy,
                                                    const EdgeGeometryTables& t) {
  const auto de = edge_gradient_ops(gb, gy, t);
  const auto forces = torch::zeros({t.frames * t.atoms, 3}, de.options()).index_add(0, t.i, de).index_add(0, t.j, -de);
  const auto virial = -torch::zeros({t.frames, 3, 3}, de.options()).index_add(0, t.edge_frame, t.d.unsqueeze(2) * de.unsqueeze(1));
  return {forces, virial};
}

std::pair<torch::Tensor, torch::Tensor> backward_ops(const torch::Tensor& gf, const torch::Tensor& gv,
                                                     const EdgeGeometryTables& t) {
  // ∂/∂(∂E/∂d_e)[b] = gF[i_e][b] - gF[j_e][b] - Σ_a gV[frame_e][a][b] d_e[a].
  auto gde = gf.index_select(0, t.i) - gf.index_select(0, t.j);
  gde = gde - (gv.index_select(0, t.edge_frame) * t.d.unsqueeze(2)).sum(1);
  const auto g_y = (t.y_jacobian * gde.unsqueeze(1)).sum(2);
  const auto g_basis = (t.basis_jacobian * gde.index_select(0, t.pair_edge).unsqueeze(1)).sum(2);
  return {g_basis, g_y};
}

template <typename T>
void forward_host(const torch::Tensor& gb_t, const torch::Tensor& gy_t, const EdgeGeometryTables& t,
                  torch::Tensor& forces_t, torch::Tensor& virial_t) {
  const int64_t E = t.i.size(0), Q = t.pair_edge.size(0), B = gb_t.size(1), Y = gy_t.size(1);
  const T *gb = gb_t.data_ptr<T>(), *gy = gy_t.data_ptr<T>(), *bj = t.basis_jacobian.data_ptr<T>(),
          *yj = t.y_jacobian.data_ptr<T>(), *d = t.d.data_ptr<T>();
  const int64_t *pe = t.pair_edge.data_ptr<int64_t>(), *ci = t.i.data_ptr<int64_t>(), *nj = t.j.data_ptr<int64_t>(),
                *fr = t.edge_frame.data_ptr<int64_t>();
  std::vector<T> de(size_t(E * 3), T(0));
  for (int64_t e = 0; e < E; ++e)
    for (int64_t k = 0; k < Y; ++k)
      for (int64_t c = 0; c < 3; ++c) de[size_t(e * 3 + c)] += gy[e * Y + k] * yj[(e * Y + k) * 3 + c];
  for (int64_t q = 0; q < Q; ++q) {
    T part[3] = {0, 0, 0};
    for (int64_t k = 0; k < B; ++k)
      for (int64_t c = 0; c < 3; ++c) part[c] += gb[q * B + k] * bj[(q * B + k) * 3 + c];
    for (int64_t c = 0; c < 3; ++c) de[size_t(pe[q] * 3 + c)] += part[c];
  }
  T *f = forces_t.data_ptr<T>(), *v = virial_t.data_ptr<T>();
  for (int64_t e = 0; e < E; ++e)
    for (int64_t c = 0; c < 3; ++c) f[ci[e] * 3 + c] += de[size_t(e * 3 + c)];
  for (int64_t e = 0; e < E; ++e)
    for (int64_t c = 0; c < 3; ++c) f[nj[e] * 3 + c] -= de[size_t(e * 3 + c)];
  for (int64_t e = 0; e < E; ++e)
    for (int64_t a = 0; a < 3; ++a)
      for (int64_t b = 0; b < 3; ++b) v[fr[e] * 9 + a * 3 + b] -= d[e * 3 + a] * de[size_t(e * 3 + b)];
}

template <typename T>
void backward_host(const torch::Tensor& gf_t, const torch::Tensor& gv_t, const EdgeGeometryTables& t,
                   torch::Tensor& g_basis_t, torch::Tensor& g_y_t) {
  const int64_t E = t.i.size(0), Q = t.pair_edge.size(0), B = g_basis_t.size(1), Y = g_y_t.size(1);
  const T *gf = gf_t.data_ptr<T>(), *gv = gv_t.data_ptr<T>(), *bj = t.basis_jacobian.data_ptr<T>(),
          *yj = t.y_jacobian.data_ptr<T>(), *d = t.d.data_ptr<T>();
  const int64_t *pe = t.pair_edge.data_ptr<int64_t>(), *ci = t.i.data_ptr<int64_t>(), *nj = t.j.data_ptr<int64_t>(),
                *fr = t.edge_frame.data_ptr<int64_t>();
  std::vector<T> gde(size_t(E * 3));
  for (int64_t e = 0; e < E; ++e)
    for (int64_t b = 0; b < 3; ++b) {
      T s = gf[ci[e] * 3 + b] - gf[nj[e] * 3 + b];
      for (int64_t a = 0; a < 3; ++a) s -= gv[fr[e] * 9 + a * 3 + b] * d[e * 3 + a];
      gde[size_t(e * 3 + b)] = s;
    }
  T *gy = g_y_t.data_ptr<T>(), *gb = g_basis_t.data_ptr<T>();
  for (int64_t e = 0; e < E; ++e)
    for (int64_t k = 0; k < Y; ++k) {
      const T* j = yj + (e * Y + k) * 3;
      gy[e * Y + k] = j[0] * gde[size_t(e * 3)] + j[1] * gde[size_t(e * 3 + 1)] + j[2] * gde[size_t(e * 3 + 2)];
    }
  for (int64_t q = 0; q < Q; ++q)
    for (int64_t k = 0; k < B; ++k) {
      const T* j = bj + (q * B + k) * 3;
      const T* g = gde.data() + pe[q] * 3;
      gb[q * B + k] = j[0] * g[0] + j[1] * g[1] + j[2] * g[2];
    }
}

class EdgeForces : public torch::autograd::Function<EdgeForces> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& gb,
                                                const torch::Tensor& gy, const EdgeGeometryTables* tables) {
    const EdgeGeometryTables t = contiguous(*tables);
    ctx->saved_data["tables"] = std::vector<torch::Tensor>{t.basis_jacobian, t.y_jacobian, t.pair_edge, t.i, t.j, t.d,
                                                           t.edge_frame};
    ctx->saved_data["frames"] = t.frames;
    ctx->saved_data["atoms"] = t.atoms;
    if (!on_host(gy)) {
      const auto [forces, virial] = forward_ops(gb, gy, t);
      return {forces, virial};
    }
    auto forces = torch::zeros({t.frames * t.atoms, 3}, gy.options());
    auto virial = torch::zeros({t.frames, 3, 3}, gy.options());
    const auto gbc = gb.contiguous(), gyc = gy.contiguous();
    if (gy.scalar_type() == torch::kFloat64) forward_host<double>(gbc, gyc, t, forces, virial);
    else forward_host<float>(gbc, gyc, t, forces, virial);
    return {forces, virial};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    if (torch::GradMode::is_enabled())
      throw Error("edge forces: first derivatives only; a second was asked for");
    const auto saved = ctx->saved_data["tables"].toTensorVector();
    EdgeGeometryTables t{saved[0], saved[1], saved[2], saved[3], saved[4], saved[5], saved[6],
                         ctx->saved_data["frames"].toInt(), ctx->saved_data["atoms"].toInt()};
    torch::autograd::variable_list out(3);  // grad_basis, grad_y, tables
    if (!grads[0].defined() && !grads[1].defined()) return out;
    const auto opts = t.d.options();
    const auto gf = (grads[0].defined() ? grads[0] : torch::zeros({t.frames * t.atoms, 3}, opts)).contiguous();
    const auto gv = (grads[1].defined() ? grads[1] : torch::zeros({t.frames, 3, 3}, opts)).contiguous();
    if (!on_host(gf)) {
      const auto [g_basis, g_y] = backward_ops(gf, gv, t);
      out[0] = g_basis, out[1] = g_y;
      return out;
    }
    auto g_basis = torch::empty({t.basis_jacobian.size(0), t.basis_jacobian.size(1)}, opts);
    auto g_y = torch::empty({t.y_jacobian.size(0), t.y_jacobian.size(1)}, opts);
    if (gf.scalar_type() == torch::kFloat64) backward_host<double>(gf, gv, t, g_basis, g_y);
    else backward_host<float>(gf, gv, t, g_basis, g_y);
    out[0] = g_basis, out[1] = g_y;
    return out;
  }
};

}  // namespace

std::pair<torch::Tensor, torch::Tensor> edge_forces(const torch::Tensor& grad_basis, const torch::Tensor& grad_y,
                                                    const EdgeGeometryTables& tables) {
  const int64_t E = tables.i.size(0), Q = tables.pair_edge.size(0);
  if (grad_y.dim() != 2 || grad_y.size(0) != E || tables.y_jacobian.size(0) != E ||
      tables.y_jacobian.size(1) != grad_y.size(1) || grad_basis.dim() != 2 || grad_basis.size(0) != Q ||
      tables.basis_jacobian.size(0) != Q || tables.basis_jacobian.size(1) != grad_basis.size(1) ||
      tables.edge_frame.size(0) != E || tables.d.size(0) != E)
    throw Error("edge forces: expected grad_basis [" + std::to_string(Q) + ", B] and grad_y [" + std::to_string(E) +
                ", Y] matching the Jacobians, got " + c10::str(grad_basis.sizes()) + " and " +
                c10::str(grad_y.sizes()));
  const auto out = EdgeForces::apply(grad_basis, grad_y, &tables);
  return {out[0], out[1]};
}

}  // namespace mlip::models
