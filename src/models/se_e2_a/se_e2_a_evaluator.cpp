#include "models/se_e2_a/se_e2_a_evaluator.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>

#include <string>
#include <type_traits>

#include "data/neighbor_list.h"
#include "error.h"
#include "models/se_e2_a/embedding_table.h"
#include "models/se_e2_a/env_row.h"
#include "models/se_e2_a/fitting_adjoint.h"
#include "models/se_e2_a/isolated_atom.h"
#include "models/se_e2_a/table_kernels.h"
#include "models/kernels/gemm.h"
#include "models/kernels/layer_kernels.h"
#include "models/kernels/layer_rule.h"

namespace mlip::models {

using at::Tensor;

namespace {

int64_t ntypes_of(const SeAConfig& c) { return int64_t(c.type_map.size()); }
int64_t ngroups_of(const SeAConfig& c) { return c.type_one_side ? ntypes_of(c) : ntypes_of(c) * ntypes_of(c); }
int64_t group_of(const SeAConfig& c, int64_t ti, int64_t t) { return c.type_one_side ? t : ti * ntypes_of(c) + t; }

/// dE/dd_ij of one pair (docs/training_path.md): gr [4] is dE/dR̂ of the pair's normalised row
/// without the embedding net's share gs through s (added to gr[0] here); dstd [4] the centre
/// type's normalisation; dr [4][3] dR/dd. d[y] = sum_a gr[a] / N_c / dstd[a] * dR[a][y].
template <typename R>
inline void pair_vector_gradient(R* gr, R gs, R inv_nc, const R* dstd, const R* dr, R d[3]) {
  gr[0] += gs;
  d[0] = d[1] = d[2] = 0;
  for (int a = 0; a < 4; ++a) {
    const R ga = gr[a] * inv_nc / dstd[a];
    for (int y = 0; y < 3; ++y) d[y] += ga * dr[a * 3 + y];
  }
}

/// The gradient tensor of a parameter, created as zeros when it does not exist yet.
Tensor& grad_of(Tensor p) {
  Tensor& g = p.mutable_grad();
  if (!g.defined()) g = at::zeros_like(p);
  return g;
}

}  // namespace

PackedEnv PackedEnv::pack(const EnvMatrix& env, const std::vector<int>& types, const SeAConfig& c, bool with_slots) {
  const int64_t n = env.rij.size(0), nc = env.rij.size(1), nt = ntypes_of(c), ng = ngroups_of(c);
  if (nc != c.nslots() || int64_t(types.size()) != n)
    throw Error("PackedEnv::pack: environment matrix of " + std::to_string(n) + " atoms x " + std::to_string(nc) +
                " slots does not match " + std::to_string(types.size()) + " atoms x " + std::to_string(c.nslots()) +
                " slots of the model");
  const Tensor real = (env.rij.select(2, 0) != 0).contiguous();
  const Tensor nlist = env.nlist.contiguous();
  const bool* is_real = real.data_ptr<bool>();
  const int64_t* nbr = nlist.data_ptr<int64_t>();
  PackedEnv out;
  out.nframes = 1;
  out.natoms = n;
  out.nslots = nc;
  out.groups.resize(size_t(ng));
  std::vector<std::vector<int64_t>> slots(static_cast<size_t>(ng));
  for (auto& g : out.groups) g.offsets.assign(size_t(n + 1), 0);
  for (int64_t i = 0; i < n; ++i) {
    const int ti = types[size_t(i)];
    int64_t off = 0;
    for (int64_t t = 0; t < nt; ++t) {
      const int64_t g = group_of(c, ti, t);
      for (int64_t k = 0; k < c.sel[size_t(t)]; ++k) {
        const int64_t s = i * nc + off + k;
        if (is_real[s] && nbr[s] >= 0) {
          slots[size_t(g)].push_back(s);
          out.groups[size_t(g)].neighbor.push_back(nbr[s]);
        }
      }
      off += c.sel[size_t(t)];
    }
    for (int64_t g = 0; g < ng; ++g) out.groups[size_t(g)].offsets[size_t(i + 1)] = int64_t(slots[size_t(g)].size());
  }
  const Tensor rij = env.rij.reshape({n * nc, 4}), drij = env.drij.reshape({n * nc, 4, 3}),
               vec = env.vec.reshape({n * nc, 3});
  for (int64_t g = 0; g < ng; ++g) {
    const Tensor idx = torch::tensor(slots[size_t(g)], torch::kInt64);
    auto& grp = out.groups[size_t(g)];
    grp.r = rij.index_select(0, idx).contiguous();
    grp.dr = drij.index_select(0, idx).contiguous();
    grp.vec = vec.index_select(0, idx).contiguous();
    if (with_slots) {
      grp.slot = idx;
      grp.neighbor_in_frame = torch::tensor(grp.neighbor, torch::kInt64);
    }
  }
  return out;
}

template <typename Real>
PackedEnv PackedEnv::from_neighbor_list(const data::NeighborList<Real>& nl, const std::vector<int>& types,
                                        const SeAConfig& c) {
  const int64_t n = nl.natoms, nt = ntypes_of(c), ng = ngroups_of(c), nc = c.nslots();
  if (int64_t(types.size()) < n || nt > kMaxNeighborTypes || int64_t(c.sel.size()) != nt)
    throw Error("PackedEnv::from_neighbor_list: " + std::to_string(types.size()) + " atom types for " +
                std::to_string(n) + " centres and " + std::to_string(c.sel.size()) + " sel entries for " +
                std::to_string(nt) + " types");
  auto offsets = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), nl.offsets);
  auto neighbor = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), nl.neighbor);
  auto shift = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), nl.shift);
  auto vector = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), nl.vector);
  auto distance = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), nl.distance);
  const int64_t ntyped = int64_t(types.size());
  for (int64_t p = 0; p < int64_t(neighbor.extent(0)); ++p)
    if (neighbor(p) < 0 || neighbor(p) >= ntyped || types[size_t(neighbor(p))] < 0 || types[size_t(neighbor(p))] >= nt)
      throw Error("PackedEnv::from_neighbor_list: neighbour " + std::to_string(neighbor(p)) +
                  " has no type in 0.." + std::to_string(nt - 1));
  std::vector<int64_t> block_start(size_t(nt + 1), 0);
  for (int64_t t = 0; t < nt; ++t) block_start[size_t(t + 1)] = block_start[size_t(t)] + c.sel[size_t(t)];
  const Real rc = Real(c.rcut), rs = Real(c.rcut_smth), inv_width = Real(1) / (rc - rs);
  auto type_of = [&](int64_t j) { return types[size_t(j)]; };
  auto start_of = [&](int64_t t) { return block_start[size_t(t)]; };

  // 1. Each centre's chosen pairs, per type block (as compute_env_matrix's slots).
  std::vector<int64_t> chosen(static_cast<size_t>(n * nc)), fill(static_cast<size_t>(n * nt));
  at::parallel_for(0, n, 64, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      int64_t truncated = 0, dropped = 0;
      select_neighbors(i, offsets, neighbor, shift, distance, type_of, start_of, int(nt), rc,
                       chosen.data() + i * nc, fill.data() + i * nt, truncated, dropped);
    }
  });
  // 2. Where each centre's pairs start in its groups.
  PackedEnv out;
  out.nframes = 1;
  out.natoms = n;
  out.nslots = nc;
  out.groups.resize(size_t(ng));
  for (auto& g : out.groups) g.offsets.assign(size_t(n + 1), 0);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t g = 0; g < ng; ++g) out.groups[size_t(g)].offsets[size_t(i + 1)] = out.groups[size_t(g)].offsets[size_t(i)];
    for (int64_t t = 0; t < nt; ++t)
      out.groups[size_t(group_of(c, types[size_t(i)], t))].offsets[size_t(i + 1)] += fill[size_t(i * nt + t)];
  }
  const auto opts = at::TensorOptions().dtype(c10::CppTypeToScalarType<Real>::value);
  for (auto& g : out.groups) {
    const int64_t pairs = g.offsets.back();
    g.neighbor.resize(size_t(pairs));
    g.r = at::empty({pairs, 4}, opts);
    g.dr = at::empty({pairs, 4, 3}, opts);
    g.vec = at::empty({pairs, 3}, opts);
  }
  // 3. The rows, written in place.
  at::parallel_for(0, n, 64, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i)
      for (int64_t t = 0; t < nt; ++t) {
        Group& g = out.groups[size_t(group_of(c, types[size_t(i)], t))];
        Real* r = g.r.template data_ptr<Real>();
        Real* dr = g.dr.template data_ptr<Real>();
        Real* vec = g.vec.template data_ptr<Real>();
        const int64_t q0 = g.offsets[size_t(i)];
        for (int64_t k = 0; k < fill[size_t(i * nt + t)]; ++k) {
          const int64_t p = chosen[size_t(i * nc + block_start[size_t(t)] + k)], q = q0 + k;
          const Real d[3] = {vector(p, 0), vector(p, 1), vector(p, 2)};
          Real row[4], drow[4][3];
          env_row(d, distance(p), rc, rs, inv_width, row, drow);
          for (int a = 0; a < 4; ++a) {
            r[q * 4 + a] = row[a];
            for (int b = 0; b < 3; ++b) dr[q * 12 + a * 3 + b] = drow[a][b];
          }
          for (int b = 0; b < 3; ++b) vec[q * 3 + b] = d[b];
          g.neighbor[size_t(q)] = neighbor(p);
        }
      }
  });
  return out;
}

template PackedEnv PackedEnv::from_neighbor_list<float>(const data::NeighborList<float>&, const std::vector<int>&,
                                                        const SeAConfig&);
template PackedEnv PackedEnv::from_neighbor_list<double>(const data::NeighborList<double>&, const std::vector<int>&,
                                                         const SeAConfig&);

PackedEnv PackedEnv::to(const torch::Device& device) const {
  PackedEnv out = *this;
  for (auto& g : out.groups)
    for (Tensor* t : {&g.r, &g.dr, &g.vec, &g.slot, &g.neighbor_in_frame})
      if (t->defined()) *t = t->to(device);
  return out;
}

PackedEnv PackedEnv::concat(const std::vector<const PackedEnv*>& frames, bool with_slots) {
  if (frames.empty()) throw Error("PackedEnv::concat: no frames");
  PackedEnv out;
  out.natoms = frames[0]->natoms;
  out.nslots = frames[0]->nslots;
  const size_t ng = frames[0]->groups.size();
  out.groups.resize(ng);
  for (const PackedEnv* f : frames) {
    if (f->natoms != out.natoms || f->groups.size() != ng)
      throw Error("PackedEnv::concat: frames of a batch must have the same atoms");
    out.nframes += f->nframes;
  }
  for (size_t g = 0; g < ng; ++g) {
    auto& dst = out.groups[g];
    std::vector<Tensor> r, dr, vec, slot, neighbor_in_frame;
    dst.offsets.push_back(0);
    int64_t atom0 = 0;
    for (const PackedEnv* f : frames) {
      const auto& src = f->groups[g];
      if (with_slots) {
        if (!src.slot.defined()) throw Error("PackedEnv::concat: a frame without slots (made by pack?)");
        // The frame's centres come after those of the frames before it.
        slot.push_back(src.slot + atom0 * f->nslots);
        neighbor_in_frame.push_back(src.neighbor_in_frame);
      }
      const int64_t pair0 = dst.offsets.back();
      for (size_t i = 1; i < src.offsets.size(); ++i) dst.offsets.push_back(pair0 + src.offsets[i]);
      for (int64_t j : src.neighbor) dst.neighbor.push_back(atom0 + j);
      r.push_back(src.r);
      dr.push_back(src.dr);
      vec.push_back(src.vec);
      atom0 += f->nframes * f->natoms;
    }
    dst.r = at::cat(r, 0);
    dst.dr = at::cat(dr, 0);
    dst.vec = at::cat(vec, 0);
    if (with_slots) {
      dst.slot = at::cat(slot, 0);
      dst.neighbor_in_frame = at::cat(neighbor_in_frame, 0);
    }
  }
  return out;
}

