#include "train/host_wait_check.h"

#ifdef MLIP_HAVE_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace mlip::train {

HostWaitCheck::HostWaitCheck(bool on) : on_(on && available()) {
#ifdef MLIP_HAVE_CUDA
  if (!on_) return;
  previous_ = int(c10::cuda::warning_state().get_sync_debug_mode());
  c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_ERROR);
#endif
}

HostWaitCheck::~HostWaitCheck() {
#ifdef MLIP_HAVE_CUDA
  if (on_) c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode(previous_));
#endif
}

bool HostWaitCheck::available() {
#ifdef MLIP_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

}  // namespace mlip::train
