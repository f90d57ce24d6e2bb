#include "train/trainer.h"

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/optim/adam.h>
#include <ATen/Parallel.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>

#include "archive/output_file.h"
#include "compat/blas_kernels.h"
#include "data/load.h"
#include "data/neighbor_stat.h"
#include "dist/host_ranks.h"
#include "dist/simple_ddp.h"
#include "byte_size.h"
#include "error.h"
#include "models/host_to_device.h"
#include "models/registry.h"
#include "train/adam_step.h"
#include "train/batch_loss.h"
#include "train/checkpoint_store.h"
#include "train/device.h"
#include "train/ema.h"
#include "train/finetune.h"
#include "train/frame_store.h"
#include "train/lagged_flag.h"
#include "train/learning_curve.h"
#include "train/non_finite_guard.h"
#include "train/operation_counter.h"
#include "train/rank_agreement.h"
#include "train/sampler.h"
#include "train/static_step.h"
#include "version.h"

namespace fs = std::filesystem;

namespace mlip::train {

using archive::ExtraFiles;
using archive::prepare_output_folder;
using archive::remove_stale_temporaries;

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
  /// Charge labels that the loss uses (the system has them and loss.start_pref_q or
  /// limit_pref_q is positive).
  bool has_charge = false;
  std::string config_type = "Default";
  double weight = 1.0;  ///< training.config_type_weights of its config_type
};

/// Sums of squared errors of a set of frames, for exact RMSEs over several batches. The sums
/// stay on the model's device (reading them back every step would make the host wait for the
/// device); the counts are known on the host.
struct ErrorSums {
  /// [kErrorSums] float64: the loss terms summed over frames (weighted by the prefactors), the
  /// sum of dE^2 / N^2, the sum of dF^2 over components, the sum of mean_9(dW^2) / N^2, the sum
  /// of dq^2 over atoms. Undefined until something is added.
  torch::Tensor sums;
  int64_t frames = 0, force_components = 0, virial_frames = 0, charge_atoms = 0;

  void add(const torch::Tensor& values) { sums = sums.defined() ? sums + values : values; }
  /// The sums as host numbers (one device-to-host copy).
  std::vector<double> host() const {
    if (!sums.defined()) return std::vector<double>(kErrorSums, 0.0);
    const auto h = sums.to(torch::kCPU).contiguous();
    return std::vector<double>(h.data_ptr<double>(), h.data_ptr<double>() + kErrorSums);
  }
};

/// The RMSEs of lcurve.out from host sums and counts (one device-to-host copy).
CurveErrors rmse(const ErrorSums& s) {
  const auto h = s.host();
  CurveErrors r;
  r.loss = std::sqrt(h[0] / double(std::max<int64_t>(s.frames, 1)));
  r.energy = std::sqrt(h[1] / double(std::max<int64_t>(s.frames, 1)));
  r.force = std::sqrt(h[2] / double(std::max<int64_t>(s.force_components, 1)));
  r.virial = std::sqrt(h[3] / double(std::max<int64_t>(s.virial_frames, 1)));
  r.charge = std::sqrt(h[4] / double(std::max<int64_t>(s.charge_atoms, 1)));
  return r;
}

struct Prefactors {
  double e, f, v, q;
};

/// While alive, SIGINT (Ctrl-C) and SIGTERM (torchrun's agent stopping its workers, Slurm at the
/// time limit or on scancel) set g_interrupted and g_signal (cleared on construction): the loop
/// then saves a checkpoint and stops after the current step. The previous handlers come back
/// when it is destroyed, however the loop ends.
class InterruptHandlers {
 public:
  InterruptHandlers() {
    g_interrupted = false;
    g_signal = 0;
    previous_int_ = std::signal(SIGINT, on_sigint);
    previous_term_ = std::signal(SIGTERM, on_sigint);
  }
  ~InterruptHandlers() {
    std::signal(SIGINT, previous_int_);
    std::signal(SIGTERM, previous_term_);
  }
  InterruptHandlers(const InterruptHandlers&) = delete;
  InterruptHandlers& operator=(const InterruptHandlers&) = delete;

 private:
  void (*previous_int_)(int) = nullptr;
  void (*previous_term_)(int) = nullptr;
};

/// What the training loop keeps from step to step for its progress lines and the step times.
struct LoopProgress {
  std::chrono::steady_clock::time_point start;  ///< when the loop began (for steps/s and the ETA)
  bool tty = false;            ///< rank 0 draws a progress bar on a terminal (else a line per displayed step)
  double last_loss = 0;        ///< the training loss last shown (square root of the mean per frame)
  int64_t waited_steps = 0;    ///< steps that waited for frames (made by the training thread or not ready)
  std::vector<StepTime> step_times;  ///< each step's wall time (only with --step-times)
  std::unique_ptr<OperationCounter> operations;  ///< counts each step's operator calls (only with --count-ops)
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

/// A number as the input would write it: "1024", "0.5".
std::string number_text(double value) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", value);
  return buf;
}

class Trainer {
 public:
  Trainer(const TrainConfig& config, const TrainOptions& options)
      : config_(config),
        options_(options),
        checkpoints_(options.output_dir, config.save_ckpt, config.max_ckpt_keep),
        repulsion_(models::repulsion_labels(config.model->pair_repulsion, config.model->type_map)),
        started_(std::chrono::steady_clock::now()) {}
  int run();

