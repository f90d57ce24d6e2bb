#include "models/layer_kernels.h"

namespace mlip::models {
namespace {

template <typename R>
inline void add_bias_impl(R* z, const R* b, int64_t q, int64_t out) {
  for (int64_t p = 0; p < q; ++p)
    for (int64_t o = 0; o < out; ++o) z[p * out + o] += b[o];
}

template <typename R>
inline void activation_impl(const R* y, const R* tz, const R* idt, const R* vi, const R* ti, int skip, int64_t q,
                            int64_t in, int64_t out, R* vo, R* to) {
  for (int64_t p = 0; p < q; ++p) {
    const R* yp = y + p * out;
    const R* tp = tz + p * out;
    R* v = vo + p * out;
    R* t = to + p * out;
    if (idt) {
      for (int64_t o = 0; o < out; ++o) {
        v[o] = yp[o] * idt[o];
        t[o] = (R(1) - yp[o] * yp[o]) * idt[o] * tp[o];
      }
    } else {
      for (int64_t o = 0; o < out; ++o) {
        v[o] = yp[o];
        t[o] = (R(1) - yp[o] * yp[o]) * tp[o];
      }
    }
    for (int rep = 0; rep < skip; ++rep) {
      const R* a = vi + p * in;
      const R* c = ti + p * in;
      R* v2 = v + rep * in;
      R* t2 = t + rep * in;
      for (int64_t o = 0; o < in; ++o) {
        v2[o] += a[o];
        t2[o] += c[o];
      }
    }
  }
}

template <typename R>
inline void adjoint_impl(const R* y, const R* tz, const R* vb, const R* tb, const R* idt, int64_t q, int64_t out,
                         R* zv, R* zt, R* gb, R* gidt) {
  for (int64_t p = 0; p < q; ++p) {
    const R* yp = y + p * out;
    const R* tp = tz + p * out;
    const R* v = vb + p * out;
    const R* t = tb + p * out;
    R* a = zv + p * out;
    R* c = zt + p * out;
    if (idt) {
      for (int64_t o = 0; o < out; ++o) {
        const R sp = R(1) - yp[o] * yp[o];
        a[o] = idt[o] * (v[o] - 2 * yp[o] * tp[o] * t[o]) * sp;
        c[o] = t[o] * sp * idt[o];
        gb[o] += a[o];
        gidt[o] += v[o] * yp[o] + t[o] * sp * tp[o];
      }
    } else {
      for (int64_t o = 0; o < out; ++o) {
        const R sp = R(1) - yp[o] * yp[o];
        a[o] = (v[o] - 2 * yp[o] * tp[o] * t[o]) * sp;
        c[o] = t[o] * sp;
        gb[o] += a[o];
      }
    }
  }
}

}  // namespace

#define MLIP_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

MLIP_CLONES void add_bias(double* z, const double* b, int64_t q, int64_t out) { add_bias_impl(z, b, q, out); }
MLIP_CLONES void add_bias(float* z, const float* b, int64_t q, int64_t out) { add_bias_impl(z, b, q, out); }

MLIP_CLONES void layer_activation(const double* y, const double* tz, const double* idt, const double* vi,
                                  const double* ti, int skip, int64_t q, int64_t in, int64_t out, double* vo,
                                  double* to) {
  activation_impl(y, tz, idt, vi, ti, skip, q, in, out, vo, to);
}
MLIP_CLONES void layer_activation(const float* y, const float* tz, const float* idt, const float* vi, const float* ti,
                                  int skip, int64_t q, int64_t in, int64_t out, float* vo, float* to) {
  activation_impl(y, tz, idt, vi, ti, skip, q, in, out, vo, to);
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