namespace {

/// Raw pointers to one embedding net's parameters (contiguous tensors of the module).
template <typename R>
struct EmbNet {
  const std::vector<Layer>* layers = nullptr;
  std::vector<const R*> w, b, idt;  // idt null when the layer has none
};

/// d loss / d parameters of one embedding net, accumulated by one thread.
template <typename R>
struct EmbGrad {
  std::vector<std::vector<R>> w, b, idt;
  explicit EmbGrad(const std::vector<Layer>& layers) {
    for (const Layer& L : layers) {
      w.emplace_back(size_t(L.in * L.out), R(0));
      b.emplace_back(size_t(L.out), R(0));
      idt.emplace_back(L.idt ? size_t(L.out) : size_t(0), R(0));
    }
  }
};

/// The activations of q rows through an embedding net, value and d/ds stacked: x[l] [2q, w_l]
/// (layer inputs; x[L] = [G; dG/ds]) and z[l] [2q, w_l+1] (y = tanh(x W + b), then
/// u = (1 - y^2) d(x W)/ds).
template <typename R>
struct Block {
  std::vector<std::vector<R>> x, z;
  std::vector<R> xbar, xbar_next, zbar;
};

/// Makes v hold at least n elements (never shrinks, so reuse does not re-zero it).
template <typename R>
void grow(std::vector<R>& v, int64_t n) {
  if (int64_t(v.size()) < n) v.resize(size_t(n));
}

/// Runs q inputs s[p * stride] through the first `layers` layers of the net (all when
/// negative), with their derivative d/ds. The output [G; dG/ds] is blk.x.back(); with g_out
/// and gt_out (each [q, M]) it goes there instead.
template <typename R>
void block_forward(const EmbNet<R>& net, const R* s, int64_t stride, int64_t q, Block<R>& blk, R* g_out = nullptr,
                   R* gt_out = nullptr, int64_t layers_run = -1) {
  const auto& layers = *net.layers;
  blk.x.resize(layers.size() + 1);
  blk.z.resize(layers.size());
  grow(blk.x[0], 2 * q);
  for (int64_t p = 0; p < q; ++p) {
    blk.x[0][size_t(p)] = s[p * stride];
    blk.x[0][size_t(q + p)] = R(1);
  }
  const size_t nrun = layers_run < 0 ? layers.size() : size_t(layers_run);
  for (size_t l = 0; l < nrun; ++l) {
    const Layer& L = layers[l];
    const int64_t in = L.in, out = L.out;
    auto& z = blk.z[l];
    grow(z, 2 * q * out);
    const bool last = l + 1 == layers.size() && g_out != nullptr;
    if (!last) grow(blk.x[l + 1], 2 * q * out);
    const R* x = blk.x[l].data();
    gemm<R>(false, false, 2 * q, out, in, R(1), x, in, net.w[l], out, R(0), z.data(), out);
    R* vo = last ? g_out : blk.x[l + 1].data();
    R* to = last ? gt_out : blk.x[l + 1].data() + q * out;
    layer_activation(z.data(), net.b[l], z.data() + q * out, net.idt[l], x, x + q * in, skip_copies(L), q, in, out,
                     vo, to);
  }
}

/// A compressed model's table of one embedding net (docs/se_e2_a.md "Compression: the
/// embedding nets as tables"); table null when the net is not tabulated.
template <typename R>
struct EmbTable {
  const R* table = nullptr;  // [intervals, 6, M]
  TableGrid grid;
};

/// G and dG/ds [q, M] of q inputs s[p * stride]: from the net's table when it has one (inputs
/// beyond the table through the net itself, their number added to `beyond`), else through the net.
template <typename R>
void embed(const EmbNet<R>& net, const EmbTable<R>& table, const R* s, int64_t stride, int64_t q, Block<R>& blk,
           R* g, R* gt, std::vector<int64_t>& outside, std::vector<R>& spill, int64_t& beyond) {
  if (table.table == nullptr) {
    block_forward(net, s, stride, q, blk, g, gt);
    return;
  }
  const int64_t m = net.layers->back().out;
  outside.clear();
  const int64_t missed = lookup_table(table.table, table.grid, m, s, stride, q, g, gt, outside);
  if (missed == 0) return;
  beyond += missed;
  // spill: [missed] inputs, then [missed, M] values and [missed, M] derivatives.
  grow(spill, missed * (1 + 2 * m));
  for (int64_t k = 0; k < missed; ++k) spill[size_t(k)] = s[outside[size_t(k)] * stride];
  R* sg = spill.data() + missed;
  R* sgt = sg + missed * m;
  block_forward(net, spill.data(), 1, missed, blk, sg, sgt);
  for (int64_t k = 0; k < missed; ++k) {
    const int64_t p = outside[size_t(k)];
    std::copy(sg + k * m, sg + (k + 1) * m, g + p * m);
    std::copy(sgt + k * m, sgt + (k + 1) * m, gt + p * m);
  }
}

/// A compressed net's pairs of one block located in its table (docs/se_e2_a.md "The fused
/// lookup"): interval [q] (-1 - k for the k-th pair beyond the table), offset [q], and the
/// beyond-table pairs' G and dG/ds [k, M] from the net itself.
template <typename R>
struct LocatedPairs {
  std::vector<int64_t> interval;
  std::vector<R> offset, beyond_s, beyond_g, beyond_dg;

  /// Locates the q inputs rows[p * 4] in the table; returns how many lie beyond it.
  int64_t locate(const EmbNet<R>& net, const EmbTable<R>& table, const R* rows, int64_t q, Block<R>& blk) {
    const int64_t m = net.layers->back().out;
    grow(interval, q), grow(offset, q);
    beyond_s.clear();
    for (int64_t p = 0; p < q; ++p) {
      int64_t k;
      double t;
      if (table.grid.locate(double(rows[p * 4]), k, t)) {
        interval[size_t(p)] = k;
        offset[size_t(p)] = R(t);
      } else {
        interval[size_t(p)] = -1 - int64_t(beyond_s.size());
        beyond_s.push_back(rows[p * 4]);
      }
    }
    const int64_t missed = int64_t(beyond_s.size());
    if (missed > 0) {
      grow(beyond_g, missed * m), grow(beyond_dg, missed * m);
      block_forward(net, beyond_s.data(), 1, missed, blk, beyond_g.data(), beyond_dg.data());
    }
    return missed;
  }
};

/// The adjoint of block_forward: given blk.xbar [2q, M] = (d loss / dG, d loss / dG'), adds
/// d loss / d parameters to acc. Uses the activations left by block_forward.
template <typename R>
void block_reverse(const EmbNet<R>& net, Block<R>& blk, int64_t q, EmbGrad<R>& acc) {
  const auto& layers = *net.layers;
  for (int64_t l = int64_t(layers.size()) - 1; l >= 0; --l) {
    const Layer& L = layers[size_t(l)];
    const int64_t in = L.in, out = L.out;
    const R* idt = net.idt[size_t(l)];
    const R* z = blk.z[size_t(l)].data();
    const R* xb = blk.xbar.data();
    grow(blk.zbar, 2 * q * out);
    R* zb = blk.zbar.data();
    R* gb = acc.b[size_t(l)].data();
    R* gidt = idt ? acc.idt[size_t(l)].data() : nullptr;
    layer_activation_adjoint(z, z + q * out, xb, xb + q * out, idt, q, out, zb, zb + q * out, gb, gidt);
    gemm<R>(true, false, in, out, 2 * q, R(1), blk.x[size_t(l)].data(), in, zb, out, R(1), acc.w[size_t(l)].data(), out);
    if (l == 0) break;
    grow(blk.xbar_next, 2 * q * in);
    R* xn = blk.xbar_next.data();
    gemm<R>(false, true, 2 * q, in, out, R(1), zb, out, net.w[size_t(l)], out, R(0), xn, in);
    add_skip_adjoint(xn, xb, skip_copies(L), 2 * q, in, out);
    std::swap(blk.xbar, blk.xbar_next);
  }
}


/// R̂ = (R - davg_t) / dstd_t (docs/se_e2_a.md): the normalised rows [count, 4] of `count` pairs
/// of one centre of type t from their raw rows [count, 4]; davg_of_type, dstd_of_type: [4], that
/// type's normalisation. Model dtype throughout.
template <typename R>
inline void normalise_rows(const R* raw_rows, int64_t count, const R* davg_of_type, const R* dstd_of_type,
                           R* normalised_rows) {
  for (int64_t p = 0; p < count; ++p)
    for (int a = 0; a < 4; ++a)
      normalised_rows[p * 4 + a] = (raw_rows[p * 4 + a] - davg_of_type[a]) / dstd_of_type[a];
}

/// "embed" and "contract" of one embedding net's pairs of the atoms [first, last): the net's
/// outputs G and dG/ds [q, M] of the pairs (into `output` and `slope`) from their normalised
/// rows R̂ [q, 4], then R̂_i^T G_i ([4, M]) of each atom's pairs added to its row of
/// t_rows [last - first, 4, M] (not yet divided by N_c). offsets: the net's pair offsets per
/// atom; the pairs are those from offsets[first] to offsets[last], q of them (q > 0).
template <typename R>
void embed_and_contract(const EmbNet<R>& net, const R* normalised_rows, const int64_t* offsets, int64_t first,
                        int64_t last, Block<R>& block, R* output, R* slope, R* t_rows) {
  const int64_t m = net.layers->back().out;
  const int64_t first_pair = offsets[first], q = offsets[last] - first_pair;
  block_forward(net, normalised_rows, 4, q, block, output, slope);
  for (int64_t i = first; i < last; ++i) {
    const int64_t a = offsets[i] - first_pair, qi = offsets[i + 1] - offsets[i];
    if (qi > 0)
      gemm<R>(true, false, 4, m, qi, R(1), normalised_rows + a * 4, 4, output + a * m, m, R(1),
              t_rows + (i - first) * 4 * m, m);
  }
}

/// D = T^T T< ([M, M<], the descriptor of one atom) from its T [4, M] (T< its first M< columns).
template <typename R>
inline void descriptor_of(const R* t_row, int64_t m, int64_t axis_neurons, R* descriptor) {
  gemm<R>(true, false, m, axis_neurons, 4, R(1), t_row, m, t_row, m, R(0), descriptor, axis_neurons);
}

/// The adjoint of D = T^T T< for one atom: out = beta out + T< X^T + [T X, 0] ([4, M]), the
/// T-shaped gradient for X = d/dD [M, M<] (e.g. dE/dT from dE/dD).
template <typename R>
inline void descriptor_adjoint_of(const R* t_row, const R* descriptor_gradient, int64_t m, int64_t axis_neurons,
                                  R beta, R* out) {
  gemm<R>(false, true, 4, m, axis_neurons, R(1), t_row, m, descriptor_gradient, axis_neurons, beta, out, m);
  gemm<R>(false, false, 4, axis_neurons, m, R(1), t_row, m, descriptor_gradient, axis_neurons, R(1), out, m);
}

/// The adjoint of "embed" and "contract" for q pairs of one centre, from the nets' stored outputs
/// G and dG/ds [q, M], the pairs' normalised rows R̂ [q, 4] and the centre's dE/dT [4, M]:
/// row_gradient [q, 4] = G (dE/dT)^T (dE/dR̂ without the share through s) and
/// input_gradient [q] = sum_k (R̂ dE/dT)_pk dG/ds_pk (dE/ds). `product`: scratch, [q, M].
template <typename R>
void embedding_adjoint_from_outputs(const R* output, const R* slope, const R* normalised_rows, const R* t_gradient,
                                    int64_t q, int64_t m, std::vector<R>& product, R* row_gradient,
                                    R* input_gradient) {
  grow(product, q * m);
  gemm<R>(false, true, q, 4, m, R(1), output, m, t_gradient, m, R(0), row_gradient, 4);
  gemm<R>(false, false, q, m, 4, R(1), normalised_rows, 4, t_gradient, m, R(0), product.data(), m);
  for (int64_t p = 0; p < q; ++p) {
    R gs = 0;
    const R* product_row = product.data() + p * m;
    const R* slope_row = slope + p * m;
    for (int64_t k = 0; k < m; ++k) gs += product_row[k] * slope_row[k];
    input_gradient[p] = gs;
  }
}

/// dE/dd_ij [q, 3] (eV/Å, model dtype) of q pairs of one centre of type t (pair_vector_gradient
/// of each; row_gradient [q, 4] is changed): dstd_of_type [4], dr [q, 4, 3] dR/dd.
template <typename R>
void pair_vector_gradients(R* row_gradient, const R* input_gradient, R inv_nc, const R* dstd_of_type, const R* dr,
                           int64_t q, R* pair_gradient) {
  for (int64_t p = 0; p < q; ++p) {
    R d[3];
    pair_vector_gradient(row_gradient + p * 4, input_gradient[p], inv_nc, dstd_of_type, dr + p * 12, d);
    for (int y = 0; y < 3; ++y) pair_gradient[p * 3 + y] = d[y];
  }
}

/// "contract" of a compressed net's pairs of one centre (MD only; docs/se_e2_a.md "The fused
/// lookup"): adds R̂^T G ([4, M]) to t_row with G looked up in the table and never stored, and
/// G from the net itself for the pairs beyond the table. The q pairs start at pair `first` of
/// the located block; normalised_rows [q, 4].
template <typename R>
void contract_from_table(const EmbTable<R>& table, const LocatedPairs<R>& located, int64_t first, int64_t q,
                         int64_t m, const R* normalised_rows, R* t_row) {
  table_embed_accumulate(table.table, m, located.interval.data() + first, located.offset.data() + first,
                         normalised_rows, q, t_row);
  for (int64_t p = 0; p < q; ++p) {  // pairs beyond the table: their G from the net
    const int64_t interval = located.interval[size_t(first + p)];
    if (interval >= 0) continue;
    const R* g_beyond = located.beyond_g.data() + (-1 - interval) * m;
    for (int c = 0; c < 4; ++c)
      for (int64_t k = 0; k < m; ++k) t_row[c * m + k] += normalised_rows[p * 4 + c] * g_beyond[k];
  }
}

/// The adjoint of contract_from_table for q pairs of one centre (MD only): G and dG/ds
/// recomputed from the table, fused with their adjoint, into row_gradient [q, 4] and
/// input_gradient [q] as embedding_adjoint_from_outputs gives them; t_gradient: dE/dT [4, M].
template <typename R>
void table_embedding_adjoint(const EmbTable<R>& table, const LocatedPairs<R>& located, int64_t first, int64_t q,
                             int64_t m, const R* normalised_rows, const R* t_gradient, R* row_gradient,
                             R* input_gradient) {
  const int64_t* interval = located.interval.data() + first;
  table_embed_adjoint(table.table, m, interval, located.offset.data() + first, normalised_rows, q, t_gradient,
                      row_gradient, input_gradient);
  for (int64_t p = 0; p < q; ++p) {  // pairs beyond the table: G and G' from the net
    if (interval[p] >= 0) continue;
    const R* g_beyond = located.beyond_g.data() + (-1 - interval[p]) * m;
    const R* dg_beyond = located.beyond_dg.data() + (-1 - interval[p]) * m;
    R gs = 0;
    for (int c = 0; c < 4; ++c) row_gradient[p * 4 + c] = 0;
    for (int64_t k = 0; k < m; ++k) {
      R h = 0;
      for (int c = 0; c < 4; ++c) {
        row_gradient[p * 4 + c] += g_beyond[k] * t_gradient[c * m + k];
        h += normalised_rows[p * 4 + c] * t_gradient[c * m + k];
      }
      gs += h * dg_beyond[k];
    }
    input_gradient[p] = gs;
  }
}

/// What evaluate() reads of the model, per dtype: the embedding nets, a compressed model's tables,
/// the fitting nets' parameters, the energy biases and the isolated atom's fitting output.
template <typename R>
struct EvaluationModel {
  std::vector<EmbNet<R>> nets;
  std::vector<EmbTable<R>> tables;
  std::vector<typename FittingAdjoint<R>::Params> fit_params;
  Tensor bias;                             // [ntypes] float64, eV
  const IsolatedAtomFit<R>* isolated = nullptr;  // null without isolated_energy_is_bias
  std::vector<R> charge_seeds;             // [centres] ∂E_long/∂q̃ (second pass with charges), else empty
};

/// One thread's buffers for evaluate(), reused from block to block.
template <typename R>
struct EvaluationWorkspace {
  std::vector<FittingAdjoint<R>> fits;                   // per centre type
  Block<R> block;
  std::vector<std::vector<R>> normalised_rows;           // per net: [block pairs, 4]
  std::vector<std::vector<R>> outputs, slopes;           // per net: G and dG/ds [block pairs, M]
  std::vector<LocatedPairs<R>> located;                  // per net (compressed)
  std::vector<R> t_rows, descriptors, descriptor_gradients, t_gradients, energies, charges;  // per atom of the block
  std::vector<R> product, row_gradient, input_gradient;  // per pair of one centre
  std::vector<std::vector<int64_t>> rows_of_type;        // per centre type: its atoms in the block
  int64_t beyond_tables = 0;