 private:
  // Stages of run(), in order.
  void set_up_threads_and_ranks();
  /// Refuses settings whose training would need more memory than the device has, before the
  /// model is built (models::check_memory).
  void check_memory() const;
  /// training.data_workers resolved (auto: 1, or 0 on a CPU whose cores the training threads use).
  int data_workers() const;
  /// training.cache_mb in bytes; -1: no limit.
  int64_t cache_budget_bytes() const;
  /// Adds the frame cache's share to a memory estimate of `batch` (by the model's frame_bytes).
  void add_cache_part(models::MemoryEstimate& estimate, const models::BatchSizes& batch) const;
  void load_data();
  /// training.cuda_graphs against the device and the ranks (docs/device.md "Static shapes").
  void choose_step();
  void build_model();
  void prepare_sets();
  void make_samplers();
  void set_up_optimisation();
  void print_model_line() const;
  void open_lcurve();
  /// Without worker threads: the frames this rank's steps will use, made in the order of their
  /// first use while they fit in the cache (docs/data.md "Frames made before the first step").
  void make_frames_first();
  int train_loop();
  void print_communication() const;

  // Parts of load_data().
  /// Takes the isolated atoms (config_type=IsolatedAtom, and model.e0s.isolated's file) out of
  /// the training and validation data into isolated_. `type_map`: the names the data may extend
  /// (an error when it does).
  void set_aside_isolated_atoms(std::vector<std::string>& type_map);
  /// Prints the systems and frames of the data and the loss weight of each config type.
  void print_data_summary() const;

  // Parts of train_loop(), in order.
  /// Resets the loop's state (samplers running ahead, the non-finite guard, the all-reduce
  /// count) and starts its clock.
  LoopProgress start_loop();
  /// One training step from `step` (the steps done so far) at learning rate `lr`: the batch's
  /// forward and backward, the all-reduce across ranks, the optimiser's update. `trn` receives
  /// the batch's error sums (over every rank). Returns true when the run must stop after it
  /// (SIGINT or SIGTERM on any rank).
  bool train_step(int64_t step, double lr, const Prefactors& pref, ErrorSums& trn, LoopProgress& progress);
  /// Several ranks: one all-reduce of the gradients, the step's error sums [4] float64 (summed
  /// in place) and this rank's stop flag `stop`. Returns whether any rank asked to stop by the
  /// step before (the flag is read a step late, so that the host does not wait for this
  /// step's all-reduce; every rank reads the same step's flag, so all stop after the same step).
  bool all_reduce_step(torch::Tensor& sums, bool stop);
  /// The global counts of `trn` after the all-reduce: every rank has a shard of the same size
  /// of the same system, so they are the local ones times the ranks.
  void count_all_ranks(ErrorSums& trn) const;
  /// train_step's two ways (docs/device.md "Static shapes"): the usual step (forward, backward,
  /// the all-reduce, Adam) or the step from static buffers, captured as CUDA graphs where it can
  /// be. Both return the stop flag agreed by the ranks, `stop` being this rank's.
  bool run_eager_step(int64_t step, const Prefactors& pref, const SystemSampler::Batch& batch, ErrorSums& trn,
                      LoopProgress& progress, bool stop);
  bool run_static_step(int64_t step, const Prefactors& pref, const SystemSampler::Batch& batch, ErrorSums& trn,
                       LoopProgress& progress, bool stop);
  /// After `step` steps: the first-step line, and on displayed steps the validation, the
  /// lcurve line and the progress line or bar.
  void report_step(int64_t step, double lr, const Prefactors& pref, const ErrorSums& trn, LoopProgress& progress);
  /// A displayed step: the model's warning (once), the validation, the lcurve line and, off a
  /// terminal, the progress line.
  void display_step(int64_t step, double lr, const Prefactors& pref, const ErrorSums& trn,
                    const LoopProgress& progress);
  /// The progress bar on a terminal, redrawn in place.
  void print_progress_bar(int64_t step, double lr, const LoopProgress& progress) const;
  /// Steps per second of this run after `step` steps.
  double steps_per_second(int64_t step, const LoopProgress& progress) const;
  /// Interrupted after `step`: saves a checkpoint (unless one was just saved) and returns the
  /// exit code (130 for SIGINT, 143 for SIGTERM).
  int stop_after(int64_t step, bool tty);
  /// The end of the loop after `step` steps: the step times, the learning curve closed, and the
  /// closing lines.
  void finish_loop(int64_t step, int exit_code, const LoopProgress& progress);

  std::vector<SystemData> prepare(const std::vector<data::System>& systems, const DataConfig& data,
                                  const std::string& key);
  /// The frames the statistics are computed from (rank 0's view of the first batches).
  std::vector<models::StatisticsFrames> statistics_frames() const;
  void compute_statistics();
  /// --finetune on rank 0: the fresh statistics, then the pretrained model's shared weights and
  /// the energy shifts (train/finetune.h); its record goes into the metadata.
  void start_from_pretrained();
  /// The labels and weights of `frames` of system `system` of set `set`.
  BatchLabels labels_of(int set, size_t system, const std::vector<std::shared_ptr<const PreparedFrame>>& frames) const;
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
  /// Writes the checkpoint of `step` (rank 0), after checking that the weights are finite and
  /// flushing the learning curve.
  void save_checkpoint(int64_t step);
  /// The trainer's objects that checkpoints save and restore.
  TrainingState training_state();
  void print_summary() const;
  bool root() const { return comm_->rank() == 0; }

