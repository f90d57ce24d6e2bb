#include "train/frame_store.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <ATen/Parallel.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include <chrono>
#include <iomanip>

#include "error.h"

namespace mlip::train {

namespace {
/// The nice value of the worker threads (the training threads' is the process's, usually 0).
constexpr int kWorkerNice = 19;
}  // namespace

FrameStore::FrameStore(models::Model& model, torch::Device device, FrameStoreOptions options)
    : model_(model), device_(device), options_(options),
      graph_executor_optimize_(torch::jit::getGraphExecutorOptimize()) {
  for (int w = 0; w < options_.workers; ++w) workers_.emplace_back([this] { work(); });
}

FrameStore::~FrameStore() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  for (auto& t : workers_) t.join();
}

int FrameStore::add_set(const std::vector<data::System>& systems) {
  std::lock_guard<std::mutex> lock(mutex_);
  sets_.push_back(&systems);
  return int(sets_.size()) - 1;
}

std::shared_ptr<const PreparedFrame> FrameStore::make(const Key& key) {
  const auto start = std::chrono::steady_clock::now();
  struct Timer {
    std::chrono::steady_clock::time_point start;
    FrameStore* store;
    ~Timer() {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::lock_guard<std::mutex> lock(store->timing_mutex_);
      store->make_seconds_ += s;
      ++store->made_;
    }
  } timer{start, this};
  const data::System& system = (*sets_[size_t(std::get<0>(key))])[std::get<1>(key)];
  data::Frame frame = system.frame(std::get<2>(key));
  auto out = std::make_shared<PreparedFrame>();
  try {
    out->input = model_.prepare_frame(system, frame);
    if (options_.repulsion) options_.repulsion->subtract(system, frame);
  } catch (const std::exception& e) {
    // Reading names the file and frame itself (data::System::frame); what the model finds in a
    // frame's values (a neighbour list that cannot be built) must name them too.
    throw Error("system " + system.name + ": frame " + std::to_string(std::get<2>(key)) + ": " + e.what());
  }
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  auto to_tensor = [&](const std::vector<double>& v) { return torch::tensor(v, f64).to(device_); };
  if (!frame.energy.empty()) out->energy = to_tensor(frame.energy);
  if (!frame.force.empty()) out->force = to_tensor(frame.force).reshape({system.natoms(), 3});
  if (!frame.virial.empty()) out->virial = to_tensor(frame.virial);
  if (!frame.charge.empty()) out->charge = to_tensor(frame.charge);
  out->weight = frame.weight;
  out->bytes = out->input->bytes() + models::tensor_bytes(out->energy) + models::tensor_bytes(out->force) +
               models::tensor_bytes(out->virial) + models::tensor_bytes(out->charge);
  return out;
}

void FrameStore::insert_into_cache(const Key& key, const std::shared_ptr<const PreparedFrame>& frame) {
  // Called with mutex_ held.
  if (cached_.count(key) != 0) return;
  const int64_t budget = options_.budget_bytes;
  if (budget >= 0 && frame->bytes > budget) {
    if (!said_too_small_ && options_.log != nullptr) {
      *options_.log << "note: training.cache_mb " << std::setprecision(3) << double(budget) / double(1 << 20)
                    << " is smaller than one made frame (" << double(frame->bytes) / double(1 << 20)
                    << " MB): frames are made again each time they are used\n";
    }
    said_too_small_ = true;
    return;
  }
  lru_.emplace_front(key, frame);
  cached_[key] = lru_.begin();
  cached_bytes_ += frame->bytes;
  while (budget >= 0 && cached_bytes_ > budget && !lru_.empty()) {
    cached_bytes_ -= lru_.back().second->bytes;
    cached_.erase(lru_.back().first);
    lru_.pop_back();
  }
}

