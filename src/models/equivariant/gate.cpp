#include "models/equivariant/gate.h"

#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <string>

#include <ATen/Parallel.h>

#include "error.h"
#include "models/equivariant/gate_rule.h"
#include "models/kernels/device_kernels.h"
#include "models/kernels/fast_tanh.h"
#include "models/kernels/host_tensor.h"

#ifdef MLIP_HAVE_CUDA_KERNELS
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "models/equivariant/gate_cuda.h"
#endif

namespace mlip::models {
namespace {

// Notation (docs/equivariant.md "The training path"): per atom, a = g[:f] (the scalars'
// channels), b_q = g[f(q+1) : f(q+2)] (gate q), σ the logistic function, σ′ = σ(1 − σ),
// σ″ = σ′(1 − 2σ), silu′(a) = σ(1 + a(1 − σ)), silu″(a) = σ′(2 + a(1 − 2σ)).
//
//   forward:   s = a σ(a),  v_q = z_q σ(b_q)
//   backward (incoming gs, gv_q):
//     ∂/∂a = gs silu′(a),  ∂/∂b_q = c_q σ′(b_q) with c_q = Σ_m gv_q[m] z_q[m],  ∂/∂z_q = gv_q σ(b_q)
//   its backward (incoming ha, hb_q for ∂/∂g, hz_q for ∂/∂z_q):
//     ∂/∂a = ha gs silu″(a),  ∂/∂gs = ha silu′(a),
//     ∂/∂b_q = hb_q c_q σ″(b_q) + k_q σ′(b_q) with k_q = Σ_m hz_q[m] gv_q[m],
//     ∂/∂z_q = hb_q σ′(b_q) gv_q,  ∂/∂gv_q = hb_q σ′(b_q) z_q + hz_q σ(b_q).

/// The shapes of one call: n atoms, f channels, the gated irreps' components.
struct GateShape {
  int64_t n = 0, f = 0;
  std::vector<int64_t> components;
  int64_t width() const { return f * (1 + int64_t(components.size())); }
};

GateShape shape_of(const torch::Tensor& g, const std::vector<torch::Tensor>& gated) {
  GateShape s;
  const int64_t q = int64_t(gated.size());
  if (g.dim() != 3 || g.size(1) != 1 || g.size(2) % (1 + q) != 0)
    throw Error("gate: expected g [n, 1, f·(1+" + std::to_string(q) + ")], got " + c10::str(g.sizes()));
  s.n = g.size(0);
  s.f = g.size(2) / (1 + q);
  for (const auto& z : gated) {
    if (z.dim() != 3 || z.size(0) != s.n || z.size(2) != s.f)
      throw Error("gate: expected each gated irrep [" + std::to_string(s.n) + ", 2l+1, " + std::to_string(s.f) +
                  "], got " + c10::str(z.sizes()));
    if (z.scalar_type() != g.scalar_type())
      throw Error("gate: g and the gated irreps must have one dtype, got " +
                  std::string(c10::toString(g.scalar_type())) + " and " + std::string(c10::toString(z.scalar_type())));
    s.components.push_back(z.size(1));
  }
  return s;
}

template <typename T>
const T* in(const torch::Tensor& t) {
  return t.data_ptr<T>();
}

/// σ of every entry of g [n, F] (a scratch tensor).
torch::Tensor sigmoid_host(const torch::Tensor& g) {
  auto s = torch::empty_like(g);
  if (g.scalar_type() == torch::kFloat64) sigmoid_of(g.data_ptr<double>(), s.data_ptr<double>(), g.numel());
  else sigmoid_of(g.data_ptr<float>(), s.data_ptr<float>(), g.numel());
  return s;
}

// ---- the three stages on the host (contiguous operands) ----

template <typename T>
void forward_host(const GateShape& sh, const torch::Tensor& g, const std::vector<torch::Tensor>& z,
                  std::vector<torch::Tensor>& out) {
  const int64_t F = sh.width(), f = sh.f;
  const auto sig_t = sigmoid_host(g);
  const T *gp = in<T>(g), *sig = in<T>(sig_t);
  T* s = out[0].data_ptr<T>();
  for (int64_t r = 0; r < sh.n; ++r)
    for (int64_t c = 0; c < f; ++c) s[r * f + c] = gp[r * F + c] * sig[r * F + c];
  for (size_t q = 0; q < z.size(); ++q) {
    const int64_t M = sh.components[q], off = f * int64_t(q + 1);
    const T* zq = in<T>(z[q]);
    T* v = out[q + 1].data_ptr<T>();
    for (int64_t r = 0; r < sh.n; ++r)
      for (int64_t m = 0; m < M; ++m)
        for (int64_t c = 0; c < f; ++c) v[(r * M + m) * f + c] = zq[(r * M + m) * f + c] * sig[r * F + off + c];
  }
}

template <typename T>
void backward_host(const GateShape& sh, const torch::Tensor& g, const std::vector<torch::Tensor>& z,
                   const torch::Tensor& gs, const std::vector<torch::Tensor>& gv, std::vector<torch::Tensor>& out) {
  const int64_t F = sh.width(), f = sh.f;
  const auto sig_t = sigmoid_host(g);
  const T *gp = in<T>(g), *sig = in<T>(sig_t), *gsp = in<T>(gs);
  T* gg = out[0].data_ptr<T>();
  for (int64_t r = 0; r < sh.n; ++r)
    for (int64_t c = 0; c < f; ++c) {
      const T a = gp[r * F + c], sa = sig[r * F + c];
      gg[r * F + c] = gsp[r * f + c] * sa * (1 + a * (1 - sa));
    }
  for (size_t q = 0; q < z.size(); ++q) {
    const int64_t M = sh.components[q], off = f * int64_t(q + 1);
    const T *zq = in<T>(z[q]), *gvq = in<T>(gv[q]);
    T* gz = out[q + 1].data_ptr<T>();
    for (int64_t r = 0; r < sh.n; ++r) {
      T* cq = gg + r * F + off;
      for (int64_t c = 0; c < f; ++c) cq[c] = 0;
      for (int64_t m = 0; m < M; ++m)
        for (int64_t c = 0; c < f; ++c) {
          const int64_t k = (r * M + m) * f + c;
          cq[c] += gvq[k] * zq[k];
          gz[k] = gvq[k] * sig[r * F + off + c];
        }
      for (int64_t c = 0; c < f; ++c) {
        const T sb = sig[r * F + off + c];
        cq[c] *= sb * (1 - sb);
      }
    }
  }
}

/// out = {∂/∂g, ∂/∂z_q..., ∂/∂gs, ∂/∂gv_q...}; hg [n, 1, F] and hz_q are defined (zeros where
/// no gradient came in).
template <typename T>
void second_host(const GateShape& sh, const torch::Tensor& g, const std::vector<torch::Tensor>& z,
                 const torch::Tensor& gs, const std::vector<torch::Tensor>& gv, const torch::Tensor& hg,
                 const std::vector<torch::Tensor>& hz, std::vector<torch::Tensor>& out) {
  const int64_t F = sh.width(), f = sh.f;
  const size_t Q = z.size();
  const auto sig_t = sigmoid_host(g);
  const T *gp = in<T>(g), *sig = in<T>(sig_t), *gsp = in<T>(gs), *hgp = in<T>(hg);
  T *dg = out[0].data_ptr<T>(), *dgs = out[Q + 1].data_ptr<T>();
  for (int64_t r = 0; r < sh.n; ++r)
    for (int64_t c = 0; c < f; ++c) {
      const T a = gp[r * F + c], sa = sig[r * F + c], ha = hgp[r * F + c];
      dg[r * F + c] = ha * gsp[r * f + c] * sa * (1 - sa) * (2 + a * (1 - 2 * sa));
      dgs[r * f + c] = ha * sa * (1 + a * (1 - sa));
    }
  for (size_t q = 0; q < Q; ++q) {
    const int64_t M = sh.components[q], off = f * int64_t(q + 1);
    const T *zq = in<T>(z[q]), *gvq = in<T>(gv[q]), *hzq = in<T>(hz[q]);
    T *dz = out[q + 1].data_ptr<T>(), *dgv = out[Q + 2 + q].data_ptr<T>();
    for (int64_t r = 0; r < sh.n; ++r)
      for (int64_t c = 0; c < f; ++c) {
        const T sb = sig[r * F + off + c], d1 = sb * (1 - sb), d2 = d1 * (1 - 2 * sb), hb = hgp[r * F + off + c];
        T cq = 0, kq = 0;
        for (int64_t m = 0; m < M; ++m) {
          const int64_t k = (r * M + m) * f + c;
          cq += gvq[k] * zq[k];
          kq += hzq[k] * gvq[k];
          dz[k] = hb * d1 * gvq[k];
          dgv[k] = hb * d1 * zq[k] + hzq[k] * sb;
        }
        dg[r * F + off + c] = hb * cq * d2 + kq * d1;
      }
  }
}

// ---- the same on any device, as LibTorch operations ----

torch::Tensor part(const GateShape& sh, const torch::Tensor& g, size_t q) {  // q = 0: a; q ≥ 1: b_(q-1)
  return g.narrow(2, sh.f * int64_t(q), sh.f);
}

std::vector<torch::Tensor> forward_ops(const GateShape& sh, const torch::Tensor& g, const std::vector<torch::Tensor>& z) {
  std::vector<torch::Tensor> out = {at::silu(part(sh, g, 0))};
  for (size_t q = 0; q < z.size(); ++q) out.push_back(z[q] * torch::sigmoid(part(sh, g, q + 1)));
  return out;
}

std::vector<torch::Tensor> backward_ops(const GateShape& sh, const torch::Tensor& g, const std::vector<torch::Tensor>& z,
                                        const torch::Tensor& gs, const std::vector<torch::Tensor>& gv) {
  std::vector<torch::Tensor> gparts = {at::silu_backward(gs, part(sh, g, 0))}, out(1);
  for (size_t q = 0; q < z.size(); ++q) {
    const auto sb = torch::sigmoid(part(sh, g, q + 1));
    gparts.push_back((gv[q] * z[q]).sum(1, true) * sb * (1 - sb));
    out.push_back(gv[q] * sb);
  }
  out[0] = torch::cat(gparts, 2);
  return out;
}

std::vector<torch::Tensor> second_ops(const GateShape& sh, const torch::Tensor& g, const std::vector<torch::Tensor>& z,
                                      const torch::Tensor& gs, const std::vector<torch::Tensor>& gv,
                                      const torch::Tensor& hg, const std::vector<torch::Tensor>& hz) {
  const size_t Q = z.size();
  std::vector<torch::Tensor> out(2 * Q + 2), dg;
  const auto a = part(sh, g, 0), sa = torch::sigmoid(a), ha = part(sh, hg, 0);
  dg.push_back(ha * gs * sa * (1 - sa) * (2 + a * (1 - 2 * sa)));
  out[Q + 1] = ha * sa * (1 + a * (1 - sa));
  for (size_t q = 0; q < Q; ++q) {
    const auto sb = torch::sigmoid(part(sh, g, q + 1)), d1 = sb * (1 - sb), d2 = d1 * (1 - 2 * sb);
    const auto hb = part(sh, hg, q + 1);
    dg.push_back(hb * (gv[q] * z[q]).sum(1, true) * d2 + (hz[q] * gv[q]).sum(1, true) * d1);
    out[q + 1] = hb * d1 * gv[q];
    out[Q + 2 + q] = hb * d1 * z[q] + hz[q] * sb;
  }
  out[0] = torch::cat(dg, 2);
  return out;
}

std::vector<torch::Tensor> contiguous(std::vector<torch::Tensor> t) {
  for (auto& x : t) x = x.contiguous();
  return t;
}

// ---- the same by mlip's kernels: the CUDA kernels on a GPU, their host twin on the CPU ----

/// Whether mlip's device kernels take a call on g: they are on, the host loops are not, and the
/// call has at most kMostGated gated irreps (more take the LibTorch operations).
bool by_device_kernels(const torch::Tensor& g, const GateShape& sh) {
  if (on_host(g) || kernel_route(g.device()) != KernelRoute::kDeviceKernels ||
      sh.components.size() > size_t(kMostGated))
    return false;
  require_device_kernels("gate", g.device());
  return g.scalar_type() == torch::kFloat64 || g.scalar_type() == torch::kFloat32;
}

/// The operands and outputs of `stage` (gate_rule.h), every tensor contiguous; the inputs a
/// stage does not read are empty vectors or undefined.
struct GateTensors {
  torch::Tensor g, gs, hg;
  std::vector<torch::Tensor> z, gv, hz;
  std::vector<torch::Tensor> out;  // in the order the stage's dispatcher returns them
};

template <typename T>
void run_device_stage(GateStage stage, const GateShape& sh, const GateTensors& t) {
  GateRuleArgs<T> a;
  a.n = sh.n, a.f = sh.f, a.gated = int(sh.components.size());
  auto ptr = [](const torch::Tensor& x) -> const T* { return x.defined() ? x.data_ptr<T>() : nullptr; };
  a.g = ptr(t.g), a.gs = ptr(t.gs), a.hg = ptr(t.hg);
  const size_t Q = sh.components.size();
  for (size_t q = 0; q < Q; ++q) {
    a.components[q] = sh.components[q];
    a.z[q] = ptr(t.z[q]);
    if (!t.gv.empty()) a.gv[q] = ptr(t.gv[q]);
    if (!t.hz.empty()) a.hz[q] = ptr(t.hz[q]);
    a.out_z[q] = t.out[1 + q].data_ptr<T>();
    if (stage == GateStage::kSecond) a.out_gv[q] = t.out[Q + 2 + q].data_ptr<T>();
  }
  a.out_g = t.out[0].data_ptr<T>();
  if (stage == GateStage::kSecond) a.out_gs = t.out[Q + 1].data_ptr<T>();
  if (t.g.device().is_cpu()) {
    at::parallel_for(0, sh.n, 16, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = 0; c < sh.f; ++c) gate_stage_at(stage, a, r, c);
    });
    return;
  }
#ifdef MLIP_HAVE_CUDA_KERNELS
  const c10::cuda::CUDAGuard guard(t.g.device());
  launch_gate(stage, a, c10::cuda::getCurrentCUDAStream(t.g.device().index()).stream());
#endif
}

