#include "dist/shm_all_reduce.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "error.h"

// ShmAllReduce with ranks as threads (each maps the segment itself, as processes do) and, for
// the detection of an ended rank, as a forked process.

namespace {

using mlip::dist::ShmAllReduce;
using namespace std::chrono_literals;

std::string unique_name(const std::string& tag) {
  return "/mlip-test-" + tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(std::random_device()());
}

/// Runs body(rank, shm) on `size` threads; rank 0 creates the segment before the others open it.
void run_ranks(int size, size_t capacity, const std::function<void(int, ShmAllReduce&)>& body,
               std::chrono::milliseconds timeout = 20s) {
  const std::string name = unique_name("ranks");
  const uint64_t token = 12345;
  auto root = std::make_unique<ShmAllReduce>(name, 0, size, capacity, token, timeout);
  std::vector<std::unique_ptr<ShmAllReduce>> others;
  for (int r = 1; r < size; ++r)
    others.push_back(std::make_unique<ShmAllReduce>(name, r, size, capacity, token, timeout));
  root->unlink();
  std::vector<std::future<void>> done;
  for (int r = 0; r < size; ++r) {
    ShmAllReduce& shm = r == 0 ? *root : *others[size_t(r - 1)];
    done.push_back(std::async(std::launch::async, [&, r] { body(r, shm); }));
  }
  for (auto& f : done) f.get();
}

template <typename T>
class ShmAllReduceTest : public ::testing::Test {};
using Types = ::testing::Types<float, double, int64_t>;
TYPED_TEST_SUITE(ShmAllReduceTest, Types);

/// n random values for each of `size` ranks (integers in [-500, 500), reals in (-1000, 1000)).
template <typename T>
std::vector<std::vector<T>> random_values(int size, int64_t n, uint64_t seed) {
  std::vector<std::vector<T>> data(static_cast<size_t>(size));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (auto& d : data)
    for (int64_t i = 0; i < n; ++i) d.push_back(std::is_integral_v<T> ? T(rng() % 1000) - T(500) : T(u(rng) * 1e3));
  return data;
}

/// The element-wise sum over the ranks, in rank order (the order the all-reduce uses).
template <typename T>
std::vector<T> sum_in_rank_order(const std::vector<std::vector<T>>& data) {
  std::vector<T> sum(data[0]);
  for (size_t r = 1; r < data.size(); ++r)
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += data[r][i];
  return sum;
}

/// Every rank's result equals `expected`, bit for bit.
template <typename T>
void expect_on_every_rank(const std::vector<std::vector<T>>& results, const std::vector<T>& expected) {
  for (size_t r = 0; r < results.size(); ++r)
    for (size_t i = 0; i < expected.size(); ++i)
      ASSERT_EQ(results[r][i], expected[i]) << "rank " << r << ", element " << i;
}

TYPED_TEST(ShmAllReduceTest, SumsInRankOrderWithIdenticalBitsOnEveryRank) {
  using T = TypeParam;
  for (int size : {2, 3}) {
    // 4 KiB per rank: the larger calls go in several parts.
    for (int64_t n : {int64_t(1), int64_t(7), int64_t(1000), int64_t(2500)}) {
      SCOPED_TRACE(std::to_string(size) + " ranks, " + std::to_string(n) + " values");
      const auto data = random_values<T>(size, n, uint64_t(n * 10 + size));
      auto results = data;
      run_ranks(size, 4096, [&](int rank, ShmAllReduce& shm) {
        // Three calls in a row: each uses the result of the previous one.
        for (int rep = 0; rep < 3; ++rep) {
          if (rep > 0) results[size_t(rank)] = data[size_t(rank)];
          shm.all_reduce_sum(results[size_t(rank)].data(), n);
        }
      });
      expect_on_every_rank(results, sum_in_rank_order(data));
    }
  }
}

// The same sums without copies: each rank writes its values into its own slot, and the result
// is there afterwards (three calls in a row, each rank writing its slot again as soon as the
// previous call returns).
TYPED_TEST(ShmAllReduceTest, SumsInPlaceInTheSlots) {
  using T = TypeParam;
  for (int size : {2, 3}) {
    for (int64_t n : {int64_t(1), int64_t(5), int64_t(511), int64_t(1500)}) {
      SCOPED_TRACE(std::to_string(size) + " ranks, " + std::to_string(n) + " values");
      const auto data = random_values<T>(size, n, uint64_t(n * 10 + size + 1));
      std::vector<std::vector<T>> results(static_cast<size_t>(size));
      run_ranks(size, size_t(n) * sizeof(T), [&](int rank, ShmAllReduce& shm) {
        T* mine = static_cast<T*>(shm.own_slot());
        for (int rep = 0; rep < 3; ++rep) {
          std::copy(data[size_t(rank)].begin(), data[size_t(rank)].end(), mine);
          shm.all_reduce_sum_in_slot<T>(n);
        }
        results[size_t(rank)].assign(mine, mine + n);
      });
      expect_on_every_rank(results, sum_in_rank_order(data));
    }
  }
}

// The wait for the last rank is told apart from the transfer: a rank that arrives 300 ms late
// waits for nobody, the other waits those 300 ms.
TEST(ShmAllReduce, CountsTheWaitForTheLastRank) {
  std::vector<double> waited(2);
  run_ranks(2, 4096, [&](int rank, ShmAllReduce& shm) {
    if (rank == 1) std::this_thread::sleep_for(300ms);
    double x = 1;
    shm.all_reduce_sum(&x, 1);
    waited[size_t(rank)] = shm.arrival_wait_seconds();
  });
  EXPECT_GE(waited[0], 0.29);
  EXPECT_LT(waited[1], 0.1);
}

// The mean of a prefix, divided as it is summed: x * (1 / W) in T, on every rank, whether copied
// (in parts) or in place.
TYPED_TEST(ShmAllReduceTest, AveragesAPrefixAsItSums) {
  using T = TypeParam;
  if constexpr (std::is_floating_point_v<T>) {
    for (int size : {2, 3}) {
      // 4 KiB slots: parts of 1024 (float) or 512 (double), so the prefix ends inside the second
      // part (float) or the third (double).
      const int64_t n = 1500, mean_count = 1100;
      const auto data = random_values<T>(size, n, uint64_t(size) + 100);
      auto expected = sum_in_rank_order(data);
      for (int64_t i = 0; i < mean_count; ++i) expected[size_t(i)] *= T(1.0 / size);
      for (const bool in_slot : {false, true}) {
        SCOPED_TRACE(std::to_string(size) + " ranks, " + (in_slot ? "in place" : "copied"));
        std::vector<std::vector<T>> results = data;
        run_ranks(size, in_slot ? size_t(n) * sizeof(T) : 4096, [&](int rank, ShmAllReduce& shm) {
          auto& mine = results[size_t(rank)];
          if (!in_slot) return shm.all_reduce_sum(mine.data(), n, mean_count);
          T* slot = static_cast<T*>(shm.own_slot());
          std::copy(mine.begin(), mine.end(), slot);
          shm.all_reduce_sum_in_slot<T>(n, mean_count);
          mine.assign(slot, slot + n);
        });
        expect_on_every_rank(results, expected);
      }
    }
  } else {
    run_ranks(2, 4096, [](int, ShmAllReduce& shm) {
      int64_t x = 1;
      EXPECT_THROW(shm.all_reduce_sum(&x, 1, 1), mlip::Error) << "integers have no mean here";
    });
  }
}

TEST(ShmAllReduce, InPlaceSumsMustFitTheSlot) {
  run_ranks(2, 64, [](int, ShmAllReduce& shm) {
    try {
      shm.all_reduce_sum_in_slot<double>(9);
      FAIL() << "expected an error";
    } catch (const mlip::Error& e) {
      EXPECT_NE(std::string(e.what()).find("9 values of 8 bytes do not fit the slot of 64 bytes"), std::string::npos)
          << e.what();
    }
  });
}

TEST(ShmAllReduce, ARankThatAbortsEndsTheOthersWait) {
  const auto start = std::chrono::steady_clock::now();
  std::string error;
  run_ranks(2, 4096, [&](int rank, ShmAllReduce& shm) {
    if (rank == 1) {
      std::this_thread::sleep_for(100ms);
      shm.abort();
      return;
    }
    double x = 1;
    try {
      shm.all_reduce_sum(&x, 1);
    } catch (const mlip::Error& e) {
      error = e.what();
    }
  });
  EXPECT_NE(error.find("rank 1 reported a failure"), std::string::npos) << error;
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
}

TEST(ShmAllReduce, ARankThatNeverArrivesTimesOut) {
  const auto start = std::chrono::steady_clock::now();
  std::string error;
  run_ranks(
      2, 4096,
      [&](int rank, ShmAllReduce& shm) {
        if (rank == 1) return;
        double x = 1;
        try {
          shm.all_reduce_sum(&x, 1);
        } catch (const mlip::Error& e) {
          error = e.what();
        }
      },
      300ms);
  EXPECT_NE(error.find("rank 1 did not arrive within 0.3 s"), std::string::npos) << error;
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, 300ms);
  EXPECT_LT(waited, 5s);
}

