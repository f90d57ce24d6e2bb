#pragma once

#include <cstdint>

namespace mlip::models {

// Element-wise parts of a stacked embedding layer (docs/training_path.md): rows p < q hold
// values, rows q + p their derivatives d/ds. Row-major [q, out] arrays; idt may be null (= 1).
// Vectorised for AVX-512, AVX2 or SSE2, chosen at run time; tanh is fast_tanh.h's.

/// z[p, o] <- tanh(z[p, o] + b[o]) for p < q.
void bias_tanh(double* z, const double* b, int64_t q, int64_t out);
void bias_tanh(float* z, const float* b, int64_t q, int64_t out);

/// In one pass: y = tanh(z + b), stored in z; u = (1 - y^2) tz, stored in tz; then
/// vo = y idt + skip(vi) and to = u idt + skip(ti), with skip 0 (none), 1 (same width) or 2
/// (concat(x, x)); vi, ti are [q, in].
void layer_activation(double* z, const double* b, double* tz, const double* idt, const double* vi, const double* ti,
                      int skip, int64_t q, int64_t in, int64_t out, double* vo, double* to);
void layer_activation(float* z, const float* b, float* tz, const float* idt, const float* vi, const float* ti,
                      int skip, int64_t q, int64_t in, int64_t out, float* vo, float* to);

/// The y and u of layer_activation recovered from its outputs, for a layer without idt:
/// y = g - skip(vi), u = gt - skip(ti) (g, gt, y, u [q, out]; vi, ti [q, in]).
void layer_from_output(const double* g, const double* gt, const double* vi, const double* ti, int skip, int64_t q,
                       int64_t in, int64_t out, double* y, double* u);
void layer_from_output(const float* g, const float* gt, const float* vi, const float* ti, int skip, int64_t q,
                       int64_t in, int64_t out, float* y, float* u);

/// skip(x): dst[p, h in + o] += x[p, o] for the copies h < skip, p < rows, o < in
/// (dst [rows, out]).
void add_skip(const double* x, int skip, int64_t rows, int64_t in, int64_t out, double* dst);
void add_skip(const float* x, int skip, int64_t rows, int64_t in, int64_t out, float* dst);

/// The adjoint of skip: xn[p, o] += sum over the copies h < skip of xb[p, h in + o], for
/// p < rows, o < in (xb [rows, out]).
void add_skip_adjoint(double* xn, const double* xb, int skip, int64_t rows, int64_t in, int64_t out);
void add_skip_adjoint(float* xn, const float* xb, int skip, int64_t rows, int64_t in, int64_t out);

/// The adjoint of layer_activation, given its y and u: from vb = dL/dvo and tb = dL/dto,
/// zv = dL/dz and zt = dL/dtz; adds sum_p zv to gb and, when idt is given, dL/didt to gidt.
void layer_activation_adjoint(const double* y, const double* u, const double* vb, const double* tb, const double* idt,
                              int64_t q, int64_t out, double* zv, double* zt, double* gb, double* gidt);
void layer_activation_adjoint(const float* y, const float* u, const float* vb, const float* tb, const float* idt,
                              int64_t q, int64_t out, float* zv, float* zt, float* gb, float* gidt);

}  // namespace mlip::models
