#include "train/trainer.h"

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/optim/adam.h>
#include <ATen/Parallel.h>
#include <torch/serialize.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <regex>
#include <sstream>

#include "data/load.h"
#include "dist/simple_ddp.h"
#include "data/neighbor_list.h"
#include "data/neighbor_stat.h"
#include "error.h"
#include "models/env_matrix.h"
#include "models/equivariant.h"
#include "models/se_e2_a.h"
#include "models/se_e2_a_training.h"
#include "train/adam_step.h"
#include "train/checkpoint.h"
#include "train/ema.h"
#include "train/sampler.h"
#include "version.h"

namespace fs = std::filesystem;

namespace mlip::train {
namespace {

std::atomic<bool> g_interrupted{false};
std::atomic<int> g_signal{0};
extern "C" void on_sigint(int sig) {
  g_signal = sig;
  g_interrupted = true;
}

/// Labels and cached environment matrices of one system (training frames do not move, so the
/// Kokkos rows and derivatives are computed once).
struct SystemData {
  std::string name;
  int64_t natoms = 0, nframes = 0, batch = 1;
  torch::Tensor atype;                      // [N] int64
  std::vector<int> types;
  std::vector<models::EnvMatrix> env;       // frames used for the statistics: rij only, freed after them
  std::vector<models::PackedEnv> packed;    // per frame: the real pairs, for the training path
  torch::Tensor energy, force, virial;      // [nf] f64, [nf,N,3] f64, [nf,9] f64 (undefined if absent)
  std::vector<int64_t> type_count;          // atoms per type
  /// Equivariant model, per frame: the pairs within r_max (frames do not move).
  struct Edges {
    torch::Tensor d;     // [E, 3] model dtype, d_ij = r_j - r_i + shift·cell
    torch::Tensor i, j;  // [E] int64
  };
  std::vector<Edges> edges;
};

template <typename Real>
std::vector<SystemData> prepare(const std::vector<data::System>& systems, const DataConfig& data,
                                const models::SeAConfig& model, int ntypes, const std::string& key,
                                int64_t statistics_batches, int64_t& truncated_blocks, double edge_cutoff = 0) {
  const models::EnvMatrixParams params{model.rcut, model.rcut_smth, model.sel};
  std::vector<SystemData> out;
  data::NeighborListBuilder<Real> builder;
  for (size_t s = 0; s < systems.size(); ++s) {
    const data::System& sys = systems[s];
    SystemData d;
    d.name = sys.name;
    d.natoms = sys.natoms();
    d.nframes = sys.nframes;
    d.batch = data.batch_size.for_system(s, d.natoms);
    d.types = sys.types;
    d.atype = torch::tensor(std::vector<int64_t>(sys.types.begin(), sys.types.end()), torch::kInt64);
    d.type_count.assign(size_t(ntypes), 0);
    for (int t : sys.types) ++d.type_count[size_t(t)];
    if (sys.energy.empty())
      throw Error(sys.name + ": " + key + " needs energy labels (energy.npy), found none");
    d.energy = torch::tensor(sys.energy, torch::kFloat64);
    if (!sys.force.empty()) d.force = torch::tensor(sys.force, torch::kFloat64).reshape({d.nframes, d.natoms, 3});
    if (!sys.virial.empty()) d.virial = torch::tensor(sys.virial, torch::kFloat64).reshape({d.nframes, 9});
    std::vector<Real> pos(size_t(d.natoms) * 3);
    for (int64_t f = 0; f < d.nframes; ++f) {
      const double* x = sys.frame_coord(f);
      for (size_t k = 0; k < pos.size(); ++k) pos[k] = Real(x[k]);
      if (edge_cutoff > 0) {  // the equivariant model: pair vectors only
        auto nl = builder.build(pos.data(), d.natoms, sys.frame_box(f), sys.pbc, edge_cutoff);
        const int64_t e = nl.npairs();
        SystemData::Edges g;
        g.i = torch::empty({e}, torch::kInt64);
        g.j = torch::empty({e}, torch::kInt64);
        auto dd = torch::empty({e, 3}, torch::kFloat64);
        auto ia = g.i.accessor<int64_t, 1>(), ja = g.j.accessor<int64_t, 1>();
        auto da = dd.accessor<double, 2>();
        for (int64_t a = 0; a < d.natoms; ++a)
          for (int64_t p = nl.offsets(a); p < nl.offsets(a + 1); ++p) {
            ia[p] = a;
            ja[p] = nl.neighbor(p);
            for (int k = 0; k < 3; ++k) da[p][k] = double(nl.vector(p, k));
          }
        g.d = dd.to(std::is_same_v<Real, float> ? torch::kFloat32 : torch::kFloat64);
        d.edges.push_back(std::move(g));
        continue;
      }
      auto nl = builder.build(pos.data(), d.natoms, sys.frame_box(f), sys.pbc, params.rcut);
      models::EnvMatrix env = models::compute_env_matrix<Real>(nl, sys.types, params);
      truncated_blocks += env.truncated_blocks;
      d.packed.push_back(models::PackedEnv::pack(env, sys.types, model));
      if (f < statistics_batches * d.batch) {
        env.drij = env.vec = env.nlist = torch::Tensor();
        d.env.push_back(std::move(env));
      }
    }
    out.push_back(std::move(d));
  }
  return out;
}

/// Sums of squared errors of a set of frames, for exact RMSEs over several batches.
struct ErrorSums {
  double loss = 0;                 // sum over frames of the loss terms (weighted by prefactors)
  double e2_per_atom2 = 0;         // sum of dE^2 / N^2
  double f2 = 0;                   // sum of dF^2 over components
  double v2_per_atom2 = 0;         // sum of mean_9(dW^2) / N^2
  int64_t frames = 0, force_components = 0, virial_frames = 0;
  void add(const ErrorSums& o) {
    loss += o.loss, e2_per_atom2 += o.e2_per_atom2, f2 += o.f2, v2_per_atom2 += o.v2_per_atom2;
    frames += o.frames, force_components += o.force_components, virial_frames += o.virial_frames;
  }
  double rmse() const { return std::sqrt(loss / std::max<int64_t>(frames, 1)); }
  double rmse_e() const { return std::sqrt(e2_per_atom2 / std::max<int64_t>(frames, 1)); }
  double rmse_f() const { return std::sqrt(f2 / std::max<int64_t>(force_components, 1)); }
  double rmse_v() const { return std::sqrt(v2_per_atom2 / std::max<int64_t>(virial_frames, 1)); }
};

struct Prefactors {
  double e, f, v;
};

/// While alive, the parameters hold the moving average's values (nothing happens without one).
class AveragedWeights {
 public:
  explicit AveragedWeights(Ema* ema) : ema_(ema) {
    if (ema_ != nullptr) ema_->swap();
  }
  ~AveragedWeights() {
    if (ema_ != nullptr) ema_->swap();
  }
  AveragedWeights(const AveragedWeights&) = delete;
  AveragedWeights& operator=(const AveragedWeights&) = delete;