  TrainConfig config_;
  /// lcurve.out (rank 0 only; null on the other ranks).
  std::unique_ptr<LearningCurve> lcurve_;
  TrainOptions options_;
  /// The checkpoint files in options_.output_dir (written by rank 0).
  CheckpointStore checkpoints_;
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
  /// model.pair_repulsion's part of the labels (docs/repulsion.md "In training"); nullptr: none.
  std::shared_ptr<const models::RepulsionLabels> repulsion_;
  int train_set_ = 0, valid_set_ = 0;
  // A copy of the training sampler that runs ahead of it: its draws are the batches to prefetch.
  std::unique_ptr<SystemSampler> ahead_, val_ahead_;
  int64_t batches_ahead_ = 0;
  std::string printed_warning_;
  std::vector<torch::Tensor> params_;
  std::unique_ptr<torch::optim::Adam> optimizer_;
  std::unique_ptr<NonFiniteGuard> guard_;  // stops at a non-finite loss (made by train_loop)
  std::unique_ptr<Ema> ema_;  // the moving average of the weights (null when ema_decay is 0)
  std::unique_ptr<Pretrained> pretrained_;  // --finetune's model (null without)
  std::unique_ptr<SystemSampler> sampler_, val_sampler_;
  int64_t start_step_ = 0;
  ExtraFiles metadata_;
  std::unique_ptr<dist::Communicator> own_comm_;  // one rank, when no communicator was given
  dist::Communicator* comm_ = nullptr;
  std::unique_ptr<dist::SimpleDDP> ddp_;
  /// training.cuda_graphs resolved (choose_step): steps from static buffers (train/static_step.h).
  bool static_step_on_ = false;
  std::unique_ptr<StaticStep> static_step_;
  /// Several ranks with the static step: this rank's stop flag for the all-reduce inside the
  /// step, and the flag the ranks agreed on there.
  bool stop_asked_ = false, stop_agreed_ = false;
  /// The ranks' summed stop flag, read a step late (all_reduce_step).
  LaggedFlag stop_flag_;
  int64_t validation_reduces_ = 0;
  bool has_virial_ = false;
  bool has_charge_ = false;  // some training system has charge labels the loss uses
  /// Whether the loss has a charge term (loss.start_pref_q or limit_pref_q positive).
  bool charge_loss() const { return config_.start_pref_q > 0 || config_.limit_pref_q > 0; }
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
  if (device_.is_cpu())
    std::cout << "  threads:      " << at::get_num_threads() << " per rank\n"
              << "  BLAS:         " << compat::blas_kernels_note() << "\n";
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
    auto t = torch::cat(
        {val.sums.defined() ? val.sums : torch::zeros({kErrorSums}, torch::dtype(torch::kFloat64).device(device_)),
         torch::tensor({double(val.frames), double(val.force_components), double(val.virial_frames),
                        double(val.charge_atoms)},
                       torch::kFloat64)
             .to(device_)});
    comm_->all_reduce_sum(t);
    ++validation_reduces_;
    val.sums = t.narrow(0, 0, kErrorSums);
    const auto counts = t.narrow(0, kErrorSums, 4).to(torch::kCPU).contiguous();
    const double* a = counts.data_ptr<double>();
    val.frames = int64_t(a[0]), val.force_components = int64_t(a[1]), val.virial_frames = int64_t(a[2]);
    val.charge_atoms = int64_t(a[3]);
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
  set_aside_isolated_atoms(type_map);
  print_data_summary();
}

void Trainer::set_aside_isolated_atoms(std::vector<std::string>& type_map) {
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
}

void Trainer::print_data_summary() const {
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
  // Every frame weighed 0: the loss is 0 at every step and nothing is learned (docs/training.md
  // "Weights").
  bool any_weight = per_type.empty();
  std::string zero_list;
  for (const auto& [name, n] : per_type) {
    const auto w = config_.config_type_weights.find(name);
    if (w == config_.config_type_weights.end() || w->second > 0) any_weight = true;
    else zero_list += (zero_list.empty() ? "" : ", ") + name + ": 0";
  }
  if (!any_weight)
    throw Error("training.config_type_weights: every config type of the training frames weighs 0 (" + zero_list +
                "): the loss would be 0 at every step and the model would learn nothing; give at least one a "
                "positive weight");
  for (const auto& [name, weight] : config_.config_type_weights)
    if (per_type.count(name) == 0)
      std::cout << "warning: training.config_type_weights names '" << name
                << "', which no training frame has (config types: " << [&] {
                     std::string list;
                     for (const auto& [n, count] : per_type) list += (list.empty() ? "" : ", ") + n;
                     return list;
                   }() << ")\n";
}

void Trainer::choose_step() {
  const std::optional<bool>& asked = config_.cuda_graphs;  // unset: auto
  if (asked.has_value() && !*asked) return;
  // auto: off for a model with the long-range term, whose batches have shapes of their own
  // (docs/long_range.md "Training"); asked for, the model refuses it by name.
  static_step_on_ = asked.has_value() || (device_.is_cuda() && !config_.model->long_range.enabled);
}

/// Batches asked for ahead of the current one (docs/data.md "Prefetch").
constexpr int64_t kPrefetchBatches = 2;

int Trainer::data_workers() const {
  if (config_.data_workers >= 0) return int(config_.data_workers);
  // auto: on the CPU with a training thread on every CPU a worker has no core of its own and
  // slows the steps more than making the frames in them costs (bench/README.md "Data at scale").
  // The threads of every rank on this host count (mpirun -np 2 with one thread each on 2 CPUs).
  const int host_ranks = device_.is_cpu() ? dist::ranks_on_this_host(*comm_) : 1;
  const bool all_cores = device_.is_cpu() && int64_t(at::get_num_threads()) * host_ranks >= std::max(cpus_allowed(), 1);
  return all_cores ? 0 : 1;
}

int64_t Trainer::cache_budget_bytes() const {
  return config_.cache_mb < 0 ? -1 : int64_t(config_.cache_mb * double(1 << 20));
}

