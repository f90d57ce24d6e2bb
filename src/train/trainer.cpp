#include "train/trainer.h"

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/optim/adam.h>
#include <ATen/Parallel.h>
#include <torch/serialize.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <array>
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
#include "error.h"
#include "models/module_device.h"
#include "archive/model_archive.h"
#include "models/registry.h"
#include "train/adam_state.h"
#include "train/adam_step.h"
#include "train/device.h"
#include "train/ema.h"
#include "train/frame_store.h"
#include "train/non_finite_guard.h"
#include "archive/output_file.h"
#include "train/rank_agreement.h"
#include "train/sampler.h"
#include "version.h"

namespace fs = std::filesystem;

namespace mlip::train {

using archive::ExtraFiles;
using archive::OutputFile;
using archive::SpecialTarget;
using archive::check_output_target;
using archive::load_model;
using archive::prepare_output_folder;
using archive::remove_stale_temporaries;
using archive::save_module_atomically;
using archive::stored_type_names;
using archive::system_reason;
using archive::write_file_atomically;
namespace {

std::atomic<bool> g_interrupted{false};
std::atomic<int> g_signal{0};
extern "C" void on_sigint(int sig) {
  g_signal = sig;
  g_interrupted = true;
}

/// One system of the training or validation set. Its frames (the model's inputs and the labels)
/// come from the FrameStore, made ahead by its workers and cached within a budget.
struct SystemData {
  std::string name;
  int64_t nframes = 0, batch = 1;
  models::SystemAtoms atoms;
  bool has_force = false, has_virial = false;
  std::string config_type = "Default";
  double weight = 1.0;  ///< training.config_type_weights of its config_type
};

/// Sums of squared errors of a set of frames, for exact RMSEs over several batches. The sums
/// stay on the model's device (reading them back every step would make the host wait for the
/// device); the counts are known on the host.
struct ErrorSums {
  /// [4] float64: the loss terms summed over frames (weighted by the prefactors), the sum of
  /// dE^2 / N^2, the sum of dF^2 over components, the sum of mean_9(dW^2) / N^2. Undefined
  /// until something is added.
  torch::Tensor sums;
  int64_t frames = 0, force_components = 0, virial_frames = 0;

  void add(const torch::Tensor& values) { sums = sums.defined() ? sums + values : values; }
  /// The sums as host numbers (one device-to-host copy).
  std::vector<double> host() const {
    if (!sums.defined()) return {0, 0, 0, 0};
    const auto h = sums.to(torch::kCPU).contiguous();
    return std::vector<double>(h.data_ptr<double>(), h.data_ptr<double>() + 4);
  }
};

/// The RMSEs of lcurve.out from host sums and counts.
struct Rmse {
  double loss = 0, e = 0, f = 0, v = 0;
  Rmse() = default;
  explicit Rmse(const ErrorSums& s) {
    const auto h = s.host();
    loss = std::sqrt(h[0] / double(std::max<int64_t>(s.frames, 1)));
    e = std::sqrt(h[1] / double(std::max<int64_t>(s.frames, 1)));
    f = std::sqrt(h[2] / double(std::max<int64_t>(s.force_components, 1)));
    v = std::sqrt(h[3] / double(std::max<int64_t>(s.virial_frames, 1)));
  }
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

/// The CPUs this process may run on (its affinity mask, which taskset and Slurm set); 0 when it
/// cannot be read.
int cpus_allowed() {
  cpu_set_t set;
  CPU_ZERO(&set);
  return sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 0;
}

std::string format_duration(double s) {
  char buf[32];
  if (s < 0 || !std::isfinite(s)) return "?";
  const int64_t t = int64_t(s + 0.5);
  std::snprintf(buf, sizeof(buf), "%ld:%02ld:%02ld", long(t / 3600), long(t / 60 % 60), long(t % 60));
  return buf;
}

class Trainer {
 public:
  Trainer(const TrainConfig& config, const TrainOptions& options)
      : config_(config), options_(options), started_(std::chrono::steady_clock::now()) {}
  int run();

 private:
  // Stages of run(), in order.
  void set_up_threads_and_ranks();
  void load_data();
  void build_model();
  void prepare_sets();
  void make_samplers();
  void set_up_optimisation();
  void print_model_line() const;
  void open_lcurve();
  int train_loop();
  void print_communication() const;

  std::vector<SystemData> prepare(const std::vector<data::System>& systems, const DataConfig& data,
                                  const std::string& key);
  void compute_statistics();
  /// Prediction and loss on one batch; adds to the error sums. When training, also
  /// accumulates the loss gradient into the parameters' grad.
  void evaluate(int set, size_t system, const std::vector<int64_t>& frames, const Prefactors& pref, bool training,
                ErrorSums& sums);
  /// Asks the frame store's workers for the frames of the next training batches, so that
  /// `kPrefetchBatches` batches are asked for ahead of the current one.
  void prefetch_training_batches();
  /// This rank's frames of a validation batch.
  std::vector<int64_t> validation_frames(const SystemSampler::Batch& batch) const;
  /// Asks the workers for the frames the next validation will use (a copy of the validation
  /// sampler runs in step with it: one validation ahead).
  void prefetch_validation();
  Prefactors prefactors(int64_t step) const;
  ErrorSums validate(const Prefactors& pref);
  /// lcurve.out's header line.
  std::string lcurve_header() const;
  void write_lcurve_line(int64_t step, double lr, const Rmse& trn, const Rmse* val);
  void write_step_times(const std::vector<std::array<double, 2>>& step_ms) const;
  void save_checkpoint(int64_t step);
  void restore(const std::string& path, bool full);
  void broadcast_start_state();
  std::string ckpt_path(int64_t step) const;
  void print_summary() const;
  bool root() const { return comm_->rank() == 0; }

