#include "dist/host_ranks.h"

#include <torch/script.h>
#include <unistd.h>

#include <functional>
#include <string>

namespace mlip::dist {

int ranks_on_this_host(Communicator& comm) {
  if (comm.size() <= 1) return 1;
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) return 1;
  // Each rank writes its host's hash (kept positive, never 0) in its own place; the sum then
  // holds every rank's.
  const int64_t mine = int64_t(std::hash<std::string>{}(host) >> 2) + 1;
  at::Tensor hashes = at::zeros({comm.size()}, at::kLong);
  hashes[comm.rank()] = mine;
  comm.all_reduce_sum(hashes);
  const auto* h = hashes.data_ptr<int64_t>();
  int same = 0;
  for (int r = 0; r < comm.size(); ++r) same += h[r] == mine ? 1 : 0;
  return same;
}

}  // namespace mlip::dist
