#include "models/equivariant/message_contraction.h"

#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "error.h"
#include "models/equivariant/contraction_rule.h"
#include "models/equivariant/grouped_terms.h"
#include "models/equivariant/host_coupling.h"
#include "models/kernels/channel_chunk.h"
#include "models/kernels/device_kernels.h"
#include "models/kernels/target_clones.h"

#ifdef MLIP_HAVE_CUDA_KERNELS
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "models/equivariant/message_contraction_cuda.h"
#endif

namespace mlip::models {
namespace {

enum Slot : int64_t { kMessages = 0, kFeatures = 1, kRadial = 2, kHarmonics = 3 };

using Term = ContractionTerm;

/// Output shape of a slot: [N, S, f], [N, D, f], [E, P, f], [E, H].
std::vector<int64_t> shape_of(int64_t slot, const ContractionTables& t, int64_t f) {
  const int64_t n = t.centre_offsets.size(0) - 1, e = t.centre.size(0);
  switch (slot) {
    case kMessages: return {n, t.sizes[2], f};
    case kFeatures: return {n, t.sizes[1], f};
    case kRadial: return {t.pair.defined() ? t.pair_edge.size(0) : e, t.sizes[3], f};
    default: return {e, t.sizes[0]};
  }
}

// The CPU kernels: each output element is written by one thread in a fixed order (the
// contraction is deterministic for any thread count); the channel loop is innermost. The terms
// are grouped by the output slot's row (TermGroups, stable: each row's terms in table order), and
// each output row is summed over its edges and terms in registers (ChunkSum,
// models/kernels/channel_chunk.h), then written once: no zero-fill of the output and no load and
// store of it per term, with the additions in the order of the term-by-term loop (the same
// bits). The range functions are inlined into target_clones wrappers (below), so each clone
// vectorises the channel loops for its instruction set.

template <typename T>
struct KernelArgs {
  const Term* terms;  // grouped by the output slot's row: row r's are [group[r], group[r + 1])
  const int64_t* group;
  int64_t nterms, H, D, S, P, f;
  const int64_t *centre, *neighbor, *centre_offsets, *by_neighbor, *neighbor_offsets;
  const int64_t* pair;  // W's row of each edge, or nullptr: row e
  const int64_t *pair_offsets, *by_pair;  // the edges of pair q: by_pair[pair_offsets[q] ..
                                          // pair_offsets[q + 1]), in edge order (radial by pair)
  const T *A, *X, *W, *Y;  // the operand of the output slot is nullptr
  T* out;
};

/// out[n, s, c0 .. c0 + width) = Σ c Y[e, m] W[e, p] X[j_e, d] over the edges e of centre n.
template <typename T, int64_t Width>
MLIP_INLINE void messages_row(const KernelArgs<T>& a, int64_t n, int64_t s, int64_t c0, int64_t width) {
  const int64_t f = a.f;
  ChunkSum<T, Width> acc(width);
  for (int64_t e = a.centre_offsets[n]; e < a.centre_offsets[n + 1]; ++e) {
    const T* x = a.X + a.neighbor[e] * a.D * f + c0;
    const T* w = a.W + (a.pair ? a.pair[e] : e) * a.P * f + c0;
    for (int64_t t = a.group[s]; t < a.group[s + 1]; ++t) {
      const Term& q = a.terms[t];
      acc.add_product(T(q.c) * a.Y[e * a.H + q.m], w + q.p * f, x + q.d * f);
    }
  }
  acc.store(a.out + (n * a.S + s) * f + c0);
}

/// The messages of the centres in [n0, n1).
template <typename T>
MLIP_INLINE void messages_range(const KernelArgs<T>& a, int64_t n0, int64_t n1) {
  for (int64_t n = n0; n < n1; ++n)
    for (int64_t s = 0; s < a.S; ++s) MLIP_OVER_CHUNKS(T, a.f, messages_row, a, n, s);
}

/// out[atom, d, c0 .. c0 + width) = Σ c Y[e, m] W[e, p] A[i_e, s] over the edges e whose
/// neighbour is atom.
template <typename T, int64_t Width>
MLIP_INLINE void features_row(const KernelArgs<T>& a, int64_t atom, int64_t d, int64_t c0, int64_t width) {
  const int64_t f = a.f;
  ChunkSum<T, Width> acc(width);
  for (int64_t k = a.neighbor_offsets[atom]; k < a.neighbor_offsets[atom + 1]; ++k) {
    const int64_t e = a.by_neighbor[k];
    const T* am = a.A + a.centre[e] * a.S * f + c0;
    const T* w = a.W + (a.pair ? a.pair[e] : e) * a.P * f + c0;
    for (int64_t t = a.group[d]; t < a.group[d + 1]; ++t) {
      const Term& q = a.terms[t];
      acc.add_product(T(q.c) * a.Y[e * a.H + q.m], w + q.p * f, am + q.s * f);
    }
  }
  acc.store(a.out + (atom * a.D + d) * f + c0);
}

/// The partial by the features of the atoms in [a0, a1).
template <typename T>
MLIP_INLINE void features_range(const KernelArgs<T>& a, int64_t a0, int64_t a1) {
  for (int64_t atom = a0; atom < a1; ++atom)
    for (int64_t d = 0; d < a.D; ++d) MLIP_OVER_CHUNKS(T, a.f, features_row, a, atom, d);
}

/// acc += Σ c Y[e, m] A[i_e, s] X[j_e, d] over the terms of path p (channels [c0, c0 + width)):
/// edge e's part of the partial by the radial weights.
template <typename T, int64_t Width>
MLIP_INLINE void radial_edge(const KernelArgs<T>& a, int64_t e, int64_t p, int64_t c0, ChunkSum<T, Width>& acc) {
  const int64_t f = a.f;
  const T* am = a.A + a.centre[e] * a.S * f + c0;
  const T* x = a.X + a.neighbor[e] * a.D * f + c0;
  for (int64_t t = a.group[p]; t < a.group[p + 1]; ++t) {
    const Term& q = a.terms[t];
    acc.add_product(T(q.c) * a.Y[e * a.H + q.m], am + q.s * f, x + q.d * f);
  }
}

/// out[e, p, c0 .. c0 + width) = edge e's part (radial_edge).
template <typename T, int64_t Width>
MLIP_INLINE void radial_row(const KernelArgs<T>& a, int64_t e, int64_t p, int64_t c0, int64_t width) {
  ChunkSum<T, Width> acc(width);
  radial_edge(a, e, p, c0, acc);
  acc.store(a.out + (e * a.P + p) * a.f + c0);
}

/// The partial by the radial weights of the edges in [e0, e1).
template <typename T>
MLIP_INLINE void radial_range(const KernelArgs<T>& a, int64_t e0, int64_t e1) {
  for (int64_t e = e0; e < e1; ++e)
    for (int64_t p = 0; p < a.P; ++p) MLIP_OVER_CHUNKS(T, a.f, radial_row, a, e, p);
}

/// out[q, p, c0 .. c0 + width) = the sum over the edges e of pair q, in edge order, of edge e's
/// part (radial_edge), each edge's part summed on its own first: the per-edge partial summed by
/// pair, bit for bit (index_add's order).
template <typename T, int64_t Width>
MLIP_INLINE void radial_pair_row(const KernelArgs<T>& a, int64_t q, int64_t p, int64_t c0, int64_t width) {
  ChunkSum<T, Width> acc(width);
  for (int64_t k = a.pair_offsets[q]; k < a.pair_offsets[q + 1]; ++k) {
    ChunkSum<T, Width> edge(width);
    radial_edge(a, a.by_pair[k], p, c0, edge);
    acc.add(edge);
  }
  acc.store(a.out + (q * a.P + p) * a.f + c0);
}

/// The partial by the radial weights of the pairs in [q0, q1).
template <typename T>
MLIP_INLINE void radial_pairs_range(const KernelArgs<T>& a, int64_t q0, int64_t q1) {
  for (int64_t q = q0; q < q1; ++q)
    for (int64_t p = 0; p < a.P; ++p) MLIP_OVER_CHUNKS(T, a.f, radial_pair_row, a, q, p);
}

/// out[e, m] = Σ_terms c Σ_c A[i_e, s, c] W[e, p, c] X[j_e, d, c] for the edges in [e0, e1). The
/// channel sum runs in 8 interleaved partial sums added in a fixed order (vectorisable,
/// deterministic).
template <typename T>
MLIP_INLINE void harmonics_range(const KernelArgs<T>& a, int64_t e0, int64_t e1) {
  constexpr int64_t kLanes = 8;
  const int64_t f = a.f;
  std::fill(a.out + e0 * a.H, a.out + e1 * a.H, T(0));
  for (int64_t e = e0; e < e1; ++e) {
    const T* am = a.A + a.centre[e] * a.S * f;
    const T* x = a.X + a.neighbor[e] * a.D * f;
    const T* w = a.W + (a.pair ? a.pair[e] : e) * a.P * f;
    for (int64_t t = 0; t < a.nterms; ++t) {
      const Term& q = a.terms[t];
      const T* __restrict__ av = am + q.s * f;
      const T* __restrict__ xv = x + q.d * f;
      const T* __restrict__ wv = w + q.p * f;
      T lanes[kLanes] = {};
      int64_t c = 0;
      for (; c + kLanes <= f; c += kLanes)
        for (int64_t l = 0; l < kLanes; ++l) lanes[l] += av[c + l] * wv[c + l] * xv[c + l];
      for (int64_t l = 0; c < f; ++c, ++l) lanes[l] += av[c] * wv[c] * xv[c];
      T sum = 0;
      for (int64_t l = 0; l < kLanes; ++l) sum += lanes[l];
      a.out[e * a.H + q.m] += T(q.c) * sum;
    }
  }
}

#define MLIP_RANGE_CLONES(T)                                                                                   \
  MLIP_CLONES void messages_of(const KernelArgs<T>& a, int64_t b0, int64_t b1) { messages_range(a, b0, b1); }   \
  MLIP_CLONES void features_of(const KernelArgs<T>& a, int64_t b0, int64_t b1) { features_range(a, b0, b1); }   \
  MLIP_CLONES void radial_of(const KernelArgs<T>& a, int64_t b0, int64_t b1) { radial_range(a, b0, b1); }       \
  MLIP_CLONES void radial_pairs_of(const KernelArgs<T>& a, int64_t b0, int64_t b1) { radial_pairs_range(a, b0, b1); } \
  MLIP_CLONES void harmonics_of(const KernelArgs<T>& a, int64_t b0, int64_t b1) { harmonics_range(a, b0, b1); }
MLIP_RANGE_CLONES(double)
MLIP_RANGE_CLONES(float)

/// The terms grouped by the row of the output slot they write (s, d, p; m for the harmonics,
/// which keep table order), each row's in table order: terms[group[r] .. group[r + 1]).
struct TermGroups {
  std::vector<Term> terms;
  std::vector<int64_t> group;
};

TermGroups grouped(const std::vector<Term>& terms, int64_t slot, int64_t rows) {
  auto row_of = [slot](const Term& q) {
    return slot == kMessages ? q.s : slot == kFeatures ? q.d : slot == kRadial ? q.p : q.m;
  };
  TermGroups g;
  g.group.assign(size_t(rows + 1), 0);
  for (const Term& q : terms) {
    const int64_t r = row_of(q);
    if (r < 0 || r >= rows)
      throw Error("message contraction: a term's row " + std::to_string(r) + " of slot " + std::to_string(slot) +
                  ", expected 0 to " + std::to_string(rows - 1));
    ++g.group[size_t(r + 1)];
  }
  for (int64_t r = 0; r < rows; ++r) g.group[size_t(r + 1)] += g.group[size_t(r)];
  g.terms.resize(terms.size());
  std::vector<int64_t> next(g.group.begin(), g.group.end() - 1);
  for (const Term& q : terms) g.terms[size_t(next[size_t(row_of(q))]++)] = q;
  return g;
}

template <typename T>
void cpu_kernel(int64_t slot, const std::vector<torch::Tensor>& op, const ContractionTables& t, torch::Tensor& out,
                int64_t f) {
  const std::vector<int64_t> rows_of_slot = {t.sizes[2], t.sizes[1], t.sizes[3], t.sizes[0]};
  const TermGroups groups = slot == kHarmonics ? TermGroups{contraction_terms(t), {}}
                                               : grouped(contraction_terms(t), slot, rows_of_slot[size_t(slot)]);
  auto ptr = [&](int64_t k) -> const T* { return k == slot ? nullptr : op[size_t(k)].template data_ptr<T>(); };
  const KernelArgs<T> a{groups.terms.data(), groups.group.data(), int64_t(groups.terms.size()), t.sizes[0],
                        t.sizes[1], t.sizes[2], t.sizes[3], f,
                        t.centre.data_ptr<int64_t>(), t.neighbor.data_ptr<int64_t>(),
                        t.centre_offsets.data_ptr<int64_t>(), t.by_neighbor.data_ptr<int64_t>(),
                        t.neighbor_offsets.data_ptr<int64_t>(), t.pair.defined() ? t.pair.data_ptr<int64_t>() : nullptr,
                        nullptr, nullptr, ptr(kMessages), ptr(kFeatures), ptr(kRadial), ptr(kHarmonics), out.data_ptr<T>()};
  const int64_t natoms = t.centre_offsets.size(0) - 1, nedges = t.centre.size(0);
  switch (slot) {
    case kMessages: at::parallel_for(0, natoms, 8, [&](int64_t b0, int64_t b1) { messages_of(a, b0, b1); }); break;
    case kFeatures: at::parallel_for(0, natoms, 8, [&](int64_t b0, int64_t b1) { features_of(a, b0, b1); }); break;
    case kRadial: {
      if (!t.pair.defined()) {
        at::parallel_for(0, nedges, 64, [&](int64_t b0, int64_t b1) { radial_of(a, b0, b1); });
        break;
      }
      // By pair: the edges of each pair (a counting sort of `pair`, edge order kept), each
      // pair's row written by one thread.
      const int64_t npairs = out.size(0);
      std::vector<int64_t> pair_offsets(size_t(npairs + 1), 0);
      std::vector<int64_t> by_pair(static_cast<size_t>(nedges));
      for (int64_t e = 0; e < nedges; ++e) {
        if (a.pair[e] < 0 || a.pair[e] >= npairs)
          throw Error("message contraction: pair[" + std::to_string(e) + "] = " + std::to_string(a.pair[e]) +
                      ", expected a pair from 0 to " + std::to_string(npairs - 1));
        ++pair_offsets[size_t(a.pair[e] + 1)];
      }
      for (int64_t q = 0; q < npairs; ++q) pair_offsets[size_t(q + 1)] += pair_offsets[size_t(q)];
      std::vector<int64_t> next(pair_offsets.begin(), pair_offsets.end() - 1);
      for (int64_t e = 0; e < nedges; ++e) by_pair[size_t(next[size_t(a.pair[e])]++)] = e;
      KernelArgs<T> b = a;
      b.pair_offsets = pair_offsets.data(), b.by_pair = by_pair.data();
      at::parallel_for(0, npairs, 32, [&](int64_t q0, int64_t q1) { radial_pairs_of(b, q0, q1); });
      break;
    }
    default: at::parallel_for(0, nedges, 64, [&](int64_t b0, int64_t b1) { harmonics_of(a, b0, b1); });
  }
}

/// `t` on `device`, without an operator call when it is there already.
torch::Tensor on_device(const torch::Tensor& t, const torch::Device& device) {
  return t.device() == device ? t : t.to(device);
}

/// The coupling of a table as a dense tensor [H, D, S] in the operands' dtype and on their
/// device, and each output component's path [S] (int64): made once per table, dtype and device
/// and kept (a GPU's step would otherwise rebuild them with a dozen small operations per call).
struct DenseCoupling {
  torch::Tensor terms, coefficients;  // the table's own tensors (held, so their identity stays theirs)
  torch::Tensor coupling, path_of;
};

std::pair<torch::Tensor, torch::Tensor> dense_coupling(const ContractionTables& t, const torch::TensorOptions& opts) {
  static std::mutex mutex;
  // Never destroyed: device tensors must not be freed by static destructors after the device's
  // runtime has gone at exit.
  static auto& made = *new std::vector<DenseCoupling>();
  const std::lock_guard<std::mutex> lock(mutex);
  for (const DenseCoupling& d : made)
    if (d.terms.is_same(t.terms) && d.coefficients.is_same(t.coefficients) &&
        d.coupling.scalar_type() == opts.dtype().toScalarType() && d.coupling.device() == opts.device())
      return {d.coupling, d.path_of};
  const int64_t H = t.sizes[0], D = t.sizes[1], S = t.sizes[2];
  const auto idx = on_device(t.terms, opts.device());
  auto coupling = torch::zeros({H, D, S}, opts);
  coupling.index_put_({idx.select(1, 0), idx.select(1, 1), idx.select(1, 2)}, t.coefficients.to(opts), true);
  auto path_of = torch::zeros({S}, idx.options());
  path_of.index_put_({idx.select(1, 2)}, idx.select(1, 3));
  constexpr size_t kMostTables = 256;  // a few per model; tests make many models
  if (made.size() == kMostTables) made.clear();
  made.push_back({t.terms, t.coefficients, coupling, path_of});
  return {coupling, path_of};
}

/// The same with LibTorch operations on any device: the dense coupling G[e] = Σ_m Y[e, m] C[m]
/// ([E, D, S]) and batched products.
torch::Tensor generic_kernel(int64_t slot, const std::vector<torch::Tensor>& op, const ContractionTables& t, int64_t f) {
  const int64_t H = t.sizes[0], D = t.sizes[1], S = t.sizes[2], P = t.sizes[3];
  const int64_t natoms = t.centre_offsets.size(0) - 1, nedges = t.centre.size(0);
  const auto any = op[slot == kHarmonics ? kRadial : kHarmonics];
  const auto opts = any.options();
  const std::pair<torch::Tensor, torch::Tensor> made = dense_coupling(t, opts);
  const torch::Tensor& coupling = made.first;  // [H, D, S]
  const torch::Tensor& path_of = made.second;  // [S]
  const auto centre = on_device(t.centre, any.device()), neighbor = on_device(t.neighbor, any.device());
  const torch::Tensor pair = t.pair.defined() ? on_device(t.pair, any.device()) : torch::Tensor();
  auto dense = [&]() { return op[kHarmonics].matmul(coupling.reshape({H, D * S})).reshape({nedges, D, S}); };
  auto weights = [&]() {  // [E, S, f]
    const torch::Tensor w = op[kRadial].index_select(1, path_of);
    return pair.defined() ? w.index_select(0, pair) : w;
  };
  switch (slot) {
    case kMessages: {
      const auto m = dense().transpose(1, 2).bmm(op[kFeatures].index_select(0, neighbor)) * weights();
      return torch::zeros({natoms, S, f}, opts).index_add(0, centre, m);
    }
    case kFeatures: {
      const auto m = dense().bmm(op[kMessages].index_select(0, centre) * weights());
      return torch::zeros({natoms, D, f}, opts).index_add(0, neighbor, m);
    }
    case kRadial: {
      const auto m = dense().transpose(1, 2).bmm(op[kFeatures].index_select(0, neighbor)) *
                     op[kMessages].index_select(0, centre);
      const auto per_edge = torch::zeros({nedges, P, f}, opts).index_add(1, path_of, m);
      if (!pair.defined()) return per_edge;
      return torch::zeros({t.pair_edge.size(0), P, f}, opts).index_add(0, pair, per_edge);
    }
    default: {
      const auto q = op[kFeatures].index_select(0, neighbor).bmm(
          (op[kMessages].index_select(0, centre) * weights()).transpose(1, 2));  // [E, D, S]
      return q.reshape({nedges, D * S}).matmul(coupling.reshape({H, D * S}).t());
    }
  }
}

/// The host twin of the CUDA kernels: every output element by the same functions
/// (contraction_rule.h), the harmonics' lanes added in the warp's order.
template <typename T>
void device_twin(int64_t slot, const ContractionRuleArgs<T>& a, int64_t rows, T* out) {
  if (slot == kHarmonics) {
    at::parallel_for(0, rows, 16, [&](int64_t e0, int64_t e1) {
      for (int64_t e = e0; e < e1; ++e)
        for (int64_t m = 0; m < a.H; ++m) {
          T lanes[kContractionLanes];
          for (int lane = 0; lane < kContractionLanes; ++lane) lanes[lane] = contraction_harmonic_lane(a, e, m, lane);
          out[e * a.H + m] = butterfly_sum(lanes);
        }
    });
    return;
  }
  const int64_t width = slot == kMessages ? a.S : slot == kFeatures ? a.D : a.P;
  at::parallel_for(0, rows, 8, [&](int64_t r0, int64_t r1) {
    for (int64_t row = r0; row < r1; ++row)
      for (int64_t column = 0; column < width; ++column)
        for (int64_t c = 0; c < a.f; ++c)
          out[(row * width + column) * a.f + c] = slot == kMessages   ? contraction_message(a, row, column, c)
                                                  : slot == kFeatures ? contraction_feature(a, row, column, c)
                                                                      : contraction_radial(a, row, column, c);
  });
}

/// Every pair index in [0, rows of W): read on the host (the twin's tables are there).
void check_pairs(const torch::Tensor& pair, int64_t npairs) {
  const int64_t* p = pair.data_ptr<int64_t>();
  for (int64_t e = 0; e < pair.size(0); ++e)
    if (p[e] < 0 || p[e] >= npairs)
      throw Error("message contraction: pair[" + std::to_string(e) + "] = " + std::to_string(p[e]) +
                  ", expected a pair from 0 to " + std::to_string(npairs - 1));
}

/// The partial of `slot` by mlip's kernels (ContractionKernel::kDevice): the CUDA kernels on a
/// CUDA device, their host twin on the CPU. By pair, the radial partial is made per edge and
/// summed over each pair's edges.
template <typename T>
torch::Tensor device_kernel(int64_t slot, const std::vector<torch::Tensor>& op, const ContractionTables& t, int64_t f) {
  const torch::Tensor& any = op[slot == kHarmonics ? kRadial : kHarmonics];
  const torch::Device device = any.device();
  // The column of each slot's row in a term (m, d, s, p), and that slot's rows.
  const int64_t column = std::array<int64_t, 4>{2, 1, 3, 0}[size_t(slot)];
  const GroupedTerms terms = grouped_terms(t.terms, t.coefficients, column, t.sizes[size_t(column)], any.options());
  const auto index = [&](const torch::Tensor& x) { return on_device(x, device).contiguous(); };
  const torch::Tensor centre = index(t.centre), neighbor = index(t.neighbor), offsets = index(t.centre_offsets),
                      by_neighbor = index(t.by_neighbor), neighbor_offsets = index(t.neighbor_offsets),
                      pair = t.pair.defined() ? index(t.pair) : torch::Tensor();
  const int64_t natoms = t.centre_offsets.size(0) - 1, nedges = t.centre.size(0);
  if (pair.defined() && device.is_cpu()) check_pairs(pair, t.pair_edge.size(0));
  ContractionRuleArgs<T> a;
  a.terms = terms.terms.data_ptr<int64_t>();
  a.coefficients = terms.coefficients.data_ptr<T>();
  a.group = terms.group.data_ptr<int64_t>();
  a.H = t.sizes[0], a.D = t.sizes[1], a.S = t.sizes[2], a.P = t.sizes[3], a.f = f;
  a.centre = centre.data_ptr<int64_t>(), a.neighbor = neighbor.data_ptr<int64_t>();
  a.centre_offsets = offsets.data_ptr<int64_t>(), a.by_neighbor = by_neighbor.data_ptr<int64_t>();
  a.neighbor_offsets = neighbor_offsets.data_ptr<int64_t>();
  a.pair = pair.defined() ? pair.data_ptr<int64_t>() : nullptr;
  auto operand = [&](int64_t k) -> const T* { return k == slot ? nullptr : op[size_t(k)].template data_ptr<T>(); };
  a.A = operand(kMessages), a.X = operand(kFeatures), a.W = operand(kRadial), a.Y = operand(kHarmonics);
  const bool by_pair = slot == kRadial && pair.defined();
  const int64_t rows = slot == kMessages || slot == kFeatures ? natoms : nedges;
  // Every element is written: no zero-fill.
  auto out = torch::empty(by_pair ? std::vector<int64_t>{nedges, a.P, f} : shape_of(slot, t, f), any.options());
  if (device.is_cpu()) {
    device_twin(slot, a, rows, out.data_ptr<T>());
  } else {
#ifdef MLIP_HAVE_CUDA_KERNELS
    const c10::cuda::CUDAGuard guard(device);
    launch_message_contraction(slot, a, rows, out.data_ptr<T>(),
                               c10::cuda::getCurrentCUDAStream(device.index()).stream());
#endif
  }
  if (!by_pair) return out;
  return torch::zeros({t.pair_edge.size(0), a.P, f}, any.options()).index_add_(0, pair, out);
}

/// Checks what device_kernel needs, then runs it in the operands' dtype.
torch::Tensor device_kernel(int64_t slot, const std::vector<torch::Tensor>& op, const ContractionTables& t, int64_t f) {
  const torch::Tensor& any = op[slot == kHarmonics ? kRadial : kHarmonics];
  require_device_kernels("message contraction", any.device());
  if (any.scalar_type() == torch::kFloat64) return device_kernel<double>(slot, op, t, f);
  if (any.scalar_type() == torch::kFloat32) return device_kernel<float>(slot, op, t, f);
  throw Error("message contraction: expected float32 or float64 operands, got " +
              std::string(c10::toString(any.scalar_type())));
}

ContractionTables tables_from(const c10::IValue& edges, const c10::IValue& coupling, const std::vector<int64_t>& sizes) {
  const auto e = edges.toTensorVector();
  const auto c = coupling.toTensorVector();
  ContractionTables t;
  t.centre = e[0], t.neighbor = e[1], t.centre_offsets = e[2], t.by_neighbor = e[3], t.neighbor_offsets = e[4];
  if (e.size() == 7) t.pair = e[5], t.pair_edge = e[6];
  t.terms = c[0], t.coefficients = c[1];
  t.sizes = sizes;
  return t;
}

/// The other three slots of `slot`, in order.
std::array<int64_t, 3> others(int64_t slot) {
  std::array<int64_t, 3> k{};
  for (int64_t s = 0, n = 0; s < 4; ++s)
    if (s != slot) k[size_t(n++)] = s;
  return k;
}

/// Autograd of one partial: its inputs are the three operands other than `slot` (in slot
/// order); its backward is three more partials (docs/equivariant.md "The training path").
class Contraction : public torch::autograd::Function<Contraction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, int64_t slot, const ContractionTables* tables,
                               const torch::Tensor& first, const torch::Tensor& second, const torch::Tensor& third) {
    ctx->saved_data["slot"] = slot;
    std::vector<torch::Tensor> edges = {tables->centre, tables->neighbor, tables->centre_offsets, tables->by_neighbor,
                                        tables->neighbor_offsets};
    if (tables->pair.defined()) edges.insert(edges.end(), {tables->pair, tables->pair_edge});
    ctx->saved_data["edges"] = edges;
    ctx->saved_data["coupling"] = std::vector<torch::Tensor>{tables->terms, tables->coefficients};
    ctx->saved_data["sizes"] = tables->sizes;
    ctx->save_for_backward({first, second, third});
    std::vector<torch::Tensor> operands(4);
    const auto k = others(slot);
    operands[size_t(k[0])] = first, operands[size_t(k[1])] = second, operands[size_t(k[2])] = third;
    return contract_kernel(slot, operands, *tables, ContractionKernel::kAuto);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const int64_t slot = ctx->saved_data["slot"].toInt();
    const ContractionTables tables =
        tables_from(ctx->saved_data["edges"], ctx->saved_data["coupling"], ctx->saved_data["sizes"].toIntVector());
    const auto saved = ctx->get_saved_variables();
    const auto k = others(slot);
    torch::autograd::variable_list out(5);  // slot, tables, then the three operands
    if (!grads[0].defined()) return out;
    std::vector<torch::Tensor> operands(4);
    for (size_t n = 0; n < 3; ++n) operands[size_t(k[n])] = saved[n];
    operands[size_t(slot)] = grads[0];
    for (size_t n = 0; n < 3; ++n)
      if (ctx->needs_input_grad(n)) out[2 + n] = contract(k[n], operands, tables);
    return out;
  }
};

