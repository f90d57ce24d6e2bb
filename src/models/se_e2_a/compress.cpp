#include "models/se_e2_a/compress.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <limits>
#include <set>
#include <sstream>

#include "error.h"
#include "models/kernels/layer_rule.h"

namespace mlip::models {

double switched_inverse_distance(double r, double rcut_smth, double rcut) {
  if (r >= rcut) return 0.0;
  if (r < rcut_smth) return 1.0 / r;
  const double x = (r - rcut_smth) / (rcut - rcut_smth);
  return (x * x * x * (-6 * x * x + 15 * x - 10) + 1) / r;
}

namespace {

/// The closest pair a table covers: the distance below which data and MD refuse two atoms as
/// overlapping (docs/lammps.md "Errors").
constexpr double kShortestTabulatedDistance = 1e-3;

std::string shortest_text(double value) {
  std::ostringstream o;
  o << value;
  return o.str();
}

}  // namespace

SeACompression se_e2_a_grids(const SeAConfig& c, const torch::Tensor& davg_in, const torch::Tensor& dstd_in,
                             const CompressOptions& options) {
  const int64_t ntypes = int64_t(c.type_map.size());
  if (!(options.min_distance > 0) || !std::isfinite(options.min_distance))
    throw Error("compress: the shortest pair distance of the training data: expected a positive number of Å, got " +
                std::to_string(options.min_distance));
  if (options.min_distance < kShortestTabulatedDistance)
    throw Error("compress: the shortest pair distance " + shortest_text(options.min_distance) + " Å: expected at least " +
                shortest_text(kShortestTabulatedDistance) +
                " Å (atoms closer than that have no finite energy; mlip refuses them in MD and data alike)");
  if (options.min_distance >= c.rcut)
    throw Error("compress: the shortest pair distance " + std::to_string(options.min_distance) +
                " Å is not below the model's rcut " + std::to_string(c.rcut) + " Å: nothing to tabulate");
  const torch::Tensor davg = davg_in.to(torch::kCPU, torch::kFloat64).contiguous();
  const torch::Tensor dstd = dstd_in.to(torch::kCPU, torch::kFloat64).contiguous();
  if (davg.numel() != ntypes * 4 || dstd.numel() != ntypes * 4)
    throw Error("compress: the model's davg/dstd do not have " + std::to_string(ntypes) + " x 4 entries");
  const double* da = davg.data_ptr<double>();
  const double* ds = dstd.data_ptr<double>();
  const double s_max = switched_inverse_distance(options.min_distance, c.rcut_smth, c.rcut);
  SeACompression z;
  z.options = options;
  z.grids.resize(size_t(embedding_net_count(c)));
  for (int64_t g = 0; g < embedding_net_count(c); ++g) {
    const int64_t t = c.type_one_side ? g : g % ntypes;
    if (c.sel[size_t(t)] == 0) continue;
    double lower = std::numeric_limits<double>::infinity(), upper = -lower;
    for (int64_t ti = 0; ti < ntypes; ++ti) {
      if (!c.type_one_side && ti != g / ntypes) continue;
      lower = std::min(lower, (0.0 - da[ti * 4]) / ds[ti * 4]);
      upper = std::max(upper, (s_max - da[ti * 4]) / ds[ti * 4]);
    }
    z.grids[size_t(g)] = make_table_grid(lower, upper, options.step, options.extrapolate);
  }
  return z;
}

namespace {

/// Embedding net g of the module in float64.
EmbeddingNet embedding_net_of(const SeAConfig& c, const torch::jit::Module& module, int64_t g) {
  std::vector<int64_t> widths = {1};
  widths.insert(widths.end(), c.neuron.begin(), c.neuron.end());
  EmbeddingNet net;
  net.layers = layers_of(widths, c.resnet_dt);
  auto values = [&](const std::string& name) {
    const torch::Tensor t = module.attr(name).toTensor().detach().to(torch::kCPU, torch::kFloat64).contiguous();
    return std::vector<double>(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
  };
  const std::string name = embedding_net_name(c, g) + "_";
  for (size_t l = 0; l < net.layers.size(); ++l) {
    const std::string ls = std::to_string(l);
    net.w.push_back(values(name + "w" + ls));
    net.b.push_back(values(name + "b" + ls));
    net.idt.push_back(net.layers[l].idt ? values(name + "idt" + ls) : std::vector<double>{});
  }
  return net;
}

bool is_table_buffer(const std::string& name) {
  auto ends = [&](const std::string& tail) {
    return name.size() > tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
  };
  return ends("_table") || ends("_grid");
}

}  // namespace

torch::jit::Module compress_se_e2_a(const SeAConfig& c, const torch::jit::Module& source, const CompressOptions& options,
                                    std::ostream& log) {
  const SeACompression z =
      se_e2_a_grids(c, source.attr("davg").toTensor(), source.attr("dstd").toTensor(), options);
  torch::jit::Module out = build_se_e2_a(c, &z);
  // Every parameter and buffer of the source, by name (the tables are made anew).
  at::NoGradGuard no_grad;
  for (const auto& p : out.named_parameters(false)) {
    if (!source.hasattr(p.name))
      throw Error("compress: the model lacks the parameter '" + p.name + "' of its own settings");
    const torch::Tensor from = source.attr(p.name).toTensor();
    if (from.sizes() != p.value.sizes())
      throw Error("compress: the model's parameter '" + p.name + "' does not have the shape its settings give");
    p.value.copy_(from);
  }
  for (const auto& b : out.named_buffers(false)) {
    if (is_table_buffer(b.name)) continue;
    const torch::Tensor from = source.attr(b.name).toTensor();
    if (from.sizes() != b.value.sizes())
      throw Error("compress: the model's buffer '" + b.name + "' does not have the shape its settings give");
    b.value.copy_(from);
  }
  const int64_t m = c.neuron.back();
  for (int64_t g = 0; g < embedding_net_count(c); ++g) {
    const TableGrid& grid = z.grids[size_t(g)];
    if (grid.intervals() == 0) continue;
    const std::string name = embedding_net_name(c, g);
    const std::vector<double> table = build_embedding_table(embedding_net_of(c, source, g), grid);
    torch::Tensor target = out.attr(name + "_table").toTensor();
    target.copy_(torch::from_blob(const_cast<double*>(table.data()), {grid.intervals(), 6, m}, torch::kFloat64));
    std::ostringstream line;
    line << std::setprecision(6) << "  " << name << ": ŝ in [" << grid.lower << ", " << grid.upper << "] by "
         << grid.fine_step << " (" << grid.fine_intervals << " intervals), to " << grid.max << " by "
         << grid.coarse_step << " (" << grid.coarse_intervals << "); " << std::fixed << std::setprecision(1)
         << double(target.nbytes()) / (1 << 20) << " MB\n";
    log << line.str();
  }
  out.eval();
  for (const auto& p : out.parameters()) p.requires_grad_(false);
  return out;
}

}  // namespace mlip::models