  EvaluationWorkspace(const std::vector<Layer>& fit_layers, int64_t ntypes, int64_t nnets)
      : normalised_rows(size_t(nnets)), outputs(size_t(nnets)), slopes(size_t(nnets)), located(size_t(nnets)),
        rows_of_type(size_t(ntypes)) {
    for (int64_t t = 0; t < ntypes; ++t) fits.emplace_back(fit_layers);
  }
};

/// What "embed" and "contract" leave in a workspace for one block (EvaluationWorkspace's fields
/// of those names): kept from evaluate()'s first pass with charges for its second when they fit
/// in kKeptEmbeddingBytes.
template <typename R>
struct EmbeddedBlock {
  std::vector<std::vector<R>> normalised_rows, outputs, slopes;
  std::vector<LocatedPairs<R>> located;
  std::vector<R> t_rows;

  /// Exchanges these with the workspace's (moving a kept block in or out; no copy).
  void swap_with(EvaluationWorkspace<R>& work) {
    std::swap(normalised_rows, work.normalised_rows);
    std::swap(outputs, work.outputs);
    std::swap(slopes, work.slopes);
    std::swap(located, work.located);
    std::swap(t_rows, work.t_rows);
  }
};

/// evaluate() with charges keeps the first pass's embedding outputs for the second while they
/// take at most this many bytes (pairs × M × 2 numbers), else makes them again.
constexpr double kKeptEmbeddingBytes = 512.0 * (1 << 20);

/// evaluate()'s results before the forces on the neighbours and the virials are summed.
template <typename R>
struct EvaluationPartials {
  std::vector<double> atomic;                  // [centres] eV
  std::vector<double> own_force;               // [centres * 3] eV/Å: sum over the centre's pairs
  std::vector<std::vector<R>> pair_gradient;   // per net: [pairs, 3] dE/dd_ij
};

}  // namespace

struct SeAEvaluator::Impl {
  SeAConfig c;
  torch::jit::Module module;
  std::vector<Layer> emb_layers, fit_layers;
  int64_t nt = 0, ng = 0, nc = 0, m = 0, ms = 0;
  double kept_embedding_bytes = kKeptEmbeddingBytes;  // evaluate() with charges

  /// Per embedding net: its outputs for the empty-slot inputs (forward() and evaluate()), and
  /// what backward() needs from forward().
  struct EmbState {
    int64_t pairs = 0;
    std::vector<int64_t> pseudo_row;  // [ntypes]: row in ge of centre type ti's empty slot, -1 if none
    std::vector<double> pseudo_s;     // inputs of the ge rows
    Tensor rh;                        // [pairs, 4] normalised rows
    Tensor g, gt;                     // [pairs, M] G and dG/ds
    Tensor ge;                        // [rows, M] G of the empty-slot inputs
    Tensor vh;                        // [pairs, 4] d loss / d gR-hat (backward)
  };
  const PackedEnv* batch = nullptr;
  int64_t nb = 0, n = 0, bn = 0;
  std::vector<int> atype;      // [B N]
  std::vector<double> e0;      // [ntypes] normalised s of an empty slot
  std::vector<int64_t> chunks;  // atom ranges [chunks[k], chunks[k+1]) processed as one block
  Tensor davg, dstd, t_mat, d_flat, gd_mat, gt_mat;
  std::vector<EmbState> emb;
  std::vector<std::vector<int64_t>> fit_index;  // per centre type: its atoms in the batch
  std::vector<FittingAdjoint<float>> fit_f;     // per centre type (float32 models)
  std::vector<FittingAdjoint<double>> fit_d;    // per centre type (float64 models)
  std::vector<Tensor> pair_gd;  // per group [pairs, 3] dE/dd_ij
  // With c.isolated_energy_is_bias: FN of an atom without neighbours, subtracted from every atom.
  std::unique_ptr<IsolatedAtomFit<float>> isolated_f;
  std::unique_ptr<IsolatedAtomFit<double>> isolated_d;
  std::vector<Tensor> held;     // contiguous parameter tensors behind the raw pointers

  Tensor attr(const std::string& name) const { return module.attr(name).toTensor(); }
  std::string emb_name(int64_t g) const {
    return c.type_one_side ? "emb_" + std::to_string(g)
                           : "emb_" + std::to_string(g / nt) + "_" + std::to_string(g % nt);
  }
  bool active(int64_t g) const { return c.sel[size_t(c.type_one_side ? g : g % nt)] > 0; }
  template <typename R>
  static at::TensorOptions options() { return at::TensorOptions().dtype(c10::CppTypeToScalarType<R>::value); }

  /// Calls f(g, state, group, p0, q) for each embedding net with pairs of centre atom i
  /// (pairs [p0, p0 + q) of that net), in neighbour-type order.
  template <typename F>
  void for_each_block(const PackedEnv& pe, int64_t i, F&& f) const {
    const int64_t ti = atype[size_t(i)];
    for (int64_t t = 0; t < nt; ++t) {
      if (c.sel[size_t(t)] == 0) continue;
      const int64_t g = group_of(c, ti, t);
      const auto& grp = pe.groups[size_t(g)];
      const int64_t p0 = grp.offsets[size_t(i)], q = grp.offsets[size_t(i + 1)] - p0;
      if (q > 0) f(g, emb[size_t(g)], grp, p0, q);
    }
  }

  template <typename R>
  std::vector<EmbNet<R>> emb_nets() {
    std::vector<EmbNet<R>> nets(static_cast<size_t>(ng));
    held.clear();
    auto ptr = [&](const std::string& name) {
      held.push_back(attr(name).contiguous());
      return static_cast<const R*>(held.back().data_ptr<R>());
    };
    for (int64_t g = 0; g < ng; ++g) {
      auto& net = nets[size_t(g)];
      net.layers = &emb_layers;
      for (size_t l = 0; l < emb_layers.size(); ++l) {
        const std::string name = emb_name(g) + "_", ls = std::to_string(l);
        net.w.push_back(ptr(name + "w" + ls));
        net.b.push_back(ptr(name + "b" + ls));
        net.idt.push_back(emb_layers[l].idt ? ptr(name + "idt" + ls) : nullptr);
      }
    }
    return nets;
  }

