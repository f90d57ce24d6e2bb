#include "dist/shm_all_reduce.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <new>
#include <sstream>
#include <thread>

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
void ShmAllReduce::all_reduce_sum(T* data, int64_t n) {
  const int64_t per = int64_t(capacity_ / sizeof(T));
  for (int64_t off = 0; off < n; off += per) {
    const int64_t m = std::min(per, n - off);
    std::memcpy(slot(rank_), data + off, size_t(m) * sizeof(T));
    arrive_and_wait(++phase_);
    // This rank's chunk, summed over the slots in rank order into slot 0.
    const int64_t lo = m * rank_ / size_, hi = m * (rank_ + 1) / size_;
    T* out = reinterpret_cast<T*>(slot(0));
    for (int r = 1; r < size_; ++r) {
      const T* in = reinterpret_cast<const T*>(slot(r));
      for (int64_t i = lo; i < hi; ++i) out[i] += in[i];
    }
    arrive_and_wait(++phase_);
    std::memcpy(data + off, slot(0), size_t(m) * sizeof(T));
    // Nobody writes its slot again before every rank has read the result.
    arrive_and_wait(++phase_);
  }
}

template void ShmAllReduce::all_reduce_sum<float>(float*, int64_t);
template void ShmAllReduce::all_reduce_sum<double>(double*, int64_t);
template void ShmAllReduce::all_reduce_sum<int64_t>(int64_t*, int64_t);

}  // namespace mlip::dist
