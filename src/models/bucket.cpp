#include "models/bucket.h"

#include "error.h"

namespace mlip::models {

int64_t bucket_size(int64_t n) {
  if (n < 0) throw Error("bucket_size: expected a count >= 0, got " + std::to_string(n));
  constexpr int64_t kSmallest = 16;
  int64_t power = 1;
  while (power <= n / 2) power *= 2;  // the largest power of two <= n (1 for n <= 1)
  const int64_t granularity = power / 8 > kSmallest ? power / 8 : kSmallest;
  return (n + granularity - 1) / granularity * granularity;
}

}  // namespace mlip::models
