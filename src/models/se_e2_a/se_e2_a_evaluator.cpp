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

}  // namespace

struct SeAEvaluator::Impl {
  SeAConfig c;
  torch::jit::Module module;
  std::vector<Layer> emb_layers, fit_layers;
  int64_t nt = 0, ng = 0, nc = 0, m = 0, ms = 0;

  /// What backward() needs from forward(), per embedding net.
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

  /// With c.isolated_energy_is_bias, FN_t of an atom without neighbours for the types in
  /// `types` (docs/se_e2_a.md "Reference energies"), from the empty-slot outputs
  /// `empty_output(g, ti)` of the nets; null otherwise.
  template <typename R, typename EmptyOutput>
  IsolatedAtomFit<R>* isolated_forward(const std::vector<int>& types, EmptyOutput&& empty_output) {
    IsolatedAtomFit<R>* iso = isolated<R>();
    if (iso == nullptr) return nullptr;
    std::vector<std::vector<const R*>> empty(size_t(nt), std::vector<const R*>(size_t(nt), nullptr));
    std::vector<bool> used(size_t(nt), false);
    std::vector<typename FittingAdjoint<R>::Params> params;
    for (int t : types) used[size_t(t)] = true;
    for (int64_t ti = 0; ti < nt; ++ti) {
      params.push_back(fit_params<R>(ti));
      for (int64_t t = 0; t < nt; ++t)
        if (c.sel[size_t(t)] > 0) empty[size_t(ti)][size_t(t)] = empty_output(group_of(c, ti, t), ti);
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
    return p;
  }

  /// Per atom (in parallel): out_i = beta out_i + T<_i X_i^T + [T_i X_i, 0] ([4, M]), the
  /// T-shaped gradient of the symmetric product D = T^T T< for X = dE/dD; t [BN, 4, M],
  /// x [BN, M, M<].
  template <typename R>
  void sym(const R* t, const R* x, R beta, R* out) const {
    at::parallel_for(0, bn, 16, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const R* ti = t + i * 4 * m;
        const R* xi = x + i * m * ms;
        R* oi = out + i * 4 * m;
        gemm<R>(false, true, 4, m, ms, R(1), ti, m, xi, ms, beta, oi, m);
        gemm<R>(false, false, 4, ms, m, R(1), ti, m, xi, ms, R(1), oi, m);
      }
    });
  }

  template <typename R>
  Output forward(const PackedEnv& batch, const std::vector<int>& types);
  template <typename R>
  Evaluation evaluate(const PackedEnv& frame, const std::vector<int>& types, int64_t natoms_total, bool atom_virial);
  template <typename R>
  void backward(const Tensor& ge, const Tensor& gf, const Tensor& gv);
};