  /// A compressed module's tables, per net (null tables when the module has none). Call after
  /// emb_nets(), which clears `held`.
  template <typename R>
  std::vector<EmbTable<R>> emb_tables() {
    std::vector<EmbTable<R>> tables(static_cast<size_t>(ng));
    for (int64_t g = 0; g < ng; ++g) {
      const std::string name = emb_name(g);
      if (!active(g) || !module.hasattr(name + "_table")) continue;
      held.push_back(attr(name + "_table").contiguous());
      tables[size_t(g)].table = held.back().data_ptr<R>();
      const Tensor grid = attr(name + "_grid").to(at::kDouble).contiguous();
      tables[size_t(g)].grid = TableGrid::unpack(grid.data_ptr<double>());
      if (held.back().size(0) != tables[size_t(g)].grid.intervals() || held.back().size(2) != m)
        throw Error("compressed se_e2_a: the table " + name + "_table does not match its grid");
    }
    return tables;
  }

  template <typename R>
  IsolatedAtomFit<R>* isolated() {
    if constexpr (std::is_same_v<R, float>) return isolated_f.get();
    else return isolated_d.get();
  }

  /// G [M] of net g for the empty-slot input of centre type ti (after embed_empty_slots).
  template <typename R>
  const R* empty_slot_output(int64_t g, int64_t ti) const {
    const EmbState& s = emb[size_t(g)];
    return s.ge.template data_ptr<R>() + s.pseudo_row[size_t(ti)] * m;
  }

  /// With c.isolated_energy_is_bias, FN_t of an atom without neighbours for the types in
  /// `types` (docs/se_e2_a.md "Reference energies"), from the nets' empty-slot outputs
  /// (embed_empty_slots); null otherwise.
  template <typename R>
  IsolatedAtomFit<R>* isolated_forward(const std::vector<int>& types) {
    IsolatedAtomFit<R>* iso = isolated<R>();
    if (iso == nullptr) return nullptr;
    std::vector<std::vector<const R*>> empty(size_t(nt), std::vector<const R*>(size_t(nt), nullptr));
    std::vector<bool> used(size_t(nt), false);
    std::vector<typename FittingAdjoint<R>::Params> params;
    for (int t : types) used[size_t(t)] = true;
    for (int64_t ti = 0; ti < nt; ++ti) {
      params.push_back(fit_params<R>(ti));
      for (int64_t t = 0; t < nt; ++t)
        if (c.sel[size_t(t)] > 0) empty[size_t(ti)][size_t(t)] = empty_slot_output<R>(group_of(c, ti, t), ti);
    }
    iso->forward(params, e0, empty, used);
    return iso;
  }

  template <typename R>
  std::vector<FittingAdjoint<R>>& fits() {
    if constexpr (std::is_same_v<R, float>) return fit_f;
    else return fit_d;
  }

  /// The parameters of the fitting net of centre type ti.
  template <typename R>
  typename FittingAdjoint<R>::Params fit_params(int64_t ti) const {
    typename FittingAdjoint<R>::Params p;
    const std::string name = "fit_" + std::to_string(ti);
    for (size_t l = 0; l < fit_layers.size(); ++l) {
      const std::string ls = std::to_string(l);
      p.w.push_back(attr(name + "_w" + ls));
      p.b.push_back(attr(name + "_b" + ls));
      p.idt.push_back(fit_layers[l].idt ? attr(name + "_idt" + ls) : Tensor());
    }
    p.wout = attr(name + "_wout");
    p.bout = attr(name + "_bout");
    if (c.long_range.enabled) {  // the charge output (docs/long_range.md "The charge heads")
      p.wq = attr(name + "_wq");
      p.bq = attr(name + "_bq");
    }
    return p;
  }

  /// Per atom (in parallel): out_i = beta out_i + T<_i X_i^T + [T_i X_i, 0] ([4, M]), the
  /// T-shaped gradient of the symmetric product D = T^T T< for X = dE/dD; t [BN, 4, M],
  /// x [BN, M, M<].
  template <typename R>
  void sym(const R* t, const R* x, R beta, R* out) const {
    at::parallel_for(0, bn, 16, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) descriptor_adjoint_of(t + i * 4 * m, x + i * m * ms, m, ms, beta, out + i * 4 * m);
    });
  }

  // Stages shared by forward() and evaluate().

  /// Reads the normalisation davg, dstd ([ntypes, 4], model dtype) and sets e0, the normalised
  /// input s of an empty slot per centre type.
  template <typename R>
  void load_normalisation() {
    davg = attr("davg").contiguous();
    dstd = attr("dstd").contiguous();
    const R* da = davg.data_ptr<R>();
    const R* ds = dstd.data_ptr<R>();
    e0.resize(size_t(nt));
    for (int64_t t = 0; t < nt; ++t) e0[size_t(t)] = -double(da[t * 4]) / double(ds[t * 4]);
  }

  /// "embed" of the empty slots: resets `emb` and gives each active net its outputs ge [rows, M]
  /// for the empty-slot input e0 of each centre type that uses it (from a compressed model's
  /// tables too, so that a pair leaving the cutoff meets the same function; an empty slot's input
  /// is the grid's lower end, never beyond it).
  template <typename R>
  void embed_empty_slots(const std::vector<EmbNet<R>>& nets, const std::vector<EmbTable<R>>& tables) {
    emb.assign(size_t(ng), EmbState());
    for (int64_t g = 0; g < ng; ++g) {
      if (!active(g)) continue;
      EmbState& s = emb[size_t(g)];
      s.pseudo_row.assign(size_t(nt), -1);
      for (int64_t ti = 0; ti < nt; ++ti)
        if (c.type_one_side || ti == g / nt) {
          s.pseudo_row[size_t(ti)] = int64_t(s.pseudo_s.size());
          s.pseudo_s.push_back(e0[size_t(ti)]);
        }
      const std::vector<R> inputs(s.pseudo_s.begin(), s.pseudo_s.end());
      const int64_t rows = int64_t(inputs.size());
      s.ge = at::empty({rows, m}, options<R>());
      Block<R> block;
      std::vector<R> slope(size_t(rows * m)), spill;
      std::vector<int64_t> outside;
      int64_t beyond = 0;
      embed(nets[size_t(g)], tables[size_t(g)], inputs.data(), 1, rows, block, s.ge.data_ptr<R>(), slope.data(),
            outside, spill, beyond);
    }
  }

  /// Atom ranges [blocks[k], blocks[k+1]) of the atoms [0, count), each closed once it holds
  /// pairs_per_block pairs of the active nets (the last one with what is left).
  std::vector<int64_t> atom_blocks(const PackedEnv& pe, int64_t count, int64_t pairs_per_block) const {
    std::vector<int64_t> blocks(1, 0);
    int64_t pairs = 0;
    for (int64_t i = 0; i < count; ++i) {
      for (int64_t g = 0; g < ng; ++g)
        if (active(g)) pairs += pe.groups[size_t(g)].offsets[size_t(i + 1)] - pe.groups[size_t(g)].offsets[size_t(i)];
      if (pairs >= pairs_per_block || i + 1 == count) {
        blocks.push_back(i + 1);
        pairs = 0;
      }
    }
    return blocks;
  }

  /// The end of "contract" for the atoms [first, last) (t_rows [last - first, 4, M], the real
  /// pairs' R̂^T G summed): adds the empty slots in closed form (their count × e0 × G_e, row 0)
  /// and divides by N_c, giving T_i = (1/N_c) sum_j R̂_ij G_ij.
  template <typename R>
  void add_empty_slots_and_scale(const PackedEnv& pe, int64_t first, int64_t last, R* t_rows) const {
    const R inv_nc = R(1) / R(nc);
    for (int64_t i = first; i < last; ++i) {
      const int64_t ti = atype[size_t(i)];
      R* row = t_rows + (i - first) * 4 * m;
      for (int64_t t = 0; t < nt; ++t) {
        if (c.sel[size_t(t)] == 0) continue;
        const int64_t g = group_of(c, ti, t);
        const auto& off = pe.groups[size_t(g)].offsets;
        const int64_t empty = c.sel[size_t(t)] - (off[size_t(i + 1)] - off[size_t(i)]);
        if (empty > 0) {
          const R* ge = empty_slot_output<R>(g, ti);
          const R f = R(double(empty) * e0[size_t(ti)]);
          for (int64_t k = 0; k < m; ++k) row[k] += f * ge[k];
        }
      }
      for (int64_t k = 0; k < 4 * m; ++k) row[k] *= inv_nc;
    }
  }

  /// Sorts the atoms [first, last) by centre type: rows_of_type[t] gets i - first of each atom i of type t.
  void group_by_type(int64_t first, int64_t last, std::vector<std::vector<int64_t>>& rows_of_type) const {
    rows_of_type.resize(size_t(nt));
    for (auto& rows : rows_of_type) rows.clear();
    for (int64_t i = first; i < last; ++i) rows_of_type[size_t(atype[size_t(i)])].push_back(i - first);
  }

  // forward() (training) and its stages.

  template <typename R>
  Output forward(const PackedEnv& batch, const std::vector<int>& types);
  template <typename R>
  void normalise_batch_rows(const PackedEnv& pe);
  template <typename R>
  void embed_and_contract_batch(const PackedEnv& pe, const std::vector<EmbNet<R>>& nets);
  template <typename R>
  void descriptors_of_batch();
  template <typename R>
  Tensor fit_batch(const std::vector<int>& types);
  template <typename R>
  Tensor pair_gradients_of_batch(const PackedEnv& pe);
  template <typename R>
  std::vector<double> neighbour_forces_and_virials(const PackedEnv& pe, R* forces) const;

  // evaluate() (MD) and its stages.

  template <typename R>
  Evaluation evaluate(const PackedEnv& frame, const std::vector<int>& types, int64_t natoms_total, bool atom_virial,
                      ChargeCoupling* coupling);
  template <typename R>
  std::vector<int64_t> evaluation_blocks(const PackedEnv& pe, bool compressed) const;
  template <typename R>
  void evaluate_block(const PackedEnv& pe, const EvaluationModel<R>& model, int64_t first, int64_t last,
                      EvaluationWorkspace<R>& work, EvaluationPartials<R>& partials) const;
  template <typename R>
  void embed_and_contract_block(const PackedEnv& pe, const EvaluationModel<R>& model, int64_t first, int64_t last,
                                EvaluationWorkspace<R>& work) const;
  template <typename R>
  void fit_block(const EvaluationModel<R>& model, int64_t first, int64_t last, EvaluationWorkspace<R>& work,
                 std::vector<double>& atomic, double* charges = nullptr) const;
  template <typename R>
  std::vector<double> raw_charges(const PackedEnv& pe, const EvaluationModel<R>& model,
                                  const std::vector<int64_t>& blocks, std::vector<EmbeddedBlock<R>>* kept,
                                  int64_t& beyond_tables) const;
  template <typename R>
  void pair_gradients_of_block(const PackedEnv& pe, const EvaluationModel<R>& model, int64_t first, int64_t last,
                               EvaluationWorkspace<R>& work, EvaluationPartials<R>& partials) const;
  template <typename R>
  Evaluation sum_evaluation(const PackedEnv& pe, EvaluationPartials<R>& partials, int64_t natoms_total,
                            bool atom_virial) const;

  // backward() (training) and its stages.

  template <typename R>
  void backward(const Tensor& ge, const Tensor& gf, const Tensor& gv);
  template <typename R>
  Tensor force_adjoint(const Tensor& grad_forces, const Tensor& grad_virial);
  template <typename R>
  Tensor descriptor_gradient_adjoint(const Tensor& gt_bar, Tensor& t_bar) const;
  template <typename R>
  std::vector<std::vector<std::vector<R>>> fit_adjoint(const Tensor& grad_energy, const Tensor& gd_bar, Tensor& t_bar);
  template <typename R>
  void embedding_adjoint(const std::vector<EmbNet<R>>& nets, const Tensor& t_bar,
                         std::vector<std::vector<EmbGrad<R>>>& per_thread);
  template <typename R>
  void empty_slot_adjoint(const std::vector<EmbNet<R>>& nets, const Tensor& t_bar,
                          const std::vector<std::vector<std::vector<R>>>& isolated_bar, std::vector<EmbGrad<R>>& acc);
  template <typename R>
  void add_embedding_gradients(std::vector<std::vector<EmbGrad<R>>>& per_thread);
};

