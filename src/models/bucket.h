#pragma once

#include <cstdint>

namespace mlip::models {

/// The size a count of `n` items (edges, pairs) is padded to so that batches of nearby sizes
/// share one tensor shape (docs/device.md "Static shapes"): the smallest multiple of the
/// granularity g >= n, where g is an eighth of the largest power of two <= n, and at least 16.
/// So a padded size is at most 12.5% (or 15 items) above n, and the sizes from 1 to n fall into
/// O(log n) buckets: a replayed CUDA graph exists per bucket, not per batch.
/// n: >= 0; the result is >= n, even, and n itself when n is already a bucket size.
int64_t bucket_size(int64_t n);

}  // namespace mlip::models