torch::Tensor message_contract_op(int64_t slot, const c10::optional<torch::Tensor>& a,
                                  const c10::optional<torch::Tensor>& x, const c10::optional<torch::Tensor>& w,
                                  const c10::optional<torch::Tensor>& y, at::TensorList edges,
                                  const torch::Tensor& terms, const torch::Tensor& coefficients,
                                  c10::IntArrayRef sizes) {
  if (edges.size() != 5 && edges.size() != 7)
    throw Error("mlip::message_contract: expected 5 edge tables (or 7, with pair and pair_edge), got " +
                std::to_string(edges.size()));
  ContractionTables t;
  t.centre = edges[0], t.neighbor = edges[1], t.centre_offsets = edges[2], t.by_neighbor = edges[3];
  t.neighbor_offsets = edges[4], t.terms = terms, t.coefficients = coefficients;
  if (edges.size() == 7) t.pair = edges[5], t.pair_edge = edges[6];
  t.sizes = sizes.vec();
  return contract(slot, {a.value_or(torch::Tensor()), x.value_or(torch::Tensor()), w.value_or(torch::Tensor()),
                         y.value_or(torch::Tensor())},
                  t);
}

}  // namespace

std::vector<ContractionTerm> contraction_terms(const ContractionTables& t) {
  if (t.terms.dim() != 2 || t.terms.size(1) != 4)
    throw Error("message contraction: expected terms [T, 4], got " + c10::str(t.terms.sizes()));
  const auto host = host_coupling(t.terms, t.coefficients);
  const int64_t* ip = host->terms.data();
  const double* vp = host->coefficients.data();
  std::vector<ContractionTerm> out(size_t(host->rows()));
  for (size_t k = 0; k < out.size(); ++k) out[k] = {ip[4 * k], ip[4 * k + 1], ip[4 * k + 2], ip[4 * k + 3], vp[k]};
  return out;
}

