#include "models/equivariant/radial_message.h"

#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <memory>
#include <string>
#include <type_traits>

#include "error.h"
#include "models/kernels/host_tensor.h"
#include "models/equivariant/radial_mlp.h"
#include "models/kernels/fast_tanh_impl.h"
#include "models/kernels/gemm.h"
#include "models/kernels/target_clones.h"

namespace mlip::models {
namespace {

/// Rows (pairs, or edges) per block: the rows of one block's MLP products (docs/equivariant.md
/// "Inference in MD").
constexpr int64_t kBlockRows = 64;

using Term = ContractionTerm;

/// radial_message_keep_weights: -1 the size rule, 0 recompute, 1 keep.
std::atomic<int> keep_weights_mode{-1};

/// Whether the backward pass keeps W between its passes (radial_message.h: kKeptWeightBytes).
bool keep_weights_between_passes(bool float32, int64_t bytes_per_pair) {
  const int mode = keep_weights_mode.load();
  return mode < 0 ? float32 && bytes_per_pair <= kKeptWeightBytes : mode == 1;
}

/// The operands of the fused kernels, as raw host pointers.
template <typename T>
struct FusedArgs {
  const Term* terms;
  int64_t nterms, H, D, S, P, f;
  const int64_t *centre, *neighbor, *centre_offsets, *by_neighbor, *neighbor_offsets, *pair;
  const T* basis;                  ///< [Q, widths[0]]
  std::vector<const T*> weights;   ///< layer k: [widths[k], widths[k + 1]], already divided by its divisor
  std::vector<int64_t> widths;     ///< num_bessels, the hidden widths, P·f
  const T *X, *Y;                  ///< [N, D, f], [E, H]
  const T* G;                      ///< backward: dL/dA [N, S, f]
};

/// One thread's buffers for a block of rows: the MLP's input rows (when gathered), each hidden
/// layer's pre-activation, the activations and their gradients (ping-pong), and the block's
/// radial weights and their gradient.
template <typename T>
struct Scratch {
  std::vector<T> input, w, grad_w, act[2], grad[2];
  std::vector<std::vector<T>> pre;
  explicit Scratch(const FusedArgs<T>& a) {
    int64_t widest = 0;
    for (int64_t w : a.widths) widest = std::max(widest, w);
    input.resize(size_t(kBlockRows * a.widths.front()));
    w.resize(size_t(kBlockRows * a.widths.back()));
    grad_w.resize(w.size());
    for (int k = 0; k < 2; ++k) act[k].resize(size_t(kBlockRows * widest)), grad[k].resize(act[k].size());
    pre.resize(a.widths.size() - 2);
    for (size_t k = 0; k < pre.size(); ++k) pre[k].resize(size_t(kBlockRows * a.widths[k + 1]));
  }
};

/// σ(x) = (1 + tanh(x / 2)) / 2, by the vectorisable tanh of models/kernels/fast_tanh.h.
template <typename T>
MLIP_INLINE T sigmoid(T x) {
  return T(0.5) * (T(1) + detail::tanh_value(T(0.5) * x));
}

/// act = silu(pre) = pre σ(pre) over n values.
template <typename T>
MLIP_INLINE void silu_range(const T* __restrict__ pre, T* __restrict__ act, int64_t n) {
  for (int64_t q = 0; q < n; ++q) act[q] = pre[q] * sigmoid(pre[q]);
}

/// g *= silu'(pre) = σ(pre) (1 + pre (1 - σ(pre))) over n values.
template <typename T>
MLIP_INLINE void silu_gradient_range(const T* __restrict__ pre, T* __restrict__ g, int64_t n) {
  for (int64_t q = 0; q < n; ++q) {
    const T s = sigmoid(pre[q]);
    g[q] *= s * (T(1) + pre[q] * (T(1) - s));
  }
}

MLIP_CLONES void silu_of(const double* pre, double* act, int64_t n) { silu_range(pre, act, n); }
MLIP_CLONES void silu_of(const float* pre, float* act, int64_t n) { silu_range(pre, act, n); }
MLIP_CLONES void silu_gradient_of(const double* pre, double* g, int64_t n) { silu_gradient_range(pre, g, n); }
MLIP_CLONES void silu_gradient_of(const float* pre, float* g, int64_t n) { silu_gradient_range(pre, g, n); }

/// The MLP of `rows` pairs from their basis rows `in` [rows, num_bessels]: the radial weights
/// w [rows, P·f], and each hidden layer's pre-activation in s.pre.
template <typename T>
void mlp_forward(const FusedArgs<T>& a, Scratch<T>& s, int64_t rows, const T* in, T* w) {
  const size_t hidden = a.widths.size() - 2;
  for (size_t k = 0; k < hidden; ++k) {
    const int64_t fan_in = a.widths[k], fan_out = a.widths[k + 1];
    T* pre = s.pre[k].data();
    gemm<T>(false, false, rows, fan_out, fan_in, T(1), in, fan_in, a.weights[k], fan_out, T(0), pre, fan_out);
    T* act = s.act[k % 2].data();
    silu_of(pre, act, rows * fan_out);
    in = act;
  }
  const int64_t fan_in = a.widths[hidden], fan_out = a.widths.back();
  gemm<T>(false, false, rows, fan_out, fan_in, T(1), in, fan_in, a.weights[hidden], fan_out, T(0), w, fan_out);
}

/// From s.grad_w [rows, P·f] back to the basis rows: out [rows, num_bessels].
template <typename T>
void mlp_backward(const FusedArgs<T>& a, Scratch<T>& s, int64_t rows, T* out) {
  const size_t hidden = a.widths.size() - 2;
  const T* g = s.grad_w.data();
  int64_t g_width = a.widths.back();
  for (size_t k = hidden + 1; k-- > 0;) {
    // g [rows, widths[k + 1]] times weights[k]ᵀ: the gradient by layer k's input.
    const int64_t fan_in = a.widths[k];
    T* next = k == 0 ? out : s.grad[k % 2].data();
    gemm<T>(false, true, rows, fan_in, g_width, T(1), g, g_width, a.weights[k], g_width, T(0), next, fan_in);
    if (k == 0) break;
    // Through the SiLU of hidden layer k - 1: silu'(x) = σ(x) (1 + x (1 - σ(x))).
    silu_gradient_of(s.pre[k - 1].data(), next, rows * fan_in);
    g = next;
    g_width = fan_in;
  }
}

/// Messages of the edges [e0, e1) (all of them centred in this thread's range), each with its
/// pair's radial weights W[pair[e]]: out[i_e, s] += c Y[e, m] W[q_e, p] X[j_e, d].
template <typename T>
MLIP_INLINE void messages_range(const FusedArgs<T>& a, const T* W, int64_t e0, int64_t e1, T* out) {
  const int64_t f = a.f, pf = a.P * f;
  for (int64_t e = e0; e < e1; ++e) {
    const T* x = a.X + a.neighbor[e] * a.D * f;
    const T* w = W + a.pair[e] * pf;
    T* o = out + a.centre[e] * a.S * f;
    for (int64_t t = 0; t < a.nterms; ++t) {
      const Term& q = a.terms[t];
      const T cy = T(q.c) * a.Y[e * a.H + q.m];
      T* __restrict__ ov = o + q.s * f;
      const T* __restrict__ xv = x + q.d * f;
      const T* __restrict__ wv = w + q.p * f;
      for (int64_t k = 0; k < f; ++k) ov[k] += cy * wv[k] * xv[k];
    }
  }
}

/// The radial gradient of the pairs [q0, q0 + rows), from G = dL/dA: for each pair, the sum over
/// its edges (edge_offsets/edges_by_pair, in edge order) of ∂L/∂W[p] = Σ c Y[e, m] G[i_e, s] X[j_e, d];
/// grad_w [rows, P·f] is added to.
template <typename T>
MLIP_INLINE void radial_gradient_block(const FusedArgs<T>& a, const int64_t* edge_offsets,
                                       const int64_t* edges_by_pair, int64_t q0, int64_t rows, T* grad_w) {
  const int64_t f = a.f;
  for (int64_t r = 0; r < rows; ++r) {
    T* gw = grad_w + r * a.P * f;
    for (int64_t k = edge_offsets[q0 + r]; k < edge_offsets[q0 + r + 1]; ++k) {
      const int64_t e = edges_by_pair[k];
      const T* g = a.G + a.centre[e] * a.S * f;
      const T* x = a.X + a.neighbor[e] * a.D * f;
      for (int64_t t = 0; t < a.nterms; ++t) {
        const Term& q = a.terms[t];
        const T cy = T(q.c) * a.Y[e * a.H + q.m];
        const T* __restrict__ gv = g + q.s * f;
        const T* __restrict__ xv = x + q.d * f;
        T* __restrict__ gwv = gw + q.p * f;
        for (int64_t c = 0; c < f; ++c) gwv[c] += cy * gv[c] * xv[c];
      }
    }
  }
}

/// The adjoint by the inputs of the edges by_neighbor[k0 .. k0 + rows) (all with neighbours in
/// this thread's range), from G = dL/dA: dX[j_e, d] += c Y W G[i_e, s]; dY[e, m] += c Σ_channels
/// G W X (the channel sum in 8 interleaved partial sums added in a fixed order). The edges'
/// radial weights: row pair[e] of w_rows [Q, P·f] when by_pair, else row r of w_rows [rows, P·f].
template <typename T>
MLIP_INLINE void input_adjoint_block(const FusedArgs<T>& a, const T* w_rows, bool by_pair, int64_t k0, int64_t rows,
                                     T* dX, T* dY) {
  constexpr int64_t kLanes = 8;
  const int64_t f = a.f, pf = a.P * f;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t e = a.by_neighbor[k0 + r], atom = a.neighbor[e];
    const T* g = a.G + a.centre[e] * a.S * f;
    const T* x = a.X + atom * a.D * f;
    const T* w = w_rows + (by_pair ? a.pair[e] : r) * pf;
    for (int64_t t = 0; t < a.nterms; ++t) {
      const Term& q = a.terms[t];
      const T c = T(q.c), cy = c * a.Y[e * a.H + q.m];
      const T* __restrict__ gv = g + q.s * f;
      const T* __restrict__ xv = x + q.d * f;
      const T* __restrict__ wv = w + q.p * f;
      if (dX != nullptr) {
        T* __restrict__ dxv = dX + (atom * a.D + q.d) * f;
        for (int64_t l = 0; l < f; ++l) dxv[l] += cy * wv[l] * gv[l];
      }
      if (dY != nullptr) {
        T lanes[kLanes] = {};
        int64_t l = 0;
        for (; l + kLanes <= f; l += kLanes)
          for (int64_t n = 0; n < kLanes; ++n) lanes[n] += gv[l + n] * wv[l + n] * xv[l + n];
        for (int64_t n = 0; l < f; ++l, ++n) lanes[n] += gv[l] * wv[l] * xv[l];
        T sum = 0;
        for (int64_t n = 0; n < kLanes; ++n) sum += lanes[n];
        dY[e * a.H + q.m] += c * sum;
      }
    }
  }
}

#define MLIP_FUSED_CLONES(T)                                                                                      \
  MLIP_CLONES void messages_of(const FusedArgs<T>& a, const T* W, int64_t e0, int64_t e1, T* out) {                \
    messages_range(a, W, e0, e1, out);                                                                             \
  }                                                                                                                \
  MLIP_CLONES void radial_gradient_of(const FusedArgs<T>& a, const int64_t* offsets, const int64_t* edges,        \
                                      int64_t q0, int64_t rows, T* grad_w) {                                       \
    radial_gradient_block(a, offsets, edges, q0, rows, grad_w);                                                    \
  }                                                                                                                \
  MLIP_CLONES void input_adjoint_of(const FusedArgs<T>& a, const T* w, bool by_pair, int64_t k0, int64_t rows,     \
                                    T* dX, T* dY) {                                                                \
    input_adjoint_block(a, w, by_pair, k0, rows, dX, dY);                                                          \
  }
MLIP_FUSED_CLONES(double)
MLIP_FUSED_CLONES(float)

template <typename T>
FusedArgs<T> args_of(const std::vector<Term>& terms, const ContractionTables& t, const torch::Tensor& basis,
                     const std::vector<torch::Tensor>& weights, const torch::Tensor& x, const torch::Tensor& y) {
  FusedArgs<T> a{};
  a.terms = terms.data();
  a.nterms = int64_t(terms.size());
  a.H = t.sizes[0], a.D = t.sizes[1], a.S = t.sizes[2], a.P = t.sizes[3], a.f = x.size(2);
  a.centre = t.centre.data_ptr<int64_t>(), a.neighbor = t.neighbor.data_ptr<int64_t>();
  a.centre_offsets = t.centre_offsets.data_ptr<int64_t>(), a.by_neighbor = t.by_neighbor.data_ptr<int64_t>();
  a.neighbor_offsets = t.neighbor_offsets.data_ptr<int64_t>(), a.pair = t.pair.data_ptr<int64_t>();
  a.basis = basis.data_ptr<T>();
  a.widths.push_back(basis.size(1));
  for (const auto& w : weights) a.weights.push_back(w.data_ptr<T>()), a.widths.push_back(w.size(1));
  a.X = x.data_ptr<T>(), a.Y = y.data_ptr<T>();
  return a;
}

/// Calls visit(scratch, q0, rows) for each block of kBlockRows consecutive pairs, in parallel
/// (one Scratch per thread's share). The blocks are fixed by the pair count alone, so every
/// pair's weights come from the same products for any number of threads (a product's rounding
/// may depend on its row count).
template <typename T, typename Visit>
void for_each_pair_block(const FusedArgs<T>& a, int64_t npairs, Visit visit) {
  const int64_t blocks = (npairs + kBlockRows - 1) / kBlockRows;
  at::parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
    Scratch<T> s(a);
    for (int64_t b = b0; b < b1; ++b) visit(s, b * kBlockRows, std::min(kBlockRows, npairs - b * kBlockRows));
  });
}

