// The exact top-k by magnitude (compress/magnitude_topk.h) against a stable sort of all
// elements: both paths (small inputs, histogram + boundary bucket), ties, NaN and infinities.
#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <numeric>

#include <gtest/gtest.h>

#include "compress/magnitude_topk.h"
#include "exchange_harness.h"

namespace gradsync {
namespace {

using testing::gaussian;

// NaN above everything, then by |x|.
bool largerMagnitude(float a, float b) {
  if (std::isnan(a)) return !std::isnan(b);
  if (std::isnan(b)) return false;
  return std::fabs(a) > std::fabs(b);
}

// Naive reference: stable sort of every index by magnitude, the first k, in index order.
std::vector<uint32_t> naiveTopK(const std::vector<float>& x, size_t k) {
  std::vector<uint32_t> order(x.size());
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(),
                   [&](uint32_t a, uint32_t b) { return largerMagnitude(x[a], x[b]); });
  order.resize(k);
  std::sort(order.begin(), order.end());
  return order;
}

void expectLikeNaive(const std::vector<float>& x, size_t k, TopKScratch& scratch) {
  std::vector<uint32_t> got;
  topKByMagnitude(x, k, got, scratch);
  ASSERT_EQ(got, naiveTopK(x, k)) << "n " << x.size() << " k " << k;
}

TEST(MagnitudeTopK, MatchesAStableSortOnBothPaths) {
  TopKScratch scratch;  // shared on purpose: reuse across sizes must not leak state
  for (size_t n : {size_t{1}, size_t{2}, size_t{7}, size_t{1000}, size_t{40'001}}) {
    std::vector<float> x = gaussian(n, n);
    for (size_t k : {size_t{0}, size_t{1}, n / 100, n / 2, n - 1, n}) {
      expectLikeNaive(x, k, scratch);
    }
  }
}

TEST(MagnitudeTopK, MatchesAStableSortOnAMillionElements) {
  TopKScratch scratch;
  std::vector<float> x = gaussian((size_t{1} << 20) + 3, 5);
  expectLikeNaive(x, 10'486, scratch);
}

TEST(MagnitudeTopK, BreaksTiesTowardTheLowerIndex) {
  TopKScratch scratch;
  // Five distinct magnitudes over 50,000 elements: the boundary is one huge tie.
  std::vector<float> x(50'000);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = static_cast<float>(static_cast<int>(i * 7919 % 5) - 2);
  for (size_t k : {size_t{1}, size_t{10'000}, size_t{20'001}, size_t{33'333}}) {
    expectLikeNaive(x, k, scratch);
  }
  std::vector<float> zeros(100'000, 0.0f);
  zeros[77] = -0.0f;
  std::vector<uint32_t> got;
  topKByMagnitude(zeros, 10, got, scratch);
  EXPECT_EQ(got, (std::vector<uint32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
}

TEST(MagnitudeTopK, SeparatesValuesOneUlpApartInOneBucket) {
  TopKScratch scratch;
  // Every value shares the histogram's high bits, so the exact step sees the whole input.
  std::vector<float> x(60'000);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = std::bit_cast<float>(0x3f800000u + static_cast<uint32_t>(i * 40'503 % 4096));
    if (i % 3 == 0) x[i] = -x[i];
  }
  for (size_t k : {size_t{1}, size_t{100}, size_t{30'000}}) expectLikeNaive(x, k, scratch);
}

TEST(MagnitudeTopK, RanksNanAboveInfinityAboveFinite) {
  TopKScratch scratch;
  for (size_t n : {size_t{100}, size_t{50'000}}) {
    std::vector<float> x = gaussian(n, 3);
    x[n / 2] = std::numeric_limits<float>::quiet_NaN();
    x[n / 3] = -std::numeric_limits<float>::infinity();
    x[n / 4] = 1e30f;
    std::vector<uint32_t> got;
    topKByMagnitude(x, 3, got, scratch);
    std::vector<uint32_t> expected = {static_cast<uint32_t>(n / 4), static_cast<uint32_t>(n / 3),
                                      static_cast<uint32_t>(n / 2)};
    EXPECT_EQ(got, expected);
    expectLikeNaive(x, n / 10, scratch);
  }
}

}  // namespace
}  // namespace gradsync