template <typename R>
SeAEvaluator::Output SeAEvaluator::Impl::forward(const PackedEnv& pe, const std::vector<int>& types) {
  batch = &pe;
  nb = pe.nframes, n = pe.natoms, bn = nb * n;
  if (int64_t(types.size()) != n || int64_t(pe.groups.size()) != ng)
    throw Error("se_e2_a training path: the batch does not match the model (" + std::to_string(types.size()) +
                " types for " + std::to_string(n) + " atoms, " + std::to_string(pe.groups.size()) + " nets for " +
                std::to_string(ng) + ")");
  load_normalisation<R>();
  atype.resize(size_t(bn));
  for (int64_t k = 0; k < bn; ++k) atype[size_t(k)] = types[size_t(k % n)];
  const auto nets = emb_nets<R>();
  embed_empty_slots<R>(nets, std::vector<EmbTable<R>>(size_t(ng)));
  normalise_batch_rows<R>(pe);
  // Atom chunks of ~256 pairs: one block through the nets each, small enough for the cache.
  chunks = atom_blocks(pe, bn, 256);
  embed_and_contract_batch<R>(pe, nets);
  descriptors_of_batch<R>();
  const Tensor atomic = fit_batch<R>(types);
  // dE/dT = the adjoint of D = T^T T< for dE/dD.
  gt_mat = at::empty({bn, 4, m}, options<R>());
  sym<R>(t_mat.data_ptr<R>(), gd_mat.data_ptr<R>(), R(0), gt_mat.data_ptr<R>());
  const Tensor forces = pair_gradients_of_batch<R>(pe);
  const std::vector<double> virial = neighbour_forces_and_virials<R>(pe, forces.data_ptr<R>());
  Output out;
  out.atomic = atomic.reshape({nb, n});
  out.energy = out.atomic.to(at::kDouble).sum(1);
  out.forces = forces.reshape({nb, n, 3});
  out.virial = torch::tensor(virial, torch::kFloat64).reshape({nb, 3, 3}).to(options<R>().dtype());
  return out;
}

/// forward(): the normalised rows R̂ [pairs, 4] of every active net's pairs (emb[g].rh), and
/// room for the nets' outputs G and dG/ds [pairs, M] (emb[g].g, emb[g].gt).
template <typename R>
void SeAEvaluator::Impl::normalise_batch_rows(const PackedEnv& pe) {
  const R* da = davg.data_ptr<R>();
  const R* ds = dstd.data_ptr<R>();
  for (int64_t g = 0; g < ng; ++g) {
    if (!active(g)) continue;
    const auto& grp = pe.groups[size_t(g)];
    EmbState& s = emb[size_t(g)];
    s.pairs = int64_t(grp.neighbor.size());
    s.rh = at::empty({s.pairs, 4}, options<R>());
    s.g = at::empty({s.pairs, m}, options<R>());
    s.gt = at::empty({s.pairs, m}, options<R>());
    R* rh = s.rh.data_ptr<R>();
    const R* r = grp.r.data_ptr<R>();
    const int64_t* off = grp.offsets.data();
    at::parallel_for(0, bn, 16, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t ti = atype[size_t(i)];
        normalise_rows(r + off[i] * 4, off[i + 1] - off[i], da + ti * 4, ds + ti * 4, rh + off[i] * 4);
      }
    });
  }
}

/// forward(): "embed" and "contract" chunk by chunk (in parallel): the nets' outputs G and
/// dG/ds of every pair (kept for backward()) and T_i [BN, 4, M] (t_mat).
template <typename R>
void SeAEvaluator::Impl::embed_and_contract_batch(const PackedEnv& pe, const std::vector<EmbNet<R>>& nets) {
  t_mat = at::zeros({bn, 4, m}, options<R>());
  R* tp = t_mat.data_ptr<R>();
  at::parallel_for(0, int64_t(chunks.size()) - 1, 1, [&](int64_t c0, int64_t c1) {
    Block<R> block;
    for (int64_t ch = c0; ch < c1; ++ch) {
      const int64_t i0 = chunks[size_t(ch)], i1 = chunks[size_t(ch + 1)];
      for (int64_t g = 0; g < ng; ++g) {
        if (!active(g)) continue;
        const auto& off = pe.groups[size_t(g)].offsets;
        EmbState& s = emb[size_t(g)];
        const int64_t p0 = off[size_t(i0)], q = off[size_t(i1)] - p0;
        if (q == 0) continue;
        embed_and_contract(nets[size_t(g)], s.rh.data_ptr<R>() + p0 * 4, off.data(), i0, i1, block,
                           s.g.data_ptr<R>() + p0 * m, s.gt.data_ptr<R>() + p0 * m, tp + i0 * 4 * m);
      }
      add_empty_slots_and_scale(pe, i0, i1, tp + i0 * 4 * m);
    }
  });
}

/// forward(): the descriptors D_i = T_i^T T<_i [BN, M * M<] (d_flat).
template <typename R>
void SeAEvaluator::Impl::descriptors_of_batch() {
  d_flat = at::empty({bn, m * ms}, options<R>());
  const R* tp = t_mat.data_ptr<R>();
  R* dp = d_flat.data_ptr<R>();
  at::parallel_for(0, bn, 16, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) descriptor_of(tp + i * 4 * m, m, ms, dp + i * m * ms);
  });
}

/// forward(): "fit", the fitting nets of every centre type on its atoms' descriptors. Returns the
/// atomic energies [BN] (model dtype, eV: the net's output, less the isolated atom's with
/// isolated_energy_is_bias, plus the type's bias); sets dE/dD (gd_mat [BN, M, M<]) and fit_index.
template <typename R>
Tensor SeAEvaluator::Impl::fit_batch(const std::vector<int>& types) {
  Tensor atomic = at::empty({bn}, options<R>());
  Tensor gd_flat = at::empty({bn, m * ms}, options<R>());
  const Tensor bias = attr("bias").to(at::kDouble).contiguous();
  group_by_type(0, bn, fit_index);
  const IsolatedAtomFit<R>* iso = isolated_forward<R>(types);
  R* ap = atomic.data_ptr<R>();
  for (int64_t ti = 0; ti < nt; ++ti) {
    const auto& idx = fit_index[size_t(ti)];
    if (idx.empty()) continue;
    fits<R>()[size_t(ti)].forward(fit_params<R>(ti), d_flat.data_ptr<R>(), idx.data(), int64_t(idx.size()), ap,
                                  gd_flat.data_ptr<R>());
    const R b = R(bias.data_ptr<double>()[ti]);
    if (iso != nullptr) {
      const R e_iso = iso->energy(ti);
      for (int64_t k : idx) ap[k] = ap[k] - e_iso + b;
    } else {
      for (int64_t k : idx) ap[k] += b;
    }
  }
  gd_mat = gd_flat.reshape({bn, m, ms});
  return atomic;
}

/// forward(): the adjoint of "embed" and "contract" for every pair, dE/dd_ij (pair_gd, per net
/// [pairs, 3]), from the stored G, dG/ds and dE/dT (gt_mat). Returns each atom's sum over its
/// own pairs [BN, 3] (model dtype, eV/Å), the forces before those on the neighbours.
template <typename R>
Tensor SeAEvaluator::Impl::pair_gradients_of_batch(const PackedEnv& pe) {
  const R* ds = dstd.data_ptr<R>();
  const R* gtp = gt_mat.data_ptr<R>();
  const R inv_nc = R(1) / R(nc);
  Tensor forces = at::zeros({bn, 3}, options<R>());
  R* fp = forces.data_ptr<R>();
  pair_gd.assign(size_t(ng), Tensor());
  for (int64_t g = 0; g < ng; ++g) pair_gd[size_t(g)] = at::empty({emb[size_t(g)].pairs, 3}, options<R>());
  at::parallel_for(0, bn, 8, [&](int64_t i0, int64_t i1) {
    std::vector<R> product, row_gradient, input_gradient;
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t ti = atype[size_t(i)];
      R fi[3] = {0, 0, 0};
      for_each_block(pe, i, [&](int64_t g, const EmbState& s, const PackedEnv::Group& grp, int64_t p0, int64_t qi) {
        grow(row_gradient, qi * 4);
        grow(input_gradient, qi);
        embedding_adjoint_from_outputs(s.g.data_ptr<R>() + p0 * m, s.gt.data_ptr<R>() + p0 * m,
                                       s.rh.data_ptr<R>() + p0 * 4, gtp + i * 4 * m, qi, m, product,
                                       row_gradient.data(), input_gradient.data());
        R* gd = pair_gd[size_t(g)].data_ptr<R>() + p0 * 3;
        pair_vector_gradients(row_gradient.data(), input_gradient.data(), inv_nc, ds + ti * 4,
                              grp.dr.data_ptr<R>() + p0 * 12, qi, gd);
        for (int64_t p = 0; p < qi; ++p)
          for (int y = 0; y < 3; ++y) fi[y] += gd[p * 3 + y];
      });
      for (int y = 0; y < 3; ++y) fp[i * 3 + y] = fi[y];
    }
  });
  return forces;
}

/// forward(): subtracts dE/dd_ij of every pair from the force on its neighbour (forces [BN, 3],
/// model dtype, eV/Å) and returns the virials [B, 3, 3] (float64, eV), in pair order.
template <typename R>
std::vector<double> SeAEvaluator::Impl::neighbour_forces_and_virials(const PackedEnv& pe, R* forces) const {
  std::vector<double> virial(size_t(nb * 9), 0.0);
  for (int64_t g = 0; g < ng; ++g) {
    const auto& grp = pe.groups[size_t(g)];
    if (emb[size_t(g)].pairs == 0) continue;
    const R* gd = pair_gd[size_t(g)].data_ptr<R>();
    const R* vec = grp.vec.data_ptr<R>();
    for (int64_t i = 0; i < bn; ++i) {
      double* w = virial.data() + (i / n) * 9;
      for (int64_t p = grp.offsets[size_t(i)]; p < grp.offsets[size_t(i + 1)]; ++p) {
        const int64_t j = grp.neighbor[size_t(p)];
        for (int y = 0; y < 3; ++y) forces[j * 3 + y] -= gd[p * 3 + y];
        for (int x = 0; x < 3; ++x)
          for (int y = 0; y < 3; ++y) w[x * 3 + y] -= double(vec[p * 3 + x]) * double(gd[p * 3 + y]);
      }
    }
  }
  return virial;
}