void ContractionTables::order_by_neighbor(const torch::Tensor& neighbor, int64_t natoms, torch::Tensor& by_neighbor,
                                          torch::Tensor& neighbor_offsets) {
  by_neighbor = std::get<1>(neighbor.sort(/*stable=*/true, 0, false));
  const auto counts = torch::bincount(neighbor, {}, natoms);
  neighbor_offsets = torch::cat({torch::zeros({1}, counts.options()), counts.cumsum(0)});
}

torch::Tensor contract_kernel(int64_t slot, const std::vector<torch::Tensor>& operands, const ContractionTables& tables,
                              ContractionKernel kernel) {
  if (slot < 0 || slot > 3) throw Error("message contraction: slot must be 0..3, got " + std::to_string(slot));
  const auto& some = operands[size_t(slot == kRadial ? kFeatures : kRadial)];
  const int64_t f = some.size(-1);
  std::vector<torch::Tensor> op(4);
  for (int64_t k = 0; k < 4; ++k)
    if (k != slot) op[size_t(k)] = operands[size_t(k)].contiguous();
  if (kernel == ContractionKernel::kAuto) {
    const KernelRoute route = kernel_route(some.device());
    if (route == KernelRoute::kDeviceKernels) kernel = ContractionKernel::kDevice;
    if (route == KernelRoute::kLibTorch) kernel = ContractionKernel::kGeneric;
  }
  if (kernel == ContractionKernel::kDevice) return device_kernel(slot, op, tables, f);
  if (kernel == ContractionKernel::kGeneric || !some.device().is_cpu()) return generic_kernel(slot, op, tables, f);
  auto out = torch::empty(shape_of(slot, tables, f), some.options());  // every element written
  if (some.scalar_type() == torch::kFloat64)
    cpu_kernel<double>(slot, op, tables, out, f);
  else if (some.scalar_type() == torch::kFloat32)
    cpu_kernel<float>(slot, op, tables, out, f);
  else
    throw Error("message contraction: expected float32 or float64 operands");
  return out;
}

torch::Tensor contract(int64_t slot, const std::vector<torch::Tensor>& operands, const ContractionTables& tables) {
  if (slot < 0 || slot > 3) throw Error("message contraction: slot must be 0..3, got " + std::to_string(slot));
  const auto k = others(slot);
  return Contraction::apply(slot, &tables, operands[size_t(k[0])], operands[size_t(k[1])], operands[size_t(k[2])]);
}

TORCH_LIBRARY(mlip, m) {
  m.def("message_contract(int slot, Tensor? a, Tensor? x, Tensor? w, Tensor? y, Tensor[] edges, Tensor terms, "
        "Tensor coefficients, int[] sizes) -> Tensor",
        &message_contract_op);
}

void register_message_contraction() {
  // The TORCH_LIBRARY block above registers the operator when this file's object is linked in;
  // calling this function makes sure it is.
}

}  // namespace mlip::models