void Trainer::add_cache_part(models::MemoryEstimate& estimate, const models::BatchSizes& batch) const {
  // The frame cache keeps made frames up to its budget (training.cache_mb); a frame larger than
  // the budget is never kept. Estimated with every training frame the size of this system's.
  if (!(estimate.frame_bytes > 0.0)) return;
  double frames = 0.0;
  for (const data::System& sys : train_raw_) frames += double(sys.nframes);
  const double all = frames * estimate.frame_bytes;
  const int64_t budget = cache_budget_bytes();
  const double cached = budget < 0 ? all : (estimate.frame_bytes > double(budget) ? 0.0 : std::min(all, double(budget)));
  if (cached > 0.0)
    estimate.parts.push_back({"the frame cache (made frames kept for later steps)",
                              "training.cache_mb " + (budget < 0 ? std::string("all") : number_text(config_.cache_mb)) +
                                  " (" + batch.system + ": about " + bytes_in_words(estimate.frame_bytes) + " a frame)",
                              cached});
}

void Trainer::check_memory() const {
  // Before the model exists: its weights and one batch of each training system, estimated from
  // the settings and the first frame of each system (docs/training.md "Memory checked before the
  // first allocation"); the largest batch is checked.
  const models::ModelSettings& settings = *config_.model;
  models::MemoryEstimate worst;
  models::BatchSizes worst_batch;
  const int workers = data_workers();  // collective under several ranks: once, on every rank
  for (size_t s = 0; s < train_raw_.size(); ++s) {
    const data::System& sys = train_raw_[s];
    if (sys.nframes == 0) continue;
    models::BatchSizes batch;
    batch.system = sys.name;
    batch.atoms = sys.natoms();
    batch.frames = config_.training_data.batch_size.for_system(s, sys.natoms());
    const data::Frame frame = sys.frame(0);
    batch.pairs = data::estimate_neighbor_pairs(frame.coord.data(), sys.natoms(), frame.cell(), sys.pbc,
                                                settings.cutoff());
    // The data workers make kPrefetchBatches batches ahead, and each may be making one more.
    batch.frames_ahead = workers > 0 ? kPrefetchBatches * batch.frames + workers : 0;
    models::MemoryEstimate estimate = models::estimate_training_memory(settings, batch);
    add_cache_part(estimate, batch);
    if (worst.parts.empty() || estimate.total() > worst.total()) worst = std::move(estimate), worst_batch = batch;
  }
  if (root() && !worst.parts.empty())
    std::cout << "memory: about " << bytes_in_words(worst.total()) << " for the weights and a batch of "
              << worst_batch.frames << " x " << worst_batch.atoms << " atoms (docs/training.md \"Memory checked before "
              << "the first allocation\")\n";
  if (device_.is_cuda()) {
    models::check_memory(worst, device_memory_bytes(device_), worst_batch, "has " + device_.str());
  } else {
    const int host_ranks = comm_->size() > 1 ? dist::ranks_on_this_host(*comm_) : 1;
    models::check_memory(worst, data::available_memory_bytes() / double(host_ranks), worst_batch,
                         host_ranks > 1 ? "are available to each of the " + std::to_string(host_ranks) +
                                              " ranks on this machine"
                                        : "are available");
  }
}

void Trainer::build_model() {
  const TrainConfig& c = config_;
  models::ModelContext context;
  context.device = device_;
  context.training_seed = c.seed;
  context.seed_offset = options_.seed_offset;
  context.training_systems = &train_raw_;
  context.log = &std::cout;
  context.static_shapes = static_step_on_;
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
    d.has_charge = sys.has_charge && charge_loss();
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
  for (auto& d : train_) has_charge_ = has_charge_ || d.has_charge;
  if (charge_loss() && !has_charge_)
    throw Error(std::string("loss.") + (config_.start_pref_q > 0 ? "start_pref_q" : "limit_pref_q") +
                ": the charge loss needs charge labels, but no training system has them (expected charge.npy in "
                "each set of a DeePMD system, or a REF_charges or charges column in extended XYZ, or the name "
                "given by charges_key; docs/long_range.md \"Charge labels\")");
  FrameStoreOptions options;
  options.budget_bytes = cache_budget_bytes();
  options.workers = data_workers();
  options.repulsion = repulsion_;
  std::string why;
  if (config_.data_workers < 0)
    why = options.workers == 0 ? " (auto: the training threads use every CPU)" : " (auto)";
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

std::vector<models::StatisticsFrames> Trainer::statistics_frames() const {
  // The first data_stat_nbatch global batches (batch_size x ranks frames) of every training
  // system: the frames one rank with the global batch would use.
  // Only these frames are read before step 1 (docs/data.md "Statistics from a sample").
  const int64_t batches = config_.model->statistics_batches * comm_->size();
  std::vector<models::StatisticsFrames> frames;
  for (size_t s = 0; s < train_raw_.size(); ++s) {
    models::StatisticsFrames sample;
    sample.system = &train_raw_[s];
    const int64_t n = std::min<int64_t>(train_raw_[s].nframes, batches * train_[s].batch);
    for (int64_t f = 0; f < n; ++f) {
      sample.frames.push_back(train_raw_[s].frame(f));
      // The statistics are of what the network learns: the labels less the repulsion.
      if (repulsion_) repulsion_->subtract(train_raw_[s], sample.frames.back());
    }
    frames.push_back(std::move(sample));
  }
  return frames;
}

void Trainer::compute_statistics() { model_->compute_statistics(statistics_frames(), reference_energies(), std::cout); }

void Trainer::start_from_pretrained() {
  // The fresh model's statistics on the new data first (the added elements keep them), then
  // what the pretrained model shares with it (docs/training.md "Fine-tuning").
  const std::vector<models::StatisticsFrames> frames = statistics_frames();
  model_->compute_statistics(frames, reference_energies(), std::cout);
  const bool keep_pretrained_shifts = config_.model->e0s.kind == models::ReferenceEnergies::Kind::kFit;
  metadata_["finetune"] = train::start_from_pretrained(*pretrained_, *model_, frames, keep_pretrained_shifts, std::cout);
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
          p(config_.start_pref_v, config_.limit_pref_v), p(config_.start_pref_q, config_.limit_pref_q)};
}

