#include "compress/magnitude_topk.h"

#include <algorithm>
#include <bit>
#include <functional>
#include <numeric>

#include "common/check.h"

namespace gradsync {
namespace {

// The histogram looks at the top 16 of the key's 31 bits: 256 KiB of counters stay in L2, and
// the boundary bucket is narrow enough (a few ulps of 2^-3 relative width) that the exact step
// after it sees a small fraction of the input for any smooth distribution.
constexpr int kShift = 15;
constexpr size_t kBuckets = size_t{1} << (31 - kShift);
// Below this size clearing the histogram costs more than selecting among all elements directly.
constexpr size_t kSmall = size_t{1} << 15;
// Elements tested at once by the partition pass before it looks at them one by one.
constexpr size_t kBlock = 16;

inline uint32_t keyAt(const float* x, size_t i) {
  return magnitudeKey(std::bit_cast<uint32_t>(x[i]));
}

// Keeps, in place and in order, the r candidates with the largest keys (ties: the earlier ones).
// Returns r. `candidates` is in increasing index order.
size_t keepLargest(const float* x, std::span<uint32_t> candidates, size_t r,
                   std::vector<uint32_t>& keys) {
  if (r == candidates.size() || r == 0) return r;
  keys.resize(candidates.size());
  for (size_t j = 0; j < candidates.size(); ++j) keys[j] = keyAt(x, candidates[j]);
  std::nth_element(keys.begin(), keys.begin() + static_cast<ptrdiff_t>(r - 1), keys.end(),
                   std::greater<>());
  const uint32_t threshold = keys[r - 1];
  // Everything before position r - 1 is >= threshold: count the strict winners there.
  size_t greater = 0;
  for (size_t j = 0; j + 1 < r; ++j) greater += keys[j] > threshold;
  size_t equalLeft = r - greater;
  size_t kept = 0;
  for (uint32_t index : candidates) {
    const uint32_t key = keyAt(x, index);
    if (key > threshold || (key == threshold && equalLeft > 0)) {
      equalLeft -= key == threshold;
      candidates[kept++] = index;
    }
  }
  GS_CHECK_EQ(kept, r);
  return r;
}

// Counts keys per bucket of their high bits; returns the boundary bucket (the one holding the
// k-th largest key) and sets `above` to the number of elements in higher buckets.
uint32_t boundaryBucket(const float* x, size_t n, size_t k, std::vector<uint32_t>& histogram,
                        size_t& above) {
  histogram.assign(kBuckets, 0);
  for (size_t i = 0; i < n; ++i) ++histogram[keyAt(x, i) >> kShift];
  above = 0;
  uint32_t bucket = kBuckets - 1;
  while (above + histogram[bucket] < k) above += histogram[bucket--];
  return bucket;
}

// Appends the indices of bucket > boundary to `above` and of bucket == boundary to
// `candidates`, in increasing order. Both arrays have one spare slot: each element is written
// unconditionally and kept by advancing the count. Blocks with no element at or above the
// boundary, the vast majority for small k, are skipped after a vectorised test.
void partition(const float* x, size_t n, uint32_t boundary, uint32_t* above, size_t& na,
               uint32_t* candidates, size_t& nc) {
  const uint32_t lowest = boundary << kShift;  // the smallest key in the boundary bucket
  auto scan = [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      const uint32_t bucket = keyAt(x, i) >> kShift;
      above[na] = static_cast<uint32_t>(i);
      na += bucket > boundary;
      candidates[nc] = static_cast<uint32_t>(i);
      nc += bucket == boundary;
    }
  };
  size_t begin = 0;
  for (; begin + kBlock <= n; begin += kBlock) {
    uint32_t hits = 0;
    for (size_t i = begin; i < begin + kBlock; ++i) hits |= keyAt(x, i) >= lowest;
    if (hits != 0) scan(begin, begin + kBlock);
  }
  scan(begin, n);
}

}  // namespace

void topKByMagnitude(std::span<const float> x, size_t k, std::vector<uint32_t>& out,
                     TopKScratch& scratch) {
  const size_t n = x.size();
  GS_CHECK_LE(k, n);
  GS_CHECK_LE(n, size_t{UINT32_MAX});
  out.resize(k);
  if (k == 0) return;
  if (k == n || n < kSmall) {
    std::vector<uint32_t>& all = k == n ? out : scratch.candidates;
    all.resize(n);
    std::iota(all.begin(), all.end(), 0u);
    if (k == n) return;
    keepLargest(x.data(), all, k, scratch.keys);
    std::copy_n(all.begin(), k, out.begin());
    return;
  }
  size_t aboveCount = 0;
  const uint32_t boundary = boundaryBucket(x.data(), n, k, scratch.histogram, aboveCount);
  // One spare slot each: the partition writes unconditionally and advances conditionally.
  scratch.above.resize(aboveCount + 1);
  scratch.candidates.resize(scratch.histogram[boundary] + 1);
  size_t na = 0, nc = 0;
  partition(x.data(), n, boundary, scratch.above.data(), na, scratch.candidates.data(), nc);
  GS_CHECK_EQ(na, aboveCount);
  uint32_t* candidates = scratch.candidates.data();
  size_t chosen = keepLargest(x.data(), {candidates, nc}, k - na, scratch.keys);
  std::merge(scratch.above.data(), scratch.above.data() + na, candidates, candidates + chosen,
             out.begin());
}

}  // namespace gradsync
