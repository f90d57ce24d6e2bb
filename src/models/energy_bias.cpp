#include "models/energy_bias.h"

#include <iomanip>
#include <ostream>

#include "error.h"

namespace mlip::models {

torch::Tensor energy_bias(const std::vector<StatisticsFrames>& frames, const std::vector<double>& reference,
                          int ntypes, const char* name, std::ostream& log) {
  if (!reference.empty() && int(reference.size()) != ntypes)
    throw Error(std::string(name) + ": " + std::to_string(reference.size()) + " reference energies for " +
                std::to_string(ntypes) + " types");
  std::vector<double> counts, energies, natoms;
  for (const StatisticsFrames& s : frames) {
    const data::System& sys = *s.system;
    std::vector<double> type_count(size_t(ntypes), 0.0);
    for (int t : sys.types) type_count[size_t(t)] += 1;
    for (const data::Frame& frame : s.frames) {
      if (frame.energy.empty())
        throw Error(sys.name + ": the statistics need energy labels (energy.npy), found none");
      counts.insert(counts.end(), type_count.begin(), type_count.end());
      energies.push_back(frame.energy[0]);
      natoms.push_back(double(sys.natoms()));
    }
  }
  const int64_t nf = int64_t(energies.size());
  const auto c = torch::tensor(counts, torch::kFloat64).reshape({nf, ntypes});
  const auto e = torch::tensor(energies, torch::kFloat64);
  const auto bias = reference.empty() ? torch::linalg_pinv(c).matmul(e) : torch::tensor(reference, torch::kFloat64);
  const auto residual = (c.matmul(bias) - e) / torch::tensor(natoms, torch::kFloat64);
  log << "statistics from " << nf << " frame(s): " << name << " [";
  for (int t = 0; t < ntypes; ++t) log << (t ? ", " : "") << std::setprecision(10) << bias[t].item<double>();
  log << "] eV" << (reference.empty() ? "; per-atom energy RMSE of the linear fit " : " (model.e0s); per-atom RMSE of the energies about them ")
      << std::setprecision(4) << residual.pow(2).mean().sqrt().item<double>() << " eV/atom\n";
  return bias;
}

}  // namespace mlip::models