/// Inference (docs/lammps.md "se_e2_a in MD"): the stages of forward() run block by block of
/// ~kEvaluationPairs pairs, each block from its pairs' rows to their dE/dd_ij while its
/// activations are still in the cache; nothing is kept for backward(). Blocks run in parallel
/// and write disjoint ranges; forces on the neighbours and the virials are summed afterwards in
/// pair order, so the result does not depend on the number of threads.
template <typename R>
SeAEvaluator::Evaluation SeAEvaluator::Impl::evaluate(const PackedEnv& pe, const std::vector<int>& types,
                                                      int64_t natoms_total, bool atom_virial,
                                                      ChargeCoupling* coupling) {
  if ((coupling != nullptr) != c.long_range.enabled)
    throw Error(c.long_range.enabled ? "se_e2_a evaluation: the model has charges (model.long_range) and needs the "
                                       "long-range term's coupling"
                                     : "se_e2_a evaluation: a charge coupling for a model without charges");
  batch = nullptr;  // nothing to differentiate afterwards
  nb = 1, n = pe.natoms, bn = n;
  if (pe.nframes != 1 || int64_t(types.size()) != n || int64_t(pe.groups.size()) != ng || natoms_total < n)
    throw Error("se_e2_a evaluation: the frame does not match the model (" + std::to_string(types.size()) +
                " types for " + std::to_string(n) + " centres of " + std::to_string(natoms_total) + " atoms, " +
                std::to_string(pe.groups.size()) + " nets for " + std::to_string(ng) + ")");
  load_normalisation<R>();
  atype.assign(types.begin(), types.end());
  EvaluationModel<R> model;
  model.nets = emb_nets<R>();
  model.tables = emb_tables<R>();
  const bool compressed = std::any_of(model.tables.begin(), model.tables.end(),
                                      [](const EmbTable<R>& t) { return t.table != nullptr; });
  model.bias = attr("bias").to(at::kDouble).contiguous();
  for (int64_t ti = 0; ti < nt; ++ti) model.fit_params.push_back(fit_params<R>(ti));
  embed_empty_slots<R>(model.nets, model.tables);
  model.isolated = isolated_forward<R>(types);

  const std::vector<int64_t> blocks = evaluation_blocks<R>(pe, compressed);
  std::vector<double> charges;
  std::vector<EmbeddedBlock<R>> kept;  // the first pass's embedding outputs, when kept
  std::atomic<int64_t> beyond_tables{0};
  if (coupling != nullptr) {
    // First pass: the raw charges; the coupling (collective over MD's ranks) gives their seeds.
    int64_t pairs = 0;
    for (const auto& grp : pe.groups) pairs += grp.offsets[size_t(n)];
    const bool keep = double(pairs) * double(m) * 2.0 * sizeof(R) <= kept_embedding_bytes;
    int64_t beyond_first = 0;
    charges = raw_charges<R>(pe, model, blocks, keep ? &kept : nullptr, beyond_first);
    if (keep) beyond_tables += beyond_first;
    std::vector<double> gradient(size_t(n), 0.0);
    coupling->couple(charges.data(), n, gradient.data());
    model.charge_seeds.assign(gradient.begin(), gradient.end());
  }
  EvaluationPartials<R> partials;
  partials.atomic.resize(size_t(n));
  partials.own_force.resize(size_t(n) * 3);
  partials.pair_gradient.resize(size_t(ng));
  for (int64_t g = 0; g < ng; ++g) partials.pair_gradient[size_t(g)].resize(pe.groups[size_t(g)].neighbor.size() * 3);
  at::parallel_for(0, int64_t(blocks.size()) - 1, 1, [&](int64_t b0, int64_t b1) {
    EvaluationWorkspace<R> work(fit_layers, nt, ng);
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t first = blocks[size_t(b)], last = blocks[size_t(b + 1)];
      if (kept.empty()) {
        evaluate_block<R>(pe, model, first, last, work, partials);
        continue;
      }
      kept[size_t(b)].swap_with(work);  // the first pass's "embed" and "contract" of this block
      fit_block(model, first, last, work, partials.atomic);
      pair_gradients_of_block(pe, model, first, last, work, partials);
      kept[size_t(b)].swap_with(work);
      kept[size_t(b)] = EmbeddedBlock<R>();
    }
    beyond_tables += work.beyond_tables;
  });
  Evaluation out = sum_evaluation<R>(pe, partials, natoms_total, atom_virial);
  out.beyond_tables = beyond_tables.load();
  out.charges = std::move(charges);
  return out;
}

/// evaluate()'s first pass with charges: "embed", "contract" and "fit" of every block, giving
/// each centre's raw charge [n] (e). With `kept`, each block's embedding outputs are kept there
/// for the second pass (and the pairs beyond a compressed model's tables counted here); without,
/// the second pass makes them again.
template <typename R>
std::vector<double> SeAEvaluator::Impl::raw_charges(const PackedEnv& pe, const EvaluationModel<R>& model,
                                                    const std::vector<int64_t>& blocks,
                                                    std::vector<EmbeddedBlock<R>>* kept, int64_t& beyond_tables) const {
  std::vector<double> charges(size_t(n), 0.0);
  std::vector<double> atomic(size_t(n), 0.0);
  if (kept != nullptr) kept->assign(blocks.size() - 1, EmbeddedBlock<R>());
  std::atomic<int64_t> beyond{0};
  at::parallel_for(0, int64_t(blocks.size()) - 1, 1, [&](int64_t b0, int64_t b1) {
    EvaluationWorkspace<R> work(fit_layers, nt, ng);
    for (int64_t b = b0; b < b1; ++b) {
      embed_and_contract_block(pe, model, blocks[size_t(b)], blocks[size_t(b + 1)], work);
      fit_block(model, blocks[size_t(b)], blocks[size_t(b + 1)], work, atomic, charges.data());
      if (kept != nullptr) {
        // The block's buffers move into the kept block; the workspace gets fresh empty ones
        // of the same shape (one per net) for the next block.
        EmbeddedBlock<R>& k = (*kept)[size_t(b)];
        k.normalised_rows.resize(size_t(ng)), k.outputs.resize(size_t(ng)), k.slopes.resize(size_t(ng));
        k.located.resize(size_t(ng));
        k.swap_with(work);
      }
    }
    beyond += work.beyond_tables;
  });
  beyond_tables = beyond.load();
  return charges;
}

/// evaluate(): the centres' blocks, of kEvaluationPairs pairs; a compressed model keeps no
/// embedding outputs (docs/se_e2_a.md "The fused lookup"), so its blocks are sized for the
/// fitting nets instead, whose weights are then read and packed once for many atoms (about 180
/// water atoms).
template <typename R>
std::vector<int64_t> SeAEvaluator::Impl::evaluation_blocks(const PackedEnv& pe, bool compressed) const {
  constexpr int64_t kEvaluationPairs = 512;
  constexpr int64_t kCompressedEvaluationPairs = 16384, kCompressedMinimumPairs = 2048;
  int64_t block_pairs = kEvaluationPairs;
  if (compressed) {
    int64_t pairs = 0;
    for (const auto& grp : pe.groups) pairs += grp.offsets[size_t(n)];
    // As many blocks as that size needs, rounded up to a multiple of the threads (so that none
    // waits for the last block); a small box gets one block per thread, as large as it can be.
    const int64_t threads = std::max<int64_t>(1, at::get_num_threads());
    int64_t count = std::max<int64_t>(threads, (pairs + kCompressedEvaluationPairs - 1) / kCompressedEvaluationPairs);
    count = (count + threads - 1) / threads * threads;
    block_pairs = std::max<int64_t>(kCompressedMinimumPairs, (pairs + count - 1) / count);
  }
  return atom_blocks(pe, n, block_pairs);
}

/// evaluate() of the centres [first, last): "embed" and "contract", "fit", and the adjoint of
/// the first two, into the block's share of `partials`.
template <typename R>
void SeAEvaluator::Impl::evaluate_block(const PackedEnv& pe, const EvaluationModel<R>& model, int64_t first,
                                        int64_t last, EvaluationWorkspace<R>& work,
                                        EvaluationPartials<R>& partials) const {
  embed_and_contract_block(pe, model, first, last, work);
  fit_block(model, first, last, work, partials.atomic);
  pair_gradients_of_block(pe, model, first, last, work, partials);
}

/// evaluate(): "embed" and "contract" of the centres [first, last): their pairs' normalised rows
/// (work.normalised_rows), the nets' outputs G and dG/ds (work.outputs, work.slopes; a compressed
/// net's pairs located in its table instead, work.located) and T [last - first, 4, M] (work.t_rows).
template <typename R>
void SeAEvaluator::Impl::embed_and_contract_block(const PackedEnv& pe, const EvaluationModel<R>& model,
                                                  int64_t first, int64_t last, EvaluationWorkspace<R>& work) const {
  const R* da = davg.data_ptr<R>();
  const R* ds = dstd.data_ptr<R>();
  work.t_rows.assign(size_t((last - first) * 4 * m), R(0));
  for (int64_t g = 0; g < ng; ++g) {
    if (!active(g)) continue;
    const auto& off = pe.groups[size_t(g)].offsets;
    const int64_t p0 = off[size_t(first)], q = off[size_t(last)] - p0;
    if (q == 0) continue;
    const EmbTable<R>& table = model.tables[size_t(g)];
    auto& rows = work.normalised_rows[size_t(g)];
    grow(rows, q * 4);
    const R* r = pe.groups[size_t(g)].r.data_ptr<R>();
    for (int64_t i = first; i < last; ++i) {
      const int64_t ti = atype[size_t(i)];
      normalise_rows(r + off[size_t(i)] * 4, off[size_t(i + 1)] - off[size_t(i)], da + ti * 4, ds + ti * 4,
                     rows.data() + (off[size_t(i)] - p0) * 4);
    }
    if (table.table == nullptr) {
      grow(work.outputs[size_t(g)], q * m), grow(work.slopes[size_t(g)], q * m);
      embed_and_contract(model.nets[size_t(g)], rows.data(), off.data(), first, last, work.block,
                         work.outputs[size_t(g)].data(), work.slopes[size_t(g)].data(), work.t_rows.data());
      continue;
    }
    // Compressed: the lookup fused with T_i = R̂^T G; G is not kept (recomputed for the adjoint).
    LocatedPairs<R>& located = work.located[size_t(g)];
    work.beyond_tables += located.locate(model.nets[size_t(g)], table, rows.data(), q, work.block);
    for (int64_t i = first; i < last; ++i) {
      const int64_t a = off[size_t(i)] - p0;
      contract_from_table(table, located, a, off[size_t(i + 1)] - off[size_t(i)], m, rows.data() + a * 4,
                          work.t_rows.data() + (i - first) * 4 * m);
    }
  }
  add_empty_slots_and_scale(pe, first, last, work.t_rows.data());
}

/// evaluate(): "fit" of the centres [first, last): their descriptors, the fitting nets, the
/// atomic energies (float64, eV, into atomic) and dE/dT [last - first, 4, M] (work.t_gradients).
template <typename R>
void SeAEvaluator::Impl::fit_block(const EvaluationModel<R>& model, int64_t first, int64_t last,
                                   EvaluationWorkspace<R>& work, std::vector<double>& atomic, double* charges) const {
  const int64_t count = last - first;
  grow(work.descriptors, count * m * ms), grow(work.descriptor_gradients, count * m * ms), grow(work.energies, count);
  if (charges != nullptr) grow(work.charges, count);
  // With the charges' seeds (second pass): dE/dD of E_short + Σ seed_i q̃_i.
  const R* seeds = model.charge_seeds.empty() ? nullptr : model.charge_seeds.data() + first;
  work.t_gradients.assign(size_t(count * 4 * m), R(0));
  for (int64_t k = 0; k < count; ++k) descriptor_of(work.t_rows.data() + k * 4 * m, m, ms, work.descriptors.data() + k * m * ms);
  group_by_type(first, last, work.rows_of_type);
  for (int64_t ti = 0; ti < nt; ++ti) {
    const auto& rows = work.rows_of_type[size_t(ti)];
    if (rows.empty()) continue;
    work.fits[size_t(ti)].forward(model.fit_params[size_t(ti)], work.descriptors.data(), rows.data(),
                                  int64_t(rows.size()), work.energies.data(), work.descriptor_gradients.data(),
                                  charges != nullptr ? work.charges.data() : nullptr, seeds);
    if (charges != nullptr)
      for (int64_t k : rows) charges[first + k] = double(work.charges[size_t(k)]);
    const IsolatedAtomFit<R>* iso = model.isolated;
    const R e_iso = iso != nullptr ? iso->energy(ti) : R(0);
    for (int64_t k : rows)
      atomic[size_t(first + k)] = double(iso != nullptr ? R(work.energies[size_t(k)] - e_iso) : work.energies[size_t(k)]) +
                                  model.bias.template data_ptr<double>()[ti];
  }
  for (int64_t k = 0; k < count; ++k)
    descriptor_adjoint_of(work.t_rows.data() + k * 4 * m, work.descriptor_gradients.data() + k * m * ms, m, ms, R(0),
                          work.t_gradients.data() + k * 4 * m);
}

