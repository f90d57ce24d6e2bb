#include "models/pair_repulsion.h"

#include <array>
#include <cmath>
#include <sstream>

#include "error.h"
#include "models/deploy_source.h"

namespace mlip::models {
namespace {

// The ZBL constants as LAMMPS' pair_style zbl uses them (docs/repulsion.md "The formula").
constexpr double kScreeningLength = 0.46850;  // Å, a0 of a = a0 / (Z_i^p + Z_j^p)
constexpr double kScreeningPower = 0.23;      // p
constexpr double kCoulomb = 14.399645;        // eV Å, e^2 / (4 pi eps0) (LAMMPS metal units)

const char* const kElements[] = {
    "H",  "He", "Li", "Be", "B",  "C",  "N",  "O",  "F",  "Ne", "Na", "Mg", "Al", "Si", "P",  "S",  "Cl",
    "Ar", "K",  "Ca", "Sc", "Ti", "V",  "Cr", "Mn", "Fe", "Co", "Ni", "Cu", "Zn", "Ga", "Ge", "As", "Se",
    "Br", "Kr", "Rb", "Sr", "Y",  "Zr", "Nb", "Mo", "Tc", "Ru", "Rh", "Pd", "Ag", "Cd", "In", "Sn", "Sb",
    "Te", "I",  "Xe", "Cs", "Ba", "La", "Ce", "Pr", "Nd", "Pm", "Sm", "Eu", "Gd", "Tb", "Dy", "Ho", "Er",
    "Tm", "Yb", "Lu", "Hf", "Ta", "W",  "Re", "Os", "Ir", "Pt", "Au", "Hg", "Tl", "Pb", "Bi", "Po", "At",
    "Rn", "Fr", "Ra", "Ac", "Th", "Pa", "U",  "Np", "Pu", "Am", "Cm", "Bk", "Cf", "Es", "Fm", "Md", "No",
    "Lr", "Rf", "Db", "Sg", "Bh", "Hs", "Mt", "Ds", "Rg", "Cn", "Nh", "Fl", "Mc", "Lv", "Ts", "Og"};

/// A radius for messages, as the input would write it ("0.5").
std::string text(double v) {
  std::ostringstream o;
  o << v;
  return o.str();
}

}  // namespace

int atomic_number(const std::string& element) {
  for (size_t z = 0; z < sizeof(kElements) / sizeof(kElements[0]); ++z)
    if (element == kElements[z]) return int(z) + 1;
  return 0;
}

const std::vector<double>& ZblRepulsion::weights() {
  static const std::vector<double> w = {0.18175, 0.50986, 0.28022, 0.02817};
  return w;
}

const std::vector<double>& ZblRepulsion::rates() {
  static const std::vector<double> d = {3.19980, 0.94229, 0.40290, 0.20162};
  return d;
}

ZblRepulsion::ZblRepulsion(const PairRepulsionSettings& settings, const std::vector<std::string>& type_map)
    : ntypes_(int64_t(type_map.size())), inner_(settings.inner), outer_(settings.outer) {
  if (settings.type != "zbl") throw Error("model.pair_repulsion: expected \"zbl\", got \"" + settings.type + "\"");
  if (!(inner_ > 0 && inner_ < outer_))
    throw Error("model.pair_repulsion: expected 0 < inner < outer, got inner " + text(inner_) + " Å, outer " +
                text(outer_) + " Å");
  std::vector<double> z;
  for (const auto& name : type_map) {
    const int number = atomic_number(name);
    if (number == 0)
      throw Error("model.pair_repulsion: the type \"" + name +
                  "\" of type_map is not an element symbol (ZBL needs each type's nuclear charge)");
    z.push_back(double(number));
  }
  const size_t npairs = size_t(ntypes_ * ntypes_);
  table_.charge.resize(npairs);
  table_.inverse_screening.resize(npairs);
  table_.switch_cubic.assign(npairs, 0.0);
  table_.switch_quartic.assign(npairs, 0.0);
  table_.shift.assign(npairs, 0.0);
  for (int64_t i = 0; i < ntypes_; ++i)
    for (int64_t j = 0; j < ntypes_; ++j) {
      const size_t p = size_t(i * ntypes_ + j);
      table_.charge[p] = z[size_t(i)] * z[size_t(j)] * kCoulomb;
      table_.inverse_screening[p] =
          (std::pow(z[size_t(i)], kScreeningPower) + std::pow(z[size_t(j)], kScreeningPower)) / kScreeningLength;
      // The switch (docs/repulsion.md "The switch"): V, V' and V'' vanish at outer.
      double e = 0, de = 0, d2e = 0;
      unswitched(p, outer_, e, de, d2e);
      const double tc = outer_ - inner_;
      const double a = (-3.0 * de + tc * d2e) / (tc * tc);
      const double b = (2.0 * de - tc * d2e) / (tc * tc * tc);
      table_.switch_cubic[p] = a / 3.0;
      table_.switch_quartic[p] = b / 4.0;
      table_.shift[p] = -e + tc / 2.0 * de - tc * tc / 12.0 * d2e;
    }
}

void ZblRepulsion::unswitched(size_t p, double r, double& e, double& de, double& d2e) const {
  // V0 = q φ(r / a) / r with φ(x) = sum_k w_k exp(-d_k x).
  const double q = table_.charge[p], inv_a = table_.inverse_screening[p];
  double phi = 0, dphi = 0, d2phi = 0;  // φ and its derivatives by r
  for (size_t k = 0; k < weights().size(); ++k) {
    const double rate = rates()[k] * inv_a;
    const double term = weights()[k] * std::exp(-rate * r);
    phi += term;
    dphi -= rate * term;
    d2phi += rate * rate * term;
  }
  const double inv_r = 1.0 / r;
  e = q * phi * inv_r;
  de = q * (dphi * inv_r - phi * inv_r * inv_r);
  d2e = q * (d2phi * inv_r - 2.0 * dphi * inv_r * inv_r + 2.0 * phi * inv_r * inv_r * inv_r);
}

void ZblRepulsion::evaluate(int64_t ti, int64_t tj, double r, double& energy, double& derivative) const {
  energy = 0;
  derivative = 0;
  if (r >= outer_) return;
  const size_t p = size_t(ti * ntypes_ + tj);
  double d2e = 0;
  unswitched(p, r, energy, derivative, d2e);
  energy += table_.shift[p];
  if (r > inner_) {
    const double t = r - inner_;
    energy += t * t * t * (table_.switch_cubic[p] + table_.switch_quartic[p] * t);
    derivative += t * t * (3.0 * table_.switch_cubic[p] + 4.0 * table_.switch_quartic[p] * t);
  }
}

void record_pair_repulsion(SettingsRecord& record, const PairRepulsionSettings& settings) {
  if (!settings.enabled()) return;
  record.set("pair_repulsion", settings.type);
  record.set_number("pair_repulsion_inner", settings.inner);
  record.set_number("pair_repulsion_outer", settings.outer);
}

PairRepulsionSettings pair_repulsion_from(const SettingsRecord& record) {
  PairRepulsionSettings s;
  if (!record.has("pair_repulsion")) return s;
  s.type = record.required("pair_repulsion");
  if (s.type != "zbl")
    throw Error(record.source() + ": pair_repulsion \"" + s.type + "\" is not one this mlip knows (zbl)");
  s.inner = record.number("pair_repulsion_inner", 0.0);
  s.outer = record.number("pair_repulsion_outer", 0.0);
  if (!(s.inner > 0 && s.inner < s.outer))
    throw Error(record.source() + ": pair_repulsion_inner and _outer: expected 0 < inner < outer, got " +
                text(s.inner) + " and " + text(s.outer));
  return s;
}

void register_repulsion_buffers(torch::jit::Module& module, const PairRepulsionSettings& settings,
                                const std::vector<std::string>& type_map) {
  if (!settings.enabled()) return;
  const ZblRepulsion zbl(settings, type_map);
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  auto add = [&](const std::string& name, const std::vector<double>& values) {
    module.register_buffer(name, torch::tensor(values, f64));
  };
  add("zbl_weights", ZblRepulsion::weights());
  add("zbl_rates", ZblRepulsion::rates());
  add("zbl_charge", zbl.table().charge);
  add("zbl_inverse_screening", zbl.table().inverse_screening);
  add("zbl_switch_cubic", zbl.table().switch_cubic);
  add("zbl_switch_quartic", zbl.table().switch_quartic);
  add("zbl_shift", zbl.table().shift);
}

std::string pair_repulsion_source(const PairRepulsionSettings& settings, int64_t ntypes,
                                  const std::string& def_indent) {
  if (!settings.enabled()) return "";
  // docs/repulsion.md "In the frozen model": float64 whatever the model's dtype.
  const std::string in = def_indent + "    ";
  std::ostringstream o;
  o << def_indent
    << "def pair_repulsion_energy(self, r_all: Tensor, edge_index: Tensor, atype: Tensor, n: int) -> Tensor:\n"
    << in << "keep = torch.nonzero(r_all < " << torchscript_number(settings.outer) << ").squeeze(1)\n"
    << in << "r = r_all.index_select(0, keep).double()\n"
    << in << "i = edge_index[0].index_select(0, keep)\n"
    << in << "pair = atype.index_select(0, i) * " << ntypes
    << " + atype.index_select(0, edge_index[1].index_select(0, keep))\n"
    << in << "x = (r * self.zbl_inverse_screening.index_select(0, pair)).unsqueeze(1)\n"
    << in << "phi = (self.zbl_weights.unsqueeze(0) * torch.exp(-x * self.zbl_rates.unsqueeze(0))).sum(1)\n"
    << in << "v = self.zbl_charge.index_select(0, pair) * phi / r + self.zbl_shift.index_select(0, pair)\n"
    << in << "t = torch.clamp(r - " << torchscript_number(settings.inner) << ", min=0.0)\n"
    << in << "v = v + t * t * t * (self.zbl_switch_cubic.index_select(0, pair) + "
    << "self.zbl_switch_quartic.index_select(0, pair) * t)\n"
    << in << "return torch.zeros([n], dtype=r.dtype, device=r.device).index_add(0, i, 0.5 * v)\n\n";
  return o.str();
}

}  // namespace mlip::models
