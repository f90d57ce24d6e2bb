#include "models/se_e2_a/fitting_adjoint.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <string>

#include "error.h"
#include "models/kernels/gemm.h"
#include "models/kernels/layer_kernels.h"

namespace mlip::models {
namespace {

/// The gradient of a parameter as a writable pointer (zeros created when undefined).
template <typename R>
R* grad_ptr(const at::Tensor& p) {
  at::Tensor& g = const_cast<at::Tensor&>(p).mutable_grad();
  if (!g.defined()) g = at::zeros_like(p);
  if (!g.is_contiguous()) throw Error("FittingAdjoint: the gradient of a parameter is not contiguous");
  return g.data_ptr<R>();
}

template <typename R>
void grow(std::vector<R>& v, int64_t n) {
  if (int64_t(v.size()) < n) v.resize(size_t(n));
}

/// dst[r] = src[index[r]] for rows of `width` elements, r < n.
template <typename R>
void gather(const R* src, const int64_t* index, int64_t n, int64_t width, R* dst) {
  at::parallel_for(0, n, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) std::copy_n(src + index[r] * width, width, dst + r * width);
  });
}

/// dst[index[r]] = src[r] for rows of `width` elements, r < n.
template <typename R>
void scatter(const R* src, const int64_t* index, int64_t n, int64_t width, R* dst) {
  at::parallel_for(0, n, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) std::copy_n(src + r * width, width, dst + index[r] * width);
  });
}


}  // namespace

