#include "dist/simple_ddp.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <tuple>

#include "dist/communicator.h"
#include "error.h"

namespace {

using mlip::dist::Communicator;

/// A free TCP port on localhost (bound to port 0, then released).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

/// Runs `body(comm)` on `world` ranks: threads of this process joined by a real Gloo process
/// group over a TCPStore rendezvous on localhost (the torchrun protocol).
void on_ranks(int world, const std::function<void(Communicator&)>& body) {
  // LibTorch 2.x records every Gloo collective in a process-wide flight recorder whose map of
  // process groups is written outside its lock: several groups in one process (these threads)
  // racing on a first collective corrupted it (a segfault in CI, reproduced here about once in
  // 170 runs beside a CPU burner). A real run has one group per process; the recorder (a
  // debugging aid) is off for the tests. Read when the first group is made; 1.13 has none.
  ::setenv("TORCH_FR_BUFFER_SIZE", "0", 1);
  const int port = free_port();
  std::vector<std::thread> threads;
  std::vector<std::string> errors(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        mlip::dist::LaunchEnv env;
        env.launcher = mlip::dist::Launcher::kTorchrun;
        env.rank = env.local_rank = r;
        env.world_size = world;
        env.master_addr = "127.0.0.1";
        env.master_port = port;
        mlip::dist::CommOptions options;
        options.backend = "gloo";
        options.timeout = std::chrono::seconds(60);
        auto comm = mlip::dist::make_communicator(env, options);
        body(*comm);
      } catch (const std::exception& e) {
        errors[size_t(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) EXPECT_EQ(errors[size_t(r)], "") << "rank " << r;
}

template <typename T>
class SimpleDDPTest : public ::testing::Test {};
using Dtypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(SimpleDDPTest, Dtypes);

TYPED_TEST(SimpleDDPTest, AveragesGradientsWithZerosForAbsentOnesInOneAllReduce) {
  const auto dtype = std::is_same_v<TypeParam, float> ? torch::kFloat32 : torch::kFloat64;
  for (int world : {2, 3}) {
    on_ranks(world, [&](Communicator& comm) {
      const int r = comm.rank();
      auto a = torch::zeros({2, 3}, dtype).requires_grad_();
      auto b = torch::zeros({4}, dtype).requires_grad_();
      // a: rank r holds (r + 1) * [1..6]; b: only rank 0 has a gradient (4 everywhere).
      a.mutable_grad() = torch::arange(1, 7, dtype).reshape({2, 3}) * double(r + 1);
      if (r == 0) b.mutable_grad() = torch::full({4}, 4.0, dtype);
      mlip::dist::SimpleDDP ddp({a, b}, comm);
      EXPECT_EQ(ddp.numel(), 10);
      std::vector<double> extras = {double(r + 1), 0.5};
      const int64_t before = comm.all_reduces();
      ddp.sync(extras);
      EXPECT_EQ(comm.all_reduces() - before, 1) << "exactly one collective per step";
      const double mean_factor = double(world + 1) / 2.0;  // mean of 1..world
      const auto expected_a = torch::arange(1, 7, dtype).reshape({2, 3}) * mean_factor;
      EXPECT_TRUE(torch::allclose(a.grad(), expected_a, 1e-6, 0)) << a.grad();
      ASSERT_TRUE(b.grad().defined()) << "rank " << r;
      EXPECT_TRUE(torch::allclose(b.grad(), torch::full({4}, 4.0 / world, dtype), 1e-6, 0)) << b.grad();
      EXPECT_DOUBLE_EQ(extras[0], world * (world + 1) / 2.0);
      EXPECT_DOUBLE_EQ(extras[1], 0.5 * world);
    });
  }
}

TEST(SimpleDDP, SameGradientsOnEveryRankBitForBit) {
  on_ranks(2, [](Communicator& comm) {
    torch::manual_seed(uint64_t(comm.rank()) + 7);  // different local gradients
    auto p = torch::zeros({1000}, torch::kFloat64).requires_grad_();
    p.mutable_grad() = torch::randn({1000}, torch::kFloat64);
    mlip::dist::SimpleDDP ddp({p}, comm);
    std::vector<double> extras;
    ddp.sync(extras);
    auto mine = p.grad().clone();
    auto roots = mine.clone();
    mlip::dist::broadcast_tensors(comm, {roots}, 0);
    EXPECT_TRUE(torch::equal(mine, roots)) << "rank " << comm.rank();
  });
}

TEST(BroadcastTensors, GivesEveryRankTheRootsValuesOneBroadcastPerDtype) {
  on_ranks(3, [](Communicator& comm) {
    const double r = comm.rank();
    auto w = torch::full({3, 2}, r, torch::kFloat64);
    auto v = torch::full({5}, r + 10, torch::kFloat64);
    auto n = torch::full({2}, int64_t(r) + 100, torch::kInt64);
    const int64_t before = comm.collectives();
    mlip::dist::broadcast_tensors(comm, {w, n, v}, 1);
    EXPECT_EQ(comm.collectives() - before, 2);
    EXPECT_TRUE(torch::equal(w, torch::full({3, 2}, 1.0, torch::kFloat64)));
    EXPECT_TRUE(torch::equal(v, torch::full({5}, 11.0, torch::kFloat64)));
    EXPECT_TRUE(torch::equal(n, torch::full({2}, int64_t(101), torch::kInt64)));
  });
}

/// Whether `address` lies in a mapping of a file in /dev/shm (a shared-memory segment).
bool in_shared_memory(const void* address) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  const auto a = reinterpret_cast<uintptr_t>(address);
  while (std::getline(maps, line)) {
    uintptr_t lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi) == 2 && lo <= a && a < hi)
      return line.find("/dev/shm/mlip-") != std::string::npos;
  }
  return false;
}