/// evaluate(): the adjoint of "embed" and "contract" for the pairs of the centres [first, last):
/// dE/dd_ij of each pair (partials.pair_gradient) and the sum over each centre's own pairs
/// (partials.own_force), as in forward().
template <typename R>
void SeAEvaluator::Impl::pair_gradients_of_block(const PackedEnv& pe, const EvaluationModel<R>& model, int64_t first,
                                                 int64_t last, EvaluationWorkspace<R>& work,
                                                 EvaluationPartials<R>& partials) const {
  const R* ds = dstd.data_ptr<R>();
  const R inv_nc = R(1) / R(nc);
  for (int64_t i = first; i < last; ++i) {
    const int64_t ti = atype[size_t(i)];
    const R* t_gradient = work.t_gradients.data() + (i - first) * 4 * m;
    double fi[3] = {0, 0, 0};
    for_each_block(pe, i, [&](int64_t g, const EmbState&, const PackedEnv::Group& grp, int64_t pa, int64_t qi) {
      const int64_t local = pa - grp.offsets[size_t(first)];
      grow(work.row_gradient, qi * 4), grow(work.input_gradient, qi);
      const R* rows = work.normalised_rows[size_t(g)].data() + local * 4;
      if (model.tables[size_t(g)].table != nullptr) {
        table_embedding_adjoint(model.tables[size_t(g)], work.located[size_t(g)], local, qi, m, rows, t_gradient,
                                work.row_gradient.data(), work.input_gradient.data());
      } else {
        embedding_adjoint_from_outputs(work.outputs[size_t(g)].data() + local * m,
                                       work.slopes[size_t(g)].data() + local * m, rows, t_gradient, qi, m,
                                       work.product, work.row_gradient.data(), work.input_gradient.data());
      }
      R* gd = partials.pair_gradient[size_t(g)].data() + pa * 3;
      pair_vector_gradients(work.row_gradient.data(), work.input_gradient.data(), inv_nc, ds + ti * 4,
                            grp.dr.data_ptr<R>() + pa * 12, qi, gd);
      for (int64_t p = 0; p < qi; ++p)
        for (int y = 0; y < 3; ++y) fi[y] += double(gd[p * 3 + y]);
    });
    for (int y = 0; y < 3; ++y) partials.own_force[size_t(i * 3 + y)] = fi[y];
  }
}

/// evaluate(): the Evaluation of the frame, the forces on the neighbours and the virials (and
/// with atom_virial each pair's half to each atom) summed in pair order (float64).
template <typename R>
SeAEvaluator::Evaluation SeAEvaluator::Impl::sum_evaluation(const PackedEnv& pe, EvaluationPartials<R>& partials,
                                                            int64_t natoms_total, bool atom_virial) const {
  Evaluation out;
  out.atomic = std::move(partials.atomic);
  out.energy = 0;
  for (double e : out.atomic) out.energy += e;
  out.forces.assign(size_t(natoms_total) * 3, 0.0);
  for (int64_t k = 0; k < n * 3; ++k) out.forces[size_t(k)] = partials.own_force[size_t(k)];
  if (atom_virial) out.atom_virial.assign(size_t(natoms_total) * 9, 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t g = 0; g < ng; ++g) {
      const auto& grp = pe.groups[size_t(g)];
      const R* vec = grp.vec.data_ptr<R>();
      const R* gd = partials.pair_gradient[size_t(g)].data();
      for (int64_t p = grp.offsets[size_t(i)]; p < grp.offsets[size_t(i + 1)]; ++p) {
        const int64_t j = grp.neighbor[size_t(p)];
        for (int y = 0; y < 3; ++y) out.forces[size_t(j * 3 + y)] -= double(gd[p * 3 + y]);
        for (int x = 0; x < 3; ++x)
          for (int y = 0; y < 3; ++y) {
            const double w = -double(vec[p * 3 + x]) * double(gd[p * 3 + y]);
            out.virial[size_t(x * 3 + y)] += w;
            if (atom_virial) {
              out.atom_virial[size_t(i * 9 + x * 3 + y)] += 0.5 * w;
              out.atom_virial[size_t(j * 9 + x * 3 + y)] += 0.5 * w;
            }
          }
      }
    }
  return out;
}

template <typename R>
void SeAEvaluator::Impl::backward(const Tensor& ge_in, const Tensor& gf_in, const Tensor& gv_in) {
  if (batch == nullptr) throw Error("se_e2_a training path: backward() without forward()");
  const auto opts = options<R>();
  const Tensor ge = ge_in.defined() ? ge_in.to(opts.dtype()).contiguous().reshape({nb}) : at::zeros({nb}, opts);
  const Tensor gf = gf_in.defined() ? gf_in.to(opts.dtype()).contiguous().reshape({bn, 3}) : at::zeros({bn, 3}, opts);
  const Tensor gv = gv_in.defined() ? gv_in.to(opts.dtype()).contiguous().reshape({nb, 9}) : at::zeros({nb, 9}, opts);
  const auto nets = emb_nets<R>();
  // Every parameter gets a gradient, zero for a net the batch does not use (as autograd's).
  for (const auto& p : module.parameters()) grad_of(p);

  const Tensor gt_bar = force_adjoint<R>(gf, gv);
  Tensor t_bar;
  const Tensor gd_bar = descriptor_gradient_adjoint<R>(gt_bar, t_bar);
  const auto isolated_bar = fit_adjoint<R>(ge, gd_bar, t_bar);

  // Embedding nets, block by block, into per-thread gradients summed in thread order.
  const int64_t nthreads = at::get_num_threads();
  std::vector<std::vector<EmbGrad<R>>> per_thread(static_cast<size_t>(nthreads));
  for (auto& mine : per_thread)
    for (int64_t g = 0; g < ng; ++g) mine.emplace_back(emb_layers);
  embedding_adjoint<R>(nets, t_bar, per_thread);
  empty_slot_adjoint<R>(nets, t_bar, isolated_bar, per_thread[0]);
  add_embedding_gradients<R>(per_thread);
}

/// backward(), the adjoint of the forces and virials: from d loss / d forces [BN, 3] and
/// d loss / d virials [B, 9] (model dtype) to d loss / d R̂ of every pair through the pair
/// vectors (emb[g].vh [pairs, 4]) and to d loss / d(dE/dT) [BN, 4, M], which it returns.
template <typename R>
Tensor SeAEvaluator::Impl::force_adjoint(const Tensor& grad_forces, const Tensor& grad_virial) {
  const PackedEnv& pe = *batch;
  const R* gfp = grad_forces.data_ptr<R>();
  const R* gvp = grad_virial.data_ptr<R>();
  const R* ds = dstd.data_ptr<R>();
  const R inv_nc = R(1) / R(nc);
  for (int64_t g = 0; g < ng; ++g) emb[size_t(g)].vh = at::empty({emb[size_t(g)].pairs, 4}, options<R>());
  Tensor gt_bar = at::zeros({bn, 4, m}, options<R>());
  R* gtb = gt_bar.data_ptr<R>();
  at::parallel_for(0, bn, 8, [&](int64_t i0, int64_t i1) {
    std::vector<R> cr;
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t ti = atype[size_t(i)];
      R* gbi = gtb + i * 4 * m;
      const R* wv = gvp + (i / n) * 9;
      for_each_block(pe, i, [&](int64_t g, const EmbState& s, const PackedEnv::Group& grp, int64_t p0, int64_t qi) {
        const R* rh = s.rh.data_ptr<R>() + p0 * 4;
        const R* dr = grp.dr.data_ptr<R>() + p0 * 12;
        const R* vec = grp.vec.data_ptr<R>() + p0 * 3;
        R* vh = s.vh.data_ptr<R>() + p0 * 4;
        grow(cr, qi * 4);
        for (int64_t p = 0; p < qi; ++p) {
          const int64_t j = grp.neighbor[size_t(p0 + p)];
          R u[3];
          for (int y = 0; y < 3; ++y) {
            u[y] = gfp[i * 3 + y] - gfp[j * 3 + y];
            for (int x = 0; x < 3; ++x) u[y] -= vec[p * 3 + x] * wv[x * 3 + y];
          }
          for (int a = 0; a < 4; ++a) {
            R v = 0;
            for (int y = 0; y < 3; ++y) v += dr[p * 12 + a * 3 + y] * u[y];
            vh[p * 4 + a] = v / ds[ti * 4 + a];
          }
          for (int a = 0; a < 4; ++a) cr[size_t(p * 4 + a)] = vh[p * 4] * rh[p * 4 + a];
        }
        // d loss / dgT_i = (vh^T G + (vh_0 Rhat)^T G') / Nc
        gemm<R>(true, false, 4, m, qi, inv_nc, vh, 4, s.g.data_ptr<R>() + p0 * m, m, R(1), gbi, m);
        gemm<R>(true, false, 4, m, qi, inv_nc, cr.data(), 4, s.gt.data_ptr<R>() + p0 * m, m, R(1), gbi, m);
      });
    }
  });
  return gt_bar;
}

/// backward(), through dE/dT = sym(T, dE/dD): returns d loss / d(dE/dD) = gTbar^T T< + T^T gTbar<
/// [BN, M * M<] and sets t_bar [BN, 4, M] to the first part of d loss / dT, sym(gTbar, dE/dD).
template <typename R>
Tensor SeAEvaluator::Impl::descriptor_gradient_adjoint(const Tensor& gt_bar, Tensor& t_bar) const {
  const Tensor gd_bar = at::empty({bn, m * ms}, options<R>());
  const R* gtb = gt_bar.data_ptr<R>();
  const R* tp = t_mat.data_ptr<R>();
  R* gdb = gd_bar.data_ptr<R>();
  at::parallel_for(0, bn, 16, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const R* gi = gtb + i * 4 * m;
      const R* ti = tp + i * 4 * m;
      gemm<R>(true, false, m, ms, 4, R(1), gi, m, ti, m, R(0), gdb + i * m * ms, ms);
      gemm<R>(true, false, m, ms, 4, R(1), ti, m, gi, m, R(1), gdb + i * m * ms, ms);
    }
  });
  t_bar = at::empty({bn, 4, m}, options<R>());
  sym<R>(gtb, gd_mat.data_ptr<R>(), R(0), t_bar.data_ptr<R>());
  return gd_bar;
}