 private:
  Ema* ema_;
};

class Trainer {
 public:
  Trainer(const TrainConfig& config, const TrainOptions& options) : config_(config), options_(options) {}
  int run();

 private:
  void load_data();
  void build_model();
  void compute_statistics();
  /// Forward on one batch; adds to the error sums and returns the loss. When training, also
  /// accumulates the loss gradient into the parameters' grad.
  double evaluate(const SystemData& d, const std::vector<int64_t>& frames, const Prefactors& pref, bool training,
                  ErrorSums& sums);
  Prefactors prefactors(int64_t step) const;
  void save_checkpoint(int64_t step);
  void restore(const std::string& path, bool full);
  std::string ckpt_path(int64_t step) const;

  TrainConfig config_;
  TrainOptions options_;
  models::SeAConfig model_config_;
  torch::Dtype dtype_ = torch::kFloat64;
  std::vector<data::System> train_raw_, valid_raw_;
  std::vector<SystemData> train_, valid_;
  torch::jit::Module model_;
  std::unique_ptr<models::SeATrainingPath> path_;  // the model's training computation (shares its parameters)
  models::PackedEnv batch_;                        // the current batch when it has several frames
  std::vector<torch::Tensor> params_;
  std::unique_ptr<torch::optim::Adam> optimizer_;
  std::unique_ptr<Ema> ema_;  // the moving average of the weights (null when ema_decay is 0)
  std::unique_ptr<SystemSampler> sampler_, val_sampler_;
  int64_t start_step_ = 0;
  ExtraFiles metadata_;
  std::unique_ptr<dist::Communicator> own_comm_;  // one rank, when no communicator was given
  dist::Communicator* comm_ = nullptr;
  std::unique_ptr<dist::SimpleDDP> ddp_;
  int64_t validation_reduces_ = 0;
  bool root() const { return comm_->rank() == 0; }
  bool equivariant() const { return config_.model_type == "equivariant"; }
  void build_equivariant_model();
  void equivariant_statistics();
  /// Energy [B] f64, forces [B,N,3] and virial [B,3,3] of the equivariant model, through autograd
  /// (create_graph when training, for the force loss).
  void equivariant_predict(const SystemData& d, const std::vector<int64_t>& frames, bool training,
                           torch::Tensor& energy, torch::Tensor& forces, torch::Tensor& virial);
  void print_summary() const;
  ErrorSums validate(const Prefactors& pref);
};

void Trainer::print_summary() const {
  if (!root()) return;
  const dist::LaunchEnv* env = options_.launch;
  char host[256] = "?";
  ::gethostname(host, sizeof(host) - 1);
  const int w = comm_->size();
  std::cout << "---- summary of the training ----\n"
            << "  distributed:  " << (w > 1 ? "yes" : "no")
            << (env && env->launcher != dist::Launcher::kNone ? std::string(" (") + dist::launcher_name(env->launcher) + ")" : "")
            << "\n  world size:   " << w << "\n  rank:         " << comm_->rank() << " (local "
            << (env ? env->local_rank : 0) << ")\n";
  if (env && !env->node_list.empty()) std::cout << "  node list:    " << env->node_list << "\n";
  if (w > 1 && env) std::cout << "  rendezvous:   " << (comm_->backend() == "mpi" ? std::string("MPI_COMM_WORLD") : env->master_addr + ":" + std::to_string(env->master_port)) << "\n";
  std::cout << "  host:         " << host << "\n  device:       cpu\n  backend:      " << comm_->backend()
            << (w > 1 ? " (all-reduce: " + comm_->all_reduce_transport() + ")" : std::string())
            << "\n  threads:      " << at::get_num_threads() << " per rank\n"
            << "---------------------------------\n";
}

ErrorSums Trainer::validate(const Prefactors& pref) {
  // The frames of this evaluation are those one rank would use (the validation sampler is the
  // same on every rank and not sharded); distributed.md "Validation and test metrics".
  ErrorSums val;
  const int w = comm_->size(), r = comm_->rank();
  const DataConfig& vc = *config_.validation_data;
  for (int64_t b = 0; b < vc.numb_btch; ++b) {
    const auto vb = val_sampler_->next();
    std::vector<int64_t> mine;
    if (w == 1 || vc.single_rank) {
      if (r == 0) mine = vb.frames;
    } else {
      // exact: frame k goes to rank k mod w (no padding, unequal counts allowed); padded: the
      // batch is first padded to a multiple of w by repeating its first frames.
      std::vector<int64_t> frames = vb.frames;
      if (vc.padded)
        for (size_t k = 0; frames.size() % size_t(w) != 0; ++k) frames.push_back(vb.frames[k % vb.frames.size()]);
      for (size_t k = size_t(r); k < frames.size(); k += size_t(w)) mine.push_back(frames[k]);
    }
    if (!mine.empty()) evaluate(valid_[vb.system], mine, pref, false, val);
  }
  if (w > 1 && !vc.single_rank) {
    auto t = torch::tensor({val.loss, val.e2_per_atom2, val.f2, val.v2_per_atom2, double(val.frames),
                            double(val.force_components), double(val.virial_frames)}, torch::kFloat64);
    comm_->all_reduce_sum(t);
    ++validation_reduces_;
    auto a = t.accessor<double, 1>();
    val.loss = a[0], val.e2_per_atom2 = a[1], val.f2 = a[2], val.v2_per_atom2 = a[3];
    val.frames = int64_t(a[4]), val.force_components = int64_t(a[5]), val.virial_frames = int64_t(a[6]);
  }
  return val;
}

void Trainer::load_data() {
  std::vector<std::string> type_map = config_.type_map;
  train_raw_ = data::load_systems(config_.training_data.systems, type_map);
  if (type_map.size() != config_.type_map.size())
    throw Error("model.type_map: the training data has types beyond it");
  if (config_.validation_data) valid_raw_ = data::load_systems(config_.validation_data->systems, type_map);
  int64_t frames = 0;
  for (auto& s : train_raw_) frames += s.nframes;
  std::cout << "training data: " << train_raw_.size() << " system(s), " << frames << " frame(s)";
  if (!valid_raw_.empty()) {
    int64_t vf = 0;
    for (auto& s : valid_raw_) vf += s.nframes;
    std::cout << "; validation data: " << valid_raw_.size() << " system(s), " << vf << " frame(s)";
  }
  std::cout << "\n";
}

void Trainer::build_equivariant_model() {
  const TrainConfig& c = config_;
  const EquivariantSettings& e = c.equivariant;
  models::EquivariantConfig m;
  m.type_map = c.type_map;
  m.r_max = e.r_max;
  m.num_features = e.num_features;
  m.l_max = e.l_max;
  m.parity = e.parity;
  m.num_layers = e.num_layers;
  m.num_bessels = e.num_bessels;
  m.polynomial_p = e.polynomial_p;
  m.radial_width = e.radial_width;
  m.radial_depth = e.radial_depth;
  m.avg_num_neighbors = e.avg_num_neighbors.value_or(1.0);
  m.precision = c.precision;
  m.seed = c.descriptor_seed ? *c.descriptor_seed : (c.seed ? *c.seed : 1);
  dtype_ = m.dtype();
  model_ = models::build_equivariant(m);
  model_config_.type_map = c.type_map;  // the se_e2_a fields stay unused
  model_config_.rcut = e.r_max;
  model_config_.precision = c.precision;
  metadata_["model_type"] = "equivariant";
}

void Trainer::build_model() {
  const TrainConfig& c = config_;
  if (equivariant()) {
    build_equivariant_model();
  } else {
    if (c.fitting_precision != c.precision)
      throw Error(c.input_path + ": model.fitting_net.precision: expected the descriptor's precision (\"" + c.precision +
                  "\"; one model has one precision), got \"" + c.fitting_precision + "\"");
    model_config_.type_map = c.type_map;
    model_config_.rcut = c.rcut;
    model_config_.rcut_smth = c.rcut_smth;
    model_config_.neuron = c.neuron;
    model_config_.axis_neuron = c.axis_neuron;
    model_config_.type_one_side = c.type_one_side;
    model_config_.resnet_dt = c.resnet_dt;
    model_config_.fitting_neuron = c.fitting_neuron;
    model_config_.fitting_resnet_dt = c.fitting_resnet_dt;
    model_config_.precision = c.precision;
    model_config_.seed = c.descriptor_seed ? *c.descriptor_seed : (c.seed ? *c.seed : 1);
    if (c.sel.automatic) {
      auto stat = data::neighbor_stat(train_raw_, int(c.type_map.size()), c.rcut);
      model_config_.sel.clear();
      for (auto m : stat.max_neighbors)
        model_config_.sel.push_back(4 * int64_t(std::ceil(double(m) * c.sel.ratio / 4.0)));
      std::cout << "sel: auto:" << c.sel.ratio << " -> [";
      for (size_t t = 0; t < model_config_.sel.size(); ++t) std::cout << (t ? ", " : "") << model_config_.sel[t];
      std::cout << "] (min neighbour distance " << stat.min_distance << " Å)\n";
    } else {
      model_config_.sel = c.sel.values;
    }
    dtype_ = model_config_.dtype();
    model_ = models::build_se_e2_a(model_config_);
    path_ = std::make_unique<models::SeATrainingPath>(model_config_, model_);
    metadata_["model_type"] = "se_e2_a";
  }
  metadata_["r_max"] = std::to_string(c.rcut);
  std::string names;
  for (auto& n : c.type_map) names += (names.empty() ? "" : " ") + n;
  metadata_["type_names"] = names;
  metadata_["num_types"] = std::to_string(c.type_map.size());
  metadata_["model_dtype"] = c.precision;
  metadata_["mlip_version"] = MLIP_VERSION;
  metadata_["config"] = c.input_text;
  metadata_["units"] = "eV Angstrom";
}

/// The per-type energy bias of the statistics frames (up to 10 global batches, batch_size x
/// ranks frames, of every system: the frames one rank with the global batch would use), by
/// minimum-norm least squares (SVD pseudo-inverse: well defined when the type counts are rank
/// deficient, as in water, where O:H is always 1:2). Returns [ntypes] f64 and prints it with
/// the per-atom RMSE of the fit.
torch::Tensor energy_bias(const std::vector<SystemData>& systems, int ntypes, int64_t batches_per_system,
                          const char* name) {
  std::vector<double> counts, energies, natoms;
  for (const SystemData& d : systems) {
    const int64_t n = std::min<int64_t>(d.nframes, batches_per_system * d.batch);
    for (int64_t f = 0; f < n; ++f) {
      for (int t = 0; t < ntypes; ++t) counts.push_back(double(d.type_count[size_t(t)]));
      energies.push_back(d.energy[f].item<double>());
      natoms.push_back(double(d.natoms));
    }
  }
  const int64_t nf = int64_t(energies.size());
  const auto c = torch::tensor(counts, torch::kFloat64).reshape({nf, ntypes});
  const auto e = torch::tensor(energies, torch::kFloat64);
  const auto bias = torch::linalg_pinv(c).matmul(e);
  const auto residual = (c.matmul(bias) - e) / torch::tensor(natoms, torch::kFloat64);
  std::cout << "statistics from " << nf << " frame(s): " << name << " [";
  for (int t = 0; t < ntypes; ++t) std::cout << (t ? ", " : "") << std::setprecision(10) << bias[t].item<double>();
  std::cout << "] eV; per-atom energy RMSE of the linear fit " << std::setprecision(4)
            << residual.pow(2).mean().sqrt().item<double>() << " eV/atom\n";
  return bias;
}

void Trainer::compute_statistics() {
  if (equivariant()) return equivariant_statistics();
  // davg/dstd and the energy bias from the statistics frames (energy_bias).
  const int ntypes = int(config_.type_map.size());
  models::EnvStat stat(ntypes, model_config_.nslots());
  for (const SystemData& d : train_)
    for (const auto& env : d.env) stat.add(env, d.types);
  model_.setattr("davg", stat.davg().to(dtype_));
  model_.setattr("dstd", stat.dstd().to(dtype_));
  model_.setattr("bias", energy_bias(train_, ntypes, 10 * comm_->size(), "energy bias").to(dtype_));
}

void Trainer::equivariant_statistics() {
  // Per-type shift (least squares), scale = RMS of the force labels, and the mean number of
  // neighbours within r_max (unless given).
  const int ntypes = int(config_.type_map.size());
  const auto shift = energy_bias(train_, ntypes, 10 * comm_->size(), "per-type energy shift");
  double f2 = 0, nf = 0, pairs = 0, atoms = 0;
  for (const SystemData& d : train_) {
    const int64_t n = std::min<int64_t>(d.nframes, 10 * d.batch * comm_->size());
    if (d.force.defined()) f2 += d.force.narrow(0, 0, n).pow(2).sum().item<double>(), nf += double(n * d.natoms * 3);
    for (const auto& e : d.edges) pairs += double(e.i.numel()), atoms += double(d.natoms);
  }
  const double scale = nf > 0 && f2 > 0 ? std::sqrt(f2 / nf) : 1.0;
  model_.run_method("set_scale_shift", torch::full({ntypes}, scale, torch::kFloat64), shift);
  const double avg = config_.equivariant.avg_num_neighbors.value_or(atoms > 0 ? pairs / atoms : 1.0);
  model_.setattr("avg_num_neighbors", avg);
  std::cout << "scale " << std::setprecision(6) << scale << " (RMS of the force labels, eV/Å); avg_num_neighbors "
            << avg << (config_.equivariant.avg_num_neighbors ? " (given)" : " (from the data)") << "\n";
}

Prefactors Trainer::prefactors(int64_t step) const {
  const double ratio = config_.learning_rate.at(step) / (config_.learning_rate.start_lr * config_.learning_rate.scale);
  auto p = [&](double start, double limit) { return limit + (start - limit) * ratio; };
  return {p(config_.start_pref_e, config_.limit_pref_e), p(config_.start_pref_f, config_.limit_pref_f),
          p(config_.start_pref_v, config_.limit_pref_v)};
}

void Trainer::equivariant_predict(const SystemData& d, const std::vector<int64_t>& frames, bool training,
                                  torch::Tensor& energy, torch::Tensor& forces, torch::Tensor& virial) {
  auto method = model_.get_method("atomic_energy");
  std::vector<torch::Tensor> es, fs, vs;
  for (int64_t f : frames) {
    const auto& g = d.edges[size_t(f)];
    const auto x = g.d.detach().requires_grad_(true);
    const auto e = method({x, g.i, g.j, d.atype}).toTensor();
    // Forces from the pair gradients: F_i = sum_j dE/dd_ij, F_j -= dE/dd_ij (d_ij = r_j - r_i).
    const auto grad = torch::autograd::grad({e.sum()}, {x}, {}, training, training)[0];
    es.push_back(e.to(torch::kFloat64).sum());
    fs.push_back(torch::zeros({d.natoms, 3}, grad.options()).index_add(0, g.i, grad).index_add(0, g.j, -grad));
    vs.push_back(-x.detach().t().matmul(grad));
  }
  energy = torch::stack(es);
  forces = torch::stack(fs);
  virial = torch::stack(vs);
}

double Trainer::evaluate(const SystemData& d, const std::vector<int64_t>& frames, const Prefactors& pref, bool training,
                         ErrorSums& sums) {
  torch::Tensor energy, forces, virial;
  if (equivariant()) {
    // Autograd end to end: the force loss differentiates the forces again (create_graph).
    equivariant_predict(d, frames, training, energy, forces, virial);
  } else {
    models::SeATrainingPath::Output out;
    if (frames.size() == 1) {
      out = path_->forward(d.packed[size_t(frames[0])], d.types);
    } else {
      std::vector<const models::PackedEnv*> parts;
      for (int64_t f : frames) parts.push_back(&d.packed[size_t(f)]);
      batch_ = models::PackedEnv::concat(parts);
      out = path_->forward(batch_, d.types);
    }
    // The loss of training.md on leaf copies of the predictions: autograd gives d loss / d
    // prediction, and the training path carries it to the parameters.
    energy = out.energy.detach().requires_grad_(training);
    forces = out.forces.detach().requires_grad_(training);
    virial = out.virial.detach().requires_grad_(training);
  }
  const auto index = torch::tensor(frames, torch::kInt64);
  const double n = double(d.natoms);
  const auto de = energy - d.energy.index_select(0, index);
  auto loss = pref.e * (de * de).mean() / n;
  sums.e2_per_atom2 += (de * de).sum().item<double>() / (n * n);
  if (d.force.defined()) {
    const auto df = forces.to(torch::kFloat64) - d.force.index_select(0, index);
    loss = loss + pref.f * (df * df).sum({1, 2}).mean() / (3 * n);
    sums.f2 += (df * df).sum().item<double>();
    sums.force_components += df.numel();
  }
  if (d.virial.defined()) {
    const auto dv = virial.to(torch::kFloat64).reshape({-1, 9}) - d.virial.index_select(0, index);
    loss = loss + pref.v * (dv * dv).mean(1).mean() / n;
    sums.v2_per_atom2 += (dv * dv).mean(1).sum().item<double>() / (n * n);
    sums.virial_frames += int64_t(frames.size());
  }
  const double value = loss.item<double>();
  sums.loss += value * double(frames.size());
  sums.frames += int64_t(frames.size());
  if (training && equivariant()) {
    torch::autograd::backward({loss});
  } else if (training) {
    const auto g = torch::autograd::grad({loss}, {energy, forces, virial}, {}, false, false, true);
    path_->backward(g[0], g[1], g[2]);
  }
  return value;
}

std::string Trainer::ckpt_path(int64_t step) const {
  return (fs::path(options_.output_dir) / (config_.save_ckpt + "-" + std::to_string(step) + ".pt")).string();
}

void Trainer::save_checkpoint(int64_t step) {
  ExtraFiles extra = metadata_;
  extra["mlip_checkpoint"] = "1";
  extra["step"] = std::to_string(step);
  extra["world_size"] = std::to_string(comm_->size());
  extra["sampler"] = sampler_->state();
  if (val_sampler_) extra["val_sampler"] = val_sampler_->state();
  std::ostringstream opt;
  torch::save(*optimizer_, opt);
  extra["optimizer"] = opt.str();
  const std::string path = ckpt_path(step);
  if (ema_) {
    // The module's parameters are the averaged weights (what test, freeze and --init-model
    // use); the raw ones the optimiser steps travel beside them for --restart.
    std::ostringstream raw;
    torch::save(params_, raw);
    extra["weights"] = raw.str();
    extra["ema_updates"] = std::to_string(ema_->updates());
  }
  {
    AveragedWeights averaged(ema_.get());
    save_module_atomically(model_, extra, path);
  }
  const fs::path dir = options_.output_dir;
  write_file_atomically((dir / "checkpoint").string(), fs::path(path).filename().string() + "\n");
  // <save_ckpt>.pt: a link to the newest checkpoint (replaced atomically).
  const fs::path link = dir / (config_.save_ckpt + ".pt");
  const fs::path tmp_link = dir / (config_.save_ckpt + ".pt.tmp-" + std::to_string(::getpid()));
  std::error_code ec;
  fs::remove(tmp_link, ec);
  fs::create_symlink(fs::path(path).filename(), tmp_link, ec);
  if (!ec) fs::rename(tmp_link, link, ec);
  // Keep the newest max_ckpt_keep checkpoints.
  std::vector<std::pair<int64_t, fs::path>> found;
  const std::regex pattern(std::regex_replace(config_.save_ckpt, std::regex(R"([.^$|()\[\]{}*+?\\])"), R"(\$&)") +
                           R"(-(\d+)\.pt)");
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    const std::string name = entry.path().filename().string();
    if (std::regex_match(name, m, pattern)) found.emplace_back(std::stoll(m[1]), entry.path());
  }
  std::sort(found.begin(), found.end());
  for (size_t k = 0; k + size_t(std::max<int64_t>(config_.max_ckpt_keep, 1)) < found.size(); ++k)
    fs::remove(found[k].second, ec);
}

void Trainer::restore(const std::string& given, bool full) {
  const std::string path = resolve_checkpoint(given);
  ExtraFiles extra;
  torch::jit::Module loaded = load_model(path, extra);
  if (extra["model_type"] != config_.model_type)
    throw Error(path + ": a " + extra["model_type"] + " model, the input asks for " + config_.model_type);
  // Copy weights and statistics into the freshly built model (same architecture required).
  auto mine = model_.named_attributes(false);
  for (const auto& item : loaded.named_attributes(false)) {
    if (item.value.isDouble()) {  // e.g. the equivariant model's avg_num_neighbors
      model_.setattr(item.name, item.value);
      continue;
    }
    if (!item.value.isTensor()) continue;
    bool matched = false;
    for (const auto& m : mine)
      if (m.name == item.name && m.value.isTensor()) {
        auto dst = m.value.toTensor();
        auto src = item.value.toTensor();
        if (dst.sizes() != src.sizes())
          throw Error(path + ": '" + item.name + "' has shape " + c10::str(src.sizes()) + ", the input's model has " +
                      c10::str(dst.sizes()) + " (different sel, neuron or type_map?)");
        torch::NoGradGuard guard;
        dst.copy_(src);
        matched = true;
      }
    if (!matched) throw Error(path + ": '" + item.name + "' is not part of the input's model");
  }
  if (!full) return;
  if (extra.count("step") == 0) throw Error(path + ": a frozen model, not a checkpoint: --restart needs a checkpoint");
  start_step_ = std::stoll(extra["step"]);
  // A checkpoint with a moving average holds it as the module's parameters and the raw weights
  // under "weights"; one without holds the raw weights only (the average starts from them).
  if (extra.count("weights")) {
    // The raw weights are stored in the order of the module's parameters: that order must be
    // the input's model's, name by name.
    std::vector<std::string> saved, mine;
    for (const auto& p : loaded.named_parameters(false)) saved.push_back(p.name);
    for (const auto& p : model_.named_parameters(false)) mine.push_back(p.name);
    if (saved != mine) throw Error(path + ": its parameters are not those of the input's model, in the same order");
    std::vector<torch::Tensor> raw;
    std::istringstream in(extra["weights"]);
    torch::load(raw, in);
    if (raw.size() != params_.size())
      throw Error(path + ": " + std::to_string(raw.size()) + " raw weight tensors, the input's model has " +
                  std::to_string(params_.size()));
    if (ema_) ema_->reset(extra.count("ema_updates") ? std::stoll(extra["ema_updates"]) : 0);
    else if (root())
      std::cout << "note: training.ema_decay is 0: the moving average of the weights in " << path
                << " is dropped, and training continues from the raw weights\n";
    torch::NoGradGuard guard;
    for (size_t k = 0; k < raw.size(); ++k) {
      if (raw[k].sizes() != params_[k].sizes())
        throw Error(path + ": raw weight " + std::to_string(k) + " has shape " + c10::str(raw[k].sizes()) +
                    ", the input's model has " + c10::str(params_[k].sizes()));
      params_[k].detach().copy_(raw[k]);
    }
  } else if (ema_) {
    ema_->reset(0);
    if (root())
      std::cout << "note: " << path << " has no moving average of the weights (written with ema_decay 0): "
                << "the average starts from its weights, with the warm-up of a fresh one\n";
  }
  std::istringstream opt(extra["optimizer"]);
  torch::load(*optimizer_, opt);
  const std::string ranks = extra.count("world_size") ? extra["world_size"] : "1";
  if (ranks == std::to_string(comm_->size())) {
    sampler_->set_state(extra["sampler"]);
    if (val_sampler_ && extra.count("val_sampler")) val_sampler_->set_state(extra["val_sampler"]);
  } else if (root()) {
    std::cout << "note: the checkpoint was written by a run over " << ranks << " rank(s), this one has "
              << comm_->size() << ": the frame order starts afresh (weights and optimiser continue)\n";
  }
  if (root()) std::cout << "restarted from " << path << " at step " << start_step_ << "\n";
}

std::string format_duration(double s) {
  char buf[32];
  if (s < 0 || !std::isfinite(s)) return "?";
  const int64_t t = int64_t(s + 0.5);
  std::snprintf(buf, sizeof(buf), "%ld:%02ld:%02ld", long(t / 3600), long(t / 60 % 60), long(t % 60));
  return buf;
}

int Trainer::run() {
  const TrainConfig& c = config_;
  if (c.numb_steps <= 0) throw Error(c.input_path + ": training.numb_steps: expected a positive integer");
  // TorchScript's optimising executor runs the first calls of a method unoptimised and later
  // ones fused, with different rounding: a restart would then not continue bit for bit. The
  // plain executor computes every step the same way.
  torch::jit::setGraphExecutorOptimize(false);
  // LibTorch's intra-op threads: OMP_NUM_THREADS when given, else the CPUs this process may run
  // on (its affinity mask, which taskset and Slurm set). LibTorch's own default can be 1.
  const char* omp = std::getenv("OMP_NUM_THREADS");
  if (omp != nullptr && std::atoi(omp) > 0) {
    at::set_num_threads(std::atoi(omp));
  } else {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) at::set_num_threads(CPU_COUNT(&set));
  }
  if (options_.comm) {
    comm_ = options_.comm;
  } else {
    own_comm_ = dist::make_communicator(dist::LaunchEnv{}, {});
    comm_ = own_comm_.get();
  }
  const int world = comm_->size();
  print_summary();
  if (root() && !options_.output_dir.empty()) fs::create_directories(options_.output_dir);
  config_.learning_rate.scale = scale_by_worker(c.scale_by_worker, world);
  if (world > 1 && root())
    std::cout << "learning rate: start_lr x " << config_.learning_rate.scale << " (scale_by_worker: "
              << c.scale_by_worker << ", " << world << " ranks); batch_size is per rank\n";
  load_data();
  build_model();
  // Only rank 0 of a fresh run computes statistics: the others keep no environment matrices.
  const int64_t statistics_batches = root() && options_.restart.empty() && options_.init_model.empty() ? 10 * world : 0;
  const models::SeAConfig& params = model_config_;
  const int ntypes = int(c.type_map.size());
  const double edge_cutoff = equivariant() ? c.equivariant.r_max : 0.0;
  int64_t truncated = 0;
  if (dtype_ == torch::kFloat32) {
    train_ = prepare<float>(train_raw_, c.training_data, params, ntypes, "training", statistics_batches, truncated,
                            edge_cutoff);
    if (c.validation_data)
      valid_ = prepare<float>(valid_raw_, *c.validation_data, params, ntypes, "validation", 0, truncated, edge_cutoff);
  } else {
    train_ = prepare<double>(train_raw_, c.training_data, params, ntypes, "training", statistics_batches, truncated,
                            edge_cutoff);
    if (c.validation_data)
      valid_ = prepare<double>(valid_raw_, *c.validation_data, params, ntypes, "validation", 0, truncated, edge_cutoff);
  }
  if (truncated > 0)
    std::cout << "warning: " << truncated << " (atom, neighbour type) blocks had more neighbours than sel; the "
              << "farthest were dropped (raise model.descriptor.sel, or use sel: auto)\n";