/// Uninitialised host storage for n values.
template <typename T>
std::unique_ptr<T[]> uninitialised(int64_t n) {
  return std::unique_ptr<T[]>(new T[size_t(std::max<int64_t>(n, 1))]);
}

/// The radial weights of every pair, W [Q, P·f], the MLP run once a pair.
template <typename T>
std::unique_ptr<T[]> pair_weights(const FusedArgs<T>& a, int64_t npairs) {
  const int64_t nb = a.widths.front(), pf = a.widths.back();
  auto W = uninitialised<T>(npairs * pf);
  for_each_pair_block(a, npairs, [&](Scratch<T>& s, int64_t q0, int64_t rows) {
    mlp_forward(a, s, rows, a.basis + q0 * nb, W.get() + q0 * pf);
  });
  return W;
}

template <typename T>
torch::Tensor forward_kernel(const FusedArgs<T>& a, int64_t natoms, int64_t npairs,
                             const torch::TensorOptions& options) {
  const auto W = pair_weights(a, npairs);
  torch::Tensor out = torch::zeros({natoms, a.S, a.f}, options);
  T* o = out.data_ptr<T>();
  at::parallel_for(0, natoms, 16, [&](int64_t n0, int64_t n1) {
    messages_of(a, W.get(), a.centre_offsets[n0], a.centre_offsets[n1], o);
  });
  return out;
}