  TrainConfig config_;
  /// lcurve.out (rank 0 only; null on the other ranks).
  std::unique_ptr<OutputFile> lcurve_;
  TrainOptions options_;
  torch::Device device_ = torch::kCPU;
  std::vector<data::System> train_raw_, valid_raw_;
  /// The training data's isolated atoms (config_type=IsolatedAtom): not trained on; the
  /// reference energies of model.e0s: isolated (docs/training.md "Reference energies").
  std::vector<data::System> isolated_;
  /// [ntypes] eV: model.e0s resolved (empty: the fit).
  std::vector<double> reference_energies() const;
  std::vector<SystemData> train_, valid_;
  std::unique_ptr<models::Model> model_;
  std::unique_ptr<FrameStore> store_;
  int train_set_ = 0, valid_set_ = 0;
  // A copy of the training sampler that runs ahead of it: its draws are the batches to prefetch.
  std::unique_ptr<SystemSampler> ahead_, val_ahead_;
  int64_t batches_ahead_ = 0;
  std::string printed_warning_;
  std::vector<torch::Tensor> params_;
  std::unique_ptr<torch::optim::Adam> optimizer_;
  std::unique_ptr<NonFiniteGuard> guard_;  // stops at a non-finite loss (made by train_loop)
  std::unique_ptr<Ema> ema_;  // the moving average of the weights (null when ema_decay is 0)
  std::unique_ptr<SystemSampler> sampler_, val_sampler_;
  int64_t start_step_ = 0;
  ExtraFiles metadata_;
  std::unique_ptr<dist::Communicator> own_comm_;  // one rank, when no communicator was given
  dist::Communicator* comm_ = nullptr;
  std::unique_ptr<dist::SimpleDDP> ddp_;
  int64_t validation_reduces_ = 0;
  bool has_virial_ = false;
  // Timings of the loop, for the communication line.
  double sync_seconds_ = 0, sync_wait_seconds_ = 0, step_seconds_ = 0;
  int64_t reduces_before_ = 0;
  std::chrono::steady_clock::time_point started_;  // when training was asked for (start-up time)
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
  std::cout << "  host:         " << host << "\n  device:       " << describe_device(device_)
            << "\n  backend:      " << comm_->backend()
            << (w > 1 ? " (all-reduce: " + comm_->all_reduce_transport() + ")" : std::string()) << "\n";
  if (device_.is_cpu()) std::cout << "  threads:      " << at::get_num_threads() << " per rank\n";
  std::cout << "---------------------------------\n";
}

std::vector<int64_t> Trainer::validation_frames(const SystemSampler::Batch& batch) const {
  const int w = comm_->size(), r = comm_->rank();
  const DataConfig& vc = *config_.validation_data;
  std::vector<int64_t> mine;
  if (w == 1 || vc.single_rank) {
    if (r == 0) mine = batch.frames;
  } else {
    // exact: frame k goes to rank k mod w (no padding, unequal counts allowed); padded: the
    // batch is first padded to a multiple of w by repeating its first frames.
    std::vector<int64_t> frames = batch.frames;
    if (vc.padded)
      for (size_t k = 0; frames.size() % size_t(w) != 0; ++k) frames.push_back(batch.frames[k % batch.frames.size()]);
    for (size_t k = size_t(r); k < frames.size(); k += size_t(w)) mine.push_back(frames[k]);
  }
  return mine;
}

void Trainer::prefetch_validation() {
  for (int64_t b = 0; b < config_.validation_data->numb_btch; ++b) {
    const auto vb = val_ahead_->next();
    store_->prefetch(valid_set_, vb.system, validation_frames(vb));
  }
}

ErrorSums Trainer::validate(const Prefactors& pref) {
  // The frames of this evaluation are those one rank would use (the validation sampler is the
  // same on every rank and not sharded); docs/distributed.md "Validation and test metrics".
  ErrorSums val;
  const int w = comm_->size();
  const DataConfig& vc = *config_.validation_data;
  for (int64_t b = 0; b < vc.numb_btch; ++b) {
    const auto vb = val_sampler_->next();
    const std::vector<int64_t> mine = validation_frames(vb);
    if (!mine.empty()) evaluate(valid_set_, vb.system, mine, pref, false, val);
  }
  if (w > 1 && !vc.single_rank) {
    auto t = torch::cat({val.sums.defined() ? val.sums : torch::zeros({4}, torch::dtype(torch::kFloat64).device(device_)),
                         torch::tensor({double(val.frames), double(val.force_components), double(val.virial_frames)},
                                       torch::kFloat64)
                             .to(device_)});
    comm_->all_reduce_sum(t);
    ++validation_reduces_;
    val.sums = t.narrow(0, 0, 4);
    const auto counts = t.narrow(0, 4, 3).to(torch::kCPU).contiguous();
    const double* a = counts.data_ptr<double>();
    val.frames = int64_t(a[0]), val.force_components = int64_t(a[1]), val.virial_frames = int64_t(a[2]);
  }
  return val;
}

void Trainer::load_data() {
  std::vector<std::string> type_map = config_.model->type_map;
  // Streamed: only headers are read now; frames are read when the frame store makes them.
  train_raw_ = data::load_systems(config_.training_data.systems, type_map, "", data::Loading::kStreamed,
                                  config_.training_data.keys);
  if (type_map.size() != config_.model->type_map.size())
    throw Error("model.type_map: the training data has types beyond it");
  if (config_.validation_data)
    valid_raw_ = data::load_systems(config_.validation_data->systems, type_map, "", data::Loading::kStreamed,
                                    config_.validation_data->keys);
  // Isolated atoms are references, not training frames (MACE's convention).
  auto isolated = [](const data::System& sys) { return sys.config_type == "IsolatedAtom"; };
  for (const auto& sys : train_raw_)
    if (isolated(sys)) {
      if (sys.natoms() != 1)
        throw Error(sys.name + ": config_type IsolatedAtom, but its frames have " + std::to_string(sys.natoms()) +
                    " atoms (expected 1)");
      isolated_.push_back(sys);
    }
  const std::string& isolated_file = config_.model->e0s.file;
  if (!isolated_file.empty()) {
    // model.e0s: {isolated: FILE}: every frame there is an isolated atom, whatever its config_type.
    std::vector<data::System> extra;
    try {
      extra = data::load_systems({isolated_file}, type_map, "", data::Loading::kStreamed, config_.training_data.keys);
    } catch (const Error& e) {
      throw Error(std::string("model.e0s.isolated: ") + e.what());
    }
    if (type_map.size() != config_.model->type_map.size())
      throw Error("model.e0s.isolated: " + isolated_file + " has types beyond model.type_map");
    for (const auto& sys : extra) {
      if (sys.natoms() != 1)
        throw Error("model.e0s.isolated: " + sys.name + ": expected one-atom frames (isolated atoms), got frames of " +
                    std::to_string(sys.natoms()) + " atoms");
      isolated_.push_back(sys);
    }
  }
  train_raw_.erase(std::remove_if(train_raw_.begin(), train_raw_.end(), isolated), train_raw_.end());
  valid_raw_.erase(std::remove_if(valid_raw_.begin(), valid_raw_.end(), isolated), valid_raw_.end());
  if (train_raw_.empty()) throw Error("training_data: no frames to train on besides isolated atoms");
  if (!isolated_.empty())
    std::cout << "isolated atoms (config_type=IsolatedAtom" << (isolated_file.empty() ? "" : ", " + isolated_file)
              << "): " << isolated_.size() << " system(s), taken out of training"
              << (config_.model->e0s.kind == models::ReferenceEnergies::Kind::kIsolated ? ": the reference energies"
                                                                                         : " (model.e0s is not isolated: unused)")
              << "\n";
  int64_t frames = 0;
  for (auto& s : train_raw_) frames += s.nframes;
  std::cout << "training data: " << train_raw_.size() << " system(s), " << frames << " frame(s)";
  if (!valid_raw_.empty()) {
    int64_t vf = 0;
    for (auto& s : valid_raw_) vf += s.nframes;
    std::cout << "; validation data: " << valid_raw_.size() << " system(s), " << vf << " frame(s)";
  }
  std::cout << "\n";
  // The loss weight of each config type (docs/training.md "Weights"), when there is more than one
  // or a weight is given.
  std::map<std::string, int64_t> per_type;
  for (const auto& sys : train_raw_) per_type[sys.config_type] += sys.nframes;
  if (per_type.size() > 1 || !config_.config_type_weights.empty()) {
    std::cout << "config types (frames, loss weight):";
    for (const auto& [name, n] : per_type) {
      const auto w = config_.config_type_weights.find(name);
      std::cout << " " << name << " " << n << " x " << (w == config_.config_type_weights.end() ? 1.0 : w->second)
                << ";";
    }
    std::cout << " frames with a '" << config_.training_data.keys.weight_name() << "' key weigh that much more\n";
  }
  for (const auto& [name, weight] : config_.config_type_weights)
    if (per_type.count(name) == 0)
      std::cout << "warning: training.config_type_weights names '" << name
                << "', which no training frame has (config types: " << [&] {
                     std::string list;
                     for (const auto& [n, count] : per_type) list += (list.empty() ? "" : ", ") + n;
                     return list;
                   }() << ")\n";
}

void Trainer::build_model() {
  const TrainConfig& c = config_;
  models::ModelContext context;
  context.device = device_;
  context.training_seed = c.seed;
  context.training_systems = &train_raw_;
  context.log = &std::cout;
  model_ = models::create_model(*c.model, context);
  metadata_["model_type"] = c.model->type;
  metadata_["r_max"] = std::to_string(c.model->cutoff());
  std::string names;
  for (auto& n : c.model->type_map) names += (names.empty() ? "" : " ") + n;
  metadata_["type_names"] = names;
  metadata_["num_types"] = std::to_string(c.model->type_map.size());
  metadata_["model_dtype"] = c.model->precision;
  metadata_["mlip_version"] = MLIP_VERSION;
  metadata_["config"] = c.input_text;
  metadata_["units"] = "eV Angstrom";
}

std::vector<SystemData> Trainer::prepare(const std::vector<data::System>& systems, const DataConfig& data,
                                         const std::string& key) {
  std::vector<SystemData> out;
  for (size_t s = 0; s < systems.size(); ++s) {
    const data::System& sys = systems[s];
    SystemData d;
    d.name = sys.name;
    d.nframes = sys.nframes;
    d.batch = data.batch_size.for_system(s, sys.natoms());
    d.atoms.natoms = sys.natoms();
    d.atoms.types = sys.types;
    d.atoms.atype = torch::tensor(std::vector<int64_t>(sys.types.begin(), sys.types.end()), torch::kInt64).to(device_);
    if (!sys.has_energy) throw Error(sys.name + ": " + key + " needs energy labels (energy.npy), found none");
    d.has_force = sys.has_force;
    d.has_virial = sys.has_virial;
    d.config_type = sys.config_type;
    const auto w = config_.config_type_weights.find(sys.config_type);
    if (w != config_.config_type_weights.end()) d.weight = w->second;
    out.push_back(std::move(d));
  }
  return out;
}

void Trainer::prepare_sets() {
  train_ = prepare(train_raw_, config_.training_data, "training");
  if (config_.validation_data) valid_ = prepare(valid_raw_, *config_.validation_data, "validation");
  for (auto& d : train_) has_virial_ = has_virial_ || d.has_virial;
  FrameStoreOptions options;
  options.budget_bytes = config_.cache_mb < 0 ? -1 : int64_t(config_.cache_mb * double(1 << 20));
  options.workers = int(config_.data_workers);
  std::string why;
  if (config_.data_workers < 0) {
    // auto: on the CPU with a training thread on every CPU a worker has no core of its own and
    // slows the steps more than making the frames in them costs (bench/README.md "Data at scale").
    const bool all_cores = device_.is_cpu() && at::get_num_threads() >= std::max(cpus_allowed(), 1);
    options.workers = all_cores ? 0 : 1;
    why = all_cores ? " (auto: the training threads use every CPU)" : " (auto)";
  }
  options.log = root() ? &std::cout : nullptr;
  store_ = std::make_unique<FrameStore>(*model_, device_, options);
  train_set_ = store_->add_set(train_raw_);
  valid_set_ = store_->add_set(valid_raw_);
  if (root()) {
    std::cout << "frames: read when needed; cache ";
    if (options.budget_bytes < 0) std::cout << "without a limit";
    else std::cout << config_.cache_mb << " MB";
    std::cout << "; " << options.workers << " data worker thread(s)" << why << "\n";
  }
}

void Trainer::compute_statistics() {
  // The first data_stat_nbatch global batches (batch_size x ranks frames) of every training
  // system: the frames one rank with the global batch would use.
  // Only these frames are read before step 1 (docs/data.md "Statistics from a sample").
  const int64_t batches = config_.model->statistics_batches * comm_->size();
  std::vector<models::StatisticsFrames> frames;
  for (size_t s = 0; s < train_raw_.size(); ++s) {
    models::StatisticsFrames sample;
    sample.system = &train_raw_[s];
    const int64_t n = std::min<int64_t>(train_raw_[s].nframes, batches * train_[s].batch);
    for (int64_t f = 0; f < n; ++f) sample.frames.push_back(train_raw_[s].frame(f));
    frames.push_back(std::move(sample));
  }
  model_->compute_statistics(frames, reference_energies(), std::cout);
}

std::vector<double> Trainer::reference_energies() const {
  const models::ReferenceEnergies& e0s = config_.model->e0s;
  const auto& names = config_.model->type_map;
  std::vector<double> out;
  if (e0s.kind == models::ReferenceEnergies::Kind::kGiven) {
    for (const auto& name : names) out.push_back(e0s.given.at(name));
  } else if (e0s.kind == models::ReferenceEnergies::Kind::kIsolated) {
    // Each type's isolated-atom energy, the mean over its frames.
    std::vector<double> sum(names.size(), 0.0), count(names.size(), 0.0);
    for (const auto& sys : isolated_)
      for (int64_t f = 0; f < sys.nframes; ++f) {
        const data::Frame frame = sys.frame(f);
        if (frame.energy.empty()) throw Error(sys.name + ": an isolated atom without an energy");
        sum[size_t(sys.types[0])] += frame.energy[0];
        count[size_t(sys.types[0])] += 1;
      }
    std::string missing;
    for (size_t t = 0; t < names.size(); ++t)
      if (count[t] == 0) missing += (missing.empty() ? "" : ", ") + names[t];
    if (!missing.empty())
      throw Error("model.e0s: isolated: no isolated atom (a one-atom frame with config_type=IsolatedAtom in the "
                  "training data" + (e0s.file.empty() ? "" : ", or in " + e0s.file) + ") of type " + missing);
    for (size_t t = 0; t < names.size(); ++t) out.push_back(sum[t] / count[t]);
  }
  return out;
}

Prefactors Trainer::prefactors(int64_t step) const {
  const double ratio = config_.learning_rate.at(step) / (config_.learning_rate.start_lr * config_.learning_rate.scale);
  auto p = [&](double start, double limit) { return limit + (start - limit) * ratio; };
  return {p(config_.start_pref_e, config_.limit_pref_e), p(config_.start_pref_f, config_.limit_pref_f),
          p(config_.start_pref_v, config_.limit_pref_v)};
}

void Trainer::evaluate(int set, size_t system, const std::vector<int64_t>& frames, const Prefactors& pref,
                       bool training, ErrorSums& sums) {
  const SystemData& d = (set == train_set_ ? train_ : valid_)[system];
  // The batch's frames stay alive while in use, even if the cache lets them go.
  std::vector<std::shared_ptr<const PreparedFrame>> batch;
  std::vector<const models::FrameInput*> inputs;
  std::vector<torch::Tensor> energies, forces_label, virials;
  std::vector<double> weights;  // each frame's: its config type's times its own (docs/training.md "Weights")
  for (int64_t f : frames) {
    batch.push_back(store_->get(set, system, f));
    inputs.push_back(batch.back()->input.get());
    weights.push_back(d.weight * batch.back()->weight);
    energies.push_back(batch.back()->energy);
    if (d.has_force) forces_label.push_back(batch.back()->force);
    if (d.has_virial) virials.push_back(batch.back()->virial);
  }
  const auto energy_label = torch::cat(energies);
  const models::Prediction out = model_->predict(d.atoms, inputs, training);
  // The loss of docs/training.md "Loss" on leaf copies of the predictions: autograd gives
  // d loss / d prediction, and the model's backward carries it to the parameters.
  const auto energy = out.energy.detach().requires_grad_(training);
  const auto forces = out.forces.detach().requires_grad_(training);
  const auto virial = out.virial.detach().requires_grad_(training);
  const double n = double(d.atoms.natoms);
  const auto zero = torch::zeros({}, torch::dtype(torch::kFloat64).device(device_));
  const auto de = energy - energy_label;
  const auto w = torch::tensor(weights, torch::kFloat64).to(device_);
  auto loss = pref.e * (w * de * de).mean() / n;
  const auto e2 = (de * de).sum() / (n * n);
  auto f2 = zero, v2 = zero;
  if (d.has_force) {
    const auto df = forces.to(torch::kFloat64) - torch::stack(forces_label);
    loss = loss + pref.f * (w * (df * df).sum({1, 2})).mean() / (3 * n);
    f2 = (df * df).sum();
    sums.force_components += df.numel();
  }
  if (d.has_virial) {
    const auto dv = virial.to(torch::kFloat64).reshape({-1, 9}) - torch::stack(virials);
    loss = loss + pref.v * (w * (dv * dv).mean(1)).mean() / n;
    v2 = (dv * dv).mean(1).sum() / (n * n);
    sums.virial_frames += int64_t(frames.size());
  }
  sums.add(torch::stack({loss.detach() * double(frames.size()), e2.detach(), f2.detach(), v2.detach()}));
  sums.frames += int64_t(frames.size());
  if (training) {
    const auto g = torch::autograd::grad({loss}, {energy, forces, virial}, {}, false, false, true);
    model_->backward(g[0], g[1], g[2]);
  }
}

void Trainer::write_lcurve_line(int64_t step, double lr, const Rmse& trn, const Rmse* val) {
  char line[512];
  std::string text;
  std::snprintf(line, sizeof(line), "%7ld", long(step));
  text += line;
  auto col = [&](double v) {
    std::snprintf(line, sizeof(line), "   %11.4e", v);
    text += line;
  };
  if (val) col(val->loss);
  col(trn.loss);
  if (val) col(val->e);
  col(trn.e);
  if (val) col(val->f);
  col(trn.f);
  if (has_virial_) {
    if (val) col(val->v);
    col(trn.v);
  }
  std::snprintf(line, sizeof(line), "   %10.3e\n", lr);
  text += line;
  if (lcurve_) lcurve_->write(text);
}

std::string Trainer::ckpt_path(int64_t step) const {
  return (fs::path(options_.output_dir) / (config_.save_ckpt + "-" + std::to_string(step) + ".pt")).string();
}
void Trainer::save_checkpoint(int64_t step) {
  // Never a checkpoint of non-finite weights (docs/training.md "Non-finite losses").
  guard_->check_pending();
  guard_->check_parameters(params_, step);
  // The learning curve up to this step is on disk before the checkpoint that a restart resumes from.
  if (lcurve_) lcurve_->sync();
  ExtraFiles extra = metadata_;
  extra["mlip_checkpoint"] = "1";
  extra["step"] = std::to_string(step);
  extra["world_size"] = std::to_string(comm_->size());
  extra["sampler"] = sampler_->state();
  if (val_sampler_) extra["val_sampler"] = val_sampler_->state();
  extra["optimizer"] = save_adam_state(*optimizer_);
  const std::string path = ckpt_path(step);
  if (ema_) {
    // The module's parameters are the averaged weights (what test, freeze and --init-model
    // use); the raw ones the optimiser steps travel beside them for --restart.
    std::ostringstream raw;
    std::vector<torch::Tensor> host;
    for (const auto& p : params_) host.push_back(p.detach().to(torch::kCPU));
    torch::save(host, raw);
    extra["weights"] = raw.str();
    extra["ema_updates"] = std::to_string(ema_->updates());
  }
  {
    // Written from host copies (docs/device.md "Checkpoints"): a checkpoint made on a GPU loads
    // on a machine without one.
    AveragedWeights averaged(ema_.get());
    torch::jit::Module& module = model_->module();
    if (device_.is_cpu()) {
      save_module_atomically(module, extra, path, "the checkpoint");
    } else {
      torch::jit::Module host = module.deepcopy();
      models::move_module(host, torch::kCPU);
      save_module_atomically(host, extra, path, "the checkpoint");
    }
  }
  const fs::path dir = options_.output_dir;
  write_file_atomically((dir / "checkpoint").string(), fs::path(path).filename().string() + "\n",
                        "the pointer to the newest checkpoint");
  guard_->set_newest_checkpoint(path);
  // <save_ckpt>.pt: a link to the newest checkpoint (replaced atomically).
  const fs::path link = dir / (config_.save_ckpt + ".pt");
  const fs::path tmp_link = dir / (config_.save_ckpt + ".pt.tmp-" + std::to_string(::getpid()));
  check_output_target(link.string(), SpecialTarget::kRefuse, link.string(), "the link to the newest checkpoint");
  std::error_code ec;
  fs::remove(tmp_link, ec);
  fs::create_symlink(fs::path(path).filename(), tmp_link, ec);
  if (!ec) fs::rename(tmp_link, link, ec);
  if (ec) {
    fs::remove(tmp_link, ec);
    throw Error(link.string() + ": cannot write the link to the newest checkpoint (" + ec.message() + ")");
  }
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

namespace {

/// A checkpoint's weights belong to its types in its order: they go to an input's model only when
/// its type map is the same list (docs/training.md "Restarting").
void check_same_types(const std::string& path, const std::vector<std::string>& saved,
                      const std::vector<std::string>& input, const std::string& option) {
  if (saved == input) return;
  auto listed = [](const std::vector<std::string>& names) {
    std::string out = "[";
    for (size_t k = 0; k < names.size(); ++k) out += (k ? ", " : "") + names[k];
    return out + "]";
  };
  std::string message = option + " " + path + ": the checkpoint was trained with type_map " + listed(saved) +
                        ", the input's model has " + listed(input);
  auto saved_sorted = saved, input_sorted = input;
  std::sort(saved_sorted.begin(), saved_sorted.end());
  std::sort(input_sorted.begin(), input_sorted.end());
  if (saved_sorted == input_sorted)
    message += ": the weights of each type id would serve another element; write model.type_map: " + listed(saved) +
               " in the input (the data's types are matched by name, so only the model's order changes)";
  else
    message += "; the types of a trained model cannot change: train a new model for " + listed(input);
  throw Error(message);
}

}  // namespace

void Trainer::restore(const std::string& given, bool full) {
  const std::string path = archive::resolve_checkpoint(given);
  ExtraFiles extra;
  torch::jit::Module loaded = load_model(path, extra);
  if (extra["model_type"] != config_.model->type)
    throw Error(path + ": a " + extra["model_type"] + " model, the input asks for " + config_.model->type);
  check_same_types(path, stored_type_names(extra), config_.model->type_map, full ? "--restart" : "--init-model");
  torch::jit::Module& model = model_->module();
  // Copy weights and statistics into the freshly built model (same architecture required).
  auto mine = model.named_attributes(false);
  for (const auto& item : loaded.named_attributes(false)) {
    if (item.value.isDouble()) {  // e.g. the equivariant model's avg_num_neighbors
      model.setattr(item.name, item.value);
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
    for (const auto& p : model.named_parameters(false)) mine.push_back(p.name);
    if (saved != mine) throw Error(path + ": its parameters are not those of the input's model, in the same order");
    std::vector<torch::Tensor> raw;
    std::istringstream in(extra["weights"]);
    torch::load(raw, in, device_);
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
  load_adam_state(*optimizer_, extra["optimizer"], device_, path);  // onto this run's device, wherever it was written
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

void Trainer::broadcast_start_state() {
  // Identical start state on every rank: rank 0's weights and statistics, broadcast once.
  torch::jit::Module& model = model_->module();
  std::vector<torch::Tensor> state;
  std::vector<std::string> scalars;
  for (const auto& a : model.named_attributes(false)) {
    if (a.value.isTensor()) state.push_back(a.value.toTensor());
    if (a.value.isDouble()) scalars.push_back(a.name);
  }
  auto values = torch::empty({int64_t(scalars.size())}, torch::kFloat64);
  for (size_t k = 0; k < scalars.size(); ++k) values[int64_t(k)] = model.attr(scalars[k]).toDouble();
  if (!scalars.empty()) state.push_back(values);
  dist::broadcast_tensors(*comm_, state);
  for (size_t k = 0; k < scalars.size(); ++k) model.setattr(scalars[k], values[int64_t(k)].item<double>());
}

void Trainer::set_up_threads_and_ranks() {
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
    if (cpus_allowed() > 0) at::set_num_threads(cpus_allowed());
  }
  if (options_.comm) {
    comm_ = options_.comm;
  } else {
    own_comm_ = dist::make_communicator(dist::LaunchEnv{}, {});
    comm_ = own_comm_.get();
  }
  // The command line's --device wins over training.device.
  const int local_rank = options_.launch ? options_.launch->local_rank : 0;
  device_ = options_.device.empty() ? resolve_device(config_.device, "training.device", local_rank)
                                    : resolve_device(options_.device, "--device", local_rank);
}

void Trainer::make_samplers() {
  const TrainConfig& c = config_;
  const int world = comm_->size();
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
}

void Trainer::set_up_optimisation() {
  const TrainConfig& c = config_;
  for (const auto& p : model_->module().parameters()) params_.push_back(p);
  optimizer_ = std::make_unique<torch::optim::Adam>(
      params_, torch::optim::AdamOptions(c.learning_rate.at(0)).betas({0.9, 0.999}).weight_decay(0.0));
  if (c.ema_decay > 0) ema_ = std::make_unique<Ema>(params_, c.ema_decay);
  if (!options_.restart.empty()) restore(options_.restart, true);
  else if (!options_.init_model.empty()) restore(options_.init_model, false);
  else if (root()) compute_statistics();
  if (comm_->size() > 1) broadcast_start_state();
  // The average starts from the start weights (a --restart brought its own).
  if (ema_ && options_.restart.empty()) ema_->reset(0);
  ddp_ = std::make_unique<dist::SimpleDDP>(params_, *comm_);
}

void Trainer::print_model_line() const {
  int64_t nparams = 0;
  for (auto& p : params_) nparams += p.numel();
  std::cout << "model: " << model_->summary() << ", " << nparams << " parameters";
  if (device_.is_cpu()) std::cout << "; " << at::get_num_threads() << " thread(s)";
  else std::cout << "; on " << device_.str();
  std::cout << "\n";
  if (ema_)
    std::cout << "weights: moving average with ema_decay " << config_.ema_decay
              << " for validation, checkpoints and frozen models (training.ema_decay: 0 uses the raw weights)\n";
}

std::string Trainer::lcurve_header() const {
  const bool has_val = !valid_.empty();
  std::string header = "# step";
  header += has_val ? " rmse_val rmse_trn rmse_e_val rmse_e_trn rmse_f_val rmse_f_trn" : " rmse_trn rmse_e_trn rmse_f_trn";
  if (has_virial_) header += has_val ? " rmse_v_val rmse_v_trn" : " rmse_v_trn";
  return header + " lr\n";
}

/// The lines of an lcurve.out up to and including `step`: comment lines, and data lines whose
/// first column (the step) is at most `step`; a line cut by a crash is left out.
std::string lcurve_up_to(const std::string& text, int64_t step) {
  std::istringstream in(text);
  std::string kept, line;
  while (std::getline(in, line)) {
    if (in.eof()) break;  // no newline: the last line was cut
    if (!line.empty() && line[0] == '#') {
      kept += line + "\n";
      continue;
    }
    std::istringstream fields(line);
    int64_t line_step = 0;
    if (fields >> line_step && line_step <= step) kept += line + "\n";
  }
  return kept;
}

void Trainer::open_lcurve() {
  // lcurve.out: a new file with its header, or, on --restart, the old file cut back to the
  // checkpoint's step (the lines logged after it come again) and appended to (docs/training.md).
  if (!root()) return;
  const std::string path = (fs::path(options_.output_dir) / config_.disp_file).string();
  std::error_code ec;
  if (options_.restart.empty() || !fs::exists(path, ec)) {
    write_file_atomically(path, lcurve_header(), "the learning curve");
  } else {
    std::ifstream old(path, std::ios::binary);
    std::ostringstream text;
    text << old.rdbuf();
    if (!old) throw Error(path + ": cannot read the learning curve to continue it (" + system_reason(errno) + ")");
    write_file_atomically(path, lcurve_up_to(text.str(), start_step_), "the learning curve");
  }
  lcurve_ = std::make_unique<OutputFile>(path, OutputFile::Mode::kAppend, "the learning curve");
}

void Trainer::write_step_times(const std::vector<std::array<double, 2>>& step_ms) const {
  std::string text =
      "# step ms (forward, backward and update of each step) making_ms (of which making frames: reading them and "
      "the model's per-frame input, docs/data.md)\n";
  for (size_t k = 0; k < step_ms.size(); ++k)
    text += std::to_string(start_step_ + int64_t(k) + 1) + " " + std::to_string(step_ms[k][0]) + " " +
            std::to_string(step_ms[k][1]) + "\n";
  write_file_atomically(options_.step_times, text, "the step times", SpecialTarget::kStream);  // a FIFO: streamed
}

/// Batches asked for ahead of the current one (docs/data.md "Prefetch").
constexpr int64_t kPrefetchBatches = 2;

void Trainer::prefetch_training_batches() {
  while (batches_ahead_ < kPrefetchBatches + 1) {  // the current batch and kPrefetchBatches more
    const auto b = ahead_->next();
    store_->prefetch(train_set_, b.system, ahead_->shard(b, comm_->rank()));
    ++batches_ahead_;
  }
}

int Trainer::train_loop() {
  const TrainConfig& c = config_;
  const int world = comm_->size();
  const bool has_val = !valid_.empty();
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
  std::vector<std::array<double, 2>> step_ms;  // the step, and the frames made during it, ms
  reduces_before_ = comm_->all_reduces();
  double last_loss = 0;
  int64_t waited_steps = 0;
  ahead_ = std::make_unique<SystemSampler>(*sampler_);
  batches_ahead_ = 0;
  if (has_val) val_ahead_ = std::make_unique<SystemSampler>(*val_sampler_);
  guard_ = std::make_unique<NonFiniteGuard>(device_.is_cpu());
  while (step < c.numb_steps) {
    const double lr = c.learning_rate.at(step);
    for (auto& group : optimizer_->param_groups()) static_cast<torch::optim::AdamOptions&>(group.options()).lr(lr);
    const Prefactors pref = prefactors(step);
    prefetch_training_batches();
    // The validation after this step: its frames are made while the step runs.
    const int64_t next = step + 1;
    if (has_val && (next == 1 || next % c.disp_freq == 0 || next == c.numb_steps)) prefetch_validation();
    const auto batch = sampler_->next();
    --batches_ahead_;
    ErrorSums trn;
    const auto step_start = std::chrono::steady_clock::now();
    const double making_before = store_->make_time().seconds;
    // Zeroed in place (the gradients may be views of SimpleDDP's flat buffer, which LibTorch's
    // zero_grad cannot detach).
    for (auto& p : params_)
      if (p.grad().defined()) p.mutable_grad().zero_();
    const int64_t waits_before = store_->waits();
    evaluate(train_set_, batch.system, sampler_->shard(batch, comm_->rank()), pref, true, trn);
    if (store_->waits() > waits_before) ++waited_steps;
    bool stop = g_interrupted;
    if (world > 1) {
      // One all-reduce: the gradients, the error sums of the displayed metrics, and the stop
      // flag (so that every rank stops after the same step when any of them got SIGINT or
      // SIGTERM). The counts need no communication: every rank has a shard of the same size of
      // the same system, so the global counts are the local ones times the ranks.
      auto extras = torch::cat({trn.sums, torch::full({1}, stop ? 1.0 : 0.0, torch::kFloat64).to(device_)});
      const auto sync_start = std::chrono::steady_clock::now();
      const double wait_before = comm_->all_reduce_arrival_wait_seconds();
      ddp_->sync(extras);
      sync_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - sync_start).count();
      if (wait_before >= 0) sync_wait_seconds_ += comm_->all_reduce_arrival_wait_seconds() - wait_before;
      trn.sums = extras.narrow(0, 0, 4);
      trn.frames *= world, trn.force_components *= world, trn.virial_frames *= world;
      stop = extras[4].item<double>() > 0;  // a device-to-host read every step: the ranks must agree on stopping
    }
    guard_->after_loss(trn.sums.narrow(0, 0, 1), step + 1, [&] {
      std::ostringstream b;
      b << "the batch of system " << train_raw_[batch.system].name << ", frames";
      for (int64_t f : batch.frames) b << " " << f;
      return b.str();
    });
    adam_step(*optimizer_, ema_.get());
    step_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count();
    if (!options_.step_times.empty()) {
      if (!device_.is_cpu()) trn.host();  // the step's time includes the device's work
      step_ms.push_back({std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - step_start).count(),
                         1e3 * (store_->make_time().seconds - making_before)});
    }
    ++step;
    if (step == start_step_ + 1 && root() && !tty)
      std::printf("first step done %.2f s after the start (reading the data's headers, statistics, model)\n",
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count());
    const bool display = step == 1 || step % c.disp_freq == 0 || step == c.numb_steps;
    if (display || (tty && (step % 10 == 0 || step == c.numb_steps))) last_loss = Rmse(trn).loss;
    if (display) {
      const std::string warning = model_->preparation_warning();
      if (root() && !warning.empty() && printed_warning_.empty()) std::cout << (tty ? "\n" : "") << "warning: " << warning << "\n";
      if (!warning.empty()) printed_warning_ = warning;
      const Rmse trn_rmse(trn);
      Rmse val_rmse;
      if (has_val) {
        AveragedWeights averaged(ema_.get());
        val_rmse = Rmse(validate(pref));
        guard_->after_validation(val_rmse.loss, step);
      }
      guard_->check_pending();
      write_lcurve_line(step, lr, trn_rmse, has_val ? &val_rmse : nullptr);
      if (!tty && root()) {
        const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const double rate = double(step - start_step_) / std::max(elapsed, 1e-9);
        std::printf("step %ld/%ld  lr %.3e  loss %.4e  rmse_e %.4e  rmse_f %.4e  %.1f steps/s  ETA %s\n", long(step),
                    long(c.numb_steps), lr, last_loss, trn_rmse.e, trn_rmse.f, rate,
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
  if (root() && !options_.step_times.empty()) write_step_times(step_ms);
  if (lcurve_) lcurve_->commit();
  if (tty) std::printf("\n");
  if (root()) {
    const FrameStore::MakeTime made = store_->make_time();
    std::printf("waited for data in %ld of %ld steps (frames made by the training thread or not yet ready); "
                "%ld frames made, %.2f ms each\n",
                long(waited_steps), long(step - start_step_), long(made.frames),
                made.frames > 0 ? 1e3 * made.seconds / double(made.frames) : 0.0);
  }
  if (exit_code == 0 && root()) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("finished %ld steps in %.1f s; checkpoint %s\n", long(step - start_step_), elapsed,
                ckpt_path(step).c_str());
  }
  return exit_code;
}

void Trainer::print_communication() const {
  const int world = comm_->size();
  if (world <= 1 || !root()) return;
  const int64_t reduces = comm_->all_reduces() - reduces_before_;
  // Through shared memory the all-reduce's time splits into the wait for the last rank to
  // arrive (imbalance between the ranks' steps) and the rest (the transfer and the averaging).
  char wait[96] = "";
  if (comm_->all_reduce_arrival_wait_seconds() >= 0)
    std::snprintf(wait, sizeof wait, "; %.3f s of it waiting for the last rank to arrive", sync_wait_seconds_);
  std::printf("communication (%s, %d ranks): %ld all-reduces = %ld gradient (one per step, %ld values) + %ld "
              "validation; %.1f%% of the step time in the gradient all-reduce (%.3f of %.3f s%s)\n",
              comm_->backend().c_str(), world, long(reduces), long(reduces - validation_reduces_),
              long(ddp_->numel() + 5), long(validation_reduces_), 100.0 * sync_seconds_ / std::max(step_seconds_, 1e-12),
              sync_seconds_, step_seconds_, wait);
}

int Trainer::run() {
  const TrainConfig& c = config_;
  if (c.numb_steps <= 0) throw Error(c.input_path + ": training.numb_steps: expected a positive integer");
  if (!c.model) throw Error(c.input_path + ": no model section was read");
  set_up_threads_and_ranks();
  print_summary();
  if (root()) {
    prepare_output_folder(options_.output_dir, "-o " + (options_.output_dir.empty() ? "." : options_.output_dir));
    // Temporary files of a run that was killed while writing (docs/robustness.md).
    const int removed = remove_stale_temporaries(options_.output_dir);
    if (removed > 0) std::cout << "removed " << removed << " temporary file(s) left by a killed run\n";
  }
  const int world = comm_->size();
  config_.learning_rate.scale = scale_by_worker(c.scale_by_worker, world);
  if (world > 1 && root())
    std::cout << "learning rate: start_lr x " << config_.learning_rate.scale << " (scale_by_worker: "
              << c.scale_by_worker << ", " << world << " ranks); batch_size is per rank\n";
  load_data();
  // Before anything whose shape depends on the input (docs/distributed.md "Ranks that disagree").
  check_ranks_agree(*comm_, agreement_items(config_, train_raw_, valid_raw_), device_);
  build_model();
  prepare_sets();
  make_samplers();
  set_up_optimisation();
  print_model_line();
  open_lcurve();
  const int exit_code = train_loop();
  print_communication();
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
