#include "dist/shm_all_reduce.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <new>
#include <sstream>
#include <thread>
#include <type_traits>

#include "error.h"

namespace mlip::dist {
namespace {

constexpr size_t kAlign = 4096;

size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

/// Whether process `pid` is gone (no such process, or a zombie waiting to be reaped).
bool process_ended(int64_t pid) {
  if (pid <= 0) return false;
  if (::kill(pid_t(pid), 0) != 0 && errno == ESRCH) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const auto close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'Z';
}

/// "240", "0.3": a duration in seconds as a person writes it.
std::string seconds(std::chrono::milliseconds t) {
  std::ostringstream s;
  s << double(t.count()) / 1000.0;
  return s.str();
}

}  // namespace

/// One rank's state, on its own cache line.
struct alignas(64) RankState {
  std::atomic<uint64_t> phase{0};
  int64_t pid = 0;
  uint64_t pid_namespace = 0;  // inode of /proc/self/ns/pid (0 if unknown)
};

/// The start of the segment; `size` RankStates follow at kStatesOffset, then the slots.
struct ShmAllReduce::Header {
  std::atomic<int64_t> failed{0};  // 1 + the first rank that called abort(), or 0
  uint64_t token = 0;
  int64_t size = 0;
  uint64_t capacity = 0;
};

namespace {

constexpr size_t kStatesOffset = 128;
static_assert(sizeof(ShmAllReduce::Header) <= kStatesOffset, "header too large");

RankState* states(void* base) { return reinterpret_cast<RankState*>(static_cast<char*>(base) + kStatesOffset); }

uint64_t pid_namespace() {
  struct stat st {};
  return ::stat("/proc/self/ns/pid", &st) == 0 ? uint64_t(st.st_ino) : 0;
}

}  // namespace

ShmAllReduce::ShmAllReduce(const std::string& name, int rank, int size, size_t capacity, uint64_t token,
                           std::chrono::milliseconds timeout)
    : name_(name), rank_(rank), size_(size), capacity_(round_up(std::max<size_t>(capacity, 64), 64)),
      timeout_(timeout) {
  static_assert(std::atomic<uint64_t>::is_always_lock_free, "process-shared counters need lock-free atomics");
  const size_t header = round_up(kStatesOffset + sizeof(RankState) * size_t(size), kAlign);
  bytes_ = header + capacity_ * size_t(size);
  const std::string what = "shared-memory segment " + name_ + " (" + std::to_string(bytes_ >> 20) + " MiB)";
  const int fd = rank == 0 ? ::shm_open(name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600)
                           : ::shm_open(name_.c_str(), O_RDWR, 0600);
  if (fd < 0) throw Error(what + ": cannot " + (rank == 0 ? "create" : "open") + " it: " + std::strerror(errno));
  auto fail = [&](const std::string& why) {
    ::close(fd);
    if (rank == 0) ::shm_unlink(name_.c_str());
    throw Error(what + ": " + why);
  };
  if (rank == 0) {
    if (::ftruncate(fd, off_t(bytes_)) != 0) fail(std::string("ftruncate: ") + std::strerror(errno));
    // Reserve the pages now: a /dev/shm too small fails here instead of raising SIGBUS later.
    if (const int err = ::posix_fallocate(fd, 0, off_t(bytes_)); err != 0)
      fail(std::string("cannot reserve its memory: ") + std::strerror(err));
  } else {
    struct stat st {};
    if (::fstat(fd, &st) != 0 || size_t(st.st_size) != bytes_)
      fail("has " + std::to_string(st.st_size) + " bytes, expected " + std::to_string(bytes_));
  }
  base_ = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (base_ == MAP_FAILED) {
    base_ = nullptr;
    if (rank == 0) ::shm_unlink(name_.c_str());
    throw Error(what + ": mmap: " + std::strerror(errno));
  }
  header_ = static_cast<Header*>(base_);
  if (rank == 0) {
    header_ = new (base_) Header();
    header_->token = token;
    header_->size = size;
    header_->capacity = capacity_;
    for (int r = 0; r < size; ++r) new (states(base_) + r) RankState();
  } else if (header_->token != token || header_->size != size || header_->capacity != capacity_) {
    ::munmap(base_, bytes_);
    base_ = nullptr;
    throw Error(what + ": holds another job's data (a different /dev/shm?)");
  }
  states(base_)[rank_].pid = int64_t(::getpid());
  states(base_)[rank_].pid_namespace = pid_namespace();
  std::atomic_thread_fence(std::memory_order_release);
}

ShmAllReduce::~ShmAllReduce() {
  if (base_ != nullptr) ::munmap(base_, bytes_);
  if (rank_ == 0 && !unlinked_) ::shm_unlink(name_.c_str());
}

void ShmAllReduce::unlink() {
  if (rank_ == 0 && !unlinked_) ::shm_unlink(name_.c_str());
  unlinked_ = true;
}

bool ShmAllReduce::peers_visible() const {
  const RankState* st = states(base_);
  for (int r = 0; r < size_; ++r)
    if (st[r].pid <= 0 || st[r].pid_namespace != st[rank_].pid_namespace || process_ended(st[r].pid)) return false;
  return true;
}

void ShmAllReduce::abort() {
  if (header_ == nullptr) return;
  int64_t none = 0;  // the first failure is the one the others report
  header_->failed.compare_exchange_strong(none, rank_ + 1, std::memory_order_acq_rel);
}

char* ShmAllReduce::slot(int r) const {
  const size_t header = round_up(kStatesOffset + sizeof(RankState) * size_t(size_), kAlign);
  return static_cast<char*>(base_) + header + capacity_ * size_t(r);
}

void ShmAllReduce::arrive_and_wait(uint64_t phase) {
  RankState* st = states(base_);
  st[rank_].phase.store(phase, std::memory_order_release);
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < size_; ++r) {
    auto& state = st[r];
    auto last_check = start;
    for (uint64_t spins = 0; state.phase.load(std::memory_order_acquire) < phase; ++spins) {
      // Spin briefly (a balanced step arrives within microseconds), then give the core away:
      // with more ranks than cores a spinning rank would delay the one it waits for.
      if (spins < 1000) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
        continue;
      }
      if (spins < 3000) {
        ::sched_yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
      if (const int64_t failed = header_->failed.load(std::memory_order_acquire); failed != 0)
        throw Error("rank " + std::to_string(rank_) + ": shared-memory all-reduce: rank " +
                    std::to_string(failed - 1) + " reported a failure");
      if ((spins & 63) != 0) continue;
      const auto now = std::chrono::steady_clock::now();
      if (now - last_check < std::chrono::milliseconds(10)) continue;
      last_check = now;
      if (process_ended(state.pid))
        throw Error("rank " + std::to_string(rank_) + ": shared-memory all-reduce: rank " + std::to_string(r) +
                    " (pid " + std::to_string(state.pid) + ") has ended");
      if (now - start > timeout_)
        throw Error("rank " + std::to_string(rank_) + ": shared-memory all-reduce: rank " + std::to_string(r) +
                    " did not arrive within " + seconds(timeout_) + " s (--timeout)");
    }
  }
}

