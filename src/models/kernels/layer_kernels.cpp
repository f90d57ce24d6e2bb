#include "models/kernels/layer_kernels.h"

#include "models/kernels/fast_tanh_impl.h"
#include "models/kernels/target_clones.h"

namespace mlip::models {
namespace {

// The kernels below are inlined into the target_clones functions at the end, so that each clone
// vectorises them for its instruction set (an out-of-line template would be compiled once, for
// the baseline target).

using detail::tanh_value;

template <typename R>
MLIP_INLINE void bias_tanh_impl(R* z, const R* b, int64_t q, int64_t out) {
  for (int64_t p = 0; p < q; ++p)
    for (int64_t o = 0; o < out; ++o) z[p * out + o] = tanh_value(z[p * out + o] + b[o]);
}

/// Columns [0, w) of one row: y = tanh(y + b) and u = (1 - y^2) tz in place, v = y idt + a,
/// t = u idt + c (idt = 1 unless kIdt; a, c only when kSkip).
template <typename R, bool kIdt, bool kSkip>
MLIP_INLINE void activation_cols(R* __restrict__ y, const R* __restrict__ b, R* __restrict__ tz,
                                 const R* __restrict__ idt, const R* __restrict__ a, const R* __restrict__ c,
                                 int64_t w, R* __restrict__ v, R* __restrict__ t) {
  for (int64_t o = 0; o < w; ++o) {
    const R yy = tanh_value(y[o] + b[o]);
    const R u = (R(1) - yy * yy) * tz[o];
    y[o] = yy;
    tz[o] = u;
    const R s = kIdt ? idt[o] : R(1);
    R vv = yy * s, tt = u * s;
    if (kSkip) vv += a[o], tt += c[o];
    v[o] = vv;
    t[o] = tt;
  }
}

template <typename R, bool kIdt>
MLIP_INLINE void activation_rows(R* y, const R* b, R* tz, const R* idt, const R* vi, const R* ti, int skip,
                            int64_t q, int64_t in, int64_t out, R* vo, R* to) {
  for (int64_t p = 0; p < q; ++p) {
    R* yp = y + p * out;
    R* tp = tz + p * out;
    R* v = vo + p * out;
    R* t = to + p * out;
    if (skip == 0) {
      activation_cols<R, kIdt, false>(yp, b, tp, idt, nullptr, nullptr, out, v, t);
      continue;
    }
    // skip(x) is x (out = in) or concat(x, x) (out = 2 in): one pass per copy of x.
    for (int64_t h = 0; h < skip; ++h)
      activation_cols<R, kIdt, true>(yp + h * in, b + h * in, tp + h * in, kIdt ? idt + h * in : nullptr, vi + p * in,
                                     ti + p * in, in, v + h * in, t + h * in);
  }
}

template <typename R>
MLIP_INLINE void activation_impl(R* y, const R* b, R* tz, const R* idt, const R* vi, const R* ti, int skip,
                                 int64_t q, int64_t in, int64_t out, R* vo, R* to) {
  if (idt) activation_rows<R, true>(y, b, tz, idt, vi, ti, skip, q, in, out, vo, to);
  else activation_rows<R, false>(y, b, tz, idt, vi, ti, skip, q, in, out, vo, to);
}

template <typename R>
MLIP_INLINE void skip_impl(const R* __restrict__ x, int skip, int64_t rows, int64_t in, int64_t out,
                           R* __restrict__ dst) {
  for (int64_t p = 0; p < rows; ++p)
    for (int64_t h = 0; h < skip; ++h)
      for (int64_t o = 0; o < in; ++o) dst[p * out + h * in + o] += x[p * in + o];
}

template <typename R>
MLIP_INLINE void skip_adjoint_impl(R* __restrict__ xn, const R* __restrict__ xb, int skip, int64_t rows, int64_t in,
                              int64_t out) {
  for (int64_t p = 0; p < rows; ++p)
    for (int64_t h = 0; h < skip; ++h)
      for (int64_t o = 0; o < in; ++o) xn[p * in + o] += xb[p * out + h * in + o];
}

template <typename R>
MLIP_INLINE void from_output_impl(const R* __restrict__ g, const R* __restrict__ gt, const R* __restrict__ vi,
                                  const R* __restrict__ ti, int skip, int64_t q, int64_t in, int64_t out,
                                  R* __restrict__ y, R* __restrict__ u) {
  for (int64_t p = 0; p < q; ++p) {
    for (int64_t o = 0; o < out; ++o) {
      y[p * out + o] = g[p * out + o];
      u[p * out + o] = gt[p * out + o];
    }
    for (int64_t h = 0; h < skip; ++h)
      for (int64_t o = 0; o < in; ++o) {
        y[p * out + h * in + o] -= vi[p * in + o];
        u[p * out + h * in + o] -= ti[p * in + o];
      }
  }
}

template <typename R>
MLIP_INLINE void adjoint_impl(const R* __restrict__ y, const R* __restrict__ tz, const R* __restrict__ vb,
                              const R* __restrict__ tb, const R* __restrict__ idt, int64_t q, int64_t out,
                              R* __restrict__ zv, R* __restrict__ zt, R* __restrict__ gb, R* __restrict__ gidt) {
  for (int64_t p = 0; p < q; ++p) {
    const R* yp = y + p * out;
    const R* up = tz + p * out;
    const R* v = vb + p * out;
    const R* t = tb + p * out;
    R* a = zv + p * out;
    R* c = zt + p * out;
    if (idt) {
      for (int64_t o = 0; o < out; ++o) {
        const R sp = R(1) - yp[o] * yp[o];
        a[o] = idt[o] * (v[o] * sp - 2 * yp[o] * up[o] * t[o]);
        c[o] = t[o] * sp * idt[o];
        gb[o] += a[o];
        gidt[o] += v[o] * yp[o] + t[o] * up[o];
      }
    } else {
      for (int64_t o = 0; o < out; ++o) {
        const R sp = R(1) - yp[o] * yp[o];
        a[o] = v[o] * sp - 2 * yp[o] * up[o] * t[o];
        c[o] = t[o] * sp;
        gb[o] += a[o];
      }
    }
  }
}

}  // namespace


MLIP_CLONES void bias_tanh(double* z, const double* b, int64_t q, int64_t out) { bias_tanh_impl(z, b, q, out); }
MLIP_CLONES void bias_tanh(float* z, const float* b, int64_t q, int64_t out) { bias_tanh_impl(z, b, q, out); }

MLIP_CLONES void layer_activation(double* z, const double* b, double* tz, const double* idt, const double* vi,
                                  const double* ti, int skip, int64_t q, int64_t in, int64_t out, double* vo,
                                  double* to) {
  activation_impl(z, b, tz, idt, vi, ti, skip, q, in, out, vo, to);
}
MLIP_CLONES void layer_activation(float* z, const float* b, float* tz, const float* idt, const float* vi,
                                  const float* ti, int skip, int64_t q, int64_t in, int64_t out, float* vo, float* to) {
  activation_impl(z, b, tz, idt, vi, ti, skip, q, in, out, vo, to);
}

MLIP_CLONES void layer_from_output(const double* g, const double* gt, const double* vi, const double* ti, int skip,
                                   int64_t q, int64_t in, int64_t out, double* y, double* u) {
  from_output_impl(g, gt, vi, ti, skip, q, in, out, y, u);
}
MLIP_CLONES void layer_from_output(const float* g, const float* gt, const float* vi, const float* ti, int skip,
                                   int64_t q, int64_t in, int64_t out, float* y, float* u) {
  from_output_impl(g, gt, vi, ti, skip, q, in, out, y, u);
}

MLIP_CLONES void add_skip(const double* x, int skip, int64_t rows, int64_t in, int64_t out, double* dst) {
  skip_impl(x, skip, rows, in, out, dst);
}
MLIP_CLONES void add_skip(const float* x, int skip, int64_t rows, int64_t in, int64_t out, float* dst) {
  skip_impl(x, skip, rows, in, out, dst);
}

MLIP_CLONES void add_skip_adjoint(double* xn, const double* xb, int skip, int64_t rows, int64_t in, int64_t out) {
  skip_adjoint_impl(xn, xb, skip, rows, in, out);
}
MLIP_CLONES void add_skip_adjoint(float* xn, const float* xb, int skip, int64_t rows, int64_t in, int64_t out) {
  skip_adjoint_impl(xn, xb, skip, rows, in, out);
}

MLIP_CLONES void layer_activation_adjoint(const double* y, const double* tz, const double* vb, const double* tb,
                                          const double* idt, int64_t q, int64_t out, double* zv, double* zt,
                                          double* gb, double* gidt) {
  adjoint_impl(y, tz, vb, tb, idt, q, out, zv, zt, gb, gidt);
}
MLIP_CLONES void layer_activation_adjoint(const float* y, const float* tz, const float* vb, const float* tb,
                                          const float* idt, int64_t q, int64_t out, float* zv, float* zt, float* gb,
                                          float* gidt) {
  adjoint_impl(y, tz, vb, tb, idt, q, out, zv, zt, gb, gidt);
}

}  // namespace mlip::models
