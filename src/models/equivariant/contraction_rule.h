// The message contraction's partials (message_contraction.h) one output element at a time: the
// arithmetic shared by the CUDA kernels (message_contraction_cuda.cu) and their host twin
// (message_contraction.cpp), so that the CPU tests check the very code the GPU runs
// (docs/fused_kernels.md "The message contraction"). Plain C++ and CUDA: no LibTorch header.
#pragma once

#include <cstdint>

#include "models/kernels/host_device.h"

namespace mlip::models {

/// Lanes of a harmonic's channel sum: a CUDA warp's threads, lane l summing the channels
/// l, l + 32, l + 64, ...; the lanes' sums are then added by butterfly_sum's tree.
constexpr int kContractionLanes = 32;

/// The operands and tables of one partial as raw pointers, all in one memory (the device's for
/// the kernels, the host's for the twin), operands contiguous in dtype T.
template <typename T>
struct ContractionRuleArgs {
  /// [nterms, 4] (m, d, s, p) grouped by the output slot's row (s for the messages, d for the
  /// features, p for the radial weights, m for the harmonics), each row's in table order
  const int64_t* terms = nullptr;
  const T* coefficients = nullptr;            ///< [nterms] c of each term, in T
  const int64_t* group = nullptr;             ///< [rows + 1]: row r's terms are [group[r], group[r + 1])
  int64_t H = 0, D = 0, S = 0, P = 0;         ///< harmonics, input components, output components, paths
  int64_t f = 0;                              ///< channels
  const int64_t* centre = nullptr;            ///< [E] i_e, non-decreasing
  const int64_t* neighbor = nullptr;          ///< [E] j_e
  const int64_t* centre_offsets = nullptr;    ///< [N + 1]: centre n's edges [offsets[n], offsets[n + 1])
  const int64_t* by_neighbor = nullptr;       ///< [E] edges ordered by neighbour
  const int64_t* neighbor_offsets = nullptr;  ///< [N + 1] into by_neighbor
  const int64_t* pair = nullptr;              ///< [E] W's row of each edge, or null: row e
  /// A [N, S, f], X [N, D, f], W [E or Q, P, f], Y [E, H]; the output slot's is null
  const T *A = nullptr, *X = nullptr, *W = nullptr, *Y = nullptr;
};

/// W's row of edge e.
template <typename T>
MLIP_HOST_DEVICE inline int64_t radial_row_of(const ContractionRuleArgs<T>& a, int64_t e) {
  return a.pair != nullptr ? a.pair[e] : e;
}

/// Edge e's share of a messages or features element: Σ over the terms of output row `row` of
/// c_t · Y[e, m] · W[e, p, c] · v[column_t · f], where v is the other atom's operand row at
/// channel c (X[j_e, ·, c] for the messages, whose terms' column is d; A[i_e, ·, c] for the
/// features, whose terms' column is s) and `column` that column's place in a term (1 or 2).
template <typename T>
MLIP_HOST_DEVICE inline T edge_share(const ContractionRuleArgs<T>& a, int64_t e, int64_t row, const T* v, int column,
                                     int64_t c) {
  const int64_t f = a.f;
  const T* w = a.W + radial_row_of(a, e) * a.P * f + c;
  const T* y = a.Y + e * a.H;
  T sum = T(0);
  for (int64_t t = a.group[row]; t < a.group[row + 1]; ++t) {
    const int64_t* q = a.terms + 4 * t;
    sum += a.coefficients[t] * y[q[0]] * w[q[3] * f] * v[q[column] * f];
  }
  return sum;
}

/// The messages, element (n, s, c): Σ over the edges e of centre n and the terms of s of
/// c_t · Y[e, m] · W[e, p, c] · X[j_e, d, c].
template <typename T>
MLIP_HOST_DEVICE inline T contraction_message(const ContractionRuleArgs<T>& a, int64_t n, int64_t s, int64_t c) {
  T sum = T(0);
  for (int64_t e = a.centre_offsets[n]; e < a.centre_offsets[n + 1]; ++e)
    sum += edge_share(a, e, s, a.X + a.neighbor[e] * a.D * a.f + c, 1, c);
  return sum;
}

/// The partial by the features, element (atom, d, c): Σ over the edges e whose neighbour is
/// atom and the terms of d of c_t · Y[e, m] · W[e, p, c] · A[i_e, s, c].
template <typename T>
MLIP_HOST_DEVICE inline T contraction_feature(const ContractionRuleArgs<T>& a, int64_t atom, int64_t d, int64_t c) {
  T sum = T(0);
  for (int64_t k = a.neighbor_offsets[atom]; k < a.neighbor_offsets[atom + 1]; ++k) {
    const int64_t e = a.by_neighbor[k];
    sum += edge_share(a, e, d, a.A + a.centre[e] * a.S * a.f + c, 2, c);
  }
  return sum;
}

/// The partial by the radial weights, edge e's element (p, c): Σ over the terms of p of
/// c_t · Y[e, m] · A[i_e, s, c] · X[j_e, d, c]. (By pair, the caller sums each pair's edges.)
template <typename T>
MLIP_HOST_DEVICE inline T contraction_radial(const ContractionRuleArgs<T>& a, int64_t e, int64_t p, int64_t c) {
  const int64_t f = a.f;
  const T* am = a.A + a.centre[e] * a.S * f + c;
  const T* x = a.X + a.neighbor[e] * a.D * f + c;
  const T* y = a.Y + e * a.H;
  T sum = T(0);
  for (int64_t t = a.group[p]; t < a.group[p + 1]; ++t) {
    const int64_t* q = a.terms + 4 * t;
    sum += a.coefficients[t] * y[q[0]] * am[q[2] * f] * x[q[1] * f];
  }
  return sum;
}

/// The partial by the harmonics, lane `lane`'s share of element (e, m): Σ over the terms of m of
/// c_t · Σ over the lane's channels c of A[i_e, s, c] · W[e, p, c] · X[j_e, d, c]. The element
/// is butterfly_sum of the kContractionLanes lanes' shares.
template <typename T>
MLIP_HOST_DEVICE inline T contraction_harmonic_lane(const ContractionRuleArgs<T>& a, int64_t e, int64_t m, int lane) {
  const int64_t f = a.f;
  const T* am = a.A + a.centre[e] * a.S * f;
  const T* x = a.X + a.neighbor[e] * a.D * f;
  const T* w = a.W + radial_row_of(a, e) * a.P * f;
  T sum = T(0);
  for (int64_t t = a.group[m]; t < a.group[m + 1]; ++t) {
    const int64_t* q = a.terms + 4 * t;
    const T* av = am + q[2] * f;
    const T* wv = w + q[3] * f;
    const T* xv = x + q[1] * f;
    T channels = T(0);
    for (int64_t c = lane; c < f; c += kContractionLanes) channels += av[c] * wv[c] * xv[c];
    sum += a.coefficients[t] * channels;
  }
  return sum;
}

/// The lanes' shares added as a CUDA warp adds them with __shfl_xor_sync: at each distance 16,
/// 8, 4, 2, 1, lane l takes its own value plus lane (l xor distance)'s; every lane ends with the
/// total, lane 0's is returned. (The host twin's sum; the kernel does the same with shuffles.)
template <typename T>
inline T butterfly_sum(T (&lanes)[kContractionLanes]) {
  for (int distance = kContractionLanes / 2; distance > 0; distance /= 2) {
    T next[kContractionLanes];
    for (int l = 0; l < kContractionLanes; ++l) next[l] = lanes[l] + lanes[l ^ distance];
    for (int l = 0; l < kContractionLanes; ++l) lanes[l] = next[l];
  }
  return lanes[0];
}

}  // namespace mlip::models