/// The edges of each pair in edge order, as offsets [Q + 1] into a list [E] (a counting sort of `pair`).
void edges_by_pair(const int64_t* pair, int64_t nedges, int64_t npairs, std::vector<int64_t>& offsets,
                   std::vector<int64_t>& edges) {
  offsets.assign(size_t(npairs + 1), 0);
  for (int64_t e = 0; e < nedges; ++e) ++offsets[size_t(pair[e] + 1)];
  for (int64_t q = 0; q < npairs; ++q) offsets[size_t(q + 1)] += offsets[size_t(q)];
  edges.resize(size_t(nedges));
  std::vector<int64_t> next(offsets.begin(), offsets.end() - 1);
  for (int64_t e = 0; e < nedges; ++e) edges[size_t(next[size_t(pair[e])]++)] = e;
}

/// Copies the basis rows of the edges of one block into s.input (edge_of(r): the block's r-th edge).
template <typename T, typename EdgeOf>
void gather_basis(const FusedArgs<T>& a, Scratch<T>& s, int64_t rows, EdgeOf edge_of) {
  const int64_t nb = a.widths.front();
  for (int64_t r = 0; r < rows; ++r) {
    const T* src = a.basis + a.pair[edge_of(r)] * nb;
    std::copy(src, src + nb, s.input.data() + r * nb);
  }
}

