#pragma once

#include <cstdint>

namespace mlip::train {

/// What a training step asked of LibTorch (`mlip train --count-ops`, docs/training.md "Step
/// times"). On a GPU each operator call is about one kernel launch and some microseconds of host
/// time whatever the batch's size, and each device read stops the host until the device is done.
struct OperationCounts {
  /// Operator calls (at::RecordScope::FUNCTION) made by mlip's code, by TorchScript and by
  /// autograd's nodes; not those an operator makes inside itself, which depend on the backend
  /// (the CPU's batched matrix product selects each matrix, the GPU's is one call).
  int64_t operators = 0;
  /// Autograd nodes run by the backward passes (at::RecordScope::BACKWARD_FUNCTION); their own
  /// operator calls are counted in `operators`.
  int64_t autograd_nodes = 0;
  /// Calls, inside other operators too, that make a GPU's host wait for the device: scalar reads
  /// (`item()`, aten::_local_scalar_dense) and operators whose output size is a device value
  /// (nonzero, masked_select, unique). Copies to the host are not seen: on the CPU they are none.
  int64_t device_reads = 0;

  OperationCounts operator-(const OperationCounts& earlier) const {
    return {operators - earlier.operators, autograd_nodes - earlier.autograd_nodes,
            device_reads - earlier.device_reads};
  }
};

/// Counts the operator calls of the thread that creates it, and of the autograd threads that run
/// its backward passes (LibTorch carries a thread-local observer into them); frame-making worker
/// threads are not counted. One counter at a time per process. Counting slows every operator
/// call a little: step times measured beside it are not the plain ones.
class OperationCounter {
 public:
  OperationCounter();  ///< throws mlip::Error while another counter exists
  ~OperationCounter();
  OperationCounter(const OperationCounter&) = delete;
  OperationCounter& operator=(const OperationCounter&) = delete;

  /// Everything counted since construction.
  OperationCounts counts() const;

 private:
  uint64_t handle_ = 0;
};

}  // namespace mlip::train