  auto make_sampler = [&](const std::vector<SystemData>& set, const DataConfig& data, uint64_t seed, const std::string& key,
                          int ranks) {
    std::vector<int64_t> frames, batch, nbatch;
    for (const auto& d : set) {
      frames.push_back(d.nframes);
      batch.push_back(d.batch);
      // Batches per pass of the global batch (batch_size x ranks), as one rank with that batch.
      nbatch.push_back((d.nframes + d.batch * ranks - 1) / (d.batch * ranks));
    }
    return std::make_unique<SystemSampler>(frames, batch, system_probabilities(nbatch, data.auto_prob, data.sys_probs, key),
                                           seed, ranks);
  };
  uint64_t seed = c.seed ? *c.seed : uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
  if (!c.seed && world > 1) {
    // Every rank must draw the same systems: rank 0's seed for all.
    auto t = torch::tensor({int64_t(seed >> 1)}, torch::kInt64);
    comm_->broadcast(t);
    seed = uint64_t(t.item<int64_t>());
  }
  if (!c.seed) std::cout << "training.seed not given: using " << seed << "\n";
  sampler_ = make_sampler(train_, c.training_data, seed, "training.training_data", world);
  if (!valid_.empty()) val_sampler_ = make_sampler(valid_, *c.validation_data, seed + 1, "training.validation_data", 1);
  if (world > 1 && root()) {
    for (size_t s = 0; s < train_.size(); ++s)
      if (sampler_->padding(s) > 0)
        std::cout << train_[s].name << ": " << train_[s].nframes << " frames over " << world << " ranks, "
                  << sampler_->padding(s) << " frame(s) duplicated per pass\n";
    if (c.validation_data && c.validation_data->padded)
      for (const auto& d : valid_) {
        const int64_t b = std::min(d.batch, d.nframes), dup = (b + world - 1) / world * world - b;
        std::cout << "warning: validation_data.padded: " << d.name << ": batches of " << b << " frames over " << world
                  << " ranks, " << dup << " frame(s) duplicated per batch; the validation metrics are skewed"
                  << (dup > 0 ? "" : " (not at this batch size)")
                  << ". Use validation_data.single_rank: true, or drop padded for exact metrics\n";
      }
  }

