#include "train/static_step.h"

#include <torch/csrc/autograd/autograd.h>

#include <limits>

#include "error.h"
#include "models/host_to_device.h"
#include "train/adam_step.h"

#ifdef MLIP_HAVE_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace mlip::train {

/// The buffers of one shape (and, once captured, its graph).
struct StaticStep::Slot {
  std::vector<torch::Tensor> inputs;  ///< Model::pack's tensors, owned
  BatchLabels labels;                 ///< owned copies
  torch::Tensor sums;                 ///< [kErrorSums] float64, the step's error sums (written by the step)
  int64_t runs = 0;                   ///< steps run on this slot so far
#ifdef MLIP_HAVE_CUDA
  /// The captured parts: [0] the whole step (one rank) or the gradients, [1] the update.
  std::unique_ptr<at::cuda::CUDAGraph> graphs[2];
#endif
};

namespace {

/// Copies `from` into the buffer `to`, which must have its shape and dtype.
void refill(torch::Tensor& to, const torch::Tensor& from, const char* what) {
  if (to.defined() != from.defined() || (to.defined() && (to.sizes() != from.sizes() || to.dtype() != from.dtype())))
    throw Error(std::string("static training step: the batch's ") + what +
                " do not fit the buffers of its shape key (a model whose shape_key misses a size)");
  if (to.defined()) to.copy_(from);
}

torch::Tensor owned(const torch::Tensor& t) { return t.defined() ? t.clone() : t; }

}  // namespace

StaticStep::StaticStep(models::Model& model, torch::optim::Adam& optimizer, Ema* ema,
                       std::vector<torch::Tensor> parameters, torch::Device device, bool capture, std::ostream* log,
                       int warmup, Synchronise synchronise)
    : model_(model),
      optimizer_(optimizer),
      ema_(ema),
      parameters_(std::move(parameters)),
      device_(device),
      capture_(capture),
      log_(log),
      warmup_(std::max(warmup, 1)),
      synchronise_(std::move(synchronise)) {
  // Every parameter has a gradient from the start (zeros), so that the step's numbers can be
  // worked out before its first backward pass (advance_adam).
  for (auto& p : parameters_)
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
  first_bad_step_ = torch::full({1}, std::numeric_limits<int64_t>::max(),
                                torch::TensorOptions().dtype(torch::kInt64).device(device_));
  step_index_ = torch::zeros({1}, torch::TensorOptions().dtype(torch::kInt64).device(device_));
#ifdef MLIP_HAVE_CUDA
  if (capture_ && !device_.is_cuda()) {
    capture_ = false;
    capture_status_ = "not captured: the model trains on " + device_.str() + ", CUDA graphs need a CUDA device";
  }
#else
  if (capture_) {
    capture_ = false;
    capture_status_ = "not captured: this build's LibTorch has no CUDA";
  }
#endif
  if (capture_)
    capture_status_ = synchronise_ ? "captured as CUDA graphs, two per shape (the all-reduce between them)"
                                   : "captured as CUDA graphs, one per shape";
  if (capture_status_.empty()) capture_status_ = "not captured (not asked for)";
}

StaticStep::~StaticStep() = default;

int64_t StaticStep::captures() const {
  int64_t n = 0;
#ifdef MLIP_HAVE_CUDA
  for (const auto& [key, slot] : slots_)
    for (const auto& graph : slot->graphs) n += graph ? 1 : 0;
#endif
  return n;
}

