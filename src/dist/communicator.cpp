#include "dist/communicator.h"

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef MLIP_HAVE_NCCL
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif
#ifdef MLIP_HAVE_MPI
#include <mpi.h>
#endif

#include <atomic>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "dist/shared_memory_group.h"
#include "error.h"

namespace mlip::dist {

template <typename F>
void Communicator::timed(const char* what, F&& f) {
  const auto start = std::chrono::steady_clock::now();
  ++collectives_;
  try {
    f();
  } catch (const std::exception& e) {
    std::string msg = "rank " + std::to_string(rank_) + ": the " + what + " over " + std::to_string(size_) +
                      " ranks (" + backend() + ") failed: " + e.what();
    if (const auto pos = msg.find("\nException raised from"); pos != std::string::npos) msg.resize(pos);
    const std::string other = announced_failure();
    if (!other.empty()) msg += "\n  the failure started at " + other;
    else
      msg += "\n  another rank has probably died or failed (see its output), or stopped answering (a rank that "
             "waits longer than --timeout fails; raise it if a rank legitimately works longer alone)";
    throw Error(msg);
  }
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void Communicator::all_reduce_sum(at::Tensor& tensor, int64_t mean_count) {
  if (!tensor.is_contiguous()) throw Error("all_reduce_sum: expected a contiguous tensor");
  if (mean_count < 0 || mean_count > tensor.numel() || (mean_count > 0 && !tensor.is_floating_point()))
    throw Error("all_reduce_sum: cannot average " + std::to_string(mean_count) + " of the " +
                std::to_string(tensor.numel()) + " values of a " + c10::toString(tensor.scalar_type()) + " tensor");
  ++all_reduces_;
  timed("all-reduce", [&] { do_all_reduce(tensor, mean_count); });
}

void Communicator::divide_first(at::Tensor& tensor, int64_t mean_count) const {
  if (mean_count > 0 && size_ > 1) tensor.narrow(0, 0, mean_count).mul_(1.0 / double(size_));
}

at::Tensor Communicator::make_reduce_buffer(int64_t numel, at::ScalarType dtype) {
  return at::zeros({numel}, at::TensorOptions(dtype));
}

void Communicator::broadcast(at::Tensor& tensor, int root) {
  if (!tensor.is_contiguous()) throw Error("broadcast: expected a contiguous tensor");
  timed("broadcast", [&] { do_broadcast(tensor, root); });
}

void Communicator::barrier() {
  timed("barrier", [&] { do_barrier(); });
}

namespace {

class LocalCommunicator final : public Communicator {
 public:
  LocalCommunicator() : Communicator(0, 1) {}
  std::string backend() const override { return "none"; }

 protected:
  void do_all_reduce(at::Tensor&, int64_t) override {}
  void do_broadcast(at::Tensor&, int) override {}
  void do_barrier() override {}
};

/// " (timed out: ...)" when a step that began at `start` failed after waiting `timeout`, else "".
/// LibTorch's wording of a timeout differs between versions (and between the store and the
/// process group): say it in mlip's own words.
std::string timed_out_note(std::chrono::steady_clock::time_point start, std::chrono::milliseconds timeout) {
  if (std::chrono::steady_clock::now() - start < timeout) return "";
  return " (timed out: no answer within --timeout " +
         std::to_string(std::chrono::duration_cast<std::chrono::seconds>(timeout).count()) + " s)";
}

/// The rendezvous store of the torchrun protocol: torchrun's agent hosts it when it sets
/// TORCHELASTIC_USE_AGENT_STORE=True (every rank is a client, keys under
/// /worker/attempt_<restart count>); otherwise rank 0 hosts it at MASTER_ADDR:MASTER_PORT.
c10::intrusive_ptr<c10d::Store> make_store(const LaunchEnv& env, std::chrono::milliseconds timeout) {
  if (env.master_addr.empty() || env.master_port <= 0 || env.master_port > 65535)
    throw Error(std::string("distributed run under ") + launcher_name(env.launcher) +
                ": the rendezvous needs MASTER_ADDR and MASTER_PORT (got '" + env.master_addr + "' and " +
                std::to_string(env.master_port) + ")");
  const char* agent = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
  const bool agent_store = agent != nullptr && std::string(agent) == "True";
  c10d::TCPStoreOptions o;
  o.port = uint16_t(env.master_port);
  o.isServer = !agent_store && env.rank == 0;
  if (!agent_store) o.numWorkers = size_t(env.world_size);
  o.waitWorkers = !agent_store;  // every rank counts itself in; the server waits for all
  o.timeout = timeout;
  const auto start = std::chrono::steady_clock::now();
  try {
    auto tcp = c10::make_intrusive<c10d::TCPStore>(env.master_addr, o);
    if (!agent_store) return tcp;
    const char* attempt = std::getenv("TORCHELASTIC_RESTART_COUNT");
    return c10::make_intrusive<c10d::PrefixStore>(std::string("/worker/attempt_") + (attempt ? attempt : "0"), tcp);
  } catch (const std::exception& e) {
    std::string what = e.what();
    if (const auto pos = what.find("\nException raised from"); pos != std::string::npos) what.resize(pos);
    throw Error("rank " + std::to_string(env.rank) + ": rendezvous at " + env.master_addr + ":" +
                std::to_string(env.master_port) + " failed" + timed_out_note(start, timeout) + ": " + what);
  }
}

/// A c10d process group (Gloo or NCCL) over the rendezvous store.
class C10dCommunicator final : public Communicator {
 public:
  C10dCommunicator(const LaunchEnv& env, const CommOptions& options, bool nccl)
      : Communicator(env.rank, env.world_size), timeout_(options.timeout), nccl_(nccl) {
    store_ = make_store(env, timeout_);
    const char* agent = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
    hosts_store_ = env.rank == 0 && !(agent != nullptr && std::string(agent) == "True");
    const auto start = std::chrono::steady_clock::now();
    try {
      if (nccl_) {
#ifdef MLIP_HAVE_NCCL
        // One process drives one device: the local rank's GPU. Blocking waits make the timeout
        // apply (1.13 reads NCCL_BLOCKING_WAIT, 2.x TORCH_NCCL_BLOCKING_WAIT).
        const int count = int(c10::cuda::device_count());
        if (count == 0) throw Error("--backend nccl: no CUDA device visible");
        device_ = at::Device(at::kCUDA, c10::DeviceIndex(env.local_rank % count));
        c10::cuda::set_device(device_.index());
        ::setenv("NCCL_BLOCKING_WAIT", "1", 0);
        ::setenv("TORCH_NCCL_BLOCKING_WAIT", "1", 0);
        auto o = c10d::ProcessGroupNCCL::Options::create();
        o->timeout = timeout_;
        nccl_pg_ = c10::make_intrusive<c10d::ProcessGroupNCCL>(store_, env.rank, env.world_size, o);
#endif
      } else {
        auto o = c10d::ProcessGroupGloo::Options::create(timeout_);
        const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
        o->devices.push_back(ifname ? c10d::ProcessGroupGloo::createDeviceForInterface(ifname)
                                    : c10d::ProcessGroupGloo::createDefaultDevice());
        gloo_ = c10::make_intrusive<c10d::ProcessGroupGloo>(store_, env.rank, env.world_size, o);
        setup_shared_memory();
      }
    } catch (const std::exception& e) {
      std::string what = e.what();
      if (const auto pos = what.find("\nException raised from"); pos != std::string::npos) what.resize(pos);
      throw Error("rank " + std::to_string(env.rank) + ": creating the " + backend() + " process group failed" +
                  timed_out_note(start, timeout_) + ": " + what);
    }
  }

  std::string all_reduce_transport() const override {
    return shm_ && shm_->active() ? "shared memory" : nccl_ ? "NCCL" : "Gloo over TCP";
  }

  std::string backend() const override { return nccl_ ? "nccl" : "gloo"; }

  double all_reduce_arrival_wait_seconds() const override { return shm_ ? shm_->arrival_wait_seconds() : -1; }

  void announce_failure(const std::string& what) override {
    try {
      const std::string text = "rank " + std::to_string(rank()) + ": " + what;
      // The first failure is the one to report: a rank that failed because another did does
      // not overwrite it (best effort: check, then set). Set before the shared-memory waits
      // end, so that the ranks they release find it.
      try {
        if (!store_->check({"mlip/failed"})) {
          store_->set("mlip/failed", std::vector<uint8_t>(text.begin(), text.end()));
          // TCPStore's set does not wait for the store's answer: a round trip on the same
          // connection makes sure the message is stored before the shared-memory waits end
          // (else a released rank, under load, could look before it lands).
          store_->check({"mlip/failed"});
        }
      } catch (...) {
      }
      if (shm_) shm_->abort();  // the others' shared-memory waits end at once
      if (!hosts_store_) return;
      // The store lives in this process: close the group so that the others fail at once,
      // and keep the store up until they have read the message (at most 5 s).
      gloo_.reset();
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (store_->add("mlip/failed_seen", 0) < size() - 1 && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    } catch (...) {
    }
  }

 protected:
  std::string announced_failure() override {
    try {
      store_->setTimeout(std::chrono::seconds(3));
      if (!store_->check({"mlip/failed"})) return "";
      const auto v = store_->get("mlip/failed");
      store_->add("mlip/failed_seen", 1);
      return std::string(v.begin(), v.end());
    } catch (...) {
      return "";
    }
  }

  at::Tensor make_reduce_buffer(int64_t numel, at::ScalarType dtype) override {
    at::Tensor buffer = shm_ ? shm_->make_reduce_buffer(numel, dtype) : at::Tensor();
    return buffer.defined() ? buffer : Communicator::make_reduce_buffer(numel, dtype);
  }

  void do_all_reduce(at::Tensor& tensor, int64_t mean_count) override {
    if (shm_ && shm_->all_reduce(tensor, mean_count)) return;
    run(tensor, [&](auto& pg, std::vector<at::Tensor>& v) { return pg->allreduce(v); });
    divide_first(tensor, mean_count);
  }
  void do_broadcast(at::Tensor& tensor, int root) override {
    c10d::BroadcastOptions o;
    o.rootRank = root;
    run(tensor, [&](auto& pg, std::vector<at::Tensor>& v) { return pg->broadcast(v, o); });
  }
  void do_barrier() override {
#ifdef MLIP_HAVE_NCCL
    if (nccl_) {
      nccl_pg_->barrier()->wait(timeout_);
      return;
    }
#endif
    gloo_->barrier()->wait(timeout_);
  }

 private:
  // The groups are held by their own types: in LibTorch 1.13 they derive from c10d::ProcessGroup,
  // in 2.x from c10d::Backend; both have the same allreduce/broadcast/barrier.
  template <typename F>
  void run(at::Tensor& tensor, F&& op) {
#ifdef MLIP_HAVE_NCCL
    if (nccl_) {
      // NCCL reduces device tensors in place; a host tensor (a broadcast of the start state,
      // a validation sum) goes there and back.
      if (tensor.device() == device_) {
        std::vector<at::Tensor> v{tensor};
        op(nccl_pg_, v)->wait(timeout_);
        return;
      }
      std::vector<at::Tensor> v{tensor.to(device_)};
      op(nccl_pg_, v)->wait(timeout_);
      tensor.copy_(v[0]);
      return;
    }
#endif
    std::vector<at::Tensor> v{tensor};
    op(gloo_, v)->wait(timeout_);
  }

  /// When every rank can map one /dev/shm segment (ranks on one host), the all-reduces go
  /// through it instead of Gloo's TCP loopback (MLIP_SHM_ALLREDUCE=0 keeps Gloo). The ranks
  /// agree through the store (keys under mlip/shm/<tag>/) and Gloo's barrier.
  void setup_shared_memory() {
    SharedMemoryGroup::Agreement agree;
    agree.share = [this](const std::string& key, const std::string& value) {
      if (rank() == 0) {
        store_->set(key, std::vector<uint8_t>(value.begin(), value.end()));
        return value;
      }
      const auto raw = store_->get(key);
      return std::string(raw.begin(), raw.end());
    };
    agree.all = [this](const std::string& key, bool ok) {
      store_->set(key + "/" + std::to_string(rank()), std::vector<uint8_t>{uint8_t(ok ? '1' : '0')});
      bool all = true;
      for (int r = 0; r < size(); ++r) all = all && store_->get(key + "/" + std::to_string(r)) == std::vector<uint8_t>{'1'};
      return all;
    };
    agree.barrier = [this] { gloo_->barrier()->wait(timeout_); };
    shm_ = std::make_unique<SharedMemoryGroup>(rank(), size(), timeout_, std::move(agree));
    shm_->open();
  }

  std::chrono::milliseconds timeout_;
  bool nccl_;
  bool hosts_store_ = false;
  std::unique_ptr<SharedMemoryGroup> shm_;  // Gloo only; its main segment may be inactive
  at::Device device_{at::kCPU};
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> gloo_;
#ifdef MLIP_HAVE_NCCL
  c10::intrusive_ptr<c10d::ProcessGroupNCCL> nccl_pg_;
#endif
};

#ifdef MLIP_HAVE_MPI
/// MPI_COMM_WORLD. mpirun ends the whole job when one rank dies, and announce_failure aborts it.
class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(const LaunchEnv& env, std::chrono::milliseconds timeout)
      : Communicator(env.rank, env.world_size), timeout_(timeout) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
      owner_ = true;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int rank = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (rank != env.rank || size != env.world_size)
      throw Error("mpirun: MPI says rank " + std::to_string(rank) + " of " + std::to_string(size) +
                  ", the environment says " + std::to_string(env.rank) + " of " + std::to_string(env.world_size));
    watchdog_ = std::thread([this] { watchdog(); });
    setup_shared_memory();
  }
  ~MpiCommunicator() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    if (watchdog_.joinable()) watchdog_.join();
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owner_ && !finalized) MPI_Finalize();
  }
  std::string backend() const override { return "mpi"; }
  std::string all_reduce_transport() const override { return shm_->active() ? "shared memory" : "MPI"; }
  double all_reduce_arrival_wait_seconds() const override { return shm_->arrival_wait_seconds(); }
  void announce_failure(const std::string&) override {
    shm_->abort();  // the others' shared-memory waits end at once
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  at::Tensor make_reduce_buffer(int64_t numel, at::ScalarType dtype) override {
    at::Tensor buffer = shm_->make_reduce_buffer(numel, dtype);
    return buffer.defined() ? buffer : Communicator::make_reduce_buffer(numel, dtype);
  }

 protected:
  // Blocking collectives (OpenMPI's tuned algorithms; its non-blocking ones were 5 ms slower per
  // step here), watched by a thread: a rank that stops answering ends the job after --timeout.
  void do_all_reduce(at::Tensor& t, int64_t mean_count) override {
    if (!t.device().is_cpu()) {  // host MPI: device tensors go through a host copy
      at::Tensor host = t.to(at::kCPU);
      do_all_reduce(host, mean_count);
      t.copy_(host);
      return;
    }
    if (shm_->all_reduce(t, mean_count)) return;  // ranks on one host (waits time out by themselves)
    {
      Watch w(*this, "all-reduce");
      check(MPI_Allreduce(MPI_IN_PLACE, t.data_ptr(), int(t.numel()), type(t), MPI_SUM, MPI_COMM_WORLD));
    }
    divide_first(t, mean_count);
  }
  void do_broadcast(at::Tensor& t, int root) override {
    if (!t.device().is_cpu()) {
      at::Tensor host = t.to(at::kCPU);
      do_broadcast(host, root);
      t.copy_(host);
      return;
    }
    Watch w(*this, "broadcast");
    check(MPI_Bcast(t.data_ptr(), int(t.numel()), type(t), root, MPI_COMM_WORLD));
  }
  void do_barrier() override {
    Watch w(*this, "barrier");
    check(MPI_Barrier(MPI_COMM_WORLD));
  }

 private:
  /// Ranks on one host reduce through shared memory, as under torchrun (OpenMPI's own
  /// shared-memory all-reduce took ~0.2 ms more per ethanol step; MLIP_SHM_ALLREDUCE=0 keeps
  /// MPI's). The ranks agree through MPI_Bcast, MPI_Allreduce and MPI_Barrier.
  void setup_shared_memory() {
    SharedMemoryGroup::Agreement agree;
    agree.share = [this](const std::string&, const std::string& value) {
      int64_t length = int64_t(value.size());
      check(MPI_Bcast(&length, 1, MPI_INT64_T, 0, MPI_COMM_WORLD));
      std::string out = rank() == 0 ? value : std::string(size_t(length), '\0');
      if (length > 0) check(MPI_Bcast(out.data(), int(length), MPI_CHAR, 0, MPI_COMM_WORLD));
      return out;
    };
    agree.all = [](const std::string&, bool ok) {
      int mine = ok ? 1 : 0, all = 0;
      check(MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
      return all == 1;
    };
    agree.barrier = [] { check(MPI_Barrier(MPI_COMM_WORLD)); };
    shm_ = std::make_unique<SharedMemoryGroup>(rank(), size(), timeout_, std::move(agree));
    shm_->open();
  }

  static MPI_Datatype type(const at::Tensor& t) {
    switch (t.scalar_type()) {
      case at::kDouble: return MPI_DOUBLE;
      case at::kFloat: return MPI_FLOAT;
      case at::kLong: return MPI_INT64_T;
      default: throw Error(std::string("mpi: unsupported dtype ") + c10::toString(t.scalar_type()));
    }
  }
  /// Marks the time a collective is in flight, for the watchdog.
  struct Watch {
    Watch(MpiCommunicator& c, const char* what) : c_(c) {
      c_.what_ = what;
      c_.since_ns_ = std::chrono::steady_clock::now().time_since_epoch().count();
    }
    ~Watch() { c_.since_ns_ = 0; }
    MpiCommunicator& c_;
  };

  /// Ends this process (non-zero, so mpirun ends the job) when a collective has waited longer
  /// than the timeout. It makes no MPI call: the main thread is inside one.
  void watchdog() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stop_) {
      wake_.wait_for(lock, std::chrono::milliseconds(200));
      const int64_t since = since_ns_;
      if (stop_ || since == 0) continue;
      const auto waited = std::chrono::steady_clock::now().time_since_epoch() - std::chrono::nanoseconds(since);
      if (waited < timeout_) continue;
      std::fprintf(stderr,
                   "mlip: error: rank %d: the %s over %d ranks (mpi) timed out after %ld s\n  another rank has "
                   "probably died or failed (see its output), or stopped answering (raise --timeout if a rank "
                   "legitimately works longer alone)\n",
                   rank(), what_.load(), size(), long(timeout_.count() / 1000));
      std::fflush(stderr);
      std::_Exit(1);
    }
  }
  static void check(int rc) {
    if (rc == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    throw Error(std::string(text, size_t(len)));
  }
  std::chrono::milliseconds timeout_;
  bool owner_ = false;
  std::atomic<int64_t> since_ns_{0};
  std::atomic<const char*> what_{""};
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread watchdog_;
  std::unique_ptr<SharedMemoryGroup> shm_;
};
#endif

}  // namespace