template <typename R>
void FittingAdjoint<R>::forward(const Params& params, const R* x, const int64_t* index, int64_t n, R* e, R* dedx,
                                R* q, const R* seed) {
  const int64_t nl = int64_t(layers_.size());
  if (params.w.size() != size_t(nl) || params.b.size() != size_t(nl) || params.idt.size() != size_t(nl))
    throw Error("FittingAdjoint: " + std::to_string(nl) + " layers need as many weights, biases and idt entries");
  auto check = [](const at::Tensor& t, const std::string& what, std::vector<int64_t> shape) {
    if (!t.defined() || !t.is_contiguous() || t.scalar_type() != c10::CppTypeToScalarType<R>::value)
      throw Error("FittingAdjoint: " + what + " must be a contiguous tensor of the model's dtype");
    if (t.sizes() != at::IntArrayRef(shape))
      throw Error("FittingAdjoint: " + what + " has shape " + c10::str(t.sizes()) + ", the layers need " +
                  c10::str(at::IntArrayRef(shape)));
  };
  for (int64_t l = 0; l < nl; ++l) {
    const Layer& L = layers_[size_t(l)];
    check(params.w[size_t(l)], "w" + std::to_string(l), {L.in, L.out});
    check(params.b[size_t(l)], "b" + std::to_string(l), {L.out});
    if (L.idt) check(params.idt[size_t(l)], "idt" + std::to_string(l), {L.out});
  }
  if (!params.wout.defined() || params.wout.dim() != 2)
    throw Error("FittingAdjoint: wout must be a [width, 1] tensor");
  check(params.wout, "wout", {nl > 0 ? layers_.back().out : params.wout.size(0), 1});
  check(params.bout, "bout", {1});
  const bool charges = params.wq.defined();
  if (charges) {
    check(params.wq, "wq", {params.wout.size(0), 1});
    check(params.bq, "bq", {1});
  } else if (q != nullptr || seed != nullptr) {
    throw Error("FittingAdjoint: charges or charge seeds asked of a fitting net without the charge output (wq)");
  }
  seeded_ = seed != nullptr;
  w_ = params.w, b_ = params.b, idt_ = params.idt, wout_ = params.wout, bout_ = params.bout;
  const int64_t in0 = nl > 0 ? layers_[0].in : wout_.size(0);
  const int64_t width = wout_.size(0);
  index_ = index;
  n_ = n;
  s_.resize(size_t(nl));
  t_.resize(size_t(nl));
  y_.resize(size_t(nl));
  yb_.resize(size_t(nl));
  g_.resize(size_t(nl + 1));
  for (int64_t l = 0; l < nl; ++l) {
    const Layer& L = layers_[size_t(l)];
    grow(s_[size_t(l)], 2 * n * L.in);
    grow(t_[size_t(l)], 2 * n * L.out);
    grow(y_[size_t(l)], n * L.out);
    grow(yb_[size_t(l)], n * L.out);
    grow(g_[size_t(l)], n * L.in);
  }
  grow(g_[size_t(nl)], n * width);
  grow(xl_, n * width);
  const R* wout = wout_.data_ptr<R>();
  const R bout = bout_.data_ptr<R>()[0];
  R* x0 = nl > 0 ? s_[0].data() + n * in0 : xl_.data();
  gather(x, index, n, in0, x0);
  for (int64_t l = 0; l < nl; ++l) {
    const Layer& L = layers_[size_t(l)];
    const int64_t in = L.in, out = L.out;
    const R* xin = s_[size_t(l)].data() + n * in;
    R* y = y_[size_t(l)].data();
    gemm<R>(false, false, n, out, in, R(1), xin, in, w_[size_t(l)].data_ptr<R>(), out, R(0), y, out);
    bias_tanh(y, b_[size_t(l)].data_ptr<R>(), n, out);
    R* xo = l + 1 < nl ? s_[size_t(l + 1)].data() + n * out : xl_.data();
    const R* idt = L.idt ? idt_[size_t(l)].data_ptr<R>() : nullptr;
    for (int64_t p = 0; p < n; ++p) {
      const R* yp = y + p * out;
      R* xp = xo + p * out;
      for (int64_t o = 0; o < out; ++o) xp[o] = idt ? yp[o] * idt[o] : yp[o];
    }
    add_skip(xin, skip_copies(L), n, in, out, xo);
  }
  // E = x_L wout + bout; dE/dx_L = wout (+ seed wq with the charges' seeds).
  R* gl = g_[size_t(nl)].data();
  const R* wq = charges ? params.wq.template data_ptr<R>() : nullptr;
  const R bq = charges ? params.bq.template data_ptr<R>()[0] : R(0);
  for (int64_t p = 0; p < n; ++p) {
    const R* xp = xl_.data() + p * width;
    R acc = 0, charge = 0;
    for (int64_t o = 0; o < width; ++o) acc += xp[o] * wout[o];
    e[index[p]] = acc + bout;
    if (q != nullptr) {
      for (int64_t o = 0; o < width; ++o) charge += xp[o] * wq[o];
      q[index[p]] = charge + bq;
    }
    if (seed != nullptr) {
      const R s = seed[index[p]];
      for (int64_t o = 0; o < width; ++o) gl[p * width + o] = wout[o] + s * wq[o];
    } else {
      std::copy_n(wout, width, gl + p * width);
    }
  }
  // dE/dx_l = c_l W_l^T + skip^T(dE/dx_l+1), c_l = dE/dx_l+1 (1 - y_l^2) idt_l.
  for (int64_t l = nl - 1; l >= 0; --l) {
    const Layer& L = layers_[size_t(l)];
    const int64_t in = L.in, out = L.out;
    const R* idt = L.idt ? idt_[size_t(l)].data_ptr<R>() : nullptr;
    const R* gn = g_[size_t(l + 1)].data();
    const R* y = y_[size_t(l)].data();
    R* cc = t_[size_t(l)].data();
    for (int64_t p = 0; p < n * out; p += out)
      for (int64_t o = 0; o < out; ++o) {
        const R v = gn[p + o] * (R(1) - y[p + o] * y[p + o]);
        cc[p + o] = idt ? v * idt[o] : v;
      }
    R* g = g_[size_t(l)].data();
    gemm<R>(false, true, n, in, out, R(1), cc, out, w_[size_t(l)].data_ptr<R>(), out, R(0), g, in);
    add_skip_adjoint(g, gn, skip_copies(L), n, in, out);
  }
  scatter(g_[0].data(), index, n, in0, dedx);
}

