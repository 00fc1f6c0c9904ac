// MSTopK threshold search (threshold_select.h): the N-iteration bisection computed as a radix
// top-k over the bisection grid, two passes over the input plus one for the mean and the max.
#include "compress/threshold_select.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/check.h"

namespace gradsync {
namespace {

constexpr size_t kBlock = 1024;  // elements summed in float before the total (double)

// Key of |x| on the bisection grid of [lower, max]: 0 below `lower`, else
// floor(min(t * 2^N, 2^N)) + 1 with t = (|x| - lower) * inverseRange.
class GridKeys final : public KeySource {
 public:
  // `scaledInverse` = inverseRange * 2^N, finite.
  GridKeys(std::span<const float> x, float lower, float scaledInverse, int iterations)
      : x_(x),
        lower_(lower),
        scaledInverse_(scaledInverse),
        gridSize_(std::ldexp(1.0f, iterations)),
        bits_(iterations + 1) {}
  size_t size() const override { return x_.size(); }
  int keyBits() const override { return bits_; }
  void fill(size_t begin, size_t count, uint32_t* keys) const override {
    const float* x = x_.data() + begin;
    const float lower = lower_, scaled = scaledInverse_, grid = gridSize_;
    for (size_t j = 0; j < count; ++j) {
      const float d = std::fabs(x[j]) - lower;
      // d * (c * 2^N) rounds like (d * c) * 2^N, as scaling by a power of two is exact (below
      // 2^-126, where it is not, both truncate to 0): the truncation is floor(t * 2^N), which
      // is >= m exactly when t >= m / 2^N, the bisection's comparison, for every integer m.
      // Clamped on both sides so that the conversion is defined for every finite input.
      const float v = std::min(std::max(d * scaled, 0.0f), grid);
      const uint32_t onGrid = static_cast<uint32_t>(static_cast<int32_t>(v)) + 1;
      keys[j] = d >= 0.0f ? onGrid : 0;
    }
  }

 private:
  std::span<const float> x_;
  float lower_, scaledInverse_, gridSize_;
  int bits_;
};

}  // namespace

// Eight accumulators for the sum and the max, in two SIMD vectors (GCC's vector extension: the
// compiler leaves the equivalent loop over an array scalar). Lane l of a block sums elements
// j with j % 8 == l, always in the same order, so the result is the same on every machine.
MagnitudeStats magnitudeStats(std::span<const float> x) {
  using Floats = float __attribute__((vector_size(16)));
  using Ints = int32_t __attribute__((vector_size(16)));
  MagnitudeStats stats;
  if (x.empty()) return stats;
  const Ints noSign = {0x7fffffff, 0x7fffffff, 0x7fffffff, 0x7fffffff};
  auto magnitudes = [&](const float* p) {
    Floats v;
    std::memcpy(&v, p, sizeof v);
    return reinterpret_cast<Floats>(reinterpret_cast<Ints>(v) & noSign);
  };
  double total = 0;
  Floats max0 = {}, max1 = {};
  for (size_t base = 0; base < x.size(); base += kBlock) {
    const size_t count = std::min(kBlock, x.size() - base);
    const float* p = x.data() + base;
    Floats sum0 = {}, sum1 = {};
    size_t j = 0;
    for (; j + 8 <= count; j += 8) {
      const Floats a = magnitudes(p + j), b = magnitudes(p + j + 4);
      sum0 += a;
      sum1 += b;
      max0 = max0 > a ? max0 : a;
      max1 = max1 > b ? max1 : b;
    }
    float block = 0;
    for (int l = 0; l < 4; ++l) block += sum0[l];
    for (int l = 0; l < 4; ++l) block += sum1[l];
    for (; j < count; ++j) {
      block += std::fabs(p[j]);
      stats.max = std::max(stats.max, std::fabs(p[j]));
    }
    total += block;
  }
  // A NaN or an infinity makes the sum NaN or infinite (the max may have kept or skipped it).
  stats.finite = std::isfinite(total);
  for (int l = 0; l < 4; ++l) stats.max = std::max({stats.max, max0[l], max1[l]});
  stats.mean = static_cast<float>(total / static_cast<double>(x.size()));
  return stats;
}

ThresholdSelector::ThresholdSelector(int iterations) : iterations_(iterations) {
  GS_CHECK(iterations >= 1 && iterations <= 30);
}

std::optional<uint32_t> ThresholdSelector::selectInRange(std::span<const float> x, float lower,
                                                         float max, size_t k,
                                                         std::vector<uint32_t>& indices) {
  if (!(max > lower)) return std::nullopt;
  const float scaledInverse = (1.0f / (max - lower)) * std::ldexp(1.0f, iterations_);
  if (!std::isfinite(scaledInverse)) return std::nullopt;
  return selector_.select(GridKeys(x, lower, scaledInverse, iterations_), k, indices);
}

void ThresholdSelector::select(std::span<const float> x, size_t k, std::vector<uint32_t>& indices) {
  k = std::min(k, x.size());
  const MagnitudeStats stats = magnitudeStats(x);
  if (k > 0 && stats.finite) {
    std::optional<uint32_t> kth = selectInRange(x, stats.mean, stats.max, k, indices);
    // A k-th key of 0 means the k-th element lies below the mean: fewer than k are above it.
    if (kth && *kth > 0) {
      lastRange_ = Range::kFromMean;
      return;
    }
    if (selectInRange(x, 0.0f, stats.max, k, indices)) {
      lastRange_ = Range::kFromZero;
      return;
    }
  }
  lastRange_ = Range::kExact;
  selector_.selectByMagnitude(x, k, indices);
}

}  // namespace gradsync
