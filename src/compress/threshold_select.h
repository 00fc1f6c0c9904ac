// MSTopK's threshold search (Shi et al., MLSys'21; docs/algorithms.md "mstopk"): k elements of
// large magnitude without sorting, found by bisecting a threshold between mean(|x|) and
// max(|x|) for N iterations.
//
// The algorithm as the re-implementations run it: with t(a) = (a - mean) / (max - mean), count
// the elements with t >= rho for N bisection midpoints rho; theta1 is the midpoint whose count
// k1 is the largest <= k, theta2 the one whose count is the smallest > k; keep every element
// with t >= theta1 and fill up to exactly k from [theta2, theta1). The midpoints are the dyadic
// fractions j / 2^N, so the N counts are all determined by the integer q = floor(t * 2^N): the
// bisection ends at theta1 = (the smallest j with count(q >= j) <= k) / 2^N and theta2 = theta1 -
// 2^-N. That is exactly the top-k by the key q (plus 1, so that 0 marks elements below the
// mean), with the fill taken in index order; the radix selector of select.h computes it in two
// passes instead of N, with the same result as the N-pass bisection, bit for bit. On large inputs
// (from 2^18 elements, k up to a sixteenth) the whole search is one pass: a sample of the
// magnitudes gives a floor under about the 2k largest, and the pass that sums the mean and the
// max also gathers every element at or above it; the keys need the mean and max only for those.
// As the key never decreases with the magnitude, the result is the full search's whenever the
// largest magnitude under the floor keys below the k-th (checked; else the full search runs).
//
// Precisely (this is the definition the tests check against a literal N-pass bisection):
//   a = |x|, (mean, max) = magnitudeStats(x), c = 1.0f / (max - mean), t = (a - mean) * c in
//   float; rho is compared as (double)t >= j / 2^N. Where the re-implementations leave a case
//   undefined:
//   - the bisection never tests its ends; both count as tested: rho = 0 (theta2's default)
//     and rho = 1, so theta1 = 1 (the elements at the maximum) when every midpoint counts more
//     than k, and if more than k elements tie at the maximum, theta2 = 1 and theta1 is above
//     everything (the fill takes the first k of them);
//   - the fill takes the lowest indices of the window (re-implementations take a random
//     contiguous run; the window is 2^-N of the range wide, so which ones matters little);
//   - fewer than k elements at or above the mean (a few huge outliers, or R near 1), or a
//     range [mean, max] that cannot be searched (max <= mean: all magnitudes equal up to
//     rounding; or c * 2^N not finite): the search runs on [0, max] instead (mean := 0), so
//     the fill takes the largest of the rest, not arbitrary ones;
//   - if [0, max] cannot be searched either (all zero), or x holds a NaN or an infinity: exact
//     top-k (select.h), which is what the search would pick anyway, NaN first.
// Contract: as TopKSelector (ascending indices, reused buffers, not thread-safe).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "compress/select.h"

namespace gradsync {

struct MagnitudeStats {
  float mean = 0;      // mean of |x| (summed in float in blocks of 1024, blocks in double)
  float max = 0;       // max of |x|
  bool finite = true;  // false if x holds a NaN or an infinity (or |x| sums past float range)
};
MagnitudeStats magnitudeStats(std::span<const float> x);

class ThresholdSelector {
 public:
  // 1 <= iterations <= 30 (the keys use iterations + 1 bits).
  explicit ThresholdSelector(int iterations);

  // Replaces `indices` with exactly min(k, size) indices, ascending.
  void select(std::span<const float> x, size_t k, std::vector<uint32_t>& indices);

  // How the last select() ran: searching [mean, max], searching [0, max], or exact top-k (see
  // above for when).
  enum class Range { kFromMean, kFromZero, kExact };
  Range lastRange() const { return lastRange_; }
  // Whether the last select() made one pass over the input (from 2^18 elements, k up to a
  // sixteenth of them: the mean and the max summed while a sample's candidates are gathered).
  bool lastOnePass() const { return onePass_; }

 private:
  // Top-k by the key of [lower, max]; returns the k-th largest key, or nothing (and selects
  // nothing) if the range cannot be inverted.
  std::optional<uint32_t> selectInRange(std::span<const float> x, float lower, float max, size_t k,
                                        std::vector<uint32_t>& indices);
  // One pass: the statistics (always set) while gathering the elements at or above the
  // magnitude a sample of them says about twice the k largest lie (TopKSelector::sampledFloor),
  // then the grid's top-k among those. False (nothing selected) where the sample misjudged or
  // the k-th lies below the mean: the caller selects over the whole input then.
  bool selectInOnePass(std::span<const float> x, size_t k, std::vector<uint32_t>& indices,
                       MagnitudeStats& stats);

  int iterations_;
  TopKSelector selector_;
  Range lastRange_ = Range::kExact;
  bool onePass_ = false;
  std::vector<uint32_t> candidates_, candidateKeys_, chosen_, scratch_;  // reused
};

}  // namespace gradsync