/// The stage by mlip's kernels, its outputs allocated as the host loops allocate theirs.
std::vector<torch::Tensor> device_stage(GateStage stage, const GateShape& sh, GateTensors t) {
  t.g = t.g.contiguous();
  if (t.gs.defined()) t.gs = t.gs.contiguous();
  if (t.hg.defined()) t.hg = t.hg.contiguous();
  t.z = contiguous(t.z), t.gv = contiguous(t.gv), t.hz = contiguous(t.hz);
  t.out = {stage == GateStage::kForward ? torch::empty({sh.n, 1, sh.f}, t.g.options()) : torch::empty_like(t.g)};
  for (const auto& x : t.z) t.out.push_back(torch::empty_like(x));
  if (stage == GateStage::kSecond) {
    t.out.push_back(torch::empty_like(t.gs));
    for (const auto& x : t.gv) t.out.push_back(torch::empty_like(x));
  }
  if (t.g.scalar_type() == torch::kFloat64)
    run_device_stage<double>(stage, sh, t);
  else
    run_device_stage<float>(stage, sh, t);
  return t.out;
}

// ---- dispatch ----

std::vector<torch::Tensor> forward_kernel(const GateShape& sh, const torch::Tensor& g, const std::vector<torch::Tensor>& z) {
  if (by_device_kernels(g, sh)) return device_stage(GateStage::kForward, sh, {g, {}, {}, z, {}, {}, {}});
  if (!on_host(g)) return forward_ops(sh, g, z);
  const auto gc = g.contiguous();
  const auto zc = contiguous(z);
  std::vector<torch::Tensor> out = {torch::empty({sh.n, 1, sh.f}, g.options())};
  for (const auto& x : zc) out.push_back(torch::empty_like(x));
  if (g.scalar_type() == torch::kFloat64) forward_host<double>(sh, gc, zc, out);
  else forward_host<float>(sh, gc, zc, out);
  return out;
}