void FrameStore::prefetch(int set, size_t system, const std::vector<int64_t>& frames) {
  if (workers_.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (int64_t f : frames) {
      const Key key{set, system, f};
      if (cached_.count(key) != 0 || pending_.count(key) != 0) continue;
      pending_.emplace(key, Pending{});
      queue_.push_back(key);
    }
  }
  work_ready_.notify_all();
}

std::shared_ptr<const PreparedFrame> FrameStore::get(int set, size_t system, int64_t frame) {
  const Key key{set, system, frame};
  std::unique_lock<std::mutex> lock(mutex_);
  auto hit = cached_.find(key);
  if (hit != cached_.end()) {
    lru_.splice(lru_.begin(), lru_, hit->second);  // now the most recently used
    return hit->second->second;
  }
  auto p = pending_.find(key);
  if (p != pending_.end()) {
    if (!p->second.done) {
      ++waits_;
      if (!p->second.started) {
        // Not started: take it off the queue and make it here.
        for (auto q = queue_.begin(); q != queue_.end(); ++q)
          if (*q == key) {
            queue_.erase(q);
            break;
          }
        pending_.erase(p);
        lock.unlock();
        auto made = make(key);
        lock.lock();
        insert_into_cache(key, made);
        return made;
      }
      frame_done_.wait(lock, [&] { return pending_.at(key).done; });
      p = pending_.find(key);
    }
    Pending done = std::move(p->second);
    pending_.erase(p);
    if (done.error) std::rethrow_exception(done.error);
    insert_into_cache(key, done.frame);
    return done.frame;
  }
  ++waits_;
  lock.unlock();
  auto made = make(key);
  lock.lock();
  insert_into_cache(key, made);
  return made;
}

bool FrameStore::make_into_cache(int set, size_t system, int64_t frame) {
  const Key key{set, system, frame};
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (cached_.count(key) != 0) return true;
  }
  auto made = make(key);
  std::lock_guard<std::mutex> lock(mutex_);
  if (cached_.count(key) != 0) return true;
  const int64_t budget = options_.budget_bytes;
  if (budget >= 0 && cached_bytes_ + made->bytes > budget) return false;
  insert_into_cache(key, made);
  return true;
}

void FrameStore::work() {
  // Below the training threads: on a machine whose cores all train, a worker that competed with
  // them at equal priority would stall the step's parallel regions more than its frame costs;
  // at low priority it runs in the gaps (docs/data.md "Worker threads").
  setpriority(PRIO_PROCESS, pid_t(syscall(SYS_gettid)), kWorkerNice);
  // A worker's parallel regions run on the worker alone. Otherwise OpenMP (libgomp) gives each
  // thread that opens a region its own team: with more OpenMP threads than cores it stops
  // spinning between regions, and the training threads' steps were slower even after the
  // workers had gone idle (bench/README.md "Data at scale").
  at::init_num_threads();
#ifdef _OPENMP
  omp_set_num_threads(1);
#endif
  // The executor mode is per thread and a new thread starts optimising: its first calls of a
  // method would run unoptimised and later ones fused, so a frame's geometry would depend on
  // how many frames this process had made before it (a restart would not continue bit for bit).
  torch::jit::setGraphExecutorOptimize(graph_executor_optimize_);
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    work_ready_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (stopping_) return;
    const Key key = queue_.front();
    queue_.pop_front();
    pending_.at(key).started = true;
    lock.unlock();
    std::shared_ptr<const PreparedFrame> made;
    std::exception_ptr error;
    try {
      made = make(key);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    Pending& p = pending_.at(key);
    p.frame = std::move(made);
    p.error = error;
    p.done = true;
    frame_done_.notify_all();
  }
}

int64_t FrameStore::waits() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return waits_;
}

FrameStore::MakeTime FrameStore::make_time() const {
  std::lock_guard<std::mutex> lock(timing_mutex_);
  return {made_, make_seconds_};
}

int64_t FrameStore::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cached_bytes_;
}

}  // namespace mlip::train