/// The blocks of kBlockRows consecutive places in the neighbour order that meet [begin, end):
/// each block's MLP runs on all of its rows (of `total`), whichever thread asks, so that every
/// row's weights come from the same product for any number of threads; `visit(start, rows, r0,
/// r1)` then handles the rows [r0, r1) of the block that lie in [begin, end).
template <typename Visit>
void for_each_edge_block(int64_t begin, int64_t end, int64_t total, Visit visit) {
  for (int64_t start = begin / kBlockRows * kBlockRows; start < end; start += kBlockRows) {
    const int64_t rows = std::min(kBlockRows, total - start);
    visit(start, rows, std::max(begin, start) - start, std::min(end, start + rows) - start);
  }
}

/// dL/d(basis) [Q, nb], dL/dx [N, D, f], dL/dy [E, H] (each only where `need` says). Two passes:
/// over blocks of pairs, the MLP once a pair, the radial gradient summed over the pair's edges
/// and the MLP's backward pass to the pair's basis row; then over the edges in neighbour order,
/// the partials by x and y, with each pair's weights kept from the first pass where they take at
/// most kKeptWeightBytes a pair (else the MLP runs again there, per block of edges).
template <typename T>
std::vector<torch::Tensor> backward_kernel(const FusedArgs<T>& a, int64_t natoms, int64_t npairs, const bool need[3],
                                           const torch::TensorOptions& options) {
  const int64_t nedges = a.neighbor_offsets[natoms], nb = a.widths.front(), pf = a.widths.back();
  torch::Tensor grad_basis = need[0] ? torch::empty({npairs, nb}, options) : torch::Tensor();
  torch::Tensor grad_x = need[1] ? torch::zeros({natoms, a.D, a.f}, options) : torch::Tensor();
  torch::Tensor grad_y = need[2] ? torch::zeros({nedges, a.H}, options) : torch::Tensor();
  T* gb = need[0] ? grad_basis.data_ptr<T>() : nullptr;
  T* gx = need[1] ? grad_x.data_ptr<T>() : nullptr;
  T* gy = need[2] ? grad_y.data_ptr<T>() : nullptr;
  const bool inputs = gx != nullptr || gy != nullptr;
  const bool keep = inputs && keep_weights_between_passes(std::is_same_v<T, float>, int64_t(pf * sizeof(T)));
  std::unique_ptr<T[]> W = keep ? uninitialised<T>(npairs * pf) : nullptr;
  if (gb != nullptr || keep) {
    std::vector<int64_t> offsets, edges;
    if (gb != nullptr) edges_by_pair(a.pair, nedges, npairs, offsets, edges);
    for_each_pair_block(a, npairs, [&](Scratch<T>& s, int64_t q0, int64_t rows) {
      mlp_forward(a, s, rows, a.basis + q0 * nb, keep ? W.get() + q0 * pf : s.w.data());
      if (gb == nullptr) return;
      std::fill(s.grad_w.begin(), s.grad_w.begin() + rows * pf, T(0));
      radial_gradient_of(a, offsets.data(), edges.data(), q0, rows, s.grad_w.data());
      mlp_backward(a, s, rows, gb + q0 * nb);
    });
  }
  if (!inputs) return {grad_basis, grad_x, grad_y};
  at::parallel_for(0, natoms, 16, [&](int64_t a0, int64_t a1) {
    const int64_t k0 = a.neighbor_offsets[a0], k1 = a.neighbor_offsets[a1];
    if (keep) return input_adjoint_of(a, W.get(), true, k0, k1 - k0, gx, gy);
    Scratch<T> s(a);
    for_each_edge_block(k0, k1, nedges, [&](int64_t start, int64_t rows, int64_t r0, int64_t r1) {
      auto edge_of = [&](int64_t r) { return a.by_neighbor[start + r]; };
      gather_basis(a, s, rows, edge_of);
      mlp_forward(a, s, rows, s.input.data(), s.w.data());
      input_adjoint_of(a, s.w.data() + r0 * pf, false, start + r0, r1 - r0, gx, gy);
    });
  });
  return {grad_basis, grad_x, grad_y};
}