StaticStep::Slot& StaticStep::slot_for(const models::SystemAtoms& atoms,
                                       const std::vector<const models::FrameInput*>& frames,
                                       const BatchLabels& labels) {
  std::vector<int64_t> key = model_.shape_key(atoms, frames);
  if (key.empty())
    throw Error("static training step: model " + model_.settings().type +
                " gives no static shapes (it must be built with ModelContext::static_shapes)");
  if (labels.charges.defined())
    throw Error("static training step: charge labels (a model with charges trains without static steps)");
  key.push_back(labels.forces.defined() ? 1 : 0);
  key.push_back(labels.virial.defined() ? 1 : 0);
  const std::vector<torch::Tensor> packed = model_.pack(atoms, frames);
  // The packed tensors' shapes join the key: a batch never meets buffers of other shapes, even
  // from a model whose shape_key misses a size (it would only capture more graphs).
  for (const auto& t : packed) {
    key.push_back(t.defined() ? t.dim() : -1);
    if (t.defined()) key.insert(key.end(), t.sizes().begin(), t.sizes().end());
  }
  auto it = slots_.find(key);
  if (it == slots_.end()) {
    auto slot = std::make_unique<Slot>();
    for (const auto& t : packed) slot->inputs.push_back(owned(t));
    slot->labels = {owned(labels.energy), owned(labels.forces), owned(labels.virial), owned(labels.weights), {}};
    slot->sums = torch::zeros({kErrorSums}, torch::TensorOptions().dtype(torch::kFloat64).device(device_));
    return *slots_.emplace(std::move(key), std::move(slot)).first->second;
  }
  Slot& slot = *it->second;
  if (packed.size() != slot.inputs.size())
    throw Error("static training step: the model packed " + std::to_string(packed.size()) +
                " tensors, its buffers hold " + std::to_string(slot.inputs.size()));
  for (size_t k = 0; k < packed.size(); ++k) refill(slot.inputs[k], packed[k], "inputs");
  refill(slot.labels.energy, labels.energy, "energy labels");
  refill(slot.labels.forces, labels.forces, "force labels");
  refill(slot.labels.virial, labels.virial, "virial labels");
  refill(slot.labels.weights, labels.weights, "weights");
  return slot;
}

void StaticStep::gradients(Slot& slot, const models::SystemAtoms& atoms) {
  std::vector<torch::Tensor> grads;
  for (auto& p : parameters_) grads.push_back(p.grad());
  at::_foreach_zero_(grads);  // one multi-tensor operation: one node of the graph, not one per tensor
  const models::Prediction out = model_.predict_packed(atoms, slot.inputs, true);
  // The loss on leaf copies of the prediction; the model's backward carries its gradient to
  // the parameters (as Trainer::evaluate).
  const models::Prediction leaves{out.energy.detach().requires_grad_(true), out.forces.detach().requires_grad_(true),
                                  out.virial.detach().requires_grad_(true), {}};
  const int64_t adam_scalars = scalars_.size(0) - 3;
  const BatchLoss loss = batch_loss(leaves, slot.labels, scalars_.narrow(0, adam_scalars, 3), atoms.natoms);
  const auto g =
      torch::autograd::grad({loss.loss}, {leaves.energy, leaves.forces, leaves.virial}, {}, false, false, true);
  model_.backward(g[0], g[1], g[2], {});
  // The gradients end in the tensors they started in, whatever the backward did: what is read
  // after this part (the all-reduce, the captured update) reads those.
  for (size_t k = 0; k < parameters_.size(); ++k) {
    torch::Tensor& now = parameters_[k].mutable_grad();
    if (!now.defined()) {
      now = grads[k];
    } else if (!now.is_same(grads[k])) {
      grads[k].copy_(now);
      now = grads[k];
    }
  }
  slot.sums.copy_(loss.sums);
}

void StaticStep::update(Slot& slot) {
  // The non-finite record (train/non_finite_guard.h, on the device): min(first, finite ? max : step),
  // from the loss in the error sums (the loss times the batch size; summed over the ranks with
  // several, so that every rank keeps the same record and stops at the same step).
  first_bad_step_.copy_(torch::minimum(
      first_bad_step_, torch::where(torch::isfinite(slot.sums.narrow(0, 0, 1)),
                                    torch::full_like(step_index_, std::numeric_limits<int64_t>::max()), step_index_)));
  adam_update_from(optimizer_, ema_, scalars_.narrow(0, 0, scalars_.size(0) - 3));
}