TEST(ShmAllReduce, AnEndedProcessIsNoticedAtOnce) {
  const std::string name = unique_name("ended");
  ShmAllReduce root(name, 0, 2, 4096, 7, 60s);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    try {
      ShmAllReduce peer(name, 1, 2, 4096, 7, 60s);
      ::_exit(peer.peers_visible() ? 0 : 3);
    } catch (...) {
      ::_exit(2);
    }
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0) << "the child could not map the segment, or did not see this process";
  const auto start = std::chrono::steady_clock::now();
  double x = 1;
  try {
    root.all_reduce_sum(&x, 1);
    FAIL() << "expected an error";
  } catch (const mlip::Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 (pid " + std::to_string(child) + ") has ended"), std::string::npos)
        << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);  // not the 60 s timeout
}

TEST(ShmAllReduce, RejectsAnotherJobsSegmentAndATakenName) {
  const std::string name = unique_name("token");
  ShmAllReduce root(name, 0, 2, 4096, 1, 10s);
  try {
    ShmAllReduce other(name, 1, 2, 4096, 2, 10s);
    FAIL() << "expected an error";
  } catch (const mlip::Error& e) {
    EXPECT_NE(std::string(e.what()).find("another job"), std::string::npos) << e.what();
  }
  try {
    ShmAllReduce again(name, 0, 2, 4096, 1, 10s);
    FAIL() << "expected an error";
  } catch (const mlip::Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot create"), std::string::npos) << e.what();
  }
}

}  // namespace
