#include "models/equivariant_model.h"

#include <torch/csrc/autograd/autograd.h>

#include <cmath>
#include <iomanip>
#include <ostream>
#include <mutex>
#include <sstream>

#include "data/kokkos_runtime.h"
#include "data/neighbor_list.h"
#include "error.h"
#include "models/energy_bias.h"
#include "models/pair_list.h"

namespace mlip::models {

using input::Bound;
using input::Section;

namespace {

std::shared_ptr<ModelSettings> read_equivariant(const Section& m, const std::vector<std::string>& type_map) {
  auto s = std::make_shared<EquivariantSettings>();
  s->type = "equivariant";
  s->type_map = type_map;
  EquivariantConfig& e = s->config;
  e.type_map = type_map;
  e.r_max = m.number("r_max", e.r_max, Bound::kPositive);
  e.num_features = m.integer("num_features", e.num_features);
  e.l_max = m.integer("l_max", e.l_max, Bound::kNonNegative);
  if (e.l_max > 3) input::expected(m.path_of("l_max"), "an integer from 0 to 3", m.get("l_max"));
  e.parity = m.flag("parity", e.parity);
  e.num_layers = m.integer("num_layers", e.num_layers);
  e.correlation = m.integer("correlation", e.correlation);
  e.readout_every_layer = m.choice("readout", "last", {"last", "every_layer"}) == "every_layer";
  if (e.correlation > 3) input::expected(m.path_of("correlation"), "1, 2 or 3", m.get("correlation"));
  e.num_bessels = m.integer("num_bessels", e.num_bessels);
  e.polynomial_p = m.number("polynomial_p", e.polynomial_p, Bound::kPositive);
  if (e.polynomial_p < 2) input::expected(m.path_of("polynomial_p"), "a number >= 2", m.get("polynomial_p"));
  e.radial_width = m.integer("radial_width", e.radial_width);
  e.radial_depth = m.integer("radial_depth", e.radial_depth);
  if (m.has_value("avg_num_neighbors") &&
      !(input::is_scalar(m.get("avg_num_neighbors")) && m.get("avg_num_neighbors").Scalar() == "auto"))
    s->avg_num_neighbors = m.number("avg_num_neighbors", 1.0, Bound::kPositive);
  s->precision = m.choice("precision", s->precision, {"float64", "float32"}, {{"default", "float64"}});
  e.precision = s->precision;
  s->seed = m.seed("seed", s->seed);
  return s;
}

/// The pairs within r_max of one frame (frames do not move).
struct EquivariantFrame : FrameInput {
  torch::Tensor d;     // [E, 3] model dtype, d_ij = r_j - r_i + shift·cell, Å
  torch::Tensor i, j;  // [E] int64, centre and neighbour
  int64_t bytes() const override { return tensor_bytes(d) + tensor_bytes(i) + tensor_bytes(j); }
};

class EquivariantModel final : public Model {
 public:
  EquivariantModel(const EquivariantSettings& settings, const ModelContext& context)
      : settings_(settings), device_(context.device) {
    EquivariantConfig& c = settings_.config;
    c.avg_num_neighbors = settings_.avg_num_neighbors.value_or(1.0);
    c.seed = settings_.seed ? *settings_.seed : context.training_seed.value_or(1);
    module_ = build_equivariant(c);
    module_.to(device_);
  }

  torch::jit::Module& module() override { return module_; }
  const ModelSettings& settings() const override { return settings_; }
  torch::Device device() const override { return device_; }

  std::string summary() const override {
    const EquivariantConfig& e = settings_.config;
    std::ostringstream o;
    o << "equivariant, " << settings_.precision << ", r_max " << e.r_max << " Å, l_max " << e.l_max
      << (e.parity ? " with parity" : " (SO(3))") << ", " << e.num_layers << " layers x " << e.num_features
      << " features" << (e.correlation > 1 ? ", correlation " + std::to_string(e.correlation) : std::string())
      << (e.readout_every_layer ? ", readout of every layer" : "");
    return o.str();
  }

  std::unique_ptr<FrameInput> prepare_frame(const data::System& system, const data::Frame& frame) override {
    const PairList pairs = pairs_of(system, frame);
    auto out = std::make_unique<EquivariantFrame>();
    out->d = pairs.vector.to(device_, settings_.dtype());
    out->i = pairs.centre.to(device_);
    out->j = pairs.neighbor.to(device_);
    return out;
  }