bool have_mpi() {
#ifdef MLIP_HAVE_MPI
  return true;
#else
  return false;
#endif
}

bool have_nccl() {
#ifdef MLIP_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

std::unique_ptr<Communicator> make_communicator(const LaunchEnv& env, const CommOptions& options) {
  if (env.world_size <= 1) return std::make_unique<LocalCommunicator>();
  // Gloo writes to its peers with writev, which cannot ask for no SIGPIPE: writing to a rank
  // that died must give an error (and a message), not kill this process silently.
  std::signal(SIGPIPE, SIG_IGN);
  std::string backend = options.backend;
  if (backend == "auto")
    backend = env.launcher == Launcher::kMpi && have_mpi() ? "mpi" : options.cuda && have_nccl() ? "nccl" : "gloo";
  if (backend == "gloo") return std::make_unique<C10dCommunicator>(env, options, false);
  if (backend == "nccl") {
    if (!have_nccl())
      throw Error("--backend nccl: this build has no NCCL (it needs a LibTorch with CUDA; see the feature summary)");
    return std::make_unique<C10dCommunicator>(env, options, true);
  }
  if (backend == "mpi") {
#ifdef MLIP_HAVE_MPI
    if (env.launcher != Launcher::kMpi)
      throw Error(std::string("--backend mpi: expected a run started by mpirun, found ") + launcher_name(env.launcher));
    return std::make_unique<MpiCommunicator>(env, options.timeout);
#else
    throw Error("--backend mpi: this build has no MPI (install libopenmpi-dev and reconfigure)");
#endif
  }
  throw Error("--backend: expected one of auto, gloo, mpi, nccl, got '" + options.backend + "'");
}

}  // namespace mlip::dist
