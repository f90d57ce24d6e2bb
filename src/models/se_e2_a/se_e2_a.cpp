#include "models/se_e2_a/se_e2_a.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <sstream>

#include "error.h"
#include "models/deploy_source.h"
#include "models/kernels/layer_rule.h"

namespace mlip::models {
namespace {

/// A float in the model source (models/deploy_source.h).
std::string literal(double v) { return torchscript_number(v); }

/// TorchScript of a net `fn` whose parameters are self.<prefix>_w<l>, _b<l>, _idt<l>
/// (and _wout/_bout for a linear output layer). The input's leading dimensions are flattened
/// into rows once, so that each layer is one addmm (b + x W) and one tanh, forward and backward
/// (a matmul of the batched shape and an add were five operations and four autograd nodes).
///
/// With `charge_out` (a fitting net of a model with model.long_range) the linear output has two
/// columns, the energy (_wout, _bout) and the raw charge (_wq, _bq), read from the same last
/// hidden layer in one addmm.
void emit_net(std::ostringstream& o, const std::string& fn, const std::string& prefix,
              const std::vector<Layer>& layers, bool linear_out, bool charge_out = false) {
  const int64_t width_out = linear_out ? (charge_out ? 2 : 1) : layers.back().out;
  o << "  def " << fn << "(self, x: Tensor) -> Tensor:\n"
    << "    shape = x.size()\n"
    << "    x = x.reshape([-1, " << layers.front().in << "])\n";
  for (size_t l = 0; l < layers.size(); ++l) {
    const Layer& L = layers[l];
    o << "    y = torch.tanh(torch.addmm(self." << prefix << "_b" << l << ", x, self." << prefix << "_w" << l << "))\n";
    if (L.idt) o << "    y = y * self." << prefix << "_idt" << l << "\n";
    if (L.skip == Layer::kSame) o << "    x = y + x\n";
    else if (L.skip == Layer::kDouble) o << "    x = y + torch.cat([x, x], -1)\n";
    else o << "    x = y\n";
  }
  if (linear_out && charge_out)
    o << "    x = torch.addmm(torch.cat([self." << prefix << "_bout, self." << prefix << "_bq]), x, torch.cat([self."
      << prefix << "_wout, self." << prefix << "_wq], 1))\n";
  else if (linear_out)
    o << "    x = torch.addmm(self." << prefix << "_bout, x, self." << prefix << "_wout)\n";
  o << "    return x.reshape(shape[:-1] + [" << width_out << "])\n\n";
}

/// TorchScript of a tabulated embedding net `fn(self, x [..., 1]) -> [..., M]`
/// (docs/se_e2_a.md "Compression: the embedding nets as tables"): each input's interval on the
/// grid, its offset t from the interval's node, the quintic by Horner's rule from the buffer
/// self.<fn>_table [intervals, 6, M]; inputs beyond the grid go through self.<fn>_exact.
/// Autograd through t gives the polynomial's derivative, as the hand-written inference uses.
void emit_table_lookup(std::ostringstream& o, const std::string& fn, const TableGrid& grid, int64_t m) {
  const std::string lower = literal(grid.lower), upper = literal(grid.upper), top = literal(grid.max);
  const std::string fine = std::to_string(grid.fine_intervals), hf = literal(grid.fine_step);
  o << "  def " << fn << "(self, x: Tensor) -> Tensor:\n"
    << "    shape = x.size()\n"
    << "    s = x.reshape(-1)\n"
    << "    inside = (s >= " << lower << ") & (s <= " << top << ")\n"
    << "    sc = s.clamp(" << lower << ", " << top << ")\n";
  if (grid.coarse_intervals > 0) {
    o << "    kf = torch.where(sc < " << upper << ", torch.floor((sc - " << lower << ") / " << hf << ").clamp(max="
      << grid.fine_intervals - 1 << ".0), " << fine << ".0 + torch.floor((sc - " << upper << ") / "
      << literal(grid.coarse_step) << ").clamp(max=" << grid.coarse_intervals - 1 << ".0))\n"
      << "    k = kf.clamp(min=0.0).detach().long()\n"
      << "    node = torch.where(k < " << fine << ", " << lower << " + k.to(s.dtype) * " << hf << ", " << upper
      << " + (k - " << fine << ").to(s.dtype) * " << literal(grid.coarse_step) << ")\n";
  } else {
    o << "    k = torch.floor((sc - " << lower << ") / " << hf << ").clamp(0.0, " << grid.fine_intervals - 1
      << ".0).detach().long()\n"
      << "    node = " << lower << " + k.to(s.dtype) * " << hf << "\n";
  }
  o << "    t = (sc - node).unsqueeze(1)\n"
    << "    a = self." << fn << "_table.index_select(0, k)\n"
    << "    g = a[:, 5]\n";
  for (int j = 4; j >= 0; --j) o << "    g = g * t + a[:, " << j << "]\n";
  o << "    if not bool(inside.all()):\n"
    << "      out = torch.nonzero(~inside).squeeze(1)\n"
    << "      g = g.index_copy(0, out, self." << fn << "_exact(s.index_select(0, out).unsqueeze(1)))\n"
    << "    size = shape[:-1]\n"
    << "    size.append(" << m << ")\n"
    << "    return g.reshape(size)\n\n";
}

}  // namespace

int64_t SeAConfig::nslots() const {
  int64_t n = 0;
  for (auto s : sel) n += s;
  return n;
}

torch::Dtype SeAConfig::dtype() const { return precision == "float32" ? torch::kFloat32 : torch::kFloat64; }

void SeAConfig::validate() const {
  std::ostringstream msg;
  const std::string d = "model.descriptor.";
  if (type_map.empty()) msg << "model.type_map: expected at least one type name, got none";
  else if (sel.size() != type_map.size())
    msg << d << "sel: expected " << type_map.size() << " entries (one per type of model.type_map), got " << sel.size();
  else if (nslots() <= 0) msg << d << "sel: expected at least one slot, got " << nslots();
  else if (!(rcut > 0)) msg << d << "rcut: expected a positive number, got " << rcut;
  else if (!(rcut_smth >= 0 && rcut_smth < rcut))
    msg << d << "rcut_smth: expected a number in [0, rcut = " << rcut << "), got " << rcut_smth;
  else if (neuron.empty()) msg << d << "neuron: expected at least one layer width, got none";
  else if (axis_neuron <= 0 || axis_neuron > neuron.back())
    msg << d << "axis_neuron: expected an integer in [1, neuron[-1] = " << neuron.back() << "], got " << axis_neuron;
  else if (fitting_neuron.empty()) msg << "model.fitting_net.neuron: expected at least one layer width, got none";
  else if (precision != "float64" && precision != "float32")
    msg << d << "precision: expected \"float64\" or \"float32\", got \"" << precision << "\"";
  for (size_t k = 0; msg.str().empty() && k < sel.size(); ++k)
    if (sel[k] < 0) msg << d << "sel[" << k << "]: expected a non-negative integer, got " << sel[k];
  for (size_t k = 0; msg.str().empty() && k < neuron.size(); ++k)
    if (neuron[k] <= 0) msg << d << "neuron[" << k << "]: expected a positive integer, got " << neuron[k];
  for (size_t k = 0; msg.str().empty() && k < fitting_neuron.size(); ++k)
    if (fitting_neuron[k] <= 0)
      msg << "model.fitting_net.neuron[" << k << "]: expected a positive integer, got " << fitting_neuron[k];
  if (!msg.str().empty()) throw Error(msg.str());
}

std::string embedding_net_name(const SeAConfig& c, int64_t g) {
  const int64_t ntypes = int64_t(c.type_map.size());
  return c.type_one_side ? "emb_" + std::to_string(g) : "emb_" + std::to_string(g / ntypes) + "_" + std::to_string(g % ntypes);
}

int64_t embedding_net_count(const SeAConfig& c) {
  const int64_t ntypes = int64_t(c.type_map.size());
  return c.type_one_side ? ntypes : ntypes * ntypes;
}

namespace {

/// The module's atomic_energy(rij, atype, type_atoms): per-atom energies from raw environment rows.
void emit_atomic_energy(std::ostringstream& o, const SeAConfig& c) {
  const int64_t ntypes = int64_t(c.type_map.size());
  const int64_t nc = c.nslots(), m = c.neuron.back(), msub = c.axis_neuron;
  // type_atoms (the training step from static buffers, docs/device.md "Static shapes"): each
  // type's atoms given, and every slot through the embedding net, so that nothing depends on
  // the data's values (no nonzero, no item): a CUDA graph can capture it.
  o << "  def atomic_energy(self, rij: Tensor, atype: Tensor, type_atoms: Optional[List[Tensor]] = None) -> Tensor:\n"
       "    nb = rij.size(0)\n"
       "    n = rij.size(1)\n"
       "    davg = self.davg.index_select(0, atype).unsqueeze(1)\n"
       "    dstd = self.dstd.index_select(0, atype).unsqueeze(1)\n"
       "    rhat = (rij - davg) / dstd\n"
       "    e = torch.zeros([nb, n], dtype=rij.dtype, device=rij.device)\n";
  const bool charges = c.long_range.enabled;
  if (charges) o << "    q = torch.zeros([nb, n], dtype=rij.dtype, device=rij.device)\n";
  for (int64_t ti = 0; ti < ntypes; ++ti) {
    o << "    if type_atoms is None:\n"
      << "      idx = torch.nonzero(atype == " << ti << ").squeeze(1)\n"
      << "    else:\n"
      << "      idx = type_atoms[" << ti << "]\n"
      << "    if idx.numel() > 0:\n"
      << "      r = rhat.index_select(1, idx)\n"
      << "      raw = rij.index_select(1, idx)\n"
      << "      tm = torch.zeros([nb, idx.numel(), 4, " << m << "], dtype=rij.dtype, device=rij.device)\n"
      // Empty slots sit at the end of each type block and all hold the same normalised row
      // (-davg/dstd, 0, 0, 0): the net runs only on the slots some atom uses, and the
      // remaining empty slots are added in closed form (docs/se_e2_a.md: no materialised padding).
      << "      e0 = -self.davg[" << ti << ", 0] / self.dstd[" << ti << ", 0]\n";
    int64_t off = 0;
    for (int64_t t = 0; t < ntypes; ++t) {
      const int64_t s = c.sel[size_t(t)];
      if (s > 0) {
        const std::string name = c.type_one_side ? "emb_" + std::to_string(t)
                                                 : "emb_" + std::to_string(ti) + "_" + std::to_string(t);
        o << "      used = " << s << "\n"
          << "      if type_atoms is None:\n"
          << "        used = int((raw[:, :, " << off << ":" << off + s << ", 0] != 0.0).sum(2).max().item())\n"
          << "      if used > 0:\n"
          << "        rb = r[:, :, " << off << ":" << off << " + used, :]\n"
          << "        tm = tm + torch.matmul(rb.transpose(2, 3), self." << name << "(rb[:, :, :, 0:1]))\n"
          << "      if used < " << s << ":\n"
          << "        ge = self." << name << "(e0.reshape(1, 1))\n"
          << "        tm = tm + torch.cat([(" << s << " - used) * e0 * ge, torch.zeros([3, " << m
          << "], dtype=rij.dtype, device=rij.device)], 0)\n";
      }
      off += s;
    }
    o << "      tm = tm / " << literal(double(nc)) << "\n"
      << "      d = torch.matmul(tm.transpose(2, 3), tm[:, :, :, 0:" << msub << "]).reshape(nb, idx.numel(), "
      << m * msub << ")\n";
    if (c.isolated_energy_is_bias) {
      // The same steps for an atom whose slots are all empty: its energy is then exactly the bias.
      o << "      ti0 = torch.zeros([1, " << m << "], dtype=rij.dtype, device=rij.device)\n";
      for (int64_t t = 0; t < ntypes; ++t) {
        const int64_t s = c.sel[size_t(t)];
        if (s == 0) continue;
        const std::string name = c.type_one_side ? "emb_" + std::to_string(t)
                                                 : "emb_" + std::to_string(ti) + "_" + std::to_string(t);
        o << "      ti0 = ti0 + " << s << " * e0 * self." << name << "(e0.reshape(1, 1))\n";
      }
      o << "      ti0 = torch.cat([ti0, torch.zeros([3, " << m << "], dtype=rij.dtype, device=rij.device)], 0) / "
        << literal(double(nc)) << "\n"
        << "      d0 = torch.matmul(ti0.transpose(0, 1), ti0[:, 0:" << msub << "]).reshape(1, " << m * msub << ")\n"
        << "      y = self.fit_" << ti << "(d)\n"
        << "      e = e.index_copy(1, idx, y[:, :, 0] - self.fit_" << ti << "(d0)[:, 0:1] + self.bias[" << ti << "])\n";
    } else {
      o << "      y = self.fit_" << ti << "(d)\n"
        << "      e = e.index_copy(1, idx, y[:, :, 0] + self.bias[" << ti << "])\n";
    }
    // docs/long_range.md "The charge heads": the raw charge, the fitting net's second output.
    if (charges) o << "      q = q.index_copy(1, idx, y[:, :, 1])\n";
  }
  o << (charges ? "    return torch.stack([e, q], 2)\n\n" : "    return e\n\n");
}

/// The module's pair_forces and (without the long-range term) energy_force_env: the training
/// path's energies, forces and virial by the chain rule.
void emit_energy_force_env(std::ostringstream& o, bool long_range) {
  o << "  def pair_forces(self, g: Tensor, drij: Tensor, vec: Tensor, nlist: Tensor) -> Tuple[Tensor, Tensor]:\n"
       "    nb = g.size(0)\n"
       "    n = g.size(1)\n"
       "    gd = torch.matmul(g.unsqueeze(3), drij).squeeze(3)\n"
       "    j = nlist.clamp(min=0) + torch.arange(nb, device=g.device).view(nb, 1, 1) * n\n"
       "    f = gd.sum(2).reshape(nb * n, 3).index_add(0, j.reshape(-1), -gd.reshape(-1, 3)).reshape(nb, n, 3)\n"
       "    virial = -torch.matmul(vec.reshape(nb, -1, 3).transpose(1, 2), gd.reshape(nb, -1, 3))\n"
       "    return f, virial\n\n";
  if (long_range) return;
  o << "  def energy_force_env(self, rij: Tensor, drij: Tensor, vec: Tensor, nlist: Tensor, atype: Tensor,\n"
       "                       create_graph: bool, type_atoms: Optional[List[Tensor]] = None)"
       " -> Tuple[Tensor, Tensor, Tensor, Tensor]:\n"
       "    if not rij.requires_grad:\n"
       "      rij = rij.detach().requires_grad_(True)\n"
       "    e = self.atomic_energy(rij, atype, type_atoms)\n"
       "    energy = e.double().sum(1)\n"
       "    grads = torch.autograd.grad([e.sum()], [rij], create_graph=create_graph, allow_unused=True)\n"
       "    g = grads[0]\n"
       "    if g is None:\n"
       "      g = torch.zeros_like(rij)\n"
       "    fv = self.pair_forces(g, drij, vec, nlist)\n"
       "    return energy, e, fv[0], fv[1]\n\n";
}

/// The module's forward(data): the deploy path, everything from positions and the edge list.
void emit_deploy_forward(std::ostringstream& o, const SeAConfig& c) {
  const int64_t ntypes = int64_t(c.type_map.size());
  const int64_t nc = c.nslots();
  const double rc = c.rcut, rs = c.rcut_smth;
  o << deploy_interface_source("  ");
  o << "  def forward(self, data: Dict[str, Tensor]) -> Dict[str, Tensor]:\n"
    << deploy_pair_vectors_source("  ")
    << "    keep = torch.nonzero(r_all < " << literal(rc) << ").squeeze(1)\n"
       "    i = edge_index[0].index_select(0, keep)\n"
       "    j = edge_index[1].index_select(0, keep)\n"
       "    d = d_all.index_select(0, keep)\n"
       "    r = r_all.index_select(0, keep)\n"
       "    s = shift.index_select(0, keep)\n"
       "    tj = atype.index_select(0, j)\n"
       "    # Slots as the Kokkos environment matrix fills them: per (centre, neighbour type), sorted\n"
       "    # by (distance, j, shift); stable sorts from the least significant key.\n"
       "    order = torch.arange(i.numel(), device=pos.device)\n"
       "    keys = [s[:, 2], s[:, 1], s[:, 0], j, r.detach(), tj, i]\n"
       "    for key in keys:\n"
       "      order = order.index_select(0, torch.sort(key.index_select(0, order), stable=True)[1])\n"
       "    i = i.index_select(0, order)\n"
       "    tj = tj.index_select(0, order)\n"
       "    d = d.index_select(0, order)\n"
       "    r = r.index_select(0, order)\n"
       "    group = i * " << ntypes << " + tj\n"
       "    counts = torch.bincount(group, minlength=n * " << ntypes << ")\n"
       "    starts = torch.cumsum(counts, 0) - counts\n"
       "    rank = torch.arange(group.numel(), device=pos.device) - starts.index_select(0, group)\n"
       "    ok = torch.nonzero(rank < self.sel.index_select(0, tj)).squeeze(1)\n"
       "    i = i.index_select(0, ok)\n"
       "    tj = tj.index_select(0, ok)\n"
       "    d = d.index_select(0, ok)\n"
       "    r = r.index_select(0, ok)\n"
       "    slot = i * " << nc << " + self.sel_offset.index_select(0, tj) + rank.index_select(0, ok)\n"
       "    u = (r - " << literal(rs) << ") / " << literal(rc - rs) << "\n"
       "    v = (" << literal(rc) << " - r) / " << literal(rc - rs) << "\n"
       "    w = torch.where(r < " << literal(rs) << ", torch.ones_like(r), v * v * v * (10.0 - 15.0 * v + 6.0 * v * v))\n"
       "    sw = w / r\n"
       "    rows = torch.cat([sw.unsqueeze(1), (sw / r).unsqueeze(1) * d], 1)\n"
       "    rij = torch.zeros([n * " << nc << ", 4], dtype=pos.dtype, device=pos.device).index_copy(0, slot, rows)\n"
       "    e = self.atomic_energy(rij.reshape(1, n, " << nc << ", 4), atype)[0]\n";
  if (c.long_range.enabled) o << "    q_raw = e[:, 1]\n    e = e[:, 0]\n";
  o << deploy_outputs_source("  ", c.pair_repulsion.enabled(), c.long_range.enabled);
}

}  // namespace

std::string se_e2_a_source(const SeAConfig& c, const SeACompression* compression) {
  c.validate();
  if (compression != nullptr && int64_t(compression->grids.size()) != embedding_net_count(c))
    throw Error("se_e2_a: " + std::to_string(compression->grids.size()) + " table grids for " +
                std::to_string(embedding_net_count(c)) + " embedding nets");
  const int64_t ntypes = int64_t(c.type_map.size());
  const int64_t m = c.neuron.back(), msub = c.axis_neuron;
  std::vector<int64_t> emb_widths = {1};
  emb_widths.insert(emb_widths.end(), c.neuron.begin(), c.neuron.end());
  std::vector<int64_t> fit_widths = {m * msub};
  fit_widths.insert(fit_widths.end(), c.fitting_neuron.begin(), c.fitting_neuron.end());
  const auto emb_layers = layers_of(emb_widths, c.resnet_dt);
  const auto fit_layers = layers_of(fit_widths, c.fitting_resnet_dt);

  std::ostringstream o;
  // Embedding and fitting nets, unrolled per type.
  for (int64_t g = 0; g < embedding_net_count(c); ++g) {
    const std::string name = embedding_net_name(c, g);
    if (compression != nullptr && compression->grids.at(size_t(g)).intervals() > 0) {
      emit_net(o, name + "_exact", name, emb_layers, false);
      emit_table_lookup(o, name, compression->grids[size_t(g)], m);
    } else {
      emit_net(o, name, name, emb_layers, false);
    }
  }
  for (int64_t t = 0; t < ntypes; ++t)
    emit_net(o, "fit_" + std::to_string(t), "fit_" + std::to_string(t), fit_layers, true, c.long_range.enabled);

  emit_atomic_energy(o, c);
  emit_energy_force_env(o, c.long_range.enabled);
  o << pair_repulsion_source(c.pair_repulsion, ntypes, "  ");
  o << long_range_source(c.long_range, "  ");
  emit_deploy_forward(o, c);
  return o.str();
}

namespace {

/// A compressed model's table buffers (zero) and grids and its compression attributes.
void register_tables(torch::jit::Module& module, const SeAConfig& c, const SeACompression& z) {
  if (int64_t(z.grids.size()) != embedding_net_count(c))
    throw Error("se_e2_a: " + std::to_string(z.grids.size()) + " table grids for " +
                std::to_string(embedding_net_count(c)) + " embedding nets");
  for (int64_t g = 0; g < embedding_net_count(c); ++g) {
    const TableGrid& grid = z.grids[size_t(g)];
    if (grid.intervals() == 0) continue;
    const std::string name = embedding_net_name(c, g);
    module.register_buffer(name + "_table", torch::zeros({grid.intervals(), 6, c.neuron.back()},
                                                         torch::TensorOptions().dtype(c.dtype())));
    const auto packed = grid.packed();
    module.register_buffer(name + "_grid", torch::tensor(std::vector<double>(packed.begin(), packed.end()), torch::kFloat64));
  }
  module.register_attribute("compression_step", c10::FloatType::get(), z.options.step);
  module.register_attribute("compression_extrapolate", c10::FloatType::get(), z.options.extrapolate);
  module.register_attribute("compression_min_distance", c10::FloatType::get(), z.options.min_distance);
  module.register_attribute("compression_check_frequency", c10::IntType::get(), z.options.check_frequency);
}

}  // namespace

torch::jit::Module build_se_e2_a(const SeAConfig& c, const SeACompression* compression) {
  c.validate();
  const auto dtype = c.dtype();
  const int64_t ntypes = int64_t(c.type_map.size());
  const int64_t m = c.neuron.back();
  // The embedding nets draw from the descriptor's seed, the fitting nets from their own; the
  // latter is mixed with a fixed odd constant, so that equal seeds (the usual case) still give
  // two different streams.
  auto embedding_gen = at::detail::createCPUGenerator(c.seed);
  auto fitting_gen = at::detail::createCPUGenerator(c.fitting_seed ^ 0x9E3779B97F4A7C15ULL);
  at::Generator* gen = &embedding_gen;
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  // Drawn in float64 then cast, so float32 and float64 models start from the same numbers.
  auto normal = [&](std::vector<int64_t> shape, double mean, double stddev) {
    return (at::randn(shape, *gen, f64) * stddev + mean).to(dtype);
  };

  torch::jit::Module module("mlip_se_e2_a");
  auto add_net = [&](const std::string& prefix, const std::vector<Layer>& layers, bool linear_out) {
    for (size_t l = 0; l < layers.size(); ++l) {
      const Layer& L = layers[l];
      const double std_w = 1.0 / std::sqrt(double(L.in + L.out));
      module.register_parameter(prefix + "_w" + std::to_string(l), normal({L.in, L.out}, 0.0, std_w).requires_grad_(), false);
      module.register_parameter(prefix + "_b" + std::to_string(l), normal({L.out}, 0.0, 1.0).requires_grad_(), false);
      if (L.idt)
        module.register_parameter(prefix + "_idt" + std::to_string(l), normal({L.out}, 0.1, 0.001).requires_grad_(), false);
    }
    if (linear_out) {
      const int64_t in = layers.back().out;
      module.register_parameter(prefix + "_wout", normal({in, 1}, 0.0, 1.0 / std::sqrt(double(in + 1))).requires_grad_(), false);
      module.register_parameter(prefix + "_bout", normal({1}, 0.0, 1.0).requires_grad_(), false);
    }
  };
  std::vector<int64_t> emb_widths = {1};
  emb_widths.insert(emb_widths.end(), c.neuron.begin(), c.neuron.end());
  std::vector<int64_t> fit_widths = {m * c.axis_neuron};
  fit_widths.insert(fit_widths.end(), c.fitting_neuron.begin(), c.fitting_neuron.end());
  for (int64_t ti = 0; ti < (c.type_one_side ? 1 : ntypes); ++ti)
    for (int64_t t = 0; t < ntypes; ++t)
      add_net(c.type_one_side ? "emb_" + std::to_string(t) : "emb_" + std::to_string(ti) + "_" + std::to_string(t),
              layers_of(emb_widths, c.resnet_dt), false);
  gen = &fitting_gen;
  for (int64_t t = 0; t < ntypes; ++t) add_net("fit_" + std::to_string(t), layers_of(fit_widths, c.fitting_resnet_dt), true);
  // The charge outputs, drawn last: a model with the long-range term starts from the same
  // short-range weights as its twin without it.
  if (c.long_range.enabled)
    for (int64_t t = 0; t < ntypes; ++t) {
      const int64_t in = fit_widths.back();
      const std::string prefix = "fit_" + std::to_string(t);
      module.register_parameter(prefix + "_wq", normal({in, 1}, 0.0, 1.0 / std::sqrt(double(in + 1))).requires_grad_(),
                                false);
      module.register_parameter(prefix + "_bq", torch::zeros({1}, torch::TensorOptions().dtype(dtype)).requires_grad_(),
                                false);
    }

  module.register_buffer("davg", torch::zeros({ntypes, 4}, torch::TensorOptions().dtype(dtype)));
  module.register_buffer("dstd", torch::ones({ntypes, 4}, torch::TensorOptions().dtype(dtype)));
  module.register_buffer("bias", torch::zeros({ntypes}, torch::TensorOptions().dtype(dtype)));
  auto sel = torch::tensor(c.sel, torch::kInt64);
  module.register_buffer("sel", sel);
  module.register_buffer("sel_offset", torch::cumsum(sel, 0) - sel);
  module.register_attribute("isolated_energy_is_bias", c10::BoolType::get(), c.isolated_energy_is_bias);
  if (compression != nullptr) register_tables(module, c, *compression);
  register_repulsion_buffers(module, c.pair_repulsion, c.type_map);
  try {
    module.define(se_e2_a_source(c, compression));
  } catch (const c10::Error& e) {
    throw Error(std::string("se_e2_a: TorchScript compilation failed: ") + e.what_without_backtrace());
  }
  return module;
}

}  // namespace mlip::models
