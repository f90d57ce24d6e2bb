// The shared-memory all-reduce alone (no training): W processes (fork) sum n float64 values,
// 110 times, both ways: copied into the slot and back (all_reduce_sum, as for any tensor), and
// in place in the slot with the mean of all but the last 5 values taken as they are summed
// (all_reduce_sum_in_slot, as for SimpleDDP's buffer); prints the median time per all-reduce
// on rank 0 over the last 100.
//
// usage: bench_shm_all_reduce [--values N] [--ranks W]   (default: the reference model's
// 1,014,187 gradient values and metrics, 2 ranks)

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "dist/shm_all_reduce.h"
#include "error.h"

int main(int argc, char** argv) {
  int64_t n = 1014187;
  int ranks = 2;
  for (int a = 1; a + 1 < argc; a += 2) {
    const std::string key = argv[a];
    if (key == "--values") n = std::atoll(argv[a + 1]);
    else if (key == "--ranks") ranks = std::atoi(argv[a + 1]);
    else {
      std::fprintf(stderr, "bench_shm_all_reduce: unknown option '%s'\n", key.c_str());
      return 2;
    }
  }
  if (n <= 0 || ranks < 2) {
    std::fprintf(stderr, "bench_shm_all_reduce: expected --values > 0 and --ranks >= 2\n");
    return 2;
  }
  // One run of 110 all-reduces of W processes over a segment of `capacity` bytes per rank;
  // returns rank 0's median ms over the last 100.
  auto run = [&](const std::string& name, size_t capacity, bool in_slot) {
    auto reduce = [&](mlip::dist::ShmAllReduce& shm, std::vector<double>& v) {
      if (in_slot) shm.all_reduce_sum_in_slot<double>(n, std::max<int64_t>(n - 5, 0));  // as SimpleDDP
      else shm.all_reduce_sum(v.data(), n);
    };
    mlip::dist::ShmAllReduce root(name, 0, ranks, capacity, 1, std::chrono::seconds(10));
    std::vector<pid_t> children;
    for (int r = 1; r < ranks; ++r) {
      const pid_t pid = ::fork();
      if (pid == 0) {
        try {
          mlip::dist::ShmAllReduce peer(name, r, ranks, capacity, 1, std::chrono::seconds(10));
          std::vector<double> v(static_cast<size_t>(n), 1.0);
          for (int i = 0; i < 110; ++i) reduce(peer, v);
        } catch (const mlip::Error& e) {
          std::fprintf(stderr, "bench_shm_all_reduce: rank %d: %s\n", r, e.what());
          ::_exit(1);
        }
        ::_exit(0);
      }
      children.push_back(pid);
    }
    std::vector<double> v(static_cast<size_t>(n), 1.0), ms;
    for (int i = 0; i < 110; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      reduce(root, v);
      const auto t1 = std::chrono::steady_clock::now();
      if (i >= 10) ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
    for (pid_t pid : children) ::waitpid(pid, nullptr, 0);
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  };
  const std::string name = "/mlip-bench-" + std::to_string(::getpid());
  const double mb = double(n) * 8e-6;
  try {
    // The communicator's segment for any tensor (4 MiB per rank; larger ones go in parts), and
    // SimpleDDP's buffer, which is a slot of a segment of its own.
    const double copied = run(name + "-c", size_t(4) << 20, false);
    const double in_slot = run(name + "-s", size_t(n) * sizeof(double), true);
    std::printf("shared-memory all-reduce, %d ranks, %lld float64 values (%.1f MB), median per call:\n", ranks,
                static_cast<long long>(n), mb);
    std::printf("  copied into the slot and back:  %.3f ms (%.1f GB/s)\n", copied, mb / copied);
    std::printf("  in place in the slot, averaged: %.3f ms (%.1f GB/s)\n", in_slot, mb / in_slot);
  } catch (const mlip::Error& e) {
    std::fprintf(stderr, "bench_shm_all_reduce: %s\n", e.what());
    return 1;
  }
  return 0;
}