BatchLabels Trainer::labels_of(int set, size_t system,
                               const std::vector<std::shared_ptr<const PreparedFrame>>& frames) const {
  const SystemData& d = (set == train_set_ ? train_ : valid_)[system];
  std::vector<torch::Tensor> energies, forces, virials, charges;
  std::vector<double> weights;  // each frame's: its config type's times its own (docs/training.md "Weights")
  for (const auto& f : frames) {
    weights.push_back(d.weight * f->weight);
    energies.push_back(f->energy);
    if (d.has_force) forces.push_back(f->force);
    if (d.has_virial) virials.push_back(f->virial);
    if (d.has_charge) charges.push_back(f->charge);
  }
  BatchLabels labels;
  labels.energy = torch::cat(energies);
  if (d.has_force) labels.forces = torch::stack(forces);
  if (d.has_virial) labels.virial = torch::stack(virials);
  if (d.has_charge) labels.charges = torch::stack(charges);
  labels.weights = models::to_device_without_waiting(torch::tensor(weights, torch::kFloat64), device_);
  return labels;
}

void Trainer::evaluate(int set, size_t system, const std::vector<int64_t>& frames, const Prefactors& pref,
                       bool training, ErrorSums& sums) {
  const SystemData& d = (set == train_set_ ? train_ : valid_)[system];
  // The batch's frames stay alive while in use, even if the cache lets them go.
  std::vector<std::shared_ptr<const PreparedFrame>> batch;
  std::vector<const models::FrameInput*> inputs;
  for (int64_t f : frames) {
    batch.push_back(store_->get(set, system, f));
    inputs.push_back(batch.back()->input.get());
  }
  const BatchLabels labels = labels_of(set, system, batch);
  const models::Prediction out = model_->predict(d.atoms, inputs, training);
  // The loss of docs/training.md "Loss" on leaf copies of the predictions: autograd gives
  // d loss / d prediction, and the model's backward carries it to the parameters.
  models::Prediction leaves;
  leaves.energy = out.energy.detach().requires_grad_(training);
  leaves.forces = out.forces.detach().requires_grad_(training);
  leaves.virial = out.virial.detach().requires_grad_(training);
  if (d.has_charge && out.charges.defined()) leaves.charges = out.charges.detach().requires_grad_(training);
  const BatchLoss loss = batch_loss(leaves, labels, pref.e, pref.f, pref.v, pref.q, d.atoms.natoms);
  sums.add(loss.sums);
  sums.frames += int64_t(frames.size());
  if (d.has_force) sums.force_components += labels.forces.numel();
  if (d.has_virial) sums.virial_frames += int64_t(frames.size());
  if (d.has_charge) sums.charge_atoms += labels.charges.numel();
  if (training) {
    std::vector<torch::Tensor> by = {leaves.energy, leaves.forces, leaves.virial};
    if (d.has_charge) by.push_back(leaves.charges);
    const auto g = torch::autograd::grad({loss.loss}, by, {}, false, false, true);
    model_->backward(g[0], g[1], g[2], d.has_charge ? g[3] : torch::Tensor());
  }
}

void Trainer::save_checkpoint(int64_t step) {
  // Never a checkpoint of non-finite weights (docs/training.md "Non-finite losses").
  guard_->check_pending();
  guard_->check_parameters(params_, step);
  // The learning curve up to this step is on disk before the checkpoint that a restart resumes from.
  if (lcurve_) lcurve_->sync();
  guard_->set_newest_checkpoint(checkpoints_.save(training_state(), metadata_, step));
}

TrainingState Trainer::training_state() {
  TrainingState state;
  state.model = model_.get();
  state.parameters = &params_;
  state.optimizer = optimizer_.get();
  state.ema = ema_.get();
  state.sampler = sampler_.get();
  state.validation_sampler = val_sampler_.get();
  state.device = device_;
  state.comm = comm_;
  state.metadata = &metadata_;
  return state;
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
  seed += options_.seed_offset;  // a committee member's (0 for a plain run)
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
  const bool restart = !options_.restart.empty();
  if (!options_.finetune.empty()) {
    // Every rank reads the pretrained model and checks the settings (the same error everywhere);
    // rank 0 starts from it, and the broadcast below gives the others its start.
    pretrained_ = std::make_unique<Pretrained>(read_pretrained(options_.finetune, c.model->type));
    check_finetune_settings(*pretrained_, models::inference_record(*c.model, model_->module()));
    if (root()) start_from_pretrained();
  } else if (restart || !options_.init_model.empty()) {
    TrainingState state = training_state();
    start_step_ = restore_training_state(restart ? options_.restart : options_.init_model,
                                         restart ? RestoreMode::kRestart : RestoreMode::kInitModel, c.model->type,
                                         c.model->type_map, state);
  } else if (root()) {
    compute_statistics();
  }
  // Identical start state on every rank: rank 0's weights and statistics, broadcast once.
  if (comm_->size() > 1) broadcast_start_state(*comm_, model_->module());
  // The average starts from the start weights (a --restart brought its own).
  if (ema_ && options_.restart.empty()) ema_->reset(0);
  ddp_ = std::make_unique<dist::SimpleDDP>(params_, *comm_);
  if (static_step_on_) {
    // Capture wherever it can be done; StaticStep says why not elsewhere (the model line).
    // Several ranks: the all-reduce between the step's gradients and its update.
    StaticStep::Synchronise synchronise;
    if (comm_->size() > 1)
      synchronise = [this](torch::Tensor& sums) { stop_agreed_ = all_reduce_step(sums, stop_asked_); };
    static_step_ = std::make_unique<StaticStep>(*model_, *optimizer_, ema_.get(), params_, device_, true,
                                                root() ? &std::cout : nullptr, 2, std::move(synchronise));
  }
}