template <typename R>
void FittingAdjoint<R>::backward(const R* gbar, const R* ebar, R* xbar_out) {
  const int64_t nl = int64_t(layers_.size());
  const int64_t in0 = nl > 0 ? layers_[0].in : wout_.size(0);
  const int64_t width = wout_.size(0), n = n_;
  const int64_t* index = index_;
  if (seeded_) throw Error("FittingAdjoint: backward() after a forward() with charge seeds (an MD step's)");
  if (n == 0) return;
  const R* wout = wout_.data_ptr<R>();
  R* gwout = grad_ptr<R>(wout_);
  int64_t widest = std::max(width, in0);
  for (const Layer& L : layers_) widest = std::max(widest, L.out);
  // First sweep (adjoint of dE/dx): dL/d(dE/dx_l) upwards, dL/dy_l kept for the second.
  grow(top_, n * widest);
  R* gb = nl > 0 ? s_[0].data() : top_.data();
  gather(gbar, index, n, in0, gb);
  for (int64_t l = 0; l < nl; ++l) {
    const Layer& L = layers_[size_t(l)];
    const int64_t in = L.in, out = L.out;
    const R* idt = L.idt ? idt_[size_t(l)].data_ptr<R>() : nullptr;
    R* gidt = idt ? grad_ptr<R>(idt_[size_t(l)]) : nullptr;
    R* cb = yb_[size_t(l)].data();  // c-bar = gb W_l, then dL/dy_l in place
    gemm<R>(false, false, n, out, in, R(1), gb, in, w_[size_t(l)].data_ptr<R>(), out, R(0), cb, out);
    const R* gn = g_[size_t(l + 1)].data();
    const R* y = y_[size_t(l)].data();
    R* next = l + 1 < nl ? s_[size_t(l + 1)].data() : top_.data();
    for (int64_t q = 0; q < n * out; q += out)
      for (int64_t o = 0; o < out; ++o) {
        const R t1 = cb[q + o] * (R(1) - y[q + o] * y[q + o]);
        if (idt) {
          next[q + o] = t1 * idt[o];
          gidt[o] += t1 * gn[q + o];
          cb[q + o] = R(-2) * cb[q + o] * gn[q + o] * idt[o] * y[q + o];
        } else {
          next[q + o] = t1;
          cb[q + o] = R(-2) * cb[q + o] * gn[q + o] * y[q + o];
        }
      }
    add_skip(gb, skip_copies(L), n, in, out, next);
    gb = next;
  }
  // dE/dx_L = wout: dL/dwout gets sum_p dL/d(dE/dx_L) and x_L^T dL/dE; dL/dx_L = dL/dE wout.
  grow(xbar_, n * widest);
  grow(xnext_, n * widest);
  R* xbar = xbar_.data();
  R gbout = 0;
  for (int64_t p = 0; p < n; ++p) {
    const R eb = ebar[index[p]];
    gbout += eb;
    for (int64_t o = 0; o < width; ++o) {
      gwout[o] += gb[p * width + o] + xl_[size_t(p * width + o)] * eb;
      xbar[p * width + o] = eb * wout[o];
    }
  }
  grad_ptr<R>(bout_)[0] += gbout;
  // Second sweep (adjoint of the forward pass), downwards.
  for (int64_t l = nl - 1; l >= 0; --l) {
    const Layer& L = layers_[size_t(l)];
    const int64_t in = L.in, out = L.out;
    const R* idt = L.idt ? idt_[size_t(l)].data_ptr<R>() : nullptr;
    R* gidt = idt ? grad_ptr<R>(idt_[size_t(l)]) : nullptr;
    R* gbias = grad_ptr<R>(b_[size_t(l)]);
    const R* y = y_[size_t(l)].data();
    const R* yb = yb_[size_t(l)].data();
    R* zb = t_[size_t(l)].data() + n * out;
    for (int64_t q = 0; q < n * out; q += out)
      for (int64_t o = 0; o < out; ++o) {
        const R xb = xbar[q + o];
        R v;
        if (idt) {
          v = yb[q + o] + xb * idt[o];
          gidt[o] += xb * y[q + o];
        } else {
          v = yb[q + o] + xb;
        }
        zb[q + o] = v * (R(1) - y[q + o] * y[q + o]);
        gbias[o] += zb[q + o];
      }
    R* xn = xnext_.data();
    gemm<R>(false, true, n, in, out, R(1), zb, out, w_[size_t(l)].data_ptr<R>(), out, R(0), xn, in);
    add_skip_adjoint(xn, xbar, skip_copies(L), n, in, out);
    std::swap(xbar_, xnext_);
    xbar = xbar_.data();
  }
  scatter(xbar, index, n, in0, xbar_out);
  // Weight gradients: [dL/d(dE/dx_l); x_l]^T [c_l; dL/dz_l], both sweeps in one GEMM.
  for (int64_t l = 0; l < nl; ++l) {
    const Layer& L = layers_[size_t(l)];
    gemm<R>(true, false, L.in, L.out, 2 * n, R(1), s_[size_t(l)].data(), L.in, t_[size_t(l)].data(), L.out, R(1),
            grad_ptr<R>(w_[size_t(l)]), L.out);
  }
}

template class FittingAdjoint<float>;
template class FittingAdjoint<double>;

}  // namespace mlip::models