ContractionTables tables_from(const std::vector<torch::Tensor>& e, const std::vector<torch::Tensor>& coupling,
                              const std::vector<int64_t>& sizes) {
  ContractionTables t;
  t.centre = e[0], t.neighbor = e[1], t.centre_offsets = e[2], t.by_neighbor = e[3], t.neighbor_offsets = e[4];
  t.pair = e[5], t.pair_edge = e[6];
  t.terms = coupling[0], t.coefficients = coupling[1];
  t.sizes = sizes;
  return t;
}

/// The autograd node: differentiable by basis, x and y; the (scaled) weights and the tables
/// travel as saved data.
class RadialMessage : public torch::autograd::Function<RadialMessage> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& basis, const torch::Tensor& x,
                               const torch::Tensor& y, const std::vector<torch::Tensor>& weights,
                               const ContractionTables* tables) {
    ctx->save_for_backward({basis, x, y});
    ctx->saved_data["weights"] = weights;
    ctx->saved_data["edges"] = std::vector<torch::Tensor>{tables->centre, tables->neighbor, tables->centre_offsets,
                                                          tables->by_neighbor, tables->neighbor_offsets, tables->pair,
                                                          tables->pair_edge};
    ctx->saved_data["coupling"] = std::vector<torch::Tensor>{tables->terms, tables->coefficients};
    ctx->saved_data["sizes"] = tables->sizes;
    const std::vector<Term> terms = contraction_terms(*tables);
    const int64_t natoms = tables->centre_offsets.size(0) - 1;
    const int64_t npairs = basis.size(0);
    if (x.scalar_type() == torch::kFloat64)
      return forward_kernel(args_of<double>(terms, *tables, basis, weights, x, y), natoms, npairs, x.options());
    return forward_kernel(args_of<float>(terms, *tables, basis, weights, x, y), natoms, npairs, x.options());
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    if (torch::GradMode::is_enabled())
      throw Error("radial_message: first derivatives only (it serves MD inference); a second derivative was asked for");
    torch::autograd::variable_list out(5);
    if (!grads[0].defined()) return out;
    const auto saved = ctx->get_saved_variables();
    const ContractionTables t = tables_from(ctx->saved_data["edges"].toTensorVector(),
                                            ctx->saved_data["coupling"].toTensorVector(),
                                            ctx->saved_data["sizes"].toIntVector());
    const auto weights = ctx->saved_data["weights"].toTensorVector();
    const bool need[3] = {ctx->needs_input_grad(0), ctx->needs_input_grad(1), ctx->needs_input_grad(2)};
    const std::vector<Term> terms = contraction_terms(t);
    const int64_t natoms = t.centre_offsets.size(0) - 1, npairs = saved[0].size(0);
    const torch::Tensor g = grads[0].contiguous();
    std::vector<torch::Tensor> r;
    if (saved[1].scalar_type() == torch::kFloat64) {
      auto a = args_of<double>(terms, t, saved[0], weights, saved[1], saved[2]);
      a.G = g.data_ptr<double>();
      r = backward_kernel(a, natoms, npairs, need, saved[1].options());
    } else {
      auto a = args_of<float>(terms, t, saved[0], weights, saved[1], saved[2]);
      a.G = g.data_ptr<float>();
      r = backward_kernel(a, natoms, npairs, need, saved[1].options());
    }
    out[0] = r[0], out[1] = r[1], out[2] = r[2];
    return out;
  }
};

}  // namespace