void Trainer::print_model_line() const {
  int64_t nparams = 0;
  for (auto& p : params_) nparams += p.numel();
  std::cout << "model: " << model_->summary() << ", " << nparams << " parameters";
  if (device_.is_cpu()) std::cout << "; " << at::get_num_threads() << " thread(s)";
  else std::cout << "; on " << device_.str();
  std::cout << "\n";
  if (static_step_)
    std::cout << "step: from static buffers (training.cuda_graphs), " << static_step_->capture_status() << "\n";
  if (ema_)
    std::cout << "weights: moving average with ema_decay " << config_.ema_decay
              << " for validation, checkpoints and frozen models (training.ema_decay: 0 uses the raw weights)\n";
}

void Trainer::open_lcurve() {
  // lcurve.out: a new file with its header, or, on --restart, the old file cut back to the
  // checkpoint's step (the lines logged after it come again) and appended to (docs/training.md).
  if (!root()) return;
  const std::string path = (fs::path(options_.output_dir) / config_.disp_file).string();
  LearningCurve::Columns columns;
  columns.validation = !valid_.empty();
  columns.virial = has_virial_;
  columns.charge = has_charge_;
  std::optional<int64_t> continue_after_step;
  if (!options_.restart.empty()) continue_after_step = start_step_;
  lcurve_ = std::make_unique<LearningCurve>(path, columns, continue_after_step);
}

void Trainer::make_frames_first() {
  // With workers the frames are made beside the steps; without, the training thread would make
  // each one inside the first step that uses it, so here it makes the same frames, only earlier:
  // the steps then run at their steady speed from the first one, and no rank waits at the
  // all-reduce for another that is still making frames.
  if (store_->workers() > 0 || config_.cache_mb == 0) return;  // cache_mb 0: nothing would stay
  const auto start = std::chrono::steady_clock::now();
  SystemSampler draws(*sampler_);  // the sampler's state at the first step (a restart's too)
  std::vector<std::vector<bool>> seen;
  int64_t unseen = 0;
  for (const auto& d : train_) {
    seen.emplace_back(size_t(d.nframes), false);
    unseen += d.nframes;
  }
  int64_t made = 0;
  bool fits = true;
  for (int64_t step = start_step_; step < config_.numb_steps && unseen > 0 && fits; ++step) {
    const auto batch = draws.next();
    for (int64_t f : draws.shard(batch, comm_->rank())) {
      if (seen[batch.system][size_t(f)]) continue;
      seen[batch.system][size_t(f)] = true;
      --unseen;
      fits = store_->make_into_cache(train_set_, batch.system, f);
      if (!fits) break;
      ++made;
    }
  }
  if (root() && (made > 0 || !fits))
    std::printf("frames: %ld training frames made before the first step in %.2f s%s\n", long(made),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
                fits ? "" : " (the cache is full: the others are made when first used)");
}


void Trainer::prefetch_training_batches() {
  while (batches_ahead_ < kPrefetchBatches + 1) {  // the current batch and kPrefetchBatches more
    const auto b = ahead_->next();
    store_->prefetch(train_set_, b.system, ahead_->shard(b, comm_->rank()));
    ++batches_ahead_;
  }
}

int Trainer::train_loop() {
  const TrainConfig& c = config_;
  const InterruptHandlers interrupt_handlers;
  LoopProgress progress = start_loop();
  int64_t step = start_step_;
  int exit_code = 0;
  while (step < c.numb_steps) {
    const double lr = c.learning_rate.at(step);
    const Prefactors pref = prefactors(step);
    ErrorSums trn;
    const bool stop = train_step(step, lr, pref, trn, progress);
    ++step;
    report_step(step, lr, pref, trn, progress);
    if (root() && (step % c.save_freq == 0 || step == c.numb_steps)) save_checkpoint(step);
    if (stop) {
      exit_code = stop_after(step, progress.tty);
      break;
    }
  }
  finish_loop(step, exit_code, progress);
  return exit_code;
}

LoopProgress Trainer::start_loop() {
  LoopProgress progress;
  progress.tty = root() && ::isatty(STDOUT_FILENO);
  progress.start = std::chrono::steady_clock::now();
  if (options_.count_ops) progress.operations = std::make_unique<OperationCounter>();
  reduces_before_ = comm_->all_reduces();
  ahead_ = std::make_unique<SystemSampler>(*sampler_);
  batches_ahead_ = 0;
  if (!valid_.empty()) val_ahead_ = std::make_unique<SystemSampler>(*val_sampler_);
  guard_ = std::make_unique<NonFiniteGuard>(device_.is_cpu());
  if (static_step_) guard_->watch(static_step_->first_bad_step());
  return progress;
}

