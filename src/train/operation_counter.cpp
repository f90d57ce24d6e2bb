#include "train/operation_counter.h"

#include <ATen/record_function.h>

#include <atomic>
#include <cstring>

#include "error.h"

namespace mlip::train {
namespace {

// Shared by the training thread and autograd's threads (LibTorch carries the thread-local
// observer into the backward passes it runs elsewhere, as its profiler relies on).
std::atomic<int64_t> g_operators{0};
std::atomic<int64_t> g_autograd_nodes{0};
std::atomic<int64_t> g_device_reads{0};
std::atomic<bool> g_active{false};

// Operator calls in progress on this thread: a call made while another runs is that operator's
// own work (the CPU's bmm selects each matrix; the GPU's does not) and is not counted.
thread_local int t_depth = 0;

// The engine's record around each node it runs ("autograd::engine::evaluate_function: ..."):
// neither a call nor the node (counted by its own BACKWARD_FUNCTION record).
bool engine_wrapper(const at::RecordFunction& fn) {
  static constexpr char kPrefix[] = "autograd::engine::";
  return std::strncmp(fn.name(), kPrefix, sizeof(kPrefix) - 1) == 0;
}

// Operators whose result the host must wait for on a GPU, wherever they are called: a scalar
// read (item(), a tensor's value in an `if`), and those whose output size is a device value.
bool device_read(const at::RecordFunction& fn) {
  static const char* const kNames[] = {"aten::_local_scalar_dense", "aten::nonzero",
                                       "aten::masked_select",       "aten::_unique2",
                                       "aten::unique_consecutive",  "aten::unique_dim"};
  for (const char* name : kNames)
    if (std::strcmp(fn.name(), name) == 0) return true;
  return false;
}

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  if (engine_wrapper(fn)) return nullptr;
  if (device_read(fn)) g_device_reads.fetch_add(1, std::memory_order_relaxed);
  if (fn.scope() == at::RecordScope::BACKWARD_FUNCTION) {
    g_autograd_nodes.fetch_add(1, std::memory_order_relaxed);
  } else {
    if (t_depth == 0) g_operators.fetch_add(1, std::memory_order_relaxed);
    ++t_depth;
  }
  return nullptr;
}

void on_end(const at::RecordFunction& fn, at::ObserverContext* /*context*/) {
  if (fn.scope() != at::RecordScope::BACKWARD_FUNCTION && !engine_wrapper(fn) && t_depth > 0) --t_depth;
}

}  // namespace

OperationCounter::OperationCounter() {
  if (g_active.exchange(true)) throw Error("OperationCounter: another counter is already counting in this process");
  g_operators = 0;
  g_autograd_nodes = 0;
  g_device_reads = 0;
  t_depth = 0;
  handle_ = at::addThreadLocalCallback(at::RecordFunctionCallback(on_start, on_end)
                                           .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION}));
}

OperationCounter::~OperationCounter() {
  at::removeCallback(handle_);
  g_active = false;
}

OperationCounts OperationCounter::counts() const {
  return {g_operators.load(std::memory_order_relaxed), g_autograd_nodes.load(std::memory_order_relaxed),
          g_device_reads.load(std::memory_order_relaxed)};
}

}  // namespace mlip::train