std::vector<torch::Tensor> backward_kernel(const GateShape& sh, const torch::Tensor& g, const std::vector<torch::Tensor>& z,
                                           const torch::Tensor& gs, const std::vector<torch::Tensor>& gv) {
  if (by_device_kernels(g, sh)) return device_stage(GateStage::kBackward, sh, {g, gs, {}, z, gv, {}, {}});
  if (!on_host(g)) return backward_ops(sh, g, z, gs, gv);
  const auto gc = g.contiguous(), gsc = gs.contiguous();
  const auto zc = contiguous(z), gvc = contiguous(gv);
  std::vector<torch::Tensor> out = {torch::empty_like(gc)};
  for (const auto& x : zc) out.push_back(torch::empty_like(x));
  if (g.scalar_type() == torch::kFloat64) backward_host<double>(sh, gc, zc, gsc, gvc, out);
  else backward_host<float>(sh, gc, zc, gsc, gvc, out);
  return out;
}

std::vector<torch::Tensor> second_kernel(const GateShape& sh, const torch::Tensor& g, const std::vector<torch::Tensor>& z,
                                         const torch::Tensor& gs, const std::vector<torch::Tensor>& gv,
                                         const torch::Tensor& hg, const std::vector<torch::Tensor>& hz) {
  if (by_device_kernels(g, sh)) return device_stage(GateStage::kSecond, sh, {g, gs, hg, z, gv, hz, {}});
  if (!on_host(g)) return second_ops(sh, g, z, gs, gv, hg, hz);
  const auto gc = g.contiguous(), gsc = gs.contiguous(), hgc = hg.contiguous();
  const auto zc = contiguous(z), gvc = contiguous(gv), hzc = contiguous(hz);
  std::vector<torch::Tensor> out = {torch::empty_like(gc)};
  for (const auto& x : zc) out.push_back(torch::empty_like(x));
  out.push_back(torch::empty_like(gsc));
  for (const auto& x : gvc) out.push_back(torch::empty_like(x));
  if (g.scalar_type() == torch::kFloat64) second_host<double>(sh, gc, zc, gsc, gvc, hgc, hzc, out);
  else second_host<float>(sh, gc, zc, gsc, gvc, hgc, hzc, out);
  return out;
}

