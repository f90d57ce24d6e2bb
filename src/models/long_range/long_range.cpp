#include "models/long_range/long_range.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "data/system.h"
#include "error.h"
#include "models/deploy_source.h"
#include "models/long_range/reciprocal_energy.h"

namespace mlip::models {

double LongRangeSettings::k_max() const { return 2.0 * M_PI / kspace_spacing; }
double LongRangeSettings::k_end() const { return kTaperEnd * k_max(); }

void record_long_range(SettingsRecord& record, const LongRangeSettings& settings) {
  if (!settings.enabled) return;
  record.set("long_range", "ewald");
  record.set_number("long_range_sigma", settings.sigma);
  record.set_number("long_range_kspace_spacing", settings.kspace_spacing);
  record.set_number("long_range_total_charge", settings.total_charge);
}

LongRangeSettings long_range_from(const SettingsRecord& record) {
  LongRangeSettings s;
  if (!record.has("long_range")) return s;
  const std::string kind = record.required("long_range");
  if (kind != "ewald")
    throw Error(record.source() + ": long_range \"" + kind + "\" is not one this mlip knows (ewald)");
  s.enabled = true;
  s.sigma = record.number("long_range_sigma", 0.0);
  s.kspace_spacing = record.number("long_range_kspace_spacing", 0.0);
  s.total_charge = record.number("long_range_total_charge", 0.0);
  if (!(s.sigma > 0) || !(s.kspace_spacing > 0) || !std::isfinite(s.sigma) || !std::isfinite(s.kspace_spacing))
    throw Error(record.source() + ": long_range_sigma and long_range_kspace_spacing: expected positive lengths (Å), got " +
                record.text("long_range_sigma", "none") + " and " + record.text("long_range_kspace_spacing", "none"));
  return s;
}

LongRangeFrame long_range_frame(const data::System& system, const data::Frame& frame, torch::Device device) {
  const int64_t n = system.natoms();
  LongRangeFrame out;
  out.pos = torch::from_blob(const_cast<double*>(frame.coord.data()), {n, 3}, torch::kFloat64)
                .to(device, torch::kFloat64, false, true);
  const int periodic = int(system.pbc[0]) + int(system.pbc[1]) + int(system.pbc[2]);
  if (periodic != 0 && periodic != 3) throw Error("system " + system.name + ": " + kPartlyPeriodic);
  out.periodic = periodic == 3 && frame.cell() != nullptr;
  if (out.periodic)
    out.cell = torch::from_blob(const_cast<double*>(frame.cell()), {3, 3}, torch::kFloat64).to(device, false, true);
  else
    out.cell = torch::zeros({3, 3}, torch::TensorOptions().dtype(torch::kFloat64).device(device));
  return out;
}

std::string long_range_source(const LongRangeSettings& settings, const std::string& def_indent) {
  if (!settings.enabled) return "";
  const std::string d = def_indent, b = def_indent + "    ";
  const std::string two_pi = torchscript_number(2.0 * M_PI);
  const std::string k_max = torchscript_number(settings.k_max());
  const std::string k_end = torchscript_number(settings.k_end());
  const std::string half_sigma2 = torchscript_number(0.5 * settings.sigma * settings.sigma);
  const std::string coulomb = torchscript_number(kCoulomb);
  // docs/long_range.md: E_long = (4π k_e / V) Σ_{half} w(k) exp(-σ²k²/2) / k² |S(k)|² − Σ self
  // − π k_e σ² Q² / V; atom i's share is q_i's part of |S|² (q_i Re(S* e^{ik·r_i})).
  const std::string self = torchscript_number(kCoulomb / (settings.sigma * std::sqrt(2.0 * M_PI)));
  const std::string background = torchscript_number(M_PI * kCoulomb * settings.sigma * settings.sigma);
  const std::string inverse_width = torchscript_number(1.0 / (std::sqrt(2.0) * settings.sigma));
  std::ostringstream o;
  o << d << "def long_range_charges(self, raw: Tensor, total_charge: float) -> Tensor:\n"
    << b << "q = raw.double()\n"
    << b << "return q - (q.sum() - total_charge) / max(q.size(0), 1)\n\n";
  o << d << "def long_range_kvectors(self, cell: Tensor) -> Tensor:\n"
    << b << "c = cell.detach().double()\n"
    << b << "reach = torch.floor(torch.sqrt((c * c).sum(1)) * (" << k_end << " / " << two_pi << "))\n"
    << b << "nx = int(reach[0].item())\n"
    << b << "ny = int(reach[1].item())\n"
    << b << "nz = int(reach[2].item())\n"
    << b << "count = (2 * nx + 1) * (2 * ny + 1) * (2 * nz + 1)\n"
    << b << "index = torch.arange(count, device=c.device)\n"
    << b << "ix = torch.div(index, (2 * ny + 1) * (2 * nz + 1), rounding_mode='floor') - nx\n"
    << b << "iy = torch.remainder(torch.div(index, 2 * nz + 1, rounding_mode='floor'), 2 * ny + 1) - ny\n"
    << b << "iz = torch.remainder(index, 2 * nz + 1) - nz\n"
    << b << "half = (ix > 0) | ((ix == 0) & (iy > 0)) | ((ix == 0) & (iy == 0) & (iz > 0))\n"
    << b << "n = torch.stack([ix, iy, iz], 1).double()\n"
    << b << "k = " << two_pi << " * torch.matmul(n, torch.inverse(c).transpose(0, 1))\n"
    << b << "keep = half & ((k * k).sum(1) < " << k_end << " * " << k_end << ")\n"
    << b << "return n[keep]\n\n";
  o << d << "def long_range_reciprocal(self, q: Tensor, pos: Tensor, cell: Tensor) -> Tensor:\n"
    << b << "n_int = self.long_range_kvectors(cell)\n"
    << b << "k = " << two_pi << " * torch.matmul(n_int, torch.inverse(cell).transpose(0, 1))\n"
    << b << "k2 = (k * k).sum(1)\n"
    << b << "t = torch.clamp((torch.sqrt(k2) - " << k_max << ") / (" << k_end << " - " << k_max << "), 0.0, 1.0)\n"
    << b << "taper = 1.0 - t * t * t * (10.0 - 15.0 * t + 6.0 * t * t)\n"
    << b << "volume = torch.abs(torch.det(cell))\n"
    << b << "g = (4.0 * 3.141592653589793 * " << coulomb << ") / volume * taper * torch.exp(-" << half_sigma2
    << " * k2) / k2\n"
    << b << "kr = torch.matmul(pos, k.transpose(0, 1))\n"
    << b << "cos_kr = torch.cos(kr)\n"
    << b << "sin_kr = torch.sin(kr)\n"
    << b << "s_re = torch.matmul(q, cos_kr)\n"
    << b << "s_im = torch.matmul(q, sin_kr)\n"
    << b << "e = q * torch.matmul(cos_kr * s_re + sin_kr * s_im, g)\n"
    << b << "e = e - " << self << " * q * q - " << background << " / volume * q * q.sum()\n"
    << b << "return e\n\n";
  o << d << "def long_range_direct(self, q: Tensor, pos: Tensor) -> Tensor:\n"
    << b << "n = pos.size(0)\n"
    << b << "d = pos.unsqueeze(0) - pos.unsqueeze(1)\n"
    << b << "same = torch.eye(n, dtype=pos.dtype, device=pos.device) > 0.5\n"
    << b << "r2 = torch.where(same, torch.ones_like(q).unsqueeze(0).expand(n, n), (d * d).sum(2))\n"
    << b << "r = torch.sqrt(r2)\n"
    << b << "kernel = torch.where(same, torch.zeros_like(r), torch.erf(r * " << inverse_width << ") / r)\n"
    << b << "return (0.5 * " << coulomb << ") * q * torch.matmul(kernel, q)\n\n";
  o << d << "def long_range_total_charge(self, data: Dict[str, Tensor]) -> float:\n"
    << b << "if 'total_charge' in data:\n"
    << b << "    return float(data['total_charge'].double().sum().item())\n"
    << b << "return " << torchscript_number(settings.total_charge) << "\n\n";
  o << d << "def long_range_periodic(self, data: Dict[str, Tensor]) -> bool:\n"
    << b << "if 'pbc' in data:\n"
    << b << "    count = int((data['pbc'] != 0).sum().item())\n"
    << b << "    if count == 3:\n"
    << b << "        return True\n"
    << b << "    assert count == 0, \"" << kPartlyPeriodic << "\"\n"
    << b << "    return False\n"
    << b << "return float(torch.abs(torch.det(data['cell'].double())).item()) > 1e-12\n\n";
  o << d << "def long_range_energy(self, q: Tensor, pos: Tensor, cell: Tensor, periodic: bool) -> Tensor:\n"
    << b << "if periodic:\n"
    << b << "    return self.long_range_reciprocal(q.double(), pos.double(), cell.double())\n"
    << b << "return self.long_range_direct(q.double(), pos.double())\n\n";
  return o.str();
}

LongRangeBatch long_range_batch(torch::jit::Module& module, const LongRangeSettings& settings,
                                const torch::Tensor& raw_charges, const torch::Tensor& pos, const torch::Tensor& cell,
                                const std::vector<bool>& periodic) {
  const int64_t frames = raw_charges.size(0);
  if (int64_t(periodic.size()) != frames)
    throw Error("long-range energy: " + std::to_string(periodic.size()) + " periodicity flags for " +
                std::to_string(frames) + " frames");
  std::vector<torch::Tensor> energy, charges;
  for (int64_t f = 0; f < frames; ++f) {
    // long_range_charges' shift, without the interpreter.
    const torch::Tensor raw = raw_charges[f].to(torch::kFloat64);
    const torch::Tensor q = raw - (raw.sum() - settings.total_charge) / double(std::max<int64_t>(raw.size(0), 1));
    if (periodic[size_t(f)] && q.device().is_cpu())
      energy.push_back(reciprocal_energy(settings, q, pos[f], cell[f]));  // fused on the host
    else
      energy.push_back(
          module.run_method("long_range_energy", q, pos[f], cell[f], bool(periodic[size_t(f)])).toTensor().sum());
    charges.push_back(q);
  }
  if (frames == 0) return {torch::zeros({0}, cell.options()), torch::zeros_like(raw_charges, cell.options())};
  return {torch::stack(energy), torch::stack(charges)};
}

bool long_range_fused(const std::vector<bool>& periodic, const torch::Tensor& on) {
  if (periodic.empty() || !on.device().is_cpu()) return false;
  for (bool p : periodic)
    if (!p) return false;
  return true;
}

std::pair<torch::Tensor, torch::Tensor> long_range_direct_forces(const torch::Tensor& pos, const torch::Tensor& cell,
                                                                 const torch::Tensor& grad_pos,
                                                                 const torch::Tensor& grad_cell, torch::Dtype dtype) {
  const auto g_pos = grad_pos.defined() ? grad_pos.to(torch::kFloat64) : torch::zeros_like(pos, cell.options());
  const auto g_cell = grad_cell.defined() ? grad_cell.to(torch::kFloat64) : torch::zeros_like(cell);
  const auto virial = -(torch::matmul(pos.detach().to(torch::kFloat64).transpose(1, 2), g_pos) +
                        torch::matmul(cell.detach().transpose(1, 2), g_cell));
  return {(-g_pos).to(dtype), virial.to(dtype)};
}

}  // namespace mlip::models