  for (const auto& p : model_.parameters()) params_.push_back(p);
  optimizer_ = std::make_unique<torch::optim::Adam>(
      params_, torch::optim::AdamOptions(c.learning_rate.at(0)).betas({0.9, 0.999}).weight_decay(0.0));
  if (c.ema_decay > 0) ema_ = std::make_unique<Ema>(params_, c.ema_decay);
  if (!options_.restart.empty()) restore(options_.restart, true);
  else if (!options_.init_model.empty()) restore(options_.init_model, false);
  else if (root()) compute_statistics();
  for (auto& d : train_) d.env.clear();  // the packed pairs are all training needs from here on
  if (world > 1) {
    // Identical start state: rank 0's weights and statistics, broadcast once.
    std::vector<torch::Tensor> state;
    std::vector<std::string> scalars;
    for (const auto& a : model_.named_attributes(false)) {
      if (a.value.isTensor()) state.push_back(a.value.toTensor());
      if (a.value.isDouble()) scalars.push_back(a.name);
    }
    auto values = torch::empty({int64_t(scalars.size())}, torch::kFloat64);
    for (size_t k = 0; k < scalars.size(); ++k) values[int64_t(k)] = model_.attr(scalars[k]).toDouble();
    if (!scalars.empty()) state.push_back(values);
    dist::broadcast_tensors(*comm_, state);
    for (size_t k = 0; k < scalars.size(); ++k) model_.setattr(scalars[k], values[int64_t(k)].item<double>());
  }
  // The average starts from the start weights (a --restart brought its own).
  if (ema_ && options_.restart.empty()) ema_->reset(0);
  ddp_ = std::make_unique<dist::SimpleDDP>(params_, *comm_);