/// backward(), the adjoint of "fit": the fitting nets' adjoint of their backward pass (dE/dD,
/// given gd_bar) and of their forward pass (given d loss / dE per frame, grad_energy [B]), into
/// their parameters' gradients; adds the rest of d loss / dT (through D) to t_bar. Returns the
/// isolated atom's adjoint at the empty-slot outputs (IsolatedAtomFit::backward; empty without
/// isolated_energy_is_bias): its FN is subtracted once per atom of its type, so
/// d loss / d FN_iso,t = -sum of d loss / dE over those atoms.
template <typename R>
std::vector<std::vector<std::vector<R>>> SeAEvaluator::Impl::fit_adjoint(const Tensor& grad_energy,
                                                                         const Tensor& gd_bar, Tensor& t_bar) {
  Tensor d_bar = at::empty({bn, m * ms}, options<R>());
  const Tensor ge_atom = grad_energy.repeat_interleave(n).contiguous();
  for (int64_t ti = 0; ti < nt; ++ti)
    if (!fit_index[size_t(ti)].empty())
      fits<R>()[size_t(ti)].backward(gd_bar.data_ptr<R>(), ge_atom.data_ptr<R>(), d_bar.data_ptr<R>());
  sym<R>(t_mat.data_ptr<R>(), d_bar.data_ptr<R>(), R(1), t_bar.data_ptr<R>());
  std::vector<std::vector<std::vector<R>>> isolated_bar;
  if (IsolatedAtomFit<R>* iso = isolated<R>()) {
    std::vector<R> energy_bar(size_t(nt), R(0));
    const R* gea = ge_atom.data_ptr<R>();
    for (int64_t ti = 0; ti < nt; ++ti)
      for (int64_t k : fit_index[size_t(ti)]) energy_bar[size_t(ti)] -= gea[k];
    isolated_bar = iso->backward(energy_bar);
  }
  return isolated_bar;
}

/// backward(), the adjoint of "embed" and "contract" chunk by chunk (in parallel): d loss / dG
/// and dG' of each pair from t_bar (d loss / dT [BN, 4, M]), emb[g].vh and dE/dT, then the
/// adjoint of the nets (their activations recomputed) into the thread's per_thread[thread][net].
template <typename R>
void SeAEvaluator::Impl::embedding_adjoint(const std::vector<EmbNet<R>>& nets, const Tensor& t_bar,
                                           std::vector<std::vector<EmbGrad<R>>>& per_thread) {
  const PackedEnv& pe = *batch;
  const R* tbp = t_bar.data_ptr<R>();
  const R* gtp = gt_mat.data_ptr<R>();
  const R inv_nc = R(1) / R(nc);
  const int64_t nthreads = int64_t(per_thread.size());
  // Without resnet_dt on the last embedding layer, its tanh and d/ds follow from G and G' by a
  // subtraction (layer_from_output), to within half an ulp of G and G'; with it they are
  // recomputed.
  const int64_t nlayers = int64_t(emb_layers.size());
  const bool derive_last = !emb_layers.back().idt;
  at::parallel_for(0, int64_t(chunks.size()) - 1, 1, [&](int64_t c0, int64_t c1) {
    Block<R> blk;
    auto& mine = per_thread[size_t(std::min<int64_t>(at::get_thread_num(), nthreads - 1))];
    for (int64_t ch = c0; ch < c1; ++ch) {
      const int64_t i0 = chunks[size_t(ch)], i1 = chunks[size_t(ch + 1)];
      for (int64_t g = 0; g < ng; ++g) {
        if (!active(g)) continue;
        const auto& off = pe.groups[size_t(g)].offsets;
        const EmbState& s = emb[size_t(g)];
        const int64_t p0 = off[size_t(i0)], q = off[size_t(i1)] - p0;
        if (q == 0) continue;
        const R* rh = s.rh.data_ptr<R>();
        const R* vh = s.vh.data_ptr<R>();
        if (derive_last) {
          // The last layer's y and u from the stored G and G': its GEMM and tanh are not redone.
          block_forward<R>(nets[size_t(g)], rh + p0 * 4, 4, q, blk, nullptr, nullptr, nlayers - 1);
          const Layer& L = emb_layers.back();
          grow(blk.z[size_t(nlayers - 1)], 2 * q * L.out);
          R* z = blk.z[size_t(nlayers - 1)].data();
          const R* x = blk.x[size_t(nlayers - 1)].data();
          layer_from_output(s.g.data_ptr<R>() + p0 * m, s.gt.data_ptr<R>() + p0 * m, x, x + q * L.in,
                            skip_copies(L), q, L.in, L.out, z, z + q * L.out);
        } else {
          block_forward(nets[size_t(g)], rh + p0 * 4, 4, q, blk);
        }
        grow(blk.xbar, 2 * q * m);
        R* xb = blk.xbar.data();
        for (int64_t i = i0; i < i1; ++i) {
          const int64_t a = off[size_t(i)], qi = off[size_t(i + 1)] - a;
          if (qi == 0) continue;
          R* gb = xb + (a - p0) * m;
          R* tb = xb + (q + a - p0) * m;
          // dG = (Rhat Tbar + vh gT) / Nc;  dG' = vh_0 (Rhat gT) / Nc
          gemm<R>(false, false, qi, m, 4, inv_nc, rh + a * 4, 4, tbp + i * 4 * m, m, R(0), gb, m);
          gemm<R>(false, false, qi, m, 4, inv_nc, vh + a * 4, 4, gtp + i * 4 * m, m, R(1), gb, m);
          gemm<R>(false, false, qi, m, 4, inv_nc, rh + a * 4, 4, gtp + i * 4 * m, m, R(0), tb, m);
          for (int64_t p = 0; p < qi; ++p) {
            const R v0 = vh[(a + p) * 4];
            for (int64_t k = 0; k < m; ++k) tb[p * m + k] *= v0;
          }
        }
        block_reverse(nets[size_t(g)], blk, q, mine[size_t(g)]);
      }
    }
  });
}

/// backward(), the adjoint of the empty slots' "embed": d loss / dG_e of each net's empty-slot
/// rows, sum over atoms of (empty count) e0 Tbar_i[0] / N_c plus the isolated atom's share
/// (isolated_bar, from fit_adjoint), then through the net into acc[net].
template <typename R>
void SeAEvaluator::Impl::empty_slot_adjoint(const std::vector<EmbNet<R>>& nets, const Tensor& t_bar,
                                            const std::vector<std::vector<std::vector<R>>>& isolated_bar,
                                            std::vector<EmbGrad<R>>& acc) {
  const PackedEnv& pe = *batch;
  const R* tbp = t_bar.data_ptr<R>();
  const R inv_nc = R(1) / R(nc);
  for (int64_t g = 0; g < ng; ++g) {
    if (!active(g)) continue;
    const EmbState& s = emb[size_t(g)];
    const int64_t rows = int64_t(s.pseudo_s.size());
    std::vector<R> ebar(size_t(rows * m), R(0));
    for (int64_t i = 0; i < bn; ++i) {
      const int64_t ti = atype[size_t(i)];
      if (s.pseudo_row[size_t(ti)] < 0) continue;
      const int64_t t = c.type_one_side ? g : g % nt;
      const auto& off = pe.groups[size_t(g)].offsets;
      const int64_t empty = c.sel[size_t(t)] - (off[size_t(i + 1)] - off[size_t(i)]);
      if (empty <= 0) continue;
      const R f = R(double(empty) * e0[size_t(ti)]) * inv_nc;
      R* out = ebar.data() + s.pseudo_row[size_t(ti)] * m;
      for (int64_t k = 0; k < m; ++k) out[k] += f * tbp[i * 4 * m + k];
    }
    for (int64_t ti = 0; ti < int64_t(isolated_bar.size()); ++ti) {
      const auto& from_isolated = isolated_bar[size_t(ti)][size_t(c.type_one_side ? g : g % nt)];
      if (s.pseudo_row[size_t(ti)] < 0 || from_isolated.empty()) continue;
      R* out = ebar.data() + s.pseudo_row[size_t(ti)] * m;
      for (int64_t k = 0; k < m; ++k) out[k] += from_isolated[size_t(k)];
    }
    const std::vector<R> s_in(s.pseudo_s.begin(), s.pseudo_s.end());
    Block<R> blk;
    block_forward(nets[size_t(g)], s_in.data(), 1, rows, blk);
    blk.xbar.assign(size_t(2 * rows * m), R(0));
    std::copy(ebar.begin(), ebar.end(), blk.xbar.begin());
    block_reverse(nets[size_t(g)], blk, rows, acc[size_t(g)]);
  }
}

/// backward(): adds the per-thread gradients of the embedding nets' parameters to their .grad(),
/// in thread order.
template <typename R>
void SeAEvaluator::Impl::add_embedding_gradients(std::vector<std::vector<EmbGrad<R>>>& per_thread) {
  const auto opts = options<R>();
  for (int64_t g = 0; g < ng; ++g) {
    if (!active(g)) continue;
    const std::string name = emb_name(g) + "_";
    for (size_t l = 0; l < emb_layers.size(); ++l) {
      const Layer& L = emb_layers[l];
      const std::string ls = std::to_string(l);
      for (auto& mine : per_thread) {
        auto& a = mine[size_t(g)];
        grad_of(attr(name + "w" + ls)).add_(at::from_blob(a.w[l].data(), {L.in, L.out}, opts));
        grad_of(attr(name + "b" + ls)).add_(at::from_blob(a.b[l].data(), {L.out}, opts));
        if (L.idt) grad_of(attr(name + "idt" + ls)).add_(at::from_blob(a.idt[l].data(), {L.out}, opts));
      }
    }
  }
}

SeAEvaluator::SeAEvaluator(const SeAConfig& config, torch::jit::Module module) : impl_(std::make_unique<Impl>()) {
  config.validate();
  Impl& s = *impl_;
  s.c = config;
  s.module = module;
  s.nt = ntypes_of(config);
  s.ng = ngroups_of(config);
  s.nc = config.nslots();
  s.m = config.neuron.back();
  s.ms = config.axis_neuron;
  std::vector<int64_t> emb_widths = {1};
  emb_widths.insert(emb_widths.end(), config.neuron.begin(), config.neuron.end());
  std::vector<int64_t> fit_widths = {s.m * s.ms};
  fit_widths.insert(fit_widths.end(), config.fitting_neuron.begin(), config.fitting_neuron.end());
  s.emb_layers = layers_of(emb_widths, config.resnet_dt);
  s.fit_layers = layers_of(fit_widths, config.fitting_resnet_dt);
  for (int64_t t = 0; t < s.nt; ++t) {
    s.fit_f.emplace_back(s.fit_layers);
    s.fit_d.emplace_back(s.fit_layers);
  }
  if (config.isolated_energy_is_bias) {
    s.isolated_f = std::make_unique<IsolatedAtomFit<float>>(config, s.fit_layers);
    s.isolated_d = std::make_unique<IsolatedAtomFit<double>>(config, s.fit_layers);
  }
}

SeAEvaluator::~SeAEvaluator() = default;
SeAEvaluator::SeAEvaluator(SeAEvaluator&&) noexcept = default;
SeAEvaluator& SeAEvaluator::operator=(SeAEvaluator&&) noexcept = default;

SeAEvaluator::Output SeAEvaluator::forward(const PackedEnv& batch, const std::vector<int>& types) {
  at::NoGradGuard no_grad;
  if (impl_->c.dtype() == torch::kFloat32) return impl_->forward<float>(batch, types);
  return impl_->forward<double>(batch, types);
}

SeAEvaluator::Evaluation SeAEvaluator::evaluate(const PackedEnv& frame, const std::vector<int>& types,
                                                int64_t natoms_total, bool atom_virial, ChargeCoupling* coupling) {
  at::NoGradGuard no_grad;
  if (impl_->c.dtype() == torch::kFloat32)
    return impl_->evaluate<float>(frame, types, natoms_total, atom_virial, coupling);
  return impl_->evaluate<double>(frame, types, natoms_total, atom_virial, coupling);
}

void SeAEvaluator::set_kept_embedding_bytes(double bytes) { impl_->kept_embedding_bytes = bytes; }

void SeAEvaluator::backward(const torch::Tensor& ge, const torch::Tensor& gf, const torch::Tensor& gv) {
  at::NoGradGuard no_grad;
  if (impl_->c.dtype() == torch::kFloat32) impl_->backward<float>(ge, gf, gv);
  else impl_->backward<double>(ge, gf, gv);
}

}  // namespace mlip::models