torch::Tensor StaticStep::run(const models::SystemAtoms& atoms, const std::vector<const models::FrameInput*>& frames,
                              const BatchLabels& labels, double prefactor_e, double prefactor_f, double prefactor_v,
                              int64_t step) {
  Slot& slot = slot_for(atoms, frames, labels);
  std::vector<double> numbers = advance_adam(optimizer_, ema_);
  numbers.insert(numbers.end(), {prefactor_e, prefactor_f, prefactor_v});
  const auto host = torch::tensor(numbers, torch::kFloat64);
  if (!scalars_.defined()) scalars_ = torch::empty({host.size(0)}, host.options().device(device_));
  if (scalars_.size(0) != host.size(0))
    throw Error("static training step: the optimiser's parameter groups changed during training");
  models::copy_without_waiting(scalars_, host);
  step_index_.fill_(step);
  bool replayed = false;
  if (synchronise_) {
    replayed = run_part(slot, 0, [&] { gradients(slot, atoms); });
    synchronise_(slot.sums);
    replayed = run_part(slot, 1, [&] { update(slot); }) && replayed;
  } else {
    replayed = run_part(slot, 0, [&] {
      gradients(slot, atoms);
      update(slot);
    });
  }
  if (replayed) ++replays_;
  ++slot.runs;
  return slot.sums.clone();
}

bool StaticStep::run_part(Slot& slot, int part, const std::function<void()>& body) {
#ifdef MLIP_HAVE_CUDA
  if (capture_ && !slot.graphs[part] && slot.runs >= warmup_) capture(slot, part, body);
  if (slot.graphs[part]) {
    slot.graphs[part]->replay();
    return true;
  }
#else
  (void)slot;
  (void)part;
#endif
  body();
  return false;
}

void StaticStep::capture(Slot& slot, int part, const std::function<void()>& body) {
#ifdef MLIP_HAVE_CUDA
  // Capture on a side stream (CUDA graphs cannot capture the default stream), after the warm-up
  // steps have run eagerly on these buffers (cuBLAS handles, the autograd engine's threads).
  // Capturing records and does not run: the replay that follows takes the step. Thread-local
  // capture mode: the data workers may copy frames to the device meanwhile.
  const auto main_stream = c10::cuda::getCurrentCUDAStream(device_.index());
  auto stream = c10::cuda::getStreamFromPool(false, device_.index());
  at::cuda::CUDAEvent buffers_filled;
  buffers_filled.record(main_stream);
  buffers_filled.block(stream);
  try {
    c10::cuda::CUDAStreamGuard guard(stream);
    // One pool for all graphs: a replay writes before it reads every byte of the pool it
    // touches, and what outlives a step (the buffers, sums, gradients, weights, Adam's moments,
    // the average) was allocated before any capture, so graphs that never run at the same time
    // can use the same memory for their temporaries (docs/device.md "Static shapes").
    if (pool_ == std::pair<unsigned long long, unsigned long long>{0, 0}) pool_ = at::cuda::graph_pool_handle();
    auto graph = std::make_unique<at::cuda::CUDAGraph>();
    graph->capture_begin(pool_, cudaStreamCaptureModeThreadLocal);
    try {
      body();
    } catch (...) {
      try {
        graph->capture_end();
      } catch (...) {
      }
      throw;
    }
    graph->capture_end();
    slot.graphs[part] = std::move(graph);
  } catch (const c10::Error& e) {
    capture_ = false;
    capture_status_ = std::string("not captured: the capture failed (") + e.what_without_backtrace() + ")";
    if (log_ != nullptr) *log_ << "training.cuda_graphs: " << capture_status_ << "; steps run from static buffers\n";
  }
  at::cuda::CUDAEvent captured;
  captured.record(stream);
  captured.block(main_stream);
#else
  (void)slot;
  (void)part;
  (void)body;
#endif
}

}  // namespace mlip::train