  int64_t nparams = 0;
  for (auto& p : params_) nparams += p.numel();
  if (equivariant()) {
    const EquivariantSettings& e = c.equivariant;
    std::cout << "model: equivariant, " << c.precision << ", r_max " << e.r_max << " Å, l_max " << e.l_max
              << (e.parity ? " with parity" : " (SO(3))") << ", " << e.num_layers << " layers x " << e.num_features
              << " features";
  } else {
    std::cout << "model: se_e2_a, " << c.precision << ", sel [";
    for (size_t t = 0; t < model_config_.sel.size(); ++t) std::cout << (t ? ", " : "") << model_config_.sel[t];
    std::cout << "]";
  }
  std::cout << ", " << nparams << " parameters; " << at::get_num_threads() << " thread(s)\n";
  if (ema_)
    std::cout << "weights: moving average with ema_decay " << c.ema_decay
              << " for validation, checkpoints and frozen models (training.ema_decay: 0 uses the raw weights)\n";

  // lcurve.out: a new file with its header, or appended to on --restart.
  const fs::path lcurve_path = fs::path(options_.output_dir) / c.disp_file;
  const bool has_val = !valid_.empty();
  bool has_virial = false;
  for (auto& d : train_) has_virial = has_virial || d.virial.defined();
  std::ofstream lcurve;
  if (!root()) {
  } else if (options_.restart.empty()) {
    lcurve.open(lcurve_path, std::ios::trunc);
    lcurve << "# step" << (has_val ? " rmse_val" : "") << " rmse_trn" << (has_val ? " rmse_e_val" : "") << " rmse_e_trn"
           << (has_val ? " rmse_f_val" : "") << " rmse_f_trn";
    if (has_virial) lcurve << (has_val ? " rmse_v_val" : "") << " rmse_v_trn";
    lcurve << " lr\n";
  } else {
    lcurve.open(lcurve_path, std::ios::app);
  }
  if (root() && !lcurve) throw Error(lcurve_path.string() + ": cannot write");

