// Exact top-k selection by magnitude (gtopk's local selection and merges, DGC's fallback when
// its sampled threshold lets through too many elements). A radix select on the bits of |x|:
// one histogram pass and one partition pass over the input, no sort of the whole tensor.
//
// Contract: the result is the set a stable sort by |x| (descending) would put first, i.e. ties
// are broken toward the lower index, so it is a pure function of the input (ranks that select
// from identical data agree bit for bit). NaN ranks above infinity (a NaN gradient stays
// visible instead of vanishing); -0 and +0 are equal. Not thread-safe per scratch object.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace gradsync {

// Buffers reused across calls so that steady-state selection allocates nothing.
struct TopKScratch {
  std::vector<uint32_t> histogram;
  std::vector<uint32_t> above;       // indices whose high key bits beat the boundary bucket
  std::vector<uint32_t> candidates;  // indices in the boundary bucket
  std::vector<uint32_t> keys;        // candidate keys, reordered by the exact selection
};

// The ordering key of |x|: the float's bits without the sign, monotone in |x| for non-NaN x.
inline uint32_t magnitudeKey(uint32_t bits) {
  return bits & 0x7fffffffu;
}

// Replaces `out` with the indices of the k largest |x[i]|, in increasing index order.
// Requires k <= x.size() and x.size() < 2^32.
void topKByMagnitude(std::span<const float> x, size_t k, std::vector<uint32_t>& out,
                     TopKScratch& scratch);

}  // namespace gradsync
