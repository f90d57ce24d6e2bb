#include "models/se_e2_a/table_kernels.h"

#include "models/kernels/target_clones.h"

// Clones with FMA (x86-64-v3: AVX2 and FMA; v4: AVX-512): the polynomials are chains of
// multiply-adds.
#define MLIP_TABLE_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))

namespace mlip::models {
namespace {

// Inlined into the target_clones wrappers at the end, so that each clone vectorises the loops
// over the outputs for its instruction set.

template <typename R>
MLIP_INLINE void accumulate_impl(const R* __restrict__ table, int64_t m, const int64_t* interval, const R* offset,
                                 const R* rows, int64_t q, R* __restrict__ t_matrix) {
  R* __restrict__ t0 = t_matrix;
  R* __restrict__ t1 = t_matrix + m;
  R* __restrict__ t2 = t_matrix + 2 * m;
  R* __restrict__ t3 = t_matrix + 3 * m;
  for (int64_t p = 0; p < q; ++p) {
    if (interval[p] < 0) continue;
    const R* __restrict__ a = table + interval[p] * 6 * m;
    const R t = offset[p];
    const R r0 = rows[p * 4], r1 = rows[p * 4 + 1], r2 = rows[p * 4 + 2], r3 = rows[p * 4 + 3];
    for (int64_t k = 0; k < m; ++k) {
      const R g = a[k] + t * (a[m + k] + t * (a[2 * m + k] + t * (a[3 * m + k] + t * (a[4 * m + k] + t * a[5 * m + k]))));
      t0[k] += r0 * g;
      t1[k] += r1 * g;
      t2[k] += r2 * g;
      t3[k] += r3 * g;
    }
  }
}

template <typename R>
MLIP_INLINE void adjoint_impl(const R* __restrict__ table, int64_t m, const int64_t* interval, const R* offset,
                              const R* rows, int64_t q, const R* __restrict__ grad_t, R* grad_rows, R* grad_s) {
  // Sums over the outputs in kLanes independent partial sums (vectorisable without reordering
  // rules), added up at the end.
  constexpr int kLanes = 32 / int(sizeof(R));
  const R* __restrict__ b0 = grad_t;
  const R* __restrict__ b1 = grad_t + m;
  const R* __restrict__ b2 = grad_t + 2 * m;
  const R* __restrict__ b3 = grad_t + 3 * m;
  for (int64_t p = 0; p < q; ++p) {
    if (interval[p] < 0) continue;
    const R* __restrict__ a = table + interval[p] * 6 * m;
    const R t = offset[p];
    const R r0 = rows[p * 4], r1 = rows[p * 4 + 1], r2 = rows[p * 4 + 2], r3 = rows[p * 4 + 3];
    R s0[kLanes] = {}, s1[kLanes] = {}, s2[kLanes] = {}, s3[kLanes] = {}, ss[kLanes] = {};
    auto step = [&](int64_t k, int j) {
      const R c0 = a[k], c1 = a[m + k], c2 = a[2 * m + k], c3 = a[3 * m + k], c4 = a[4 * m + k], c5 = a[5 * m + k];
      // Horner's rule for the polynomial and its derivative together.
      R g = c5 * t + c4;
      R dg = c5;
      dg = dg * t + g;
      g = g * t + c3;
      dg = dg * t + g;
      g = g * t + c2;
      dg = dg * t + g;
      g = g * t + c1;
      dg = dg * t + g;
      g = g * t + c0;
      s0[j] += g * b0[k];
      s1[j] += g * b1[k];
      s2[j] += g * b2[k];
      s3[j] += g * b3[k];
      ss[j] += (r0 * b0[k] + r1 * b1[k] + r2 * b2[k] + r3 * b3[k]) * dg;
    };
    int64_t k0 = 0;
    for (; k0 + kLanes <= m; k0 += kLanes)
      for (int j = 0; j < kLanes; ++j) step(k0 + j, j);
    for (int64_t k = k0; k < m; ++k) step(k, int(k - k0));
    R g0 = 0, g1 = 0, g2 = 0, g3 = 0, gs = 0;
    for (int j = 0; j < kLanes; ++j) g0 += s0[j], g1 += s1[j], g2 += s2[j], g3 += s3[j], gs += ss[j];
    grad_rows[p * 4] = g0;
    grad_rows[p * 4 + 1] = g1;
    grad_rows[p * 4 + 2] = g2;
    grad_rows[p * 4 + 3] = g3;
    grad_s[p] = gs;
  }
}

}  // namespace

MLIP_TABLE_CLONES void table_embed_accumulate(const double* table, int64_t outputs, const int64_t* interval,
                                        const double* offset, const double* rows, int64_t q, double* t_matrix) {
  accumulate_impl(table, outputs, interval, offset, rows, q, t_matrix);
}
MLIP_TABLE_CLONES void table_embed_accumulate(const float* table, int64_t outputs, const int64_t* interval,
                                        const float* offset, const float* rows, int64_t q, float* t_matrix) {
  accumulate_impl(table, outputs, interval, offset, rows, q, t_matrix);
}
MLIP_TABLE_CLONES void table_embed_adjoint(const double* table, int64_t outputs, const int64_t* interval,
                                     const double* offset, const double* rows, int64_t q, const double* grad_t,
                                     double* grad_rows, double* grad_s) {
  adjoint_impl(table, outputs, interval, offset, rows, q, grad_t, grad_rows, grad_s);
}
MLIP_TABLE_CLONES void table_embed_adjoint(const float* table, int64_t outputs, const int64_t* interval,
                                     const float* offset, const float* rows, int64_t q, const float* grad_t,
                                     float* grad_rows, float* grad_s) {
  adjoint_impl(table, outputs, interval, offset, rows, q, grad_t, grad_rows, grad_s);
}

}  // namespace mlip::models
