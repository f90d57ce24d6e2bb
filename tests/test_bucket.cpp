// The bucket sizes that batches are padded to for static shapes (models/bucket.h), against a
// direct search of the definition: the smallest multiple of the granularity >= n.
#include <gtest/gtest.h>

#include <set>

#include "error.h"
#include "models/bucket.h"

namespace {

using mlip::models::bucket_size;

/// The granularity by its definition: an eighth of the largest power of two <= n, at least 16.
int64_t granularity(int64_t n) {
  int64_t power = 1;
  for (int64_t p = 1; p <= n; p *= 2) power = p;
  return std::max<int64_t>(16, power / 8);
}

TEST(BucketSize, IsTheSmallestMultipleOfTheGranularityAtLeastN) {
  for (int64_t n = 0; n <= 70000; ++n) {
    const int64_t b = bucket_size(n), g = granularity(n);
    ASSERT_GE(b, n) << n;
    ASSERT_EQ(b % g, 0) << n;
    ASSERT_LT(b - n, g) << n;
    ASSERT_EQ(b % 2, 0) << n;
    ASSERT_LE(double(b - n), std::max(0.125 * double(n), 15.0)) << n;
  }
}

TEST(BucketSize, IsMonotoneAndABucketSizeIsItsOwnBucket) {
  int64_t previous = 0;
  for (int64_t n = 0; n <= 70000; ++n) {
    const int64_t b = bucket_size(n);
    ASSERT_GE(b, previous) << n;
    ASSERT_EQ(bucket_size(b), b) << n;
    previous = b;
  }
}

TEST(BucketSize, ManyCountsShareFewBuckets) {
  // One captured graph per bucket: from 1 to 10^6 items, about 8 buckets per doubling.
  std::set<int64_t> buckets;
  for (int64_t n = 1; n <= 1000000; ++n) buckets.insert(bucket_size(n));
  EXPECT_LT(buckets.size(), 8u * 20u + 16u);
  EXPECT_GT(buckets.size(), 8u * 10u);
}

TEST(BucketSize, ANegativeCountIsAnError) {
  try {
    bucket_size(-3);
    FAIL() << "expected mlip::Error";
  } catch (const mlip::Error& e) {
    EXPECT_NE(std::string(e.what()).find("got -3"), std::string::npos) << e.what();
  }
}

}  // namespace