template <typename R>
SeAEvaluator::Output SeAEvaluator::Impl::forward(const PackedEnv& pe, const std::vector<int>& types) {
  batch = &pe;
  nb = pe.nframes, n = pe.natoms, bn = nb * n;
  if (int64_t(types.size()) != n || int64_t(pe.groups.size()) != ng)
    throw Error("se_e2_a training path: the batch does not match the model (" + std::to_string(types.size()) +
                " types for " + std::to_string(n) + " atoms, " + std::to_string(pe.groups.size()) + " nets for " +
                std::to_string(ng) + ")");
  const auto opts = at::TensorOptions().dtype(c10::CppTypeToScalarType<R>::value);
  davg = attr("davg").contiguous();
  dstd = attr("dstd").contiguous();
  const R* da = davg.data_ptr<R>();
  const R* ds = dstd.data_ptr<R>();
  atype.resize(size_t(bn));
  for (int64_t k = 0; k < bn; ++k) atype[size_t(k)] = types[size_t(k % n)];
  e0.resize(size_t(nt));
  for (int64_t t = 0; t < nt; ++t) e0[size_t(t)] = -double(da[t * 4]) / double(ds[t * 4]);
  const auto nets = emb_nets<R>();
  const R inv_nc = R(1) / R(nc);

  // Normalised rows, and the nets' outputs for the empty-slot inputs.
  emb.assign(size_t(ng), EmbState());
  for (int64_t g = 0; g < ng; ++g) {
    if (!active(g)) continue;
    const auto& grp = pe.groups[size_t(g)];
    EmbState& s = emb[size_t(g)];
    s.pairs = int64_t(grp.neighbor.size());
    s.pseudo_row.assign(size_t(nt), -1);
    for (int64_t ti = 0; ti < nt; ++ti)
      if (c.type_one_side || ti == g / nt) {
        s.pseudo_row[size_t(ti)] = int64_t(s.pseudo_s.size());
        s.pseudo_s.push_back(e0[size_t(ti)]);
      }
    s.rh = at::empty({s.pairs, 4}, opts);
    s.g = at::empty({s.pairs, m}, opts);
    s.gt = at::empty({s.pairs, m}, opts);
    R* rh = s.rh.data_ptr<R>();
    const R* r = grp.r.data_ptr<R>();
    const int64_t* off = grp.offsets.data();
    at::parallel_for(0, bn, 16, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t ti = atype[size_t(i)];
        for (int64_t p = off[i]; p < off[i + 1]; ++p)
          for (int a = 0; a < 4; ++a) rh[p * 4 + a] = (r[p * 4 + a] - da[ti * 4 + a]) / ds[ti * 4 + a];
      }
    });
    const std::vector<R> s_in(s.pseudo_s.begin(), s.pseudo_s.end());
    const int64_t rows = int64_t(s_in.size());
    Block<R> blk;
    block_forward(nets[size_t(g)], s_in.data(), 1, rows, blk);
    s.ge = at::from_blob(blk.x.back().data(), {rows, m}, opts).clone();
  }

  // Atom chunks of ~256 pairs: one block through the nets each, small enough for the cache.
  chunks.assign(1, 0);
  int64_t acc = 0;
  for (int64_t i = 0; i < bn; ++i) {
    for (int64_t g = 0; g < ng; ++g)
      if (active(g)) acc += pe.groups[size_t(g)].offsets[size_t(i + 1)] - pe.groups[size_t(g)].offsets[size_t(i)];
    if (acc >= 256 || i + 1 == bn) {
      chunks.push_back(i + 1);
      acc = 0;
    }
  }

  // Embedding nets (value and d/ds) and T_i = (1/Nc) sum_j Rhat_ij G_ij, empty slots in closed form.
  t_mat = at::zeros({bn, 4, m}, opts);
  R* tp = t_mat.data_ptr<R>();
  at::parallel_for(0, int64_t(chunks.size()) - 1, 1, [&](int64_t c0, int64_t c1) {
    Block<R> blk;
    for (int64_t ch = c0; ch < c1; ++ch) {
      const int64_t i0 = chunks[size_t(ch)], i1 = chunks[size_t(ch + 1)];
      for (int64_t g = 0; g < ng; ++g) {
        if (!active(g)) continue;
        const auto& off = pe.groups[size_t(g)].offsets;
        EmbState& s = emb[size_t(g)];
        const int64_t p0 = off[size_t(i0)], q = off[size_t(i1)] - p0;
        if (q == 0) continue;
        const R* rh = s.rh.data_ptr<R>();
        R* gv = s.g.data_ptr<R>() + p0 * m;
        block_forward(nets[size_t(g)], rh + p0 * 4, 4, q, blk, gv, s.gt.data_ptr<R>() + p0 * m);
        for (int64_t i = i0; i < i1; ++i) {
          const int64_t a = off[size_t(i)], qi = off[size_t(i + 1)] - a;
          if (qi > 0) gemm<R>(true, false, 4, m, qi, R(1), rh + a * 4, 4, gv + (a - p0) * m, m, R(1), tp + i * 4 * m, m);
        }
      }
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t ti = atype[size_t(i)];
        R* ti_row = tp + i * 4 * m;
        for (int64_t t = 0; t < nt; ++t) {
          if (c.sel[size_t(t)] == 0) continue;
          const int64_t g = group_of(c, ti, t);
          const EmbState& s = emb[size_t(g)];
          const auto& off = pe.groups[size_t(g)].offsets;
          const int64_t empty = c.sel[size_t(t)] - (off[size_t(i + 1)] - off[size_t(i)]);
          if (empty > 0) {
            const R* ge = s.ge.data_ptr<R>() + s.pseudo_row[size_t(ti)] * m;
            const R f = R(double(empty) * e0[size_t(ti)]);
            for (int64_t k = 0; k < m; ++k) ti_row[k] += f * ge[k];
          }
        }
        for (int64_t k = 0; k < 4 * m; ++k) ti_row[k] *= inv_nc;
      }
    }
  });
  // D_i = T_i^T T<_i ([M, M<]).
  d_flat = at::empty({bn, m * ms}, opts);
  {
    R* dp = d_flat.data_ptr<R>();
    at::parallel_for(0, bn, 16, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i)
        gemm<R>(true, false, m, ms, 4, R(1), tp + i * 4 * m, m, tp + i * 4 * m, m, R(0), dp + i * m * ms, ms);
    });
  }

  // Fitting nets: atomic energies and dE/dD.
  Tensor atomic = at::empty({bn}, opts);
  Tensor gd_flat = at::empty({bn, m * ms}, opts);
  const Tensor bias = attr("bias").to(at::kDouble).contiguous();
  fit_index.assign(size_t(nt), {});
  for (int64_t k = 0; k < bn; ++k) fit_index[size_t(atype[size_t(k)])].push_back(k);
  const IsolatedAtomFit<R>* iso = isolated_forward<R>(types, [&](int64_t g, int64_t ti) {
    return emb[size_t(g)].ge.template data_ptr<R>() + emb[size_t(g)].pseudo_row[size_t(ti)] * m;
  });
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
  gt_mat = at::empty({bn, 4, m}, opts);
  sym<R>(tp, gd_flat.data_ptr<R>(), R(0), gt_mat.data_ptr<R>());

  // dE/dd_ij per pair; forces and virial.
  const R* gtp = gt_mat.data_ptr<R>();
  Tensor forces = at::zeros({bn, 3}, opts);
  R* fp = forces.data_ptr<R>();
  pair_gd.assign(size_t(ng), Tensor());
  for (int64_t g = 0; g < ng; ++g) pair_gd[size_t(g)] = at::empty({emb[size_t(g)].pairs, 3}, opts);
  at::parallel_for(0, bn, 8, [&](int64_t i0, int64_t i1) {
    std::vector<R> q_buf, gr_buf;
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t ti = atype[size_t(i)];
      const R* gti = gtp + i * 4 * m;
      R fi[3] = {0, 0, 0};
      for_each_block(pe, i, [&](int64_t g, const EmbState& s, const PackedEnv::Group& grp, int64_t p0, int64_t qi) {
        grow(q_buf, qi * m);
        grow(gr_buf, qi * 4);
        const R* gv = s.g.data_ptr<R>() + p0 * m;
        const R* gtan = s.gt.data_ptr<R>() + p0 * m;
        const R* rh = s.rh.data_ptr<R>() + p0 * 4;
        // gr = G gT^T (dE/dRhat without the d/ds term), Q = Rhat gT.
        gemm<R>(false, true, qi, 4, m, R(1), gv, m, gti, m, R(0), gr_buf.data(), 4);
        gemm<R>(false, false, qi, m, 4, R(1), rh, 4, gti, m, R(0), q_buf.data(), m);
        const R* dr = grp.dr.data_ptr<R>() + p0 * 12;
        R* gd = pair_gd[size_t(g)].data_ptr<R>() + p0 * 3;
        for (int64_t p = 0; p < qi; ++p) {
          R gs = 0;
          const R* qp = q_buf.data() + p * m;
          const R* tg = gtan + p * m;
          for (int64_t k = 0; k < m; ++k) gs += qp[k] * tg[k];
          R d[3];
          pair_vector_gradient(gr_buf.data() + p * 4, gs, inv_nc, ds + ti * 4, dr + p * 12, d);
          for (int y = 0; y < 3; ++y) {
            gd[p * 3 + y] = d[y];
            fi[y] += d[y];
          }
        }
      });
      for (int y = 0; y < 3; ++y) fp[i * 3 + y] = fi[y];
    }
  });
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
        for (int y = 0; y < 3; ++y) fp[j * 3 + y] -= gd[p * 3 + y];
        for (int x = 0; x < 3; ++x)
          for (int y = 0; y < 3; ++y) w[x * 3 + y] -= double(vec[p * 3 + x]) * double(gd[p * 3 + y]);
      }
    }
  }
  Output out;
  out.atomic = atomic.reshape({nb, n});
  out.energy = out.atomic.to(at::kDouble).sum(1);
  out.forces = forces.reshape({nb, n, 3});
  out.virial = torch::tensor(virial, torch::kFloat64).reshape({nb, 3, 3}).to(opts.dtype());
  return out;
}

