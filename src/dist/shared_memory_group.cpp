#include "dist/shared_memory_group.h"

#include <ATen/ATen.h>

#include <cstdlib>
#include <random>
#include <sstream>
#include <unistd.h>

#include "error.h"

namespace mlip::dist {

SharedMemoryGroup::SharedMemoryGroup(int rank, int size, std::chrono::milliseconds timeout, Agreement agreement)
    : rank_(rank), size_(size), timeout_(timeout), agreement_(std::move(agreement)) {}

bool SharedMemoryGroup::open() {
  const char* env_off = std::getenv("MLIP_SHM_ALLREDUCE");
  const bool wanted = !(env_off != nullptr && std::string(env_off) == "0");
  main_ = open_segment("main", size_t(4) << 20, wanted);
  return active();
}

/// Rank 0 creates the segment and shares its name and token; the others map it; then every
/// rank says whether it did and sees every rank's process. A segment that cannot be made or
/// mapped is a "no", never an error; rank 0 always shares a value (empty for none) so that
/// the others never wait for it. The name is removed once every rank has mapped it, so
/// nothing stays in /dev/shm however the job ends.
std::unique_ptr<ShmAllReduce> SharedMemoryGroup::open_segment(const std::string& tag, size_t capacity, bool wanted) {
  const std::string key = "mlip/shm/" + tag + "/";
  std::unique_ptr<ShmAllReduce> shm;
  std::string value;
  if (rank_ == 0) {
    std::random_device rd;
    const uint64_t token = (uint64_t(rd()) << 32) ^ rd();
    std::ostringstream name;
    name << "/mlip-" << ::getpid() << "-" << tag << "-" << std::hex << token;
    try {
      if (wanted) shm = std::make_unique<ShmAllReduce>(name.str(), 0, size_, capacity, token, timeout_);
    } catch (const std::exception&) {
      shm.reset();
    }
    if (shm) value = name.str() + " " + std::to_string(token);
  }
  value = agreement_.share(key + "segment", value);
  if (rank_ != 0) {
    std::istringstream v(value);
    std::string name;
    uint64_t token = 0;
    try {
      if (wanted && (v >> name >> token)) shm = std::make_unique<ShmAllReduce>(name, rank_, size_, capacity, token, timeout_);
    } catch (const std::exception&) {
      shm.reset();
    }
  }
  agreement_.barrier();  // every rank has mapped it (or given up)
  const bool ok = shm && shm->peers_visible();
  if (shm) shm->unlink();
  const bool all = agreement_.all(key + "ok", ok);
  return all ? std::move(shm) : nullptr;
}

at::Tensor SharedMemoryGroup::make_reduce_buffer(int64_t numel, at::ScalarType dtype) {
  if (!main_ || numel <= 0) return at::Tensor();
  const size_t bytes = size_t(numel) * c10::elementSize(dtype);
  std::shared_ptr<ShmAllReduce> segment;
  try {
    segment = open_segment("buffer" + std::to_string(buffers_made_++), bytes, true);
  } catch (const std::exception& e) {
    std::string what = e.what();
    if (const auto pos = what.find("\nException raised from"); pos != std::string::npos) what.resize(pos);
    throw Error("rank " + std::to_string(rank_) + ": making a shared-memory buffer failed: " + what);
  }
  if (!segment) return at::Tensor();
  // Held here too: a failure announced after the buffer's owner is gone (the usual case: the
  // trainer has thrown) must still end the other ranks' waits in this segment at once.
  buffers_.push_back(segment);
  // The tensor (and every view of it) keeps the mapping alive, also after the communicator.
  auto buffer = at::from_blob(segment->own_slot(), {numel}, [segment](void*) {}, at::TensorOptions(dtype));
  buffer.zero_();
  return buffer;
}

bool SharedMemoryGroup::all_reduce(at::Tensor& t, int64_t mean_count) {
  if (!main_ || !t.device().is_cpu()) return false;
  const int64_t n = t.numel();
  for (const auto& segment : buffers_)
    if (t.data_ptr() == segment->own_slot() && size_t(t.nbytes()) <= segment->capacity()) {
      switch (t.scalar_type()) {
        case at::kDouble: segment->all_reduce_sum_in_slot<double>(n, mean_count); return true;
        case at::kFloat: segment->all_reduce_sum_in_slot<float>(n, mean_count); return true;
        case at::kLong: segment->all_reduce_sum_in_slot<int64_t>(n, mean_count); return true;
        default: break;
      }
    }
  switch (t.scalar_type()) {
    case at::kDouble: main_->all_reduce_sum(t.data_ptr<double>(), n, mean_count); return true;
    case at::kFloat: main_->all_reduce_sum(t.data_ptr<float>(), n, mean_count); return true;
    case at::kLong: main_->all_reduce_sum(t.data_ptr<int64_t>(), n, mean_count); return true;
    default: return false;
  }
}

void SharedMemoryGroup::abort() {
  if (main_) main_->abort();
  for (const auto& segment : buffers_) segment->abort();
}

double SharedMemoryGroup::arrival_wait_seconds() const {
  if (!main_) return -1;
  double seconds = main_->arrival_wait_seconds();
  for (const auto& segment : buffers_) seconds += segment->arrival_wait_seconds();
  return seconds;
}

}  // namespace mlip::dist
