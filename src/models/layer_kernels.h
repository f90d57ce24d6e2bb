#pragma once

#include <cstdint>

namespace mlip::models {

// Element-wise parts of a stacked embedding layer (docs/training_path.md): rows p < q hold
// values, rows q + p their derivatives d/ds. Row-major [q, out] arrays; idt may be null (= 1).
// Vectorised for AVX-512, AVX2 or SSE2, chosen at run time.

/// z[p, o] += b[o] for p < q.
void add_bias(double* z, const double* b, int64_t q, int64_t out);
void add_bias(float* z, const float* b, int64_t q, int64_t out);

/// vo = y idt + skip(vi), to = (1 - y^2) idt tz + skip(ti), with skip 0 (none), 1 (same width)
/// or 2 (concat(x, x)); vi, ti are [q, in].
void layer_activation(const double* y, const double* tz, const double* idt, const double* vi, const double* ti,
                      int skip, int64_t q, int64_t in, int64_t out, double* vo, double* to);
void layer_activation(const float* y, const float* tz, const float* idt, const float* vi, const float* ti, int skip,
                      int64_t q, int64_t in, int64_t out, float* vo, float* to);

/// The adjoint: from vb = dL/dvo and tb = dL/dto, zv = dL/dz and zt = dL/dtz; adds
/// sum_p zv to gb and, when idt is given, dL/didt to gidt.
void layer_activation_adjoint(const double* y, const double* tz, const double* vb, const double* tb, const double* idt,
                              int64_t q, int64_t out, double* zv, double* zt, double* gb, double* gidt);
void layer_activation_adjoint(const float* y, const float* tz, const float* vb, const float* tb, const float* idt,
                              int64_t q, int64_t out, float* zv, float* zt, float* gb, float* gidt);

}  // namespace mlip::models