  g_interrupted = false;
  g_signal = 0;
  // SIGINT (Ctrl-C) and SIGTERM (torchrun's agent stopping its workers, Slurm at the time
  // limit or on scancel) both save a checkpoint and stop after the current step.
  // The previous handlers come back however this function ends.
  struct SignalGuard {
    void (*previous_int)(int) = std::signal(SIGINT, on_sigint);
    void (*previous_term)(int) = std::signal(SIGTERM, on_sigint);
    ~SignalGuard() {
      std::signal(SIGINT, previous_int);
      std::signal(SIGTERM, previous_term);
    }
  } signal_guard;
  const bool tty = root() && ::isatty(STDOUT_FILENO);
  const auto t0 = std::chrono::steady_clock::now();
  int64_t step = start_step_;
  int exit_code = 0;
  std::vector<double> step_ms;
  double sync_seconds = 0, sync_wait_seconds = 0, step_seconds = 0;
  const int64_t reduces_before = comm_->all_reduces();
  double last_loss = 0;
  while (step < c.numb_steps) {
    const double lr = c.learning_rate.at(step);
    for (auto& group : optimizer_->param_groups()) static_cast<torch::optim::AdamOptions&>(group.options()).lr(lr);
    const Prefactors pref = prefactors(step);
    const auto batch = sampler_->next();
    ErrorSums trn;
    const auto step_start = std::chrono::steady_clock::now();
    // Zeroed in place (the gradients may be views of SimpleDDP's flat buffer, which LibTorch's
    // zero_grad cannot detach).
    for (auto& p : params_)
      if (p.grad().defined()) p.mutable_grad().zero_();
    evaluate(train_[batch.system], sampler_->shard(batch, comm_->rank()), pref, true, trn);
    // One all-reduce: the gradients, the error sums of the displayed metrics, and the stop flag
    // (so that every rank stops after the same step when any of them got SIGINT or SIGTERM).
    // The counts need no communication: every rank has a shard of the same size of the same
    // system, so the global counts are the local ones times the ranks (exact in any dtype).
    std::vector<double> extras = {trn.loss, trn.e2_per_atom2, trn.f2, trn.v2_per_atom2, g_interrupted ? 1.0 : 0.0};
    const auto sync_start = std::chrono::steady_clock::now();
    const double wait_before = comm_->all_reduce_arrival_wait_seconds();
    ddp_->sync(extras);
    sync_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - sync_start).count();
    if (wait_before >= 0) sync_wait_seconds += comm_->all_reduce_arrival_wait_seconds() - wait_before;
    trn.loss = extras[0], trn.e2_per_atom2 = extras[1], trn.f2 = extras[2], trn.v2_per_atom2 = extras[3];
    trn.frames *= world, trn.force_components *= world, trn.virial_frames *= world;
    const bool stop = extras[4] > 0;
    adam_step(*optimizer_, ema_.get());
    step_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count();
    if (!options_.step_times.empty())
      step_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - step_start).count());
    ++step;
    last_loss = trn.rmse();
    if (step == 1 || step % c.disp_freq == 0 || step == c.numb_steps) {
      ErrorSums val;
      if (has_val) {
        AveragedWeights averaged(ema_.get());
        val = validate(pref);
      }
      char line[512];
      std::string text;
      std::snprintf(line, sizeof(line), "%7ld", long(step));
      text += line;
      auto col = [&](double v) {
        std::snprintf(line, sizeof(line), "   %11.4e", v);
        text += line;
      };
      if (has_val) col(val.rmse());
      col(trn.rmse());
      if (has_val) col(val.rmse_e());
      col(trn.rmse_e());
      if (has_val) col(val.rmse_f());
      col(trn.rmse_f());
      if (has_virial) {
        if (has_val) col(val.rmse_v());
        col(trn.rmse_v());
      }
      std::snprintf(line, sizeof(line), "   %10.3e\n", lr);
      text += line;
      if (root()) lcurve << text << std::flush;
      if (!tty && root()) {
        const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const double rate = double(step - start_step_) / std::max(elapsed, 1e-9);
        std::printf("step %ld/%ld  lr %.3e  loss %.4e  rmse_e %.4e  rmse_f %.4e  %.1f steps/s  ETA %s\n", long(step),
                    long(c.numb_steps), lr, last_loss, trn.rmse_e(), trn.rmse_f(), rate,
                    format_duration(double(c.numb_steps - step) / rate).c_str());
        std::fflush(stdout);
      }
    }
    if (tty && (step % 10 == 0 || step == c.numb_steps)) {
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const double rate = double(step - start_step_) / std::max(elapsed, 1e-9);
      const int width = 30, filled = int(width * double(step) / double(c.numb_steps));
      std::printf("\r[%s%s] %ld/%ld  lr %.2e  loss %.3e  %.1f steps/s  ETA %s   ", std::string(size_t(filled), '#').c_str(),
                  std::string(size_t(width - filled), '.').c_str(), long(step), long(c.numb_steps), lr, last_loss, rate,
                  format_duration(double(c.numb_steps - step) / rate).c_str());
      std::fflush(stdout);
    }
    if (root() && (step % c.save_freq == 0 || step == c.numb_steps)) save_checkpoint(step);
    if (stop) {
      if (root() && step % c.save_freq != 0 && step != c.numb_steps) save_checkpoint(step);
      if (root()) std::printf("%sinterrupted at step %ld: saved %s\n", tty ? "\n" : "", long(step), ckpt_path(step).c_str());
      exit_code = g_signal == SIGTERM ? 143 : 130;
      break;
    }
  }
  if (root() && !options_.step_times.empty()) {
    std::ofstream times(options_.step_times);
    times << "# step ms (forward, backward and update of each step)\n";
    for (size_t k = 0; k < step_ms.size(); ++k) times << start_step_ + int64_t(k) + 1 << " " << step_ms[k] << "\n";
    if (!times) throw Error(options_.step_times + ": cannot write the step times");
  }
  if (tty) std::printf("\n");
  if (exit_code == 0 && root()) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("finished %ld steps in %.1f s; checkpoint %s\n", long(step - start_step_), elapsed,
                ckpt_path(step).c_str());
  }
  if (world > 1 && root()) {
    const int64_t reduces = comm_->all_reduces() - reduces_before;
    // Through shared memory the all-reduce's time splits into the wait for the last rank to
    // arrive (imbalance between the ranks' steps) and the rest (the transfer and the averaging).
    char wait[96] = "";
    if (comm_->all_reduce_arrival_wait_seconds() >= 0)
      std::snprintf(wait, sizeof wait, "; %.3f s of it waiting for the last rank to arrive", sync_wait_seconds);
    std::printf("communication (%s, %d ranks): %ld all-reduces = %ld gradient (one per step, %ld values) + %ld "
                "validation; %.1f%% of the step time in the gradient all-reduce (%.3f of %.3f s%s)\n",
                comm_->backend().c_str(), world, long(reduces), long(reduces - validation_reduces_),
                long(ddp_->numel() + 5), long(validation_reduces_), 100.0 * sync_seconds / std::max(step_seconds, 1e-12),
                sync_seconds, step_seconds, wait);
  }
  return exit_code;
}

}  // namespace

int train(const TrainConfig& config, const TrainOptions& options) {
  try {
    Trainer trainer(config, options);
    return trainer.run();
  } catch (const c10::Error& e) {
    throw Error(std::string("training failed in LibTorch: ") + e.what_without_backtrace());
  }
}

}  // namespace mlip::train