torch::Tensor or_zeros(const torch::Tensor& t, const torch::Tensor& like_this) {
  return t.defined() ? t : torch::zeros_like(like_this, at::MemoryFormat::Contiguous);
}

/// The gate's backward as a node: inputs {g, z_q..., gs, gv_q...}; outputs {∂/∂g, ∂/∂z_q...};
/// its own backward is `second_kernel`.
class GateBackward : public torch::autograd::Function<GateBackward> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, int64_t gated,
                                                at::TensorList inputs) {
    ctx->saved_data["gated"] = gated;
    ctx->save_for_backward(inputs.vec());
    const size_t Q = size_t(gated);
    const std::vector<torch::Tensor> z(inputs.begin() + 1, inputs.begin() + 1 + Q),
        gv(inputs.begin() + 2 + Q, inputs.end());
    return backward_kernel(shape_of(inputs[0], z), inputs[0], z, inputs[1 + Q], gv);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    if (torch::GradMode::is_enabled())
      throw Error("gate: first and second derivatives only; a third was asked for");
    const size_t Q = size_t(ctx->saved_data["gated"].toInt());
    const auto saved = ctx->get_saved_variables();
    const std::vector<torch::Tensor> z(saved.begin() + 1, saved.begin() + 1 + Q),
        gv(saved.begin() + 2 + Q, saved.end());
    torch::autograd::variable_list out(1 + saved.size());  // gated, then the inputs
    bool any = false;
    for (const auto& x : grads) any = any || x.defined();
    if (!any) return out;
    std::vector<torch::Tensor> hz;
    for (size_t q = 0; q < Q; ++q) hz.push_back(or_zeros(grads[1 + q], z[q]));
    const auto all = second_kernel(shape_of(saved[0], z), saved[0], z, saved[1 + Q], gv, or_zeros(grads[0], saved[0]), hz);
    for (size_t k = 0; k < all.size(); ++k)
      if (ctx->needs_input_grad(k)) out[1 + k] = all[k];
    return out;
  }
};