torch::Tensor radial_message(const torch::Tensor& basis, const std::vector<torch::Tensor>& hidden,
                             const torch::Tensor& output, const std::vector<double>& hidden_divisors,
                             double output_divisor, const torch::Tensor& x, const torch::Tensor& y,
                             const ContractionTables& tables) {
  if (!tables.pair.defined() || !tables.pair_edge.defined())
    throw Error("radial_message: the edge tables need pair and pair_edge (the radial basis is per pair)");
  if (hidden.empty() || hidden.size() != hidden_divisors.size())
    throw Error("radial_message: " + std::to_string(hidden.size()) + " hidden layers but " +
                std::to_string(hidden_divisors.size()) + " divisors");
  const int64_t paths = tables.sizes.at(3), f = x.size(2);
  if (output.size(1) != paths * f)
    throw Error("radial_message: the MLP's output has " + std::to_string(output.size(1)) + " columns, expected " +
                std::to_string(paths) + " paths x " + std::to_string(f) + " channels");
  const bool cpu = on_host(x);
  if (!cpu) {  // the same function from the two operators, on any device
    const torch::Tensor w = radial_mlp(basis, hidden, output, hidden_divisors, output_divisor);
    return contract(0, {torch::Tensor(), x, w.reshape({-1, paths, f}), y}, tables);
  }
  std::vector<torch::Tensor> weights;
  for (size_t k = 0; k <= hidden.size(); ++k) {
    const torch::Tensor& w = k < hidden.size() ? hidden[k] : output;
    if (w.requires_grad())
      throw Error("radial_message: the weights must not require a gradient (it serves MD inference, where they are fixed)");
    weights.push_back((w / (k < hidden.size() ? hidden_divisors[k] : output_divisor)).to(x.scalar_type()).contiguous());
  }
  return RadialMessage::apply(basis.contiguous(), x.contiguous(), y.contiguous(), weights, &tables);
}