template <typename T>
void ShmAllReduce::reduce_slots(int64_t m, int64_t mean_count, bool count_arrival) {
  const auto arrival = std::chrono::steady_clock::now();
  arrive_and_wait(++phase_);  // every rank's values are in its slot
  if (count_arrival)
    arrival_wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - arrival).count();
  // This rank's chunk, summed over the slots in rank order (the same order for every element,
  // so every rank ends with identical bits) into its own slot, a block at a time.
  const auto chunk_begin = [&](int r) { return m * r / size_; };
  const int64_t lo = chunk_begin(rank_), hi = chunk_begin(rank_ + 1);
  T* mine = reinterpret_cast<T*>(slot(rank_));
  constexpr int64_t kBlock = 512;
  T sum[kBlock];
  for (int64_t b = lo; b < hi; b += kBlock) {
    const int64_t len = std::min(kBlock, hi - b);
    const T* first = reinterpret_cast<const T*>(slot(0)) + b;
    std::copy(first, first + len, sum);
    for (int r = 1; r < size_; ++r) {
      const T* in = reinterpret_cast<const T*>(slot(r)) + b;
      for (int64_t i = 0; i < len; ++i) sum[i] += in[i];
    }
    if constexpr (!std::is_integral_v<T>) {  // the mean of the first mean_count, as x * (1 / W)
      const T inverse = T(1.0 / double(size_));
      for (int64_t i = 0, end = std::min(len, mean_count - b); i < end; ++i) sum[i] *= inverse;
    }
    std::copy(sum, sum + len, mine + b);
  }
  arrive_and_wait(++phase_);  // every chunk is summed
  for (int r = 0; r < size_; ++r)
    if (r != rank_) {
      const T* in = reinterpret_cast<const T*>(slot(r));
      std::copy(in + chunk_begin(r), in + chunk_begin(r + 1), mine + chunk_begin(r));
    }
  // Nobody writes its slot again before every rank has read the chunk it summed there.
  arrive_and_wait(++phase_);
}

namespace {

/// The arguments' check of both all-reduces (before any rank waits for another).
template <typename T>
void check_mean_count(int64_t n, int64_t mean_count) {
  if (mean_count < 0 || mean_count > n || (std::is_integral_v<T> && mean_count != 0))
    throw Error("shared-memory all-reduce: cannot average " + std::to_string(mean_count) + " of " +
                std::to_string(n) + (std::is_integral_v<T> ? " integer values" : " values"));
}

}  // namespace

template <typename T>
void ShmAllReduce::all_reduce_sum(T* data, int64_t n, int64_t mean_count) {
  check_mean_count<T>(n, mean_count);
  const int64_t per = int64_t(capacity_ / sizeof(T));
  for (int64_t off = 0; off < n; off += per) {
    const int64_t m = std::min(per, n - off);
    std::memcpy(slot(rank_), data + off, size_t(m) * sizeof(T));
    reduce_slots<T>(m, std::clamp<int64_t>(mean_count - off, 0, m), off == 0);
    std::memcpy(data + off, slot(rank_), size_t(m) * sizeof(T));
  }
}

template <typename T>
void ShmAllReduce::all_reduce_sum_in_slot(int64_t n, int64_t mean_count) {
  if (n < 0 || uint64_t(n) * sizeof(T) > capacity_)
    throw Error("shared-memory all-reduce: " + std::to_string(n) + " values of " + std::to_string(sizeof(T)) +
                " bytes do not fit the slot of " + std::to_string(capacity_) + " bytes");
  check_mean_count<T>(n, mean_count);
  reduce_slots<T>(n, mean_count, true);
}

template void ShmAllReduce::all_reduce_sum<float>(float*, int64_t, int64_t);
template void ShmAllReduce::all_reduce_sum<double>(double*, int64_t, int64_t);
template void ShmAllReduce::all_reduce_sum<int64_t>(int64_t*, int64_t, int64_t);
template void ShmAllReduce::all_reduce_sum_in_slot<float>(int64_t, int64_t);
template void ShmAllReduce::all_reduce_sum_in_slot<double>(int64_t, int64_t);
template void ShmAllReduce::all_reduce_sum_in_slot<int64_t>(int64_t, int64_t);

}  // namespace mlip::dist