// SimpleDDP's buffer: through shared memory it is this rank's slot of a segment (so the
// all-reduce copies nothing), over TCP an ordinary tensor; both sum right, call after call, and
// the memory stays valid after the communicator is gone.
TEST(Communicator, ReduceBuffersLiveInSharedMemoryAndOutliveTheCommunicator) {
  for (const bool shm : {true, false}) {
    SCOPED_TRACE(shm ? "shared memory" : "Gloo over TCP");
    if (!shm) ::setenv("MLIP_SHM_ALLREDUCE", "0", 1);
    std::vector<at::Tensor> kept(3);
    on_ranks(3, [&](Communicator& comm) {
      const int r = comm.rank();
      EXPECT_EQ(comm.all_reduce_transport(), shm ? "shared memory" : "Gloo over TCP");
      for (const auto dtype : {torch::kFloat64, torch::kFloat32}) {
        auto buffer = comm.make_reduce_buffer(1000, dtype);
        ASSERT_EQ(buffer.numel(), 1000);
        ASSERT_EQ(buffer.scalar_type(), dtype);
        EXPECT_TRUE(torch::equal(buffer, torch::zeros({1000}, dtype)));
        EXPECT_EQ(in_shared_memory(buffer.data_ptr()), shm) << "rank " << r;
        for (int rep = 0; rep < 3; ++rep) {
          buffer.copy_(torch::arange(1000, dtype) * double(r + 1) + rep);
          comm.all_reduce_sum(buffer);
          // Sum over ranks of (r + 1) i + rep = 6 i + 3 rep.
          EXPECT_TRUE(torch::equal(buffer, torch::arange(1000, dtype) * 6.0 + 3.0 * rep)) << "rank " << r;
        }
        // The mean of the first 600: the sum times 1/3 (as ATen multiplies), the rest summed.
        buffer.copy_(torch::arange(1000, dtype) * double(r + 1) + 0.25);
        comm.all_reduce_sum(buffer, 600);
        auto expected = torch::arange(1000, dtype) * 6.0 + 0.75;
        expected.narrow(0, 0, 600).mul_(1.0 / 3.0);
        EXPECT_TRUE(torch::equal(buffer, expected)) << "rank " << r;
        auto plain = torch::arange(1000, dtype) * double(r + 1) + 0.25;  // not a reduce buffer
        comm.all_reduce_sum(plain, 600);
        EXPECT_TRUE(torch::equal(plain, expected)) << "rank " << r;
        buffer.copy_(torch::arange(1000, dtype) * double(r + 1) + 2.0);
        comm.all_reduce_sum(buffer);
        kept[size_t(r)] = buffer.narrow(0, 10, 5);  // a view keeps the whole buffer alive
      }
    });
    ::unsetenv("MLIP_SHM_ALLREDUCE");
    for (const auto& view : kept)
      EXPECT_TRUE(torch::equal(view, torch::arange(10, 15, torch::kFloat32) * 6.0 + 6.0));
  }
}

TEST(Communicator, OneRankIsANoOpAndBadBackendsAreNamed) {
  auto comm = mlip::dist::make_communicator(mlip::dist::LaunchEnv{}, {});
  EXPECT_EQ(comm->size(), 1);
  EXPECT_EQ(comm->backend(), "none");
  auto t = torch::ones({3}, torch::kFloat64);
  comm->all_reduce_sum(t);
  EXPECT_TRUE(torch::equal(t, torch::ones({3}, torch::kFloat64)));
  comm->all_reduce_sum(t, 3);  // the mean over one rank
  EXPECT_TRUE(torch::equal(t, torch::ones({3}, torch::kFloat64)));
  auto counts = torch::ones({3}, torch::kInt64);
  for (auto [tensor, mean_count, what] : {std::tuple{t, int64_t(4), "cannot average 4 of the 3 values of a Double"},
                                          std::tuple{counts, int64_t(1), "cannot average 1 of the 3 values of a Long"}}) {
    try {
      comm->all_reduce_sum(tensor, mean_count);
      FAIL() << "expected an error";
    } catch (const mlip::Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  }
  mlip::dist::LaunchEnv two;
  two.launcher = mlip::dist::Launcher::kTorchrun;
  two.world_size = 2;
  mlip::dist::CommOptions options;
  options.backend = "smoke-signals";
  try {
    mlip::dist::make_communicator(two, options);
    FAIL() << "expected an error";
  } catch (const mlip::Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected one of auto, gloo, mpi, nccl, got 'smoke-signals'"),
              std::string::npos);
  }
  options.backend = "gloo";  // no MASTER_ADDR / MASTER_PORT
  try {
    mlip::dist::make_communicator(two, options);
    FAIL() << "expected an error";
  } catch (const mlip::Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs MASTER_ADDR and MASTER_PORT"), std::string::npos);
  }
}

// A rank that waits for a partner who never comes fails after the timeout, with a message.
TEST(Communicator, RendezvousWithAMissingRankTimesOut) {
  mlip::dist::LaunchEnv env;
  env.launcher = mlip::dist::Launcher::kTorchrun;
  env.world_size = 2;
  env.master_addr = "127.0.0.1";
  env.master_port = free_port();
  mlip::dist::CommOptions options;
  options.backend = "gloo";
  options.timeout = std::chrono::seconds(2);
  const auto start = std::chrono::steady_clock::now();
  try {
    mlip::dist::make_communicator(env, options);
    FAIL() << "expected an error";
  } catch (const mlip::Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("rank 0: ", 0), 0u) << what;
    EXPECT_NE(what.find("failed (timed out: no answer within --timeout 2 s)"), std::string::npos) << what;
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 30.0);
}

}  // namespace