/// Inference (docs/lammps.md "se_e2_a in MD"): the stages of forward() run block by block of
/// ~kEvaluationPairs pairs, each block from its pairs' rows to their dE/dd_ij while its
/// activations are still in the cache; nothing is kept for backward(). Blocks run in parallel
/// and write disjoint ranges; forces on the neighbours and the virials are summed afterwards in
/// pair order, so the result does not depend on the number of threads.
template <typename R>
SeAEvaluator::Evaluation SeAEvaluator::Impl::evaluate(const PackedEnv& pe, const std::vector<int>& types,
                                                            int64_t natoms_total, bool atom_virial) {
  constexpr int64_t kEvaluationPairs = 512;
  // A compressed model keeps no embedding outputs (docs/se_e2_a.md "The fused lookup"): its
  // blocks are sized for the fitting nets instead, whose weights are then read and packed once
  // for many atoms (about 180 water atoms).
  constexpr int64_t kCompressedEvaluationPairs = 16384, kCompressedMinimumPairs = 2048;
  batch = nullptr;  // nothing to differentiate afterwards
  nb = 1, n = pe.natoms, bn = n;
  if (pe.nframes != 1 || int64_t(types.size()) != n || int64_t(pe.groups.size()) != ng || natoms_total < n)
    throw Error("se_e2_a evaluation: the frame does not match the model (" + std::to_string(types.size()) +
                " types for " + std::to_string(n) + " centres of " + std::to_string(natoms_total) + " atoms, " +
                std::to_string(pe.groups.size()) + " nets for " + std::to_string(ng) + ")");
  davg = attr("davg").contiguous();
  dstd = attr("dstd").contiguous();
  const R* da = davg.data_ptr<R>();
  const R* ds = dstd.data_ptr<R>();
  atype.assign(types.begin(), types.end());
  e0.resize(size_t(nt));
  for (int64_t t = 0; t < nt; ++t) e0[size_t(t)] = -double(da[t * 4]) / double(ds[t * 4]);
  const auto nets = emb_nets<R>();
  const auto tables = emb_tables<R>();
  const bool compressed =
      std::any_of(tables.begin(), tables.end(), [](const EmbTable<R>& t) { return t.table != nullptr; });
  std::atomic<int64_t> beyond_tables{0};
  const R inv_nc = R(1) / R(nc);
  const Tensor bias = attr("bias").to(at::kDouble).contiguous();
  std::vector<typename FittingAdjoint<R>::Params> fit_p;
  for (int64_t ti = 0; ti < nt; ++ti) fit_p.push_back(fit_params<R>(ti));

  // The nets' outputs for the empty-slot input of each centre type (from a compressed model's
  // tables too, so that a pair leaving the cutoff meets the same function).
  std::vector<std::vector<R>> empty_g(static_cast<size_t>(ng));
  std::vector<std::vector<int64_t>> empty_row(static_cast<size_t>(ng), std::vector<int64_t>(size_t(nt), -1));
  for (int64_t g = 0; g < ng; ++g) {
    if (!active(g)) continue;
    std::vector<R> s_in;
    for (int64_t ti = 0; ti < nt; ++ti)
      if (c.type_one_side || ti == g / nt) {
        empty_row[size_t(g)][size_t(ti)] = int64_t(s_in.size());
        s_in.push_back(R(e0[size_t(ti)]));
      }
    Block<R> blk;
    const int64_t rows = int64_t(s_in.size());
    std::vector<R> slope(size_t(rows * m)), spill;
    std::vector<int64_t> outside;
    int64_t beyond = 0;  // an empty slot's input is the grid's lower end: never beyond
    empty_g[size_t(g)].resize(size_t(rows * m));
    embed(nets[size_t(g)], tables[size_t(g)], s_in.data(), 1, rows, blk, empty_g[size_t(g)].data(), slope.data(),
          outside, spill, beyond);
  }

  const IsolatedAtomFit<R>* iso = isolated_forward<R>(types, [&](int64_t g, int64_t ti) {
    return empty_g[size_t(g)].data() + empty_row[size_t(g)][size_t(ti)] * m;
  });

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
  std::vector<int64_t> blocks(1, 0);
  int64_t acc = 0;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t g = 0; g < ng; ++g) acc += pe.groups[size_t(g)].offsets[size_t(i + 1)] - pe.groups[size_t(g)].offsets[size_t(i)];
    if (acc >= block_pairs || i + 1 == n) {
      blocks.push_back(i + 1);
      acc = 0;
    }
  }
  std::vector<double> atomic(static_cast<size_t>(n)), own_force(static_cast<size_t>(n) * 3);
  std::vector<std::vector<R>> pair_grad(static_cast<size_t>(ng));
  for (int64_t g = 0; g < ng; ++g) pair_grad[size_t(g)].resize(pe.groups[size_t(g)].neighbor.size() * 3);

  at::parallel_for(0, int64_t(blocks.size()) - 1, 1, [&](int64_t b0, int64_t b1) {
    std::vector<FittingAdjoint<R>> fit;
    for (int64_t t = 0; t < nt; ++t) fit.emplace_back(fit_layers);
    Block<R> blk;
    std::vector<std::vector<R>> rh(static_cast<size_t>(ng)), gv(static_cast<size_t>(ng)), gtan(static_cast<size_t>(ng));
    std::vector<R> t_blk, d_blk, dd_blk, gt_blk, e_blk, q_buf, gr_buf, gs_buf, spill;
    std::vector<LocatedPairs<R>> located(static_cast<size_t>(ng));
    std::vector<int64_t> outside;
    int64_t beyond = 0;
    std::vector<std::vector<int64_t>> rows(static_cast<size_t>(nt));
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t i0 = blocks[size_t(b)], i1 = blocks[size_t(b + 1)], bs = i1 - i0;
      // Embedding nets (value and d/ds) and T_i, empty slots in closed form.
      t_blk.assign(size_t(bs * 4 * m), R(0));
      for (int64_t g = 0; g < ng; ++g) {
        if (!active(g)) continue;
        const auto& off = pe.groups[size_t(g)].offsets;
        const int64_t p0 = off[size_t(i0)], q = off[size_t(i1)] - p0;
        if (q == 0) continue;
        auto& rg = rh[size_t(g)];
        grow(rg, q * 4);
        if (tables[size_t(g)].table == nullptr) grow(gv[size_t(g)], q * m), grow(gtan[size_t(g)], q * m);
        const R* r = pe.groups[size_t(g)].r.data_ptr<R>();
        for (int64_t i = i0; i < i1; ++i) {
          const int64_t ti = atype[size_t(i)];
          for (int64_t p = off[size_t(i)]; p < off[size_t(i + 1)]; ++p)
            for (int a = 0; a < 4; ++a) rg[size_t((p - p0) * 4 + a)] = (r[p * 4 + a] - da[ti * 4 + a]) / ds[ti * 4 + a];
        }
        if (tables[size_t(g)].table != nullptr) {
          // Compressed: the lookup fused with T_i = R̂^T G; G is not kept (recomputed below).
          auto& lp = located[size_t(g)];
          beyond += lp.locate(nets[size_t(g)], tables[size_t(g)], rg.data(), q, blk);
          for (int64_t i = i0; i < i1; ++i) {
            const int64_t a = off[size_t(i)] - p0, qi = off[size_t(i + 1)] - off[size_t(i)];
            R* t_row = t_blk.data() + (i - i0) * 4 * m;
            table_embed_accumulate(tables[size_t(g)].table, m, lp.interval.data() + a, lp.offset.data() + a,
                                   rg.data() + a * 4, qi, t_row);
            for (int64_t p = a; p < a + qi; ++p) {  // pairs beyond the table: their G from the net
              if (lp.interval[size_t(p)] >= 0) continue;
              const R* g_beyond = lp.beyond_g.data() + (-1 - lp.interval[size_t(p)]) * m;
              for (int c = 0; c < 4; ++c)
                for (int64_t k = 0; k < m; ++k) t_row[c * m + k] += rg[size_t(p * 4 + c)] * g_beyond[k];
            }
          }
          continue;
        }
        embed(nets[size_t(g)], tables[size_t(g)], rg.data(), 4, q, blk, gv[size_t(g)].data(), gtan[size_t(g)].data(),
              outside, spill, beyond);
        for (int64_t i = i0; i < i1; ++i) {
          const int64_t a = off[size_t(i)] - p0, qi = off[size_t(i + 1)] - off[size_t(i)];
          if (qi > 0)
            gemm<R>(true, false, 4, m, qi, R(1), rg.data() + a * 4, 4, gv[size_t(g)].data() + a * m, m, R(1),
                    t_blk.data() + (i - i0) * 4 * m, m);
        }
      }
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t ti = atype[size_t(i)];
        R* row = t_blk.data() + (i - i0) * 4 * m;
        for (int64_t t = 0; t < nt; ++t) {
          if (c.sel[size_t(t)] == 0) continue;
          const int64_t g = group_of(c, ti, t);
          const auto& off = pe.groups[size_t(g)].offsets;
          const int64_t empty = c.sel[size_t(t)] - (off[size_t(i + 1)] - off[size_t(i)]);
          if (empty > 0) {
            const R* ge = empty_g[size_t(g)].data() + empty_row[size_t(g)][size_t(ti)] * m;
            const R f = R(double(empty) * e0[size_t(ti)]);
            for (int64_t k = 0; k < m; ++k) row[k] += f * ge[k];
          }
        }
        for (int64_t k = 0; k < 4 * m; ++k) row[k] *= inv_nc;
      }
      // D_i = T_i^T T<_i, the fitting nets, and dE/dT_i (the symmetric product's adjoint).
      grow(d_blk, bs * m * ms), grow(dd_blk, bs * m * ms), grow(e_blk, bs);
      gt_blk.assign(size_t(bs * 4 * m), R(0));
      for (int64_t k = 0; k < bs; ++k)
        gemm<R>(true, false, m, ms, 4, R(1), t_blk.data() + k * 4 * m, m, t_blk.data() + k * 4 * m, m, R(0),
                d_blk.data() + k * m * ms, ms);
      for (auto& r : rows) r.clear();
      for (int64_t i = i0; i < i1; ++i) rows[size_t(atype[size_t(i)])].push_back(i - i0);
      for (int64_t ti = 0; ti < nt; ++ti) {
        if (rows[size_t(ti)].empty()) continue;
        fit[size_t(ti)].forward(fit_p[size_t(ti)], d_blk.data(), rows[size_t(ti)].data(), int64_t(rows[size_t(ti)].size()),
                                e_blk.data(), dd_blk.data());
        const R e_iso = iso != nullptr ? iso->energy(ti) : R(0);
        for (int64_t k : rows[size_t(ti)])
          atomic[size_t(i0 + k)] = double(iso != nullptr ? R(e_blk[size_t(k)] - e_iso) : e_blk[size_t(k)]) +
                                   bias.data_ptr<double>()[ti];
      }
      for (int64_t k = 0; k < bs; ++k) {
        const R* tk = t_blk.data() + k * 4 * m;
        const R* xk = dd_blk.data() + k * m * ms;
        R* ok = gt_blk.data() + k * 4 * m;
        gemm<R>(false, true, 4, m, ms, R(1), tk, m, xk, ms, R(0), ok, m);
        gemm<R>(false, false, 4, ms, m, R(1), tk, m, xk, ms, R(1), ok, m);
      }
      // dE/dd_ij of every pair of the block (as in forward()).
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t ti = atype[size_t(i)];
        const R* gti = gt_blk.data() + (i - i0) * 4 * m;
        double fi[3] = {0, 0, 0};
        for (int64_t t = 0; t < nt; ++t) {
          if (c.sel[size_t(t)] == 0) continue;
          const int64_t g = group_of(c, ti, t);
          const auto& grp = pe.groups[size_t(g)];
          const int64_t pa = grp.offsets[size_t(i)], qi = grp.offsets[size_t(i + 1)] - pa;
          if (qi == 0) continue;
          const int64_t local = pa - grp.offsets[size_t(i0)];
          grow(q_buf, qi * m), grow(gr_buf, qi * 4), grow(gs_buf, qi);
          const R* rhp = rh[size_t(g)].data() + local * 4;
          if (tables[size_t(g)].table != nullptr) {
            // Compressed: G and dG/ds recomputed from the table, fused with their adjoint.
            const auto& lp = located[size_t(g)];
            const int64_t* iv = lp.interval.data() + local;
            table_embed_adjoint(tables[size_t(g)].table, m, iv, lp.offset.data() + local, rhp, qi, gti, gr_buf.data(),
                                gs_buf.data());
            for (int64_t p = 0; p < qi; ++p) {  // pairs beyond the table: G and G' from the net
              if (iv[p] >= 0) continue;
              const R* g_beyond = lp.beyond_g.data() + (-1 - iv[p]) * m;
              const R* dg_beyond = lp.beyond_dg.data() + (-1 - iv[p]) * m;
              R gs = 0;
              for (int c = 0; c < 4; ++c) gr_buf[size_t(p * 4 + c)] = 0;
              for (int64_t k = 0; k < m; ++k) {
                R h = 0;
                for (int c = 0; c < 4; ++c) {
                  gr_buf[size_t(p * 4 + c)] += g_beyond[k] * gti[c * m + k];
                  h += rhp[p * 4 + c] * gti[c * m + k];
                }
                gs += h * dg_beyond[k];
              }
              gs_buf[size_t(p)] = gs;
            }
          } else {
            const R* gvp = gv[size_t(g)].data() + local * m;
            const R* gtp = gtan[size_t(g)].data() + local * m;
            gemm<R>(false, true, qi, 4, m, R(1), gvp, m, gti, m, R(0), gr_buf.data(), 4);
            gemm<R>(false, false, qi, m, 4, R(1), rhp, 4, gti, m, R(0), q_buf.data(), m);
            for (int64_t p = 0; p < qi; ++p) {
              R gs = 0;
              for (int64_t k = 0; k < m; ++k) gs += q_buf[size_t(p * m + k)] * gtp[p * m + k];
              gs_buf[size_t(p)] = gs;
            }
          }
          const R* dr = grp.dr.data_ptr<R>() + pa * 12;
          R* gd = pair_grad[size_t(g)].data() + pa * 3;
          for (int64_t p = 0; p < qi; ++p) {
            R d[3];
            pair_vector_gradient(gr_buf.data() + p * 4, gs_buf[size_t(p)], inv_nc, ds + ti * 4, dr + p * 12, d);
            for (int y = 0; y < 3; ++y) {
              gd[p * 3 + y] = d[y];
              fi[y] += double(d[y]);
            }
          }
        }
        for (int y = 0; y < 3; ++y) own_force[size_t(i * 3 + y)] = fi[y];
      }
    }
    beyond_tables += beyond;
  });

  // Forces on the neighbours, and the virials, in pair order.
  Evaluation out;
  out.beyond_tables = beyond_tables.load();
  out.atomic = std::move(atomic);
  out.energy = 0;
  for (double e : out.atomic) out.energy += e;
  out.forces.assign(size_t(natoms_total) * 3, 0.0);
  for (int64_t k = 0; k < n * 3; ++k) out.forces[size_t(k)] = own_force[size_t(k)];
  if (atom_virial) out.atom_virial.assign(size_t(natoms_total) * 9, 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t g = 0; g < ng; ++g) {
      const auto& grp = pe.groups[size_t(g)];
      const R* vec = grp.vec.data_ptr<R>();
      const R* gd = pair_grad[size_t(g)].data();
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
  const PackedEnv& pe = *batch;
  const auto opts = at::TensorOptions().dtype(c10::CppTypeToScalarType<R>::value);
  const Tensor ge = ge_in.defined() ? ge_in.to(opts.dtype()).contiguous().reshape({nb}) : at::zeros({nb}, opts);
  const Tensor gf = gf_in.defined() ? gf_in.to(opts.dtype()).contiguous().reshape({bn, 3}) : at::zeros({bn, 3}, opts);
  const Tensor gv = gv_in.defined() ? gv_in.to(opts.dtype()).contiguous().reshape({nb, 9}) : at::zeros({nb, 9}, opts);
  const R* gfp = gf.data_ptr<R>();
  const R* gvp = gv.data_ptr<R>();
  const R* ds = dstd.data_ptr<R>();
  const R* gtp = gt_mat.data_ptr<R>();
  const R inv_nc = R(1) / R(nc);
  const auto nets = emb_nets<R>();
  // Every parameter gets a gradient, zero for a net the batch does not use (as autograd's).
  for (const auto& p : module.parameters()) grad_of(p);

  // Phase A: from d loss / d force and virial to d loss / d(dE/dT), per atom.
  for (int64_t g = 0; g < ng; ++g) emb[size_t(g)].vh = at::empty({emb[size_t(g)].pairs, 4}, opts);
  Tensor gt_bar = at::zeros({bn, 4, m}, opts);
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

  // Through gT = sym(T, gD): d loss / d gD = gTbar^T T< + T^T gTbar<, and the first part of
  // d loss / dT, sym(gTbar, gD).
  const Tensor gd_bar = at::empty({bn, m * ms}, opts);
  {
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
  }
  Tensor t_bar = at::empty({bn, 4, m}, opts);
  sym<R>(gtb, gd_mat.data_ptr<R>(), R(0), t_bar.data_ptr<R>());

  // Fitting nets: the adjoint of the backward pass (dE/dD), then of the forward pass.
  Tensor d_bar = at::empty({bn, m * ms}, opts);
  const Tensor ge_atom = ge.repeat_interleave(n).contiguous();
  for (int64_t ti = 0; ti < nt; ++ti)
    if (!fit_index[size_t(ti)].empty())
      fits<R>()[size_t(ti)].backward(gd_bar.data_ptr<R>(), ge_atom.data_ptr<R>(), d_bar.data_ptr<R>());
  sym<R>(t_mat.data_ptr<R>(), d_bar.data_ptr<R>(), R(1), t_bar.data_ptr<R>());
  const R* tbp = t_bar.data_ptr<R>();
  // The isolated atom's FN, subtracted once per atom of its type: d loss / d FN_iso,t = -sum of
  // d loss / dE over those atoms; its adjoint ends at the empty-slot rows below.
  std::vector<std::vector<std::vector<R>>> isolated_bar;
  if (IsolatedAtomFit<R>* iso = isolated<R>()) {
    std::vector<R> energy_bar(size_t(nt), R(0));
    const R* gea = ge_atom.data_ptr<R>();
    for (int64_t ti = 0; ti < nt; ++ti)
      for (int64_t k : fit_index[size_t(ti)]) energy_bar[size_t(ti)] -= gea[k];
    isolated_bar = iso->backward(energy_bar);
  }

  // Embedding nets, block by block: d loss / dG and dG' of each pair, then the adjoint of the
  // nets (their activations recomputed), into per-thread gradients summed in thread order.
  const int64_t nthreads = at::get_num_threads();
  // Without resnet_dt on the last embedding layer, its tanh and d/ds follow from G and G' by a
  // subtraction (layer_from_output), to within half an ulp of G and G'; with it they are
  // recomputed.
  const int64_t nlayers = int64_t(emb_layers.size());
  const bool derive_last = !emb_layers.back().idt;
  std::vector<std::vector<EmbGrad<R>>> acc(static_cast<size_t>(nthreads));
  for (auto& per_thread : acc)
    for (int64_t g = 0; g < ng; ++g) per_thread.emplace_back(emb_layers);
  at::parallel_for(0, int64_t(chunks.size()) - 1, 1, [&](int64_t c0, int64_t c1) {
    Block<R> blk;
    auto& mine = acc[size_t(std::min<int64_t>(at::get_thread_num(), nthreads - 1))];
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
  // The empty-slot rows: d loss / dG_e = sum over atoms of (empty count) e0 Tbar_i[0] / Nc.
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
    block_reverse(nets[size_t(g)], blk, rows, acc[0][size_t(g)]);
  }
  for (int64_t g = 0; g < ng; ++g) {
    if (!active(g)) continue;
    const std::string name = emb_name(g) + "_";
    for (size_t l = 0; l < emb_layers.size(); ++l) {
      const Layer& L = emb_layers[l];
      const std::string ls = std::to_string(l);
      for (int64_t th = 0; th < nthreads; ++th) {
        auto& a = acc[size_t(th)][size_t(g)];
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
                                                      int64_t natoms_total, bool atom_virial) {
  at::NoGradGuard no_grad;
  if (impl_->c.dtype() == torch::kFloat32) return impl_->evaluate<float>(frame, types, natoms_total, atom_virial);
  return impl_->evaluate<double>(frame, types, natoms_total, atom_virial);
}

void SeAEvaluator::backward(const torch::Tensor& ge, const torch::Tensor& gf, const torch::Tensor& gv) {
  at::NoGradGuard no_grad;
  if (impl_->c.dtype() == torch::kFloat32) impl_->backward<float>(ge, gf, gv);
  else impl_->backward<double>(ge, gf, gv);
}

}  // namespace mlip::models