namespace {

torch::Tensor radial_message_op(const torch::Tensor& basis, std::vector<torch::Tensor> hidden,
                                const torch::Tensor& output, std::vector<double> hidden_divisors,
                                double output_divisor, const torch::Tensor& x, const torch::Tensor& y,
                                at::TensorList edges, const torch::Tensor& terms, const torch::Tensor& coefficients,
                                c10::IntArrayRef sizes) {
  if (edges.size() != 7)
    throw Error("mlip::radial_message: expected 7 edge tables (pair and pair_edge included), got " +
                std::to_string(edges.size()));
  const ContractionTables t = tables_from(edges.vec(), {terms, coefficients}, sizes.vec());
  return radial_message(basis, hidden, output, hidden_divisors, output_divisor, x, y, t);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(mlip, m) {
  m.def("radial_message(Tensor basis, Tensor[] hidden, Tensor output, float[] hidden_divisors, float output_divisor, "
        "Tensor x, Tensor y, Tensor[] edges, Tensor terms, Tensor coefficients, int[] sizes) -> Tensor",
        &radial_message_op);
}

void radial_message_keep_weights(std::optional<bool> force) {
  keep_weights_mode.store(force.has_value() ? int(*force) : -1);
}

void register_radial_message() {
  // The TORCH_LIBRARY_FRAGMENT block above registers the operator when this file's object is
  // linked in; calling this function makes sure it is.
}

}  // namespace mlip::models
