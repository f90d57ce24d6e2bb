#include "models/equivariant/equivariant.h"

#include <ATen/ATen.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>
#include <tuple>

#include "error.h"
#include "models/deploy_source.h"
#include "models/equivariant/spherical.h"

namespace mlip::models {
namespace {

/// A float in the model source (models/deploy_source.h).
std::string literal(double v) { return torchscript_number(v); }

/// `name = ` the features of `irreps` side by side along the component axis (channels last):
/// the one irrep's tensor itself, or their concatenation.
void side_by_side_source(const std::string& name, const std::string& prefix, const std::vector<std::string>& irreps,
                         std::ostream& o) {
  if (irreps.size() == 1) {
    o << "    " << name << " = " << prefix << irreps[0] << "\n";
    return;
  }
  o << "    " << name << " = torch.cat([";
  for (size_t k = 0; k < irreps.size(); ++k) o << (k ? ", " : "") << prefix << irreps[k];
  o << "], 1)\n";
}

/// Where the generated source finds the model's tensors: the module's attributes (`self.x`,
/// the saved model) or the training path's dictionary (`params["x"]`, docs/equivariant.md
/// "The training path").
struct Style {
  bool training = false;
  /// The training function for MD inference (first derivatives only): the radial MLP fused
  /// with each block's message contraction (models/equivariant/radial_message.h).
  bool inference = false;
  /// One function per block for MD with features exchanged between ranks (layer_<k>,
  /// equivariant_layer_source): per-node work on the owned rows [0, nlocal) only.
  bool layered = false;
  std::string get(const std::string& name) const { return training ? "params[\"" + name + "\"]" : "self." + name; }
  std::string avg_num_neighbors() const { return training ? "avg_num_neighbors" : "self.avg_num_neighbors"; }
  /// The features' layout: [n, 2l+1, f] (channels last) in the training function, so that
  /// each linear map is one matrix product and the custom operators' operands need no
  /// transposes; [n, f, 2l+1] in the saved model (docs/equivariant.md "The training path").
  bool channels_last() const { return training; }
  // (TorchScript's x[:, a:b] is one slice per dimension, each an operation to differentiate
  // twice: the training function writes one select or narrow, or nothing for all the channels.)
  /// Component `m` of the features `x` of one irrep: [n, f].
  std::string component(const std::string& x, int m) const {
    return channels_last() ? x + ".select(1, " + std::to_string(m) + ")" : x + "[:, :, " + std::to_string(m) + "]";
  }
  /// The channels [c0, c1) of `x` (of `width` channels): [n, c1 - c0, 2l+1] or [n, 2l+1, c1 - c0].
  std::string channels(const std::string& x, int64_t c0, int64_t c1, int64_t width) const {
    if (!channels_last()) return x + "[:, " + std::to_string(c0) + ":" + std::to_string(c1) + "]";
    if (c0 == 0 && c1 == width) return x;
    return x + ".narrow(2, " + std::to_string(c0) + ", " + std::to_string(c1 - c0) + ")";
  }
  /// A readout: the scalars `x` [n, f] times `w` [f, 1] divided by `divisor`: [n].
  std::string readout(const std::string& x, const std::string& w, double divisor) const {
    if (channels_last()) return "mlip.linear(" + x + ", " + w + ", " + literal(1.0 / divisor) + ").squeeze(1)";
    return "torch.matmul(" + x + ", " + w + ")[:, 0] / " + literal(divisor);
  }
  /// `x` times the linear map `w` [f_in, f_out] over the channels, divided by `divisor`; in the
  /// training function one node that differentiates itself (models/equivariant/linear_map.h).
  std::string linear(const std::string& x, const std::string& w, double divisor) const {
    if (channels_last()) return "mlip.linear(" + x + ", " + w + ", " + literal(1.0 / divisor) + ")";
    return "torch.einsum('nfm,fg->ngm', [" + x + ", " + w + "]) / " + literal(divisor);
  }
};

/// An irreducible representation: angular momentum l and parity p (+1 even, -1 odd; 0 when
/// the model ignores parity).
struct Irrep {
  int64_t l = 0;
  int p = 1;
  std::string name() const { return std::to_string(l) + (p == 0 ? "" : (p > 0 ? "e" : "o")); }
  bool operator<(const Irrep& o) const { return l != o.l ? l < o.l : p > o.p; }
  bool operator==(const Irrep& o) const { return l == o.l && p == o.p; }
};

std::vector<std::string> names_of(const std::vector<Irrep>& irreps) {
  std::vector<std::string> names;
  for (const Irrep& r : irreps) names.push_back(r.name());
  return names;
}

/// One tensor-product path: input irrep x harmonic l2 -> output irrep.
struct Path {
  Irrep in;
  int64_t l2;
  Irrep out;
};

/// One term of the product basis (correlation > 1, docs/equivariant.md "Body order"): the
/// channel-wise product of `factors` (indices into the block's message irreps, non-decreasing)
/// coupled to `target`; with three factors, the first two are coupled to `middle` first.
struct Product {
  std::vector<size_t> factors;
  Irrep middle;
  Irrep target;
};

/// The plan of one interaction block: its input irreps, tensor-product paths, message irreps
/// (`out`), and the irreps it passes on (`targets`: `out` for correlation 1; after the product
/// basis, every message irrep, or the even scalars alone in the last layer).
struct Block {
  std::vector<Irrep> in, out, targets;
  std::vector<Path> paths;
  std::vector<Product> products;
  std::vector<int64_t> products_to(const Irrep& t) const {
    std::vector<int64_t> k;
    for (size_t q = 0; q < products.size(); ++q)
      if (products[q].target == t) k.push_back(int64_t(q));
    return k;
  }
  std::vector<int64_t> paths_to(const Irrep& o) const {
    std::vector<int64_t> k;
    for (size_t p = 0; p < paths.size(); ++p)
      if (paths[p].out == o) k.push_back(int64_t(p));
    return k;
  }
  std::vector<Irrep> gated() const {  // passed-on irreps with l > 0 get a gate
    std::vector<Irrep> g;
    for (const auto& o : targets)
      if (o.l > 0) g.push_back(o);
    return g;
  }
};

/// Whether irreps a and b couple to c (triangle rule, and parity when the model has it).
bool couples(const Irrep& a, const Irrep& b, const Irrep& c) {
  return c.l >= std::abs(a.l - b.l) && c.l <= a.l + b.l && c.p == a.p * b.p;
}

/// The product basis of a block up to c.correlation factors, for each of its targets.
void add_products(const EquivariantConfig& c, Block& b) {
  const size_t n = b.out.size();
  for (const Irrep& t : b.targets) {
    for (size_t a = 0; a < n; ++a)
      if (b.out[a] == t) b.products.push_back({{a}, t, t});
    if (c.correlation < 2) continue;
    for (size_t a = 0; a < n; ++a)
      for (size_t e = a; e < n; ++e)
        // The product of a channel with itself has no antisymmetric part (e.g. v x v = 0).
        if (couples(b.out[a], b.out[e], t) && !(a == e && (2 * b.out[a].l + t.l) % 2 == 1))
          b.products.push_back({{a, e}, t, t});
    if (c.correlation < 3) continue;
    for (size_t a = 0; a < n; ++a)
      for (size_t e = a; e < n; ++e)
        for (int64_t lm = std::abs(b.out[a].l - b.out[e].l); lm <= std::min(b.out[a].l + b.out[e].l, kMaxL); ++lm) {
          const Irrep middle{lm, b.out[a].p * b.out[e].p};
          if (a == e && (2 * b.out[a].l + lm) % 2 == 1) continue;
          for (size_t g = e; g < n; ++g)
            if (couples(middle, b.out[g], t)) b.products.push_back({{a, e, g}, middle, t});
        }
  }
}

std::vector<Block> plan(const EquivariantConfig& c) {
  const int even = c.parity ? 1 : 0;
  std::vector<Block> blocks;
  std::vector<Irrep> current = {{0, even}};
  for (int64_t k = 0; k < c.num_layers; ++k) {
    const bool last = k == c.num_layers - 1;
    Block b;
    b.in = current;
    std::map<Irrep, bool> outs;
    for (const auto& in : b.in)
      for (int64_t l2 = 0; l2 <= c.l_max; ++l2)
        for (int64_t l3 = std::abs(in.l - l2); l3 <= std::min(in.l + l2, c.l_max); ++l3) {
          const Irrep out{l3, c.parity ? in.p * (l2 % 2 ? -1 : 1) : 0};
          // The readout needs the even scalars only; with a product basis, products of the other
          // irreps make them, so every message irrep is kept.
          if (last && c.correlation == 1 && !(out == Irrep{0, even})) continue;
          // Without pseudotensors only irreps of parity (-1)^l are made (docs/equivariant.md "Irreps").
          if (c.parity && !c.pseudotensors && out.p != (l3 % 2 ? -1 : 1)) continue;
          b.paths.push_back({in, l2, out});
          outs[out] = true;
        }
    for (const auto& [o, _] : outs) b.out.push_back(o);
    if (c.correlation == 1) {
      b.targets = b.out;
    } else {
      b.targets = last ? std::vector<Irrep>{{0, even}} : b.out;
      add_products(c, b);
    }
    current = b.targets;
    blocks.push_back(b);
  }
  return blocks;
}

/// TorchScript of a block's product basis (correlation > 1): from the messages a_<irrep>
/// [n, f, 2l+1], each target's B = sum over products q of w[type, q, channel] times the
/// channel-wise coupled product, then z_<target> = B times lin3 (with the gate channels).
void product_basis_source(const Block& b, const std::string& L, int64_t f, const Style& st, std::ostream& o) {
  for (const Irrep& t : b.targets) {
    const auto qs = b.products_to(t);
    o << "    pw = " << st.get(L + "pw_" + t.name()) << ".index_select(0, atype)\n"
      << "    bsum = torch.zeros([n, " << f << ", " << 2 * t.l + 1 << "], dtype=d.dtype, device=d.device)\n";
    for (size_t k = 0; k < qs.size(); ++k) {
      const Product& q = b.products[size_t(qs[k])];
      const std::string cg = st.get(L + "pc" + std::to_string(qs[k]) + "a");
      auto outer = [&](const std::string& a, int64_t na, const std::string& e, int64_t ne) {
        return "(" + a + ".unsqueeze(3) * " + e + ".unsqueeze(2)).reshape(n, " + std::to_string(f) + ", " +
               std::to_string(na * ne) + ")";
      };
      const Irrep& a0 = b.out[q.factors[0]];
      if (q.factors.size() == 1) {
        o << "    t = a_" << a0.name() << "\n";
      } else {
        const Irrep& a1 = b.out[q.factors[1]];
        const Irrep first = q.factors.size() == 2 ? t : q.middle;
        o << "    t = torch.matmul(" << outer("a_" + a0.name(), 2 * a0.l + 1, "a_" + a1.name(), 2 * a1.l + 1) << ", "
          << cg << ".reshape(" << (2 * a0.l + 1) * (2 * a1.l + 1) << ", " << 2 * first.l + 1 << "))\n";
        if (q.factors.size() == 3) {
          const Irrep& a2 = b.out[q.factors[2]];
          o << "    t = torch.matmul(" << outer("t", 2 * q.middle.l + 1, "a_" + a2.name(), 2 * a2.l + 1) << ", "
            << st.get(L + "pc" + std::to_string(qs[k]) + "b") << ".reshape(" << (2 * q.middle.l + 1) * (2 * a2.l + 1) << ", " << 2 * t.l + 1 << "))\n";
        }
      }
      o << "    bsum = bsum + t * pw[:, " << k << ", :].unsqueeze(2)\n";
    }
    o << "    z_" << t.name() << " = torch.einsum('nfm,fg->ngm', [bsum, " << st.get(L + "lin3_" + t.name()) << "]) / "
      << literal(std::sqrt(double(f) * double(qs.size()))) << "\n";
  }
}

/// The same product basis in the training path (docs/equivariant.md "The training path"): the
/// block's messages side by side, their pair products P once, then per target one product sum
/// (models/equivariant/product_basis.h) of its products of one, two and three factors: forms
/// (G, W, A), (G, W, P) and (G, W, P, A) over the operands G (the output), W, A and P.
void training_product_basis_source(const EquivariantConfig& c, const Block& b, size_t k, const Style& st,
                                   std::ostream& o) {
  const int64_t f = c.num_features;
  const std::string L = "l" + std::to_string(k) + "_";
  auto list = [](const std::vector<std::string>& v) {
    std::string s = "[";
    for (size_t q = 0; q < v.size(); ++q) s += (q ? ", " : "") + v[q];
    return s + "]";
  };
  auto sizes = [&](const std::vector<int64_t>& v) {
    std::vector<std::string> s;
    for (int64_t x : v) s.push_back(std::to_string(x));
    return list(s);
  };
  side_by_side_source("at", "a_", names_of(b.out), o);
  std::vector<ProductTables> mine;
  for (const ProductTables& p : product_couplings(c))
    if (p.block == int64_t(k)) mine.push_back(p);
  for (const ProductTables& p : mine)
    if (p.factors == 0)
      o << "    pp = mlip.product_basis(0, None, None, at, at, None, " << st.get(p.terms_name) << ", "
        << st.get(p.coefficients_name) << ", " << sizes(p.coupling.sizes) << ")\n";
  // The operands' numbers in the sum: G 0, W 1, A 2, P 3; each form's slots (G, W, X1, X2, X3).
  const std::vector<int64_t> slots_of[4] = {{}, {0, 1, 2, -1, -1}, {0, 1, 3, -1, -1}, {0, 1, 3, 2, -1}};
  for (const Irrep& t : b.targets) {
    const int64_t nq = int64_t(b.products_to(t).size());
    std::vector<std::string> terms, coefficients;
    std::vector<int64_t> form_sizes, slots;
    bool pairs = false;
    for (const ProductTables& p : mine) {
      if (p.factors == 0 || p.target != t.name()) continue;
      terms.push_back(st.get(p.terms_name)), coefficients.push_back(st.get(p.coefficients_name));
      form_sizes.insert(form_sizes.end(), p.coupling.sizes.begin(), p.coupling.sizes.end());
      slots.insert(slots.end(), slots_of[p.factors].begin(), slots_of[p.factors].end());
      pairs = pairs || p.factors > 1;
    }
    if (terms.empty()) {
      o << "    bt = torch.zeros([n, " << 2 * t.l + 1 << ", " << f << "], dtype=d.dtype, device=d.device)\n";
    } else {
      o << "    bt = mlip.product_sum([" << st.get(L + "pw_" + t.name()) << ".index_select(0, atype), at"
        << (pairs ? ", pp" : "") << "], " << list(terms) << ", " << list(coefficients) << ", " << sizes(form_sizes)
        << ", " << sizes(slots) << ")\n";
    }
    o << "    z_" << t.name() << " = " << st.linear("bt", st.get(L + "lin3_" + t.name()), std::sqrt(double(f) * double(nq)))
      << "\n";
  }
}

/// The coupling of irreps x and y to z, scaled as the messages' ([2lx+1, 2ly+1, 2lz+1]).
torch::Tensor product_coupling(const Irrep& x, const Irrep& y, const Irrep& z) {
  return (wigner_3j(x.l, y.l, z.l) * std::sqrt(double(2 * z.l + 1))).contiguous();
}

}  // namespace

void EquivariantConfig::validate() const {
  auto bad = [](const std::string& key, const std::string& expected, const std::string& got) {
    throw Error("model." + key + ": expected " + expected + ", got " + got);
  };
  if (type_map.empty()) bad("type_map", "at least one type", "none");
  if (!(r_max > 0)) bad("r_max", "a positive number (Å)", std::to_string(r_max));
  if (num_features < 1) bad("num_features", "a positive integer", std::to_string(num_features));
  if (l_max < 0 || l_max > kMaxL) bad("l_max", "an integer from 0 to " + std::to_string(kMaxL), std::to_string(l_max));
  if (num_layers < 1) bad("num_layers", "a positive integer", std::to_string(num_layers));
  if (num_bessels < 1) bad("num_bessels", "a positive integer", std::to_string(num_bessels));
  if (!(polynomial_p >= 2)) bad("polynomial_p", "a number >= 2", std::to_string(polynomial_p));
  if (correlation < 1 || correlation > 3) bad("correlation", "1, 2 or 3", std::to_string(correlation));
  if (radial_width < 1) bad("radial_width", "a positive integer", std::to_string(radial_width));
  if (radial_depth < 1) bad("radial_depth", "a positive integer", std::to_string(radial_depth));
  if (!(avg_num_neighbors > 0)) bad("avg_num_neighbors", "a positive number", std::to_string(avg_num_neighbors));
  if (precision != "float64" && precision != "float32") bad("precision", "\"float64\" or \"float32\"", "\"" + precision + "\"");
  if (!pseudotensors && !parity) bad("pseudotensors", "true when model.parity is false (without parity every irrep is natural)", "false");
}

torch::Dtype EquivariantConfig::dtype() const { return precision == "float32" ? torch::kFloat32 : torch::kFloat64; }

namespace {

/// `edge_geometry(d) -> (basis [E, num_bessels], y [E, (l_max+1)^2])`: the Bessel basis times
/// the cutoff, and the harmonics of d̂ (docs/equivariant.md "Pieces").
void geometry_source(const EquivariantConfig& c, std::ostream& o) {
  const double p = c.polynomial_p;
  o << "def edge_geometry(self, d: Tensor) -> Tuple[Tensor, Tensor]:\n"
       "    r = torch.sqrt((d * d).sum(1))\n"
       "    x = r / " << literal(c.r_max) << "\n"
       // Polynomial cutoff u(x), zero from r_max on.
       "    cut = 1.0 - " << literal((p + 1) * (p + 2) / 2) << " * torch.pow(x, " << literal(p) << ") + "
    << literal(p * (p + 2)) << " * torch.pow(x, " << literal(p + 1) << ") - " << literal(p * (p + 1) / 2)
    << " * torch.pow(x, " << literal(p + 2) << ")\n"
       "    cut = torch.where(x < 1.0, cut, torch.zeros_like(cut))\n"
       "    nb = torch.arange(1, " << c.num_bessels + 1 << ", dtype=d.dtype, device=d.device)\n"
       "    basis = " << literal(2.0 / c.r_max) << " * torch.sin(nb.unsqueeze(0) * " << literal(M_PI / c.r_max)
    << " * r.unsqueeze(1)) / r.unsqueeze(1) * cut.unsqueeze(1)\n"
       "    y = self.spherical_harmonics(d / r.unsqueeze(1), " << c.l_max << ")\n"
       "    return basis, y\n\n";
}

/// The messages of block `b` in the saved model: per path, the harmonics contracted with the
/// coupling ([E, 2l1+1, 2l3+1]), one batched product with the neighbours' features, the radial
/// weight; summed over the neighbours per output irrep. Leaves m_<irrep> [n, f * paths, 2l+1].
void deploy_messages_source(const Block& b, const std::string& L, int64_t f, std::ostream& o) {
  for (const auto& in : b.in) o << "    xj_" << in.name() << " = x_" << in.name() << ".index_select(0, j)\n";
  for (const auto& out : b.out) {
    const auto ps = b.paths_to(out);
    o << "    parts_" << out.name() << ": List[Tensor] = []\n";
    for (int64_t pi : ps) {
      const Path& path = b.paths[size_t(pi)];
      // Harmonics and coupling first (cheap), then one batched product with the features: a
      // three-operand einsum would contract in a worse order.
      const int64_t n1 = 2 * path.in.l + 1, n2 = 2 * path.l2 + 1, n3 = 2 * path.out.l + 1;
      o << "    yc = torch.matmul(y" << path.l2 << ", self." << L << "cg" << pi << ".permute(1, 0, 2).reshape(" << n2
        << ", " << n1 * n3 << ")).reshape(-1, " << n1 << ", " << n3 << ")\n"
        << "    t = torch.matmul(xj_" << path.in.name() << ", yc) * w[:, " << pi * f << ":" << (pi + 1) * f
        << "].unsqueeze(2)\n"
        << "    parts_" << out.name() << ".append(t)\n";
    }
    o << "    m_" << out.name() << " = torch.zeros([n, " << f * int64_t(ps.size()) << ", " << 2 * out.l + 1
      << "], dtype=d.dtype, device=d.device).index_add(0, i, torch.cat(parts_" << out.name() << ", 1))\n";
  }
}

/// The same messages in the training path: one call of the message contraction
/// (models/equivariant/message_contraction.h) for every path of the block. Its output rows are
/// ordered by output irrep, then component, then path (message_couplings), so that each output
/// irrep's messages m_<irrep> [n, 2l+1, f * paths] are a block of its rows, channels last (split
/// off by one node).
/// radial: for MD inference, the radial MLP's arguments as block_source writes them: the MLP and
/// the contraction as one fused call (models/equivariant/radial_message.h) instead of the weights `w`.
void training_messages_source(const Block& b, const std::string& L, int64_t f, int64_t harmonics,
                              const std::string& radial, std::ostream& o) {
  int64_t inputs = 0, outputs = 0;
  side_by_side_source("xt", "x_", names_of(b.in), o);
  for (const auto& in : b.in) inputs += 2 * in.l + 1;
  for (const auto& out : b.out) outputs += (2 * out.l + 1) * int64_t(b.paths_to(out).size());
  const int64_t np = int64_t(b.paths.size());
  const std::string coupling = "params[\"" + L + "terms\"], params[\"" + L + "coefficients\"], [" +
                               std::to_string(harmonics) + ", " + std::to_string(inputs) + ", " +
                               std::to_string(outputs) + ", " + std::to_string(np) + "]";
  if (radial.empty())
    o << "    mt = mlip.message_contract(0, None, xt, w.reshape(-1, " << np << ", " << f << "), y, edges, " << coupling
      << ")\n";
  else
    o << "    mt = mlip.radial_message(basis, " << radial << ", xt, y, edges, " << coupling << ")\n";
  if (b.out.size() == 1) {
    const auto& out = b.out[0];
    o << "    m_" << out.name() << " = mt.reshape(n, " << 2 * out.l + 1 << ", " << f * int64_t(b.paths_to(out).size())
      << ")\n";
    return;
  }
  // Several output irreps: one split node (models/equivariant/row_split.h).
  std::string rows, components;
  for (const auto& out : b.out) {
    rows += (rows.empty() ? "" : ", ") + std::to_string((2 * out.l + 1) * int64_t(b.paths_to(out).size()));
    components += (components.empty() ? "" : ", ") + std::to_string(2 * out.l + 1);
  }
  o << "    parts = mlip.split_rows(mt, [" << rows << "], [" << components << "])\n";
  for (size_t k = 0; k < b.out.size(); ++k) o << "    m_" << b.out[k].name() << " = parts[" << k << "]\n";
}

/// The self-connection of an output irrep that is also an input of its block: z += s · sc[type]
/// / √f, with the weights sc [types, f, width] chosen by the atom's type, written three ways.
void self_connection_source(const Irrep& out, const std::string& L, int64_t f, const Style& st, std::ostream& o) {
  const std::string sc = st.get(L + "sc_" + out.name()), z = "z_" + out.name(), s_in = "s_" + out.name();
  const std::string divisor = literal(std::sqrt(double(f)));
  const int64_t m = 2 * out.l + 1;
  if (st.training && !st.inference) {
    // Training: every type's map at once, one matrix product [n·(2l+1), f] x [f, types·width],
    // then each row's own type's part picked (type_rows_<2l+1>, body_source): a few operations,
    // where the map gathered per atom is a batched product of n small matrices, slow to run and
    // to differentiate twice for small frames. Costs `types` times the arithmetic (few types).
    o << "    sct = " << st.linear(s_in, sc + ".permute(1, 0, 2).reshape(" + std::to_string(f) + ", -1)", std::sqrt(double(f)))
      << "\n"
      << "    sct = sct.reshape(-1, " << sc << ".size(2)).index_select(0, type_rows_" << m << ").reshape(n, " << m
      << ", " << sc << ".size(2))\n"
      << "    " << z << " = " << z << " + sct\n";
  } else if (st.inference) {
    // MD: type by type (each type's atoms through its [f, width] map) rather than the weights
    // gathered per atom ([n, f, width]: most of a block's memory per atom).
    o << "    sct = torch.zeros_like(" << z << ")\n"
      << "    for t in range(" << sc << ".size(0)):\n"
      << "        rows = torch.nonzero(atype == t).squeeze(1)\n"
      << "        sct = sct.index_add(0, rows, " << st.linear(s_in + ".index_select(0, rows)", sc + "[t]", std::sqrt(double(f)))
      << ")\n"
      << "    " << z << " = " << z << " + sct\n";
  } else {  // the saved model: the weights gathered per atom
    o << "    " << z << " = " << z << " + torch.einsum('nfm,nfg->ngm', [" << s_in << ", " << sc
      << ".index_select(0, atype)]) / " << divisor << "\n";
  }
}

/// Block k of the body (docs/equivariant.md "Pieces"): from the features x_<irrep> of its input
/// irreps to those of its targets. Per-layer MD functions (st.layered) keep only the owned rows
/// [0, nlocal) once the messages are summed: the neighbours' features were needed for the
/// messages only.
void block_source(const EquivariantConfig& c, const Block& b, size_t k, const Style& st, std::ostream& o) {
  const int64_t f = c.num_features;
  const std::string even = Irrep{0, c.parity ? 1 : 0}.name();
  const std::string L = "l" + std::to_string(k) + "_";
  // MACE's readouts of every layer: each block's input scalars (the previous block's output)
  // through a linear map of their own, summed into the energy.
  if (c.readout_every_layer && k > 0)
    o << "    e_layers = e_layers + "
      << st.readout(st.component("x_" + even + (st.layered ? ".narrow(0, 0, nlocal)" : ""), 0), st.get(L + "readout"),
                    std::sqrt(double(f)))
      << "\n";
  // Radial MLP without biases: zero input (beyond r_max) gives zero weights.
  // MD inference: the radial MLP runs inside the fused message call below; training: as one
  // autograd node with its derivatives written out (models/equivariant/radial_mlp.h).
  std::string radial;
  if (st.training) {
    radial = "[";
    for (int64_t d = 0; d < c.radial_depth; ++d) radial += (d ? ", " : "") + st.get(L + "r" + std::to_string(d));
    radial += "], " + st.get(L + "rout") + ", [";
    for (int64_t d = 0; d < c.radial_depth; ++d)
      radial += (d ? ", " : "") + literal(std::sqrt(double(d == 0 ? c.num_bessels : c.radial_width)));
    radial += "], " + literal(std::sqrt(double(c.radial_width)));
    if (!st.inference) o << "    w = mlip.radial_mlp_training(basis, " << radial << ")\n";
  } else {
    o << "    h = basis\n";
    for (int64_t d = 0; d < c.radial_depth; ++d) {
      const int64_t fan_in = d == 0 ? c.num_bessels : c.radial_width;
      o << "    h = torch.matmul(h, " << st.get(L + "r" + std::to_string(d)) << ") / "
        << literal(std::sqrt(double(fan_in))) << "\n"
        << "    h = h * torch.sigmoid(h)\n";
    }
    o << "    w = torch.matmul(h, " << st.get(L + "rout") << ") / " << literal(std::sqrt(double(c.radial_width)))
      << "\n";
  }
  // The training path's basis holds each pair once (both directions have one length): the
  // contraction reads each edge's weights through its pair (its tables end with pair, pair_edge).
  // Linear mixing of the input features per irrep; keep the input for the self-connection.
  for (const auto& in : b.in)
    o << "    s_" << in.name() << " = x_" << in.name() << "\n"
      << "    x_" << in.name() << " = " << st.linear("x_" + in.name(), st.get(L + "lin1_" + in.name()), std::sqrt(double(f)))
      << "\n";
  // Messages: channel-wise tensor product with the edge harmonics, summed over neighbours.
  if (st.training)
    training_messages_source(b, L, f, (c.l_max + 1) * (c.l_max + 1), st.inference ? radial : "", o);
  else
    deploy_messages_source(b, L, f, o);
  if (st.layered) {
    o << "    n = nlocal\n"
         "    atype = atype.narrow(0, 0, nlocal)\n";
    for (const auto& out : b.out) o << "    m_" << out.name() << " = m_" << out.name() << ".narrow(0, 0, nlocal)\n";
    for (const auto& in : b.in) o << "    s_" << in.name() << " = s_" << in.name() << ".narrow(0, 0, nlocal)\n";
  }
  for (const auto& out : b.out) {
    const auto ps = b.paths_to(out);
    const std::string divisor = literal(std::sqrt(double(f * int64_t(ps.size()))));
    o << "    " << (c.correlation == 1 ? "z_" : "a_") << out.name() << " = ";
    if (st.channels_last())  // both scales as one factor on the product
      o << "mlip.linear(m_" << out.name() << ", " << st.get(L + "lin2_" + out.name()) << ", 1.0 / ("
        << st.avg_num_neighbors() << " ** 0.5) / " << divisor << ")\n";
    else
      o << "torch.einsum('ncm,cg->ngm', [m_" << out.name() << " / (" << st.avg_num_neighbors() << " ** 0.5), "
        << st.get(L + "lin2_" + out.name()) << "]) / " << divisor << "\n";
  }
  if (c.correlation > 1) {
    if (st.training)
      training_product_basis_source(c, b, k, st, o);
    else
      product_basis_source(b, L, f, st, o);
  }
  for (const auto& out : b.targets)
    if (k > 0 && std::find(b.in.begin(), b.in.end(), out) != b.in.end()) self_connection_source(out, L, f, st, o);
  // Gates: even scalars through SiLU, odd scalars through tanh; every l > 0 channel times a
  // sigmoid gate (extra even-scalar channels).
  const auto gated = b.gated();
  for (const auto& out : b.targets) {
    if (out.l > 0) continue;
    const bool is_even = out.p >= 0;
    if (out == Irrep{0, c.parity ? 1 : 0} && st.training) {  // one node (models/equivariant/gate.h)
      o << "    gates = mlip.gate(z_" << out.name() << ", [";
      for (size_t q = 0; q < gated.size(); ++q) o << (q ? ", " : "") << "z_" << gated[q].name();
      o << "])\n    x_" << out.name() << " = gates[0]\n";
      for (size_t q = 0; q < gated.size(); ++q) o << "    x_" << gated[q].name() << " = gates[" << q + 1 << "]\n";
    } else if (out == Irrep{0, c.parity ? 1 : 0}) {
      o << "    g = z_" << out.name() << "\n"
        << "    x_" << out.name() << " = " << st.channels("g", 0, f, f * int64_t(1 + gated.size())) << "\n"
        << "    x_" << out.name() << " = x_" << out.name() << " * torch.sigmoid(x_" << out.name() << ")\n";
      for (size_t q = 0; q < gated.size(); ++q)
        o << "    x_" << gated[q].name() << " = z_" << gated[q].name() << " * torch.sigmoid("
          << st.channels("g", f * int64_t(q + 1), f * int64_t(q + 2), f * int64_t(1 + gated.size())) << ")\n";
    } else {
      o << "    x_" << out.name() << " = " << (is_even ? "z_" + out.name() + " * torch.sigmoid(z_" + out.name() + ")"
                                                       : "torch.tanh(z_" + out.name() + ")")
        << "\n";
    }
  }
}

/// The embedding: the even scalars of layer 0 from the atom types.
void embedding_source(const EquivariantConfig& c, const Style& st, std::ostream& o) {
  o << "    x_" << Irrep{0, c.parity ? 1 : 0}.name() << " = " << st.get("embed")
    << ".index_select(0, atype).unsqueeze(" << (st.channels_last() ? 1 : 2) << ")\n";
}

/// The last readout (plus the earlier layers' readouts in e_layers) into `e`, unscaled.
void readout_source(const EquivariantConfig& c, const Style& st, std::ostream& o) {
  o << "    e = "
    << st.readout(st.component("x_" + Irrep{0, c.parity ? 1 : 0}.name(), 0), st.get("readout"),
                  std::sqrt(double(c.num_features)))
    << (c.readout_every_layer ? " + e_layers" : "")
    << "\n";
}

/// The body shared by the saved model's atomic_energy and the training path: from the radial
/// basis `basis`, the harmonics `y` and the pairs (i, j) to the atomic energies `e`.
void body_source(const EquivariantConfig& c, const std::vector<Block>& blocks, const Style& st, std::ostream& o) {
  embedding_source(c, st, o);
  // The training path's self-connection of an irrep of 2l+1 components picks row
  // type_rows_<2l+1>[a·(2l+1) + m] = (a·(2l+1) + m) · types + type of atom a from every type's
  // map (self_connection_source).
  if (st.training && !st.inference && c.num_layers > 1)
    for (int64_t l = 0; l <= c.l_max; ++l)
      o << "    type_rows_" << 2 * l + 1 << " = (torch.arange(n * " << 2 * l + 1
        << ", dtype=atype.dtype, device=atype.device).reshape(n, " << 2 * l + 1 << ") * " << st.get("embed")
        << ".size(0) + atype.unsqueeze(1)).reshape(-1)\n";
  if (c.readout_every_layer) o << "    e_layers = torch.zeros([n], dtype=d.dtype, device=d.device)\n";
  for (size_t k = 0; k < blocks.size(); ++k) block_source(c, blocks[k], k, st, o);
  readout_source(c, st, o);
  const std::string energy =
      "e * " + st.get("scale") + ".index_select(0, atype) + " + st.get("shift") + ".index_select(0, atype)";
  if (!c.long_range.enabled) {
    o << "    return " << energy << "\n\n";
    return;
  }
  // docs/long_range.md "The charge heads": the raw charge, a readout of the same scalars, in e.
  o << "    q_raw = "
    << st.readout(st.component("x_" + Irrep{0, c.parity ? 1 : 0}.name(), 0), st.get("charge_readout"),
                  std::sqrt(double(c.num_features)))
    << "\n"
    << "    return torch.stack([" << energy << ", q_raw.to(e.dtype)], 1)\n\n";
}

}  // namespace

std::string equivariant_source(const EquivariantConfig& c) {
  c.validate();
  const auto blocks = plan(c);
  std::ostringstream o;
  o << spherical_harmonics_source() << "\n";
  geometry_source(c, o);
  o << "def atomic_energy(self, d: Tensor, i: Tensor, j: Tensor, atype: Tensor) -> Tensor:\n"
       "    n = atype.size(0)\n"
       "    basis, y = self.edge_geometry(d)\n";
  for (int64_t l = 0; l <= c.l_max; ++l) o << "    y" << l << " = y[:, " << l * l << ":" << (l + 1) * (l + 1) << "]\n";
  body_source(c, blocks, Style{}, o);
  o << "def set_scale_shift(self, scale: Tensor, shift: Tensor):\n"
       "    self.scale = scale.to(self.scale.dtype)\n"
       "    self.shift = shift.to(self.shift.dtype)\n\n";
  o << pair_repulsion_source(c.pair_repulsion, int64_t(c.type_map.size()), "");
  o << long_range_source(c.long_range, "");
  o << deploy_interface_source("");
  o << "def forward(self, data: Dict[str, Tensor]) -> Dict[str, Tensor]:\n"
    << deploy_pair_vectors_source("    ")
    << "    keep = torch.nonzero(r_all < " << literal(c.r_max) << ").squeeze(1)\n"
       "    e = self.atomic_energy(d_all.index_select(0, keep), edge_index[0].index_select(0, keep), "
       "edge_index[1].index_select(0, keep), atype)\n";
  if (c.long_range.enabled) o << "    q_raw = e[:, 1]\n    e = e[:, 0]\n";
  o << deploy_outputs_source("    ", c.pair_repulsion.enabled(), c.long_range.enabled);
  return o.str();
}

std::string equivariant_training_source(const EquivariantConfig& c, bool inference) {
  c.validate();
  std::ostringstream o;
  o << "def training_energy(params: Dict[str, Tensor], avg_num_neighbors: float, basis: Tensor, pair: Tensor, "
       "y: Tensor, i: Tensor, j: Tensor, atype: Tensor, edges: List[Tensor]) -> Tensor:\n"
       "    n = atype.size(0)\n"
       "    d = y\n";
  body_source(c, plan(c), Style{true, inference}, o);
  return o.str();
}

std::string equivariant_layer_source(const EquivariantConfig& c) {
  c.validate();
  const auto blocks = plan(c);
  const Style st{true, true, true};
  std::ostringstream o;
  for (size_t k = 0; k < blocks.size(); ++k) {
    const Block& b = blocks[k];
    const bool last = k + 1 == blocks.size();
    o << "def layer_" << k
      << "(params: Dict[str, Tensor], avg_num_neighbors: float, basis: Tensor, pair: Tensor, y: Tensor, "
         "atype: Tensor, edges: List[Tensor], nlocal: int, x: List[Tensor]) -> Tuple[Tensor, List[Tensor]]:\n"
         "    n = atype.size(0)\n"
         "    d = y\n";
    if (k == 0) embedding_source(c, st, o);
    else
      for (size_t q = 0; q < b.in.size(); ++q) o << "    x_" << b.in[q].name() << " = x[" << q << "]\n";
    o << "    e_layers = torch.zeros([nlocal], dtype=d.dtype, device=d.device)\n";
    block_source(c, b, k, st, o);
    if (last) {
      readout_source(c, st, o);
      const std::string energy =
          "e * " + st.get("scale") + ".index_select(0, atype) + " + st.get("shift") + ".index_select(0, atype)";
      o << "    none: List[Tensor] = []\n";
      if (c.long_range.enabled)  // [nlocal, 2]: the energies and raw charges, as body_source's
        o << "    q_raw = "
          << st.readout(st.component("x_" + Irrep{0, c.parity ? 1 : 0}.name(), 0), st.get("charge_readout"),
                        std::sqrt(double(c.num_features)))
          << "\n    return torch.stack([" << energy << ", q_raw.to(e.dtype)], 1), none\n\n";
      else
        o << "    return " << energy << ", none\n\n";
    } else {
      o << "    return e_layers * " << st.get("scale") << ".index_select(0, atype), [";
      for (size_t q = 0; q < b.targets.size(); ++q) o << (q ? ", " : "") << "x_" << b.targets[q].name();
      o << "]\n\n";
    }
  }
  return o.str();
}

std::vector<std::vector<int64_t>> equivariant_layer_outputs(const EquivariantConfig& c) {
  std::vector<std::vector<int64_t>> widths;
  const auto blocks = plan(c);
  for (size_t k = 0; k + 1 < blocks.size(); ++k) {
    std::vector<int64_t> w;
    for (const auto& t : blocks[k].targets) w.push_back(2 * t.l + 1);
    widths.push_back(w);
  }
  return widths;
}

std::vector<BlockCoupling> message_couplings(const EquivariantConfig& c) {
  std::vector<BlockCoupling> out;
  for (const Block& b : plan(c)) {
    std::map<Irrep, int64_t> first;  // each input irrep's first component in the features
    int64_t inputs = 0, outputs = 0;
    for (const auto& in : b.in) first[in] = inputs, inputs += 2 * in.l + 1;
    // Output rows by output irrep, component m3, then the irrep's paths (training_messages_source).
    std::vector<int64_t> out_row(b.paths.size()), out_stride(b.paths.size());
    for (const auto& out : b.out) {
      const auto ps = b.paths_to(out);
      for (size_t k = 0; k < ps.size(); ++k)
        out_row[size_t(ps[k])] = outputs + int64_t(k), out_stride[size_t(ps[k])] = int64_t(ps.size());
      outputs += (2 * out.l + 1) * int64_t(ps.size());
    }
    std::vector<int64_t> rows;
    std::vector<double> values;
    for (size_t p = 0; p < b.paths.size(); ++p) {
      const Path& path = b.paths[p];
      const auto cg = (wigner_3j(path.in.l, path.l2, path.out.l) * std::sqrt(double(2 * path.out.l + 1))).contiguous();
      const auto a = cg.accessor<double, 3>();
      for (int64_t m1 = 0; m1 < cg.size(0); ++m1)
        for (int64_t m2 = 0; m2 < cg.size(1); ++m2)
          for (int64_t m3 = 0; m3 < cg.size(2); ++m3)
            if (a[m1][m2][m3] != 0.0) {
              rows.insert(rows.end(),
                          {path.l2 * path.l2 + m2, first[path.in] + m1, out_row[p] + m3 * out_stride[p], int64_t(p)});
              values.push_back(a[m1][m2][m3]);
            }
    }
    BlockCoupling k;
    k.terms = torch::tensor(rows, torch::kInt64).reshape({-1, 4});
    k.coefficients = torch::tensor(values, torch::kFloat64);
    k.sizes = {(c.l_max + 1) * (c.l_max + 1), inputs, outputs, int64_t(b.paths.size())};
    out.push_back(k);
  }
  return out;
}

std::vector<ProductTables> product_couplings(const EquivariantConfig& c) {
  std::vector<ProductTables> out;
  if (c.correlation < 2) return out;
  const auto blocks = plan(c);
  for (size_t block = 0; block < blocks.size(); ++block) {
    const Block& b = blocks[block];
    const std::string L = "l" + std::to_string(block) + "_";
    std::vector<int64_t> first;  // each message irrep's first component side by side
    int64_t width = 0;
    for (const auto& a : b.out) first.push_back(width), width += 2 * a.l + 1;
    // The pairs (message irrep, message irrep, coupled irrep) the products need, and their
    // first row in P.
    using Pair = std::tuple<size_t, size_t, Irrep>;
    std::map<Pair, int64_t> pair_row;
    for (const Product& pr : b.products)
      if (pr.factors.size() > 1)
        pair_row[{pr.factors[0], pr.factors[1], pr.factors.size() == 2 ? pr.target : pr.middle}] = 0;
    int64_t pair_rows = 0;
    for (auto& [key, row] : pair_row) row = pair_rows, pair_rows += 2 * std::get<2>(key).l + 1;

    auto tables = [&](const std::string& terms_name, const std::string& coefficients_name, const std::string& target,
                      int64_t factors, const std::vector<int64_t>& rows, const std::vector<double>& values,
                      std::vector<int64_t> sizes) {
      ProductTables p;
      p.terms_name = terms_name, p.coefficients_name = coefficients_name;
      p.block = int64_t(block), p.target = target, p.factors = factors;
      p.coupling.terms = torch::tensor(rows, torch::kInt64).reshape({-1, 5});
      p.coupling.coefficients = torch::tensor(values, torch::kFloat64);
      p.coupling.sizes = std::move(sizes);
      out.push_back(p);
    };
    {  // P[(a, e, λ) row + μ] = Σ C(la, le → λ)[i, j, μ] A_a[i] A_e[j]
      std::vector<int64_t> rows;
      std::vector<double> values;
      for (const auto& [key, row] : pair_row) {
        const auto [a, e, lambda] = key;
        const auto cg = product_coupling(b.out[a], b.out[e], lambda);
        const auto v = cg.accessor<double, 3>();
        for (int64_t i = 0; i < cg.size(0); ++i)
          for (int64_t j = 0; j < cg.size(1); ++j)
            for (int64_t mu = 0; mu < cg.size(2); ++mu)
              if (v[i][j][mu] != 0.0) {
                rows.insert(rows.end(), {row + mu, -1, first[a] + i, first[e] + j, -1});
                values.push_back(v[i][j][mu]);
              }
      }
      tables(L + "pairs_terms", L + "pairs_coefficients", "", 0, rows, values, {pair_rows, 0, width, width, 0});
    }
    for (const Irrep& t : b.targets) {
      const auto qs = b.products_to(t);
      std::vector<int64_t> rows[4];  // by number of factors
      std::vector<double> values[4];
      for (size_t q = 0; q < qs.size(); ++q) {
        const Product& pr = b.products[size_t(qs[q])];
        const int64_t nf = int64_t(pr.factors.size());
        if (nf == 1) {  // the message itself
          for (int64_t m = 0; m < 2 * t.l + 1; ++m) {
            rows[1].insert(rows[1].end(), {m, int64_t(q), first[pr.factors[0]] + m, -1, -1});
            values[1].push_back(1.0);
          }
        } else if (nf == 2) {  // a pair coupled to the target: its rows of P
          const int64_t row = pair_row.at({pr.factors[0], pr.factors[1], t});
          for (int64_t m = 0; m < 2 * t.l + 1; ++m) {
            rows[2].insert(rows[2].end(), {m, int64_t(q), row + m, -1, -1});
            values[2].push_back(1.0);
          }
        } else {  // a pair coupled to `middle`, coupled with the third message to the target
          const int64_t row = pair_row.at({pr.factors[0], pr.factors[1], pr.middle});
          const int64_t f2 = first[pr.factors[2]];
          const auto cg = product_coupling(pr.middle, b.out[pr.factors[2]], t);
          const auto v = cg.accessor<double, 3>();
          for (int64_t mu = 0; mu < cg.size(0); ++mu)
            for (int64_t k = 0; k < cg.size(1); ++k)
              for (int64_t m = 0; m < cg.size(2); ++m)
                if (v[mu][k][m] != 0.0) {
                  rows[3].insert(rows[3].end(), {m, int64_t(q), row + mu, f2 + k, -1});
                  values[3].push_back(v[mu][k][m]);
                }
        }
      }
      const int64_t nt = 2 * t.l + 1, nq = int64_t(qs.size());
      const std::vector<int64_t> sizes[4] = {{}, {nt, nq, width, 0, 0}, {nt, nq, pair_rows, 0, 0},
                                             {nt, nq, pair_rows, width, 0}};
      for (int64_t factors = 1; factors <= 3; ++factors)
        if (!values[factors].empty())
          tables(L + "pterms" + std::to_string(factors) + "_" + t.name(),
                 L + "pcoefficients" + std::to_string(factors) + "_" + t.name(), t.name(), factors, rows[factors],
                 values[factors], sizes[factors]);
    }
  }
  return out;
}

EquivariantSizes equivariant_sizes(const EquivariantConfig& c) {
  c.validate();
  const int64_t ntypes = int64_t(c.type_map.size()), f = c.num_features;
  EquivariantSizes out;
  auto param = [&](const std::string& name, std::vector<int64_t> shape) {
    out.parameters.emplace_back(name, std::move(shape));
  };
  param("embed", {ntypes, f});
  const auto blocks = plan(c);
  for (size_t k = 0; k < blocks.size(); ++k) {
    const Block& b = blocks[k];
    const std::string L = "l" + std::to_string(k) + "_";
    for (int64_t d = 0; d < c.radial_depth; ++d)
      param(L + "r" + std::to_string(d), {d == 0 ? c.num_bessels : c.radial_width, c.radial_width});
    param(L + "rout", {c.radial_width, f * int64_t(b.paths.size())});
    for (const auto& in : b.in) param(L + "lin1_" + in.name(), {f, f});
    if (c.readout_every_layer && k > 0) param(L + "readout", {f, 1});
    const auto gated = b.gated();
    auto width_of = [&](const Irrep& o) {
      const bool gates_here = o == Irrep{0, c.parity ? 1 : 0} && !gated.empty();
      return f * (gates_here ? 1 + int64_t(gated.size()) : 1);
    };
    for (const auto& o : b.out)
      param(L + "lin2_" + o.name(), {f * int64_t(b.paths_to(o).size()), c.correlation == 1 ? width_of(o) : f});
    for (const auto& o : b.targets) {
      if (c.correlation > 1) {
        param(L + "pw_" + o.name(), {ntypes, int64_t(b.products_to(o).size()), f});
        param(L + "lin3_" + o.name(), {f, width_of(o)});
      }
      if (k > 0 && std::find(b.in.begin(), b.in.end(), o) != b.in.end())
        param(L + "sc_" + o.name(), {ntypes, f, width_of(o)});
    }
    out.paths.push_back(int64_t(b.paths.size()));
    int64_t components = 0, inputs = 0;
    for (const Path& path : b.paths) components += 2 * path.out.l + 1;
    for (const auto& in : b.in) inputs += 2 * in.l + 1;
    out.message_components.push_back(components);
    out.input_components.push_back(inputs);
  }
  param("readout", {f, 1});
  // Drawn last: a model with the long-range term starts from the same short-range weights.
  if (c.long_range.enabled) param("charge_readout", {f, 1});
  return out;
}

torch::jit::Module build_equivariant(const EquivariantConfig& c) {
  const EquivariantSizes sizes = equivariant_sizes(c);  // validates c
  const auto dtype = c.dtype();
  const int64_t ntypes = int64_t(c.type_map.size());
  auto gen = at::detail::createCPUGenerator(c.seed);
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  torch::jit::Module m("mlip_equivariant");
  // Drawn in float64 then cast, in the order of equivariant_sizes: float32 and float64 models
  // start from the same numbers.
  for (const auto& [name, shape] : sizes.parameters)
    m.register_parameter(name, at::randn(shape, gen, f64).to(dtype).requires_grad_(), false);
  const auto blocks = plan(c);
  for (size_t k = 0; k < blocks.size(); ++k) {
    const Block& b = blocks[k];
    const std::string L = "l" + std::to_string(k) + "_";
    for (size_t p = 0; p < b.paths.size(); ++p) {
      const Path& path = b.paths[p];
      // Scaled so that a unit-variance input gives a unit-variance output component.
      const auto cg = wigner_3j(path.in.l, path.l2, path.out.l) * std::sqrt(double(2 * path.out.l + 1));
      m.register_buffer(L + "cg" + std::to_string(p), cg.to(dtype));
    }
    for (size_t q = 0; q < b.products.size(); ++q) {
      const Product& pr = b.products[q];
      if (pr.factors.size() < 2) continue;
      auto coupling = [](const Irrep& x, const Irrep& y, const Irrep& z) {
        return wigner_3j(x.l, y.l, z.l) * std::sqrt(double(2 * z.l + 1));
      };
      const Irrep& a0 = b.out[pr.factors[0]];
      const Irrep& a1 = b.out[pr.factors[1]];
      const std::string name = L + "pc" + std::to_string(q);
      m.register_buffer(name + "a", coupling(a0, a1, pr.factors.size() == 2 ? pr.target : pr.middle).to(dtype));
      if (pr.factors.size() == 3)
        m.register_buffer(name + "b", coupling(pr.middle, b.out[pr.factors[2]], pr.target).to(dtype));
    }
  }
  m.register_attribute("avg_num_neighbors", c10::FloatType::get(), c.avg_num_neighbors);
  m.register_attribute("scale", c10::TensorType::get(), at::ones({ntypes}, torch::TensorOptions().dtype(dtype)));
  m.register_attribute("shift", c10::TensorType::get(), at::zeros({ntypes}, torch::TensorOptions().dtype(dtype)));
  register_repulsion_buffers(m, c.pair_repulsion, c.type_map);
  try {
    m.define(equivariant_source(c));
  } catch (const c10::Error& e) {
    throw Error(std::string("equivariant model: TorchScript compilation failed: ") + e.what_without_backtrace());
  }
  return m;
}

}  // namespace mlip::models