/// The gate as a node: inputs {g, z_q...}; outputs {s, v_q...}.
class GateFunction : public torch::autograd::Function<GateFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, at::TensorList inputs) {
    ctx->save_for_backward(inputs.vec());
    const std::vector<torch::Tensor> z(inputs.begin() + 1, inputs.end());
    return forward_kernel(shape_of(inputs[0], z), inputs[0], z);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    torch::autograd::variable_list out(saved.size());
    bool any = false;
    for (const auto& x : grads) any = any || x.defined();
    if (!any) return out;
    std::vector<torch::Tensor> inputs = saved;
    inputs.push_back(or_zeros(grads[0], torch::empty({saved[0].size(0), 1, saved[0].size(2) / int64_t(saved.size())},
                                                     saved[0].options())));
    for (size_t q = 1; q < saved.size(); ++q) inputs.push_back(or_zeros(grads[q], saved[q]));
    return GateBackward::apply(int64_t(saved.size() - 1), at::TensorList(inputs));
  }
};

std::vector<torch::Tensor> gate_op(const torch::Tensor& g, at::TensorList gated) {
  return gate(g, gated.vec());
}

}  // namespace

std::vector<torch::Tensor> gate(const torch::Tensor& g, const std::vector<torch::Tensor>& gated) {
  shape_of(g, gated);  // checks the shapes before autograd sees them
  std::vector<torch::Tensor> inputs = {g};
  inputs.insert(inputs.end(), gated.begin(), gated.end());
  return GateFunction::apply(at::TensorList(inputs));
}

TORCH_LIBRARY_FRAGMENT(mlip, m) {
  m.def("gate(Tensor g, Tensor[] gated) -> Tensor[]", &gate_op);
}

void register_gate() {
  // The TORCH_LIBRARY_FRAGMENT block above registers the operator when this file's object is
  // linked in; calling this function makes sure it is.
}

}  // namespace mlip::models