  void compute_statistics(const std::vector<StatisticsFrames>& frames, std::ostream& log) override {
    // Per-type shift (least squares), scale = RMS of the force labels of the statistics
    // frames, and the mean number of neighbours within r_max over all frames of the systems
    // (unless given); docs/equivariant.md "Statistics".
    const int ntypes = int(settings_.type_map.size());
    const auto shift = energy_bias(frames, ntypes, "per-type energy shift", log);
    double f2 = 0, nf = 0, pairs = 0, atoms = 0;
    for (const StatisticsFrames& s : frames) {
      const data::System& sys = *s.system;
      for (const data::Frame& frame : s.frames) {
        for (double f : frame.force) f2 += f * f;
        nf += double(frame.force.size());
        if (!settings_.avg_num_neighbors) pairs += double(pairs_of(sys, frame).npairs()), atoms += double(sys.natoms());
      }
    }
    const double scale = nf > 0 && f2 > 0 ? std::sqrt(f2 / nf) : 1.0;
    module_.run_method("set_scale_shift", torch::full({ntypes}, scale, torch::kFloat64).to(device_),
                       shift.to(device_));
    const double avg = settings_.avg_num_neighbors.value_or(atoms > 0 ? pairs / atoms : 1.0);
    module_.setattr("avg_num_neighbors", avg);
    log << "scale " << std::setprecision(6) << scale << " (RMS of the force labels, eV/Å); avg_num_neighbors "
        << avg << (settings_.avg_num_neighbors ? " (given)" : " (from the data)") << "\n";
  }

  Prediction predict(const SystemAtoms& atoms, const std::vector<const FrameInput*>& frames, bool training) override {
    // Autograd end to end: the forces are the gradient of the energy with respect to the pair
    // vectors, kept as a graph (create_graph) when training so that the force loss can be
    // differentiated again.
    auto method = module_.get_method("atomic_energy");
    std::vector<torch::Tensor> es, fs, vs;
    for (const FrameInput* input : frames) {
      const auto& g = static_cast<const EquivariantFrame&>(*input);
      const auto x = g.d.detach().requires_grad_(true);
      const auto e = method({x, g.i, g.j, atoms.atype}).toTensor();
      // F_i = sum_j dE/dd_ij, F_j -= dE/dd_ij (d_ij = r_j - r_i); W = -sum d ⊗ dE/dd.
      const auto grad = torch::autograd::grad({e.sum()}, {x}, {}, training, training)[0];
      es.push_back(e.to(torch::kFloat64).sum());
      fs.push_back(torch::zeros({atoms.natoms, 3}, grad.options()).index_add(0, g.i, grad).index_add(0, g.j, -grad));
      vs.push_back(-x.detach().t().matmul(grad));
    }
    Prediction p{torch::stack(es), torch::stack(fs), torch::stack(vs)};
    if (training) last_ = p;
    return p;
  }

  void backward(const torch::Tensor& grad_energy, const torch::Tensor& grad_forces,
                const torch::Tensor& grad_virial) override {
    backward_through_graph(last_, grad_energy, grad_forces, grad_virial);
    last_ = Prediction{};
  }

 private:
  PairList pairs_of(const data::System& system, const data::Frame& frame) {
    const double r_max = settings_.config.r_max;
    // One build at a time: the builders' buffers and Kokkos are shared (prepare_frame runs on
    // worker threads; data/kokkos_runtime.h).
    std::lock_guard<std::mutex> lock(data::kokkos_mutex());
    if (settings_.dtype() == torch::kFloat32) {
      std::vector<float> pos(frame.coord.begin(), frame.coord.end());
      return pair_list(builder_float_.build(pos.data(), system.natoms(), frame.cell(), system.pbc, r_max));
    }
    return pair_list(builder_double_.build(frame.coord.data(), system.natoms(), frame.cell(), system.pbc, r_max));
  }

  EquivariantSettings settings_;
  torch::Device device_;
  torch::jit::Module module_;
  Prediction last_;  // the prediction of the last training step, with its graph
  data::NeighborListBuilder<float> builder_float_;
  data::NeighborListBuilder<double> builder_double_;
};

}  // namespace

ModelEntry equivariant_entry() {
  ModelEntry e;
  e.name = "equivariant";
  e.keys = {"type", "type_map", "r_max", "num_features", "l_max", "parity", "num_layers", "num_bessels",
            "polynomial_p", "radial_width", "radial_depth", "avg_num_neighbors", "precision", "seed", "correlation",
            "readout",
            "data_stat_nbatch"};
  e.read = read_equivariant;
  e.create = [](const ModelSettings& settings, const ModelContext& context) -> std::unique_ptr<Model> {
    return std::make_unique<EquivariantModel>(dynamic_cast<const EquivariantSettings&>(settings), context);
  };
  return e;
}

}  // namespace mlip::models