bool Trainer::train_step(int64_t step, double lr, const Prefactors& pref, ErrorSums& trn, LoopProgress& progress) {
  const TrainConfig& c = config_;
  for (auto& group : optimizer_->param_groups()) static_cast<torch::optim::AdamOptions&>(group.options()).lr(lr);
  prefetch_training_batches();
  // The validation after this step: its frames are made while the step runs.
  const int64_t next = step + 1;
  if (!valid_.empty() && (next == 1 || next % c.disp_freq == 0 || next == c.numb_steps)) prefetch_validation();
  const auto batch = sampler_->next();
  --batches_ahead_;
  bool stop = g_interrupted;
  const auto step_start = std::chrono::steady_clock::now();
  const double making_before = store_->make_time().seconds;
  const OperationCounter* ops = progress.operations.get();
  const OperationCounts counts_before = ops ? ops->counts() : OperationCounts{};
  if (static_step_) stop = run_static_step(step, pref, batch, trn, progress, stop);
  else stop = run_eager_step(step, pref, batch, trn, progress, stop);
  step_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count();
  if (!options_.step_times.empty()) {
    // Counted before trn.host(), whose copy to the host is the step time's, not the step's.
    std::optional<OperationCounts> counts;
    if (ops) counts = ops->counts() - counts_before;
    if (!device_.is_cpu()) trn.host();  // the step's time includes the device's work
    progress.step_times.push_back(
        {std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - step_start).count(),
         1e3 * (store_->make_time().seconds - making_before), counts});
  }
  return stop;
}

bool Trainer::run_eager_step(int64_t step, const Prefactors& pref, const SystemSampler::Batch& batch, ErrorSums& trn,
                             LoopProgress& progress, bool stop) {
  // Zeroed in place (the gradients may be views of SimpleDDP's flat buffer, which LibTorch's
  // zero_grad cannot detach), all in one multi-tensor operation (one launch on a GPU).
  std::vector<torch::Tensor> grads;
  for (auto& p : params_)
    if (p.grad().defined()) grads.push_back(p.grad());
  if (!grads.empty()) at::_foreach_zero_(grads);
  const int64_t waits_before = store_->waits();
  evaluate(train_set_, batch.system, sampler_->shard(batch, comm_->rank()), pref, true, trn);
  if (store_->waits() > waits_before) ++progress.waited_steps;
  if (comm_->size() > 1) {
    stop = all_reduce_step(trn.sums, stop);
    count_all_ranks(trn);
  }
  guard_->after_loss(trn.sums.narrow(0, 0, 1), step + 1, [&] {
    std::ostringstream b;
    b << "the batch of system " << train_raw_[batch.system].name << ", frames";
    for (int64_t f : batch.frames) b << " " << f;
    return b.str();
  });
  adam_step(*optimizer_, ema_.get());
  return stop;
}

bool Trainer::run_static_step(int64_t step, const Prefactors& pref, const SystemSampler::Batch& batch, ErrorSums& trn,
                              LoopProgress& progress, bool stop) {
  const SystemData& d = train_[batch.system];
  std::vector<std::shared_ptr<const PreparedFrame>> frames;
  std::vector<const models::FrameInput*> inputs;
  const int64_t waits_before = store_->waits();
  for (int64_t f : sampler_->shard(batch, comm_->rank())) {
    frames.push_back(store_->get(train_set_, batch.system, f));
    inputs.push_back(frames.back()->input.get());
  }
  if (store_->waits() > waits_before) ++progress.waited_steps;
  const BatchLabels labels = labels_of(train_set_, batch.system, frames);
  // Several ranks: the all-reduce runs inside the step, between its gradients and its update
  // (StaticStep's synchronise, made in set_up_optimisation), with this rank's stop flag.
  stop_asked_ = stop;
  trn.add(static_step_->run(d.atoms, inputs, labels, pref.e, pref.f, pref.v, step + 1));
  trn.frames += int64_t(inputs.size());
  if (d.has_force) trn.force_components += labels.forces.numel();
  if (d.has_virial) trn.virial_frames += int64_t(inputs.size());
  if (comm_->size() == 1) return stop;
  count_all_ranks(trn);
  return stop_agreed_;
}

bool Trainer::all_reduce_step(torch::Tensor& sums, bool stop) {
  // One all-reduce: the gradients, the error sums of the displayed metrics, and the stop
  // flag (so that every rank stops after the same step when any of them got SIGINT or
  // SIGTERM: the step after the all-reduce that carried it).
  auto extras = torch::cat({sums, torch::full({1}, stop ? 1.0 : 0.0, sums.options())});
  const auto sync_start = std::chrono::steady_clock::now();
  const double wait_before = comm_->all_reduce_arrival_wait_seconds();
  ddp_->sync(extras);
  sync_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - sync_start).count();
  if (wait_before >= 0) sync_wait_seconds_ += comm_->all_reduce_arrival_wait_seconds() - wait_before;
  sums.copy_(extras.narrow(0, 0, kErrorSums));
  return stop_flag_.exchange(extras.narrow(0, kErrorSums, 1));
}

void Trainer::count_all_ranks(ErrorSums& trn) const {
  const int world = comm_->size();
  trn.frames *= world, trn.force_components *= world, trn.virial_frames *= world, trn.charge_atoms *= world;
}

void Trainer::report_step(int64_t step, double lr, const Prefactors& pref, const ErrorSums& trn,
                          LoopProgress& progress) {
  const TrainConfig& c = config_;
  if (step == start_step_ + 1 && root() && !progress.tty)
    std::printf("first step done %.2f s after the start (reading the data's headers, statistics, model)\n",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count());
  const bool display = step == 1 || step % c.disp_freq == 0 || step == c.numb_steps;
  const bool bar = progress.tty && (step % 10 == 0 || step == c.numb_steps);
  if (display || bar) progress.last_loss = rmse(trn).loss;
  if (display) display_step(step, lr, pref, trn, progress);
  if (bar) print_progress_bar(step, lr, progress);
}

