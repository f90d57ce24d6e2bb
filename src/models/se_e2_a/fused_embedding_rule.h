#pragma once

// One neuron of se_e2_a's embedding net with its derivative d/ds, and its adjoint: the
// arithmetic shared by the CUDA kernels (fused_embedding_cuda.cu) and their host twins
// (fused_embedding.cpp), so that the CPU tests check the very code the GPU runs
// (docs/fused_kernels.md). Plain C++ and CUDA: no LibTorch header.

#include <cmath>
#include <cstdint>

#include "models/kernels/host_device.h"

namespace mlip::models {

/// The most layers an embedding net may have in the fused kernel (DeePMD-kit's default has 3).
constexpr int kMaxFusedLayers = 8;

/// An embedding net as raw pointers into its parameters, all on one device, model dtype R.
/// Layer l maps a row of width in[l] to width out[l] (docs/se_e2_a.md "Nets"):
/// y = tanh(x W + b), times idt when the layer has one, plus skip(x): nothing (skip 0), x
/// (skip 1, out = in) or concat(x, x) (skip 2, out = 2 in).
template <typename R>
struct FusedNet {
  int layers = 0;                   ///< number of layers, 1..kMaxFusedLayers
  int max_width = 0;                ///< the widest row, input included (1)
  int in[kMaxFusedLayers]{};        ///< input width of each layer
  int out[kMaxFusedLayers]{};       ///< output width of each layer
  int skip[kMaxFusedLayers]{};      ///< 0, 1 or 2 copies of the input added (above)
  const R* w[kMaxFusedLayers]{};    ///< [in, out] row-major
  const R* b[kMaxFusedLayers]{};    ///< [out]
  const R* idt[kMaxFusedLayers]{};  ///< [out], or null when the layer has none (= 1)
};

/// Where the adjoint writes, per layer l (in the inputs' memory: the device's for the kernel, the
/// host's for its twin; model dtype): the layer's input rows [q, 2, in_l] (values, then
/// derivatives d/ds), d loss / dz and d loss / dzt [q, 2, out_l], and each pair's share of
/// d loss / d idt [q, out_l] (null for a layer without idt).
template <typename R>
struct FusedAdjointScratch {
  R* inputs[kMaxFusedLayers]{};
  R* zbar[kMaxFusedLayers]{};
  R* idt_share[kMaxFusedLayers]{};
};

MLIP_HOST_DEVICE inline float fused_tanh(float x) { return tanhf(x); }
MLIP_HOST_DEVICE inline double fused_tanh(double x) { return tanh(x); }

/// The pre-activation of neuron o of layer l and its derivative: z = x W[:, o] + b[o] and
/// zt = xt W[:, o].
template <typename R>
MLIP_HOST_DEVICE inline void fused_pre_activation(const FusedNet<R>& net, int l, const R* x, const R* xt, int o, R* z,
                                                  R* zt) {
  const int in = net.in[l], out = net.out[l];
  const R* w = net.w[l];
  R value = net.b[l][o], derivative = R(0);
  for (int i = 0; i < in; ++i) {
    const R weight = w[i * out + o];
    value += x[i] * weight;
    derivative += xt[i] * weight;
  }
  *z = value;
  *zt = derivative;
}

/// Neuron o of layer l for one pair: from the layer's input row x [in] and its derivative
/// xt = dx/ds [in], the output v and its derivative t = dv/ds:
///   z = x W[:, o] + b[o], y = tanh(z), u = (1 - y^2) (xt W[:, o]),
///   v = y idt[o] + skip(x)[o], t = u idt[o] + skip(xt)[o].
template <typename R>
MLIP_HOST_DEVICE inline void fused_neuron(const FusedNet<R>& net, int l, const R* x, const R* xt, int o, R* v, R* t) {
  const int in = net.in[l];
  R z, zt;
  fused_pre_activation(net, l, x, xt, o, &z, &zt);
  R y = fused_tanh(z);
  R u = (R(1) - y * y) * zt;
  if (net.idt[l] != nullptr) {
    y *= net.idt[l][o];
    u *= net.idt[l][o];
  }
  if (net.skip[l] > 0) {  // skip 1: in == out, so o % in == o; skip 2: concat(x, x)
    y += x[o % in];
    u += xt[o % in];
  }
  *v = y;
  *t = u;
}

/// The adjoint of fused_neuron for neuron o of layer l of one pair: from the layer's input row x,
/// xt (as fused_neuron read them) and d loss / dv = vb, d loss / dt = tb of this neuron, the
/// gradients d loss / dz = *zb and d loss / d(xt W[:, o]) = *ztb, and the neuron's share of
/// d loss / d idt[o] (*idt_share: vb y + tb u, before idt; zero when the layer has none):
///   ub = tb idt, ztb = (1 - y^2) ub, zb = (1 - y^2) (vb idt - 2 y zt ub).
template <typename R>
MLIP_HOST_DEVICE inline void fused_neuron_adjoint(const FusedNet<R>& net, int l, const R* x, const R* xt, int o, R vb,
                                                  R tb, R* zb, R* ztb, R* idt_share) {
  R z, zt;
  fused_pre_activation(net, l, x, xt, o, &z, &zt);
  const R y = fused_tanh(z), slope = R(1) - y * y;
  const R idt = net.idt[l] != nullptr ? net.idt[l][o] : R(1);
  *idt_share = net.idt[l] != nullptr ? vb * y + tb * slope * zt : R(0);
  const R ub = tb * idt;
  *ztb = slope * ub;
  *zb = slope * (vb * idt - R(2) * y * zt * ub);
}

/// d loss / d x[i] and d loss / d xt[i] of layer l's input row for one pair: W[i, :] times the
/// layer's zb, ztb (rows of `out`), plus the skip's share of the layer's vb, tb (rows of `out`).
template <typename R>
MLIP_HOST_DEVICE inline void fused_input_adjoint(const FusedNet<R>& net, int l, const R* zb, const R* ztb, const R* vb,
                                                 const R* tb, int i, R* xb, R* xtb) {
  const int in = net.in[l], out = net.out[l];
  const R* w = net.w[l] + i * out;
  R value = R(0), derivative = R(0);
  for (int o = 0; o < out; ++o) {
    value += w[o] * zb[o];
    derivative += w[o] * ztb[o];
  }
  for (int h = 0; h < net.skip[l]; ++h) {
    value += vb[h * in + i];
    derivative += tb[h * in + i];
  }
  *xb = value;
  *xtb = derivative;
}

}  // namespace mlip::models
