// The gate nonlinearity (gate.h) and its two derivatives at one (atom, channel): the arithmetic
// shared by the CUDA kernels (gate_cuda.cu) and their host twin (gate.cpp), so that the CPU
// tests check the very code the GPU runs (docs/fused_kernels.md "The gate"). Plain C++ and CUDA:
// no LibTorch header.
#pragma once

#include <cmath>
#include <cstdint>

#include "models/kernels/host_device.h"

namespace mlip::models {

/// Which stage of the gate a kernel computes: gate_forward_at, gate_backward_at, gate_second_at.
enum class GateStage { kForward, kBackward, kSecond };

/// The most gated irreps one call of the kernels takes (l ≤ 3 with both parities: 6).
constexpr int kMostGated = 8;

/// One call's operands as raw pointers, all contiguous in one memory, dtype T (gate.h's
/// notation): g [n, F] with F = f (1 + Q), z_q [n, M_q, f], the incoming gradients gs [n, f]
/// and gv_q (backward and second), hg [n, F] and hz_q (second); the outputs of the stage.
template <typename T>
struct GateRuleArgs {
  int64_t n = 0, f = 0;  ///< atoms, channels
  int gated = 0;         ///< Q, at most kMostGated
  int64_t components[kMostGated] = {};
  const T* g = nullptr;
  const T* z[kMostGated] = {};
  const T* gs = nullptr;
  const T* gv[kMostGated] = {};
  const T* hg = nullptr;
  const T* hz[kMostGated] = {};
  /// forward: s [n, f], v_q; backward: ∂/∂g [n, F], ∂/∂z_q; second: ∂/∂g, ∂/∂z_q, ∂/∂gs, ∂/∂gv_q
  T* out_g = nullptr;
  T* out_z[kMostGated] = {};
  T* out_gs = nullptr;
  T* out_gv[kMostGated] = {};
};

MLIP_HOST_DEVICE inline float gate_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
MLIP_HOST_DEVICE inline double gate_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

/// Forward at (r, c): s = a σ(a) into out_g [n, f], v_q = z_q σ(b_q) into out_z[q].
template <typename T>
MLIP_HOST_DEVICE inline void gate_forward_at(const GateRuleArgs<T>& a, int64_t r, int64_t c) {
  const int64_t f = a.f, F = f * (1 + a.gated);
  const T x = a.g[r * F + c];
  a.out_g[r * f + c] = x * gate_sigmoid(x);
  for (int q = 0; q < a.gated; ++q) {
    const T sb = gate_sigmoid(a.g[r * F + f * (q + 1) + c]);
    for (int64_t m = 0; m < a.components[q]; ++m) {
      const int64_t k = (r * a.components[q] + m) * f + c;
      a.out_z[q][k] = a.z[q][k] * sb;
    }
  }
}

/// Backward at (r, c): ∂/∂a = gs silu′(a), ∂/∂b_q = σ′(b_q) Σ_m gv_q z_q, ∂/∂z_q = gv_q σ(b_q).
template <typename T>
MLIP_HOST_DEVICE inline void gate_backward_at(const GateRuleArgs<T>& a, int64_t r, int64_t c) {
  const int64_t f = a.f, F = f * (1 + a.gated);
  const T x = a.g[r * F + c], sa = gate_sigmoid(x);
  a.out_g[r * F + c] = a.gs[r * f + c] * sa * (T(1) + x * (T(1) - sa));
  for (int q = 0; q < a.gated; ++q) {
    const int64_t at = r * F + f * (q + 1) + c;
    const T sb = gate_sigmoid(a.g[at]);
    T sum = T(0);
    for (int64_t m = 0; m < a.components[q]; ++m) {
      const int64_t k = (r * a.components[q] + m) * f + c;
      sum += a.gv[q][k] * a.z[q][k];
      a.out_z[q][k] = a.gv[q][k] * sb;
    }
    a.out_g[at] = sum * sb * (T(1) - sb);
  }
}

/// The backward's own backward at (r, c), given hg (for ∂/∂g) and hz_q (for ∂/∂z_q):
/// ∂/∂a = ha gs silu″(a), ∂/∂gs = ha silu′(a), ∂/∂b_q = hb_q c_q σ″(b_q) + k_q σ′(b_q),
/// ∂/∂z_q = hb_q σ′(b_q) gv_q, ∂/∂gv_q = hb_q σ′(b_q) z_q + hz_q σ(b_q)
/// (c_q = Σ_m gv_q z_q, k_q = Σ_m hz_q gv_q).
template <typename T>
MLIP_HOST_DEVICE inline void gate_second_at(const GateRuleArgs<T>& a, int64_t r, int64_t c) {
  const int64_t f = a.f, F = f * (1 + a.gated);
  const T x = a.g[r * F + c], sa = gate_sigmoid(x), ha = a.hg[r * F + c];
  a.out_g[r * F + c] = ha * a.gs[r * f + c] * sa * (T(1) - sa) * (T(2) + x * (T(1) - T(2) * sa));
  a.out_gs[r * f + c] = ha * sa * (T(1) + x * (T(1) - sa));
  for (int q = 0; q < a.gated; ++q) {
    const int64_t at = r * F + f * (q + 1) + c;
    const T sb = gate_sigmoid(a.g[at]), d1 = sb * (T(1) - sb), d2 = d1 * (T(1) - T(2) * sb), hb = a.hg[at];
    T cq = T(0), kq = T(0);
    for (int64_t m = 0; m < a.components[q]; ++m) {
      const int64_t k = (r * a.components[q] + m) * f + c;
      cq += a.gv[q][k] * a.z[q][k];
      kq += a.hz[q][k] * a.gv[q][k];
      a.out_z[q][k] = hb * d1 * a.gv[q][k];
      a.out_gv[q][k] = hb * d1 * a.z[q][k] + a.hz[q][k] * sb;
    }
    a.out_g[at] = hb * cq * d2 + kq * d1;
  }
}

/// `stage` at (r, c).
template <typename T>
MLIP_HOST_DEVICE inline void gate_stage_at(GateStage stage, const GateRuleArgs<T>& a, int64_t r, int64_t c) {
  if (stage == GateStage::kForward)
    gate_forward_at(a, r, c);
  else if (stage == GateStage::kBackward)
    gate_backward_at(a, r, c);
  else
    gate_second_at(a, r, c);
}

}  // namespace mlip::models