void Trainer::display_step(int64_t step, double lr, const Prefactors& pref, const ErrorSums& trn,
                           const LoopProgress& progress) {
  const TrainConfig& c = config_;
  const bool has_val = !valid_.empty();
  const std::string warning = model_->preparation_warning();
  if (root() && !warning.empty() && printed_warning_.empty())
    std::cout << (progress.tty ? "\n" : "") << "warning: " << warning << "\n";
  if (!warning.empty()) printed_warning_ = warning;
  const CurveErrors trn_rmse = rmse(trn);
  CurveErrors val_rmse;
  if (has_val) {
    AveragedWeights averaged(ema_.get());
    val_rmse = rmse(validate(pref));
    guard_->after_validation(val_rmse.loss, step);
  }
  guard_->check_pending();
  if (lcurve_) lcurve_->write_line(step, lr, trn_rmse, has_val ? &val_rmse : nullptr);
  if (!progress.tty && root()) {
    const double rate = steps_per_second(step, progress);
    std::printf("step %ld/%ld  lr %.3e  loss %.4e  rmse_e %.4e  rmse_f %.4e  %.1f steps/s  ETA %s\n", long(step),
                long(c.numb_steps), lr, progress.last_loss, trn_rmse.energy, trn_rmse.force, rate,
                format_duration(double(c.numb_steps - step) / rate).c_str());
    std::fflush(stdout);
  }
}

void Trainer::print_progress_bar(int64_t step, double lr, const LoopProgress& progress) const {
  const TrainConfig& c = config_;
  const double rate = steps_per_second(step, progress);
  const int width = 30, filled = int(width * double(step) / double(c.numb_steps));
  std::printf("\r[%s%s] %ld/%ld  lr %.2e  loss %.3e  %.1f steps/s  ETA %s   ", std::string(size_t(filled), '#').c_str(),
              std::string(size_t(width - filled), '.').c_str(), long(step), long(c.numb_steps), lr, progress.last_loss,
              rate, format_duration(double(c.numb_steps - step) / rate).c_str());
  std::fflush(stdout);
}

double Trainer::steps_per_second(int64_t step, const LoopProgress& progress) const {
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - progress.start).count();
  return double(step - start_step_) / std::max(elapsed, 1e-9);
}

int Trainer::stop_after(int64_t step, bool tty) {
  const TrainConfig& c = config_;
  if (root() && step % c.save_freq != 0 && step != c.numb_steps) save_checkpoint(step);
  if (root())
    std::printf("%sinterrupted at step %ld: saved %s\n", tty ? "\n" : "", long(step), checkpoints_.path(step).c_str());
  return g_signal == SIGTERM ? 143 : 130;
}

void Trainer::finish_loop(int64_t step, int exit_code, const LoopProgress& progress) {
  if (root() && !options_.step_times.empty()) write_step_times(options_.step_times, start_step_, progress.step_times);
  if (lcurve_) lcurve_->commit();
  if (progress.tty) std::printf("\n");
  if (root()) {
    const FrameStore::MakeTime made = store_->make_time();
    std::printf("waited for data in %ld of %ld steps (frames made by the training thread or not yet ready); "
                "%ld frames made, %.2f ms each\n",
                long(progress.waited_steps), long(step - start_step_), long(made.frames),
                made.frames > 0 ? 1e3 * made.seconds / double(made.frames) : 0.0);
  }
  if (exit_code == 0 && root()) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - progress.start).count();
    std::printf("finished %ld steps in %.1f s; checkpoint %s\n", long(step - start_step_), elapsed,
                checkpoints_.path(step).c_str());
  }
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
  choose_step();
  check_memory();
  build_model();
  prepare_sets();
  make_samplers();
  set_up_optimisation();
  print_model_line();
  open_lcurve();
  make_frames_first();
  const int exit_code = train_loop();
  print_communication();
  return exit_code;
}

}  // namespace

namespace {

/// The mlip::Error for LibTorch's text of a failed allocation ("[enforce fail at alloc_cpu.cpp:75]
/// ... DefaultCPUAllocator: can't allocate memory: you tried to allocate 25600000000 bytes", "CUDA
/// out of memory"), also inside a TorchScript interpreter's traceback; nullopt for other text.
std::optional<Error> out_of_memory_error(const std::string& what) {
  if (what.find("can't allocate memory") == std::string::npos && what.find("out of memory") == std::string::npos)
    return std::nullopt;
  std::string bytes;
  const std::string tried = "you tried to allocate ";
  const size_t at = what.find(tried);
  if (at != std::string::npos) {
    const size_t first = at + tried.size(), last = what.find_first_not_of("0123456789", first);
    const std::string digits = what.substr(first, last == std::string::npos ? std::string::npos : last - first);
    if (!digits.empty()) bytes = " (one allocation of " + bytes_in_words(std::stod(digits)) + ")";
  }
  return Error("training ran out of memory" + bytes +
               "; the \"memory:\" line above estimates what the weights and one batch take: smaller batches "
               "(training.training_data.batch_size) or model sizes need less");
}

}  // namespace

int train(const TrainConfig& config, const TrainOptions& options) {
  try {
    Trainer trainer(config, options);
    return trainer.run();
  } catch (const Error&) {
    throw;
  } catch (const c10::Error& e) {
    if (auto error = out_of_memory_error(e.what_without_backtrace())) throw *error;
    throw Error(std::string("training failed in LibTorch: ") + e.what_without_backtrace());
  } catch (const std::bad_alloc&) {
    throw *out_of_memory_error("out of memory");
  } catch (const std::exception& e) {  // the TorchScript interpreter's errors
    if (auto error = out_of_memory_error(e.what())) throw *error;
    throw;
  }
}

}  // namespace mlip::train
