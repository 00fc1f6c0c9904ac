// MSTopK threshold search (threshold_select.h): the N-iteration bisection computed as a radix
// top-k over the bisection grid. On large inputs one pass over them: the mean and the max are
// summed while the elements a sample says could be among the k largest are gathered, and the
// grid's keys are computed for those only; elsewhere a pass for the mean and the max, then the
// radix selection's one or two.
#include "compress/threshold_select.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <optional>

#include "common/check.h"
#include "common/simd.h"

namespace gradsync {
namespace {

constexpr size_t kBlock = 1024;  // elements summed in float before the total (double)

// The bisection grid of [lower, max]: scaled = 2^N / (max - lower), finite; size = 2^N.
struct Grid {
  float lower = 0;
  float scaled = 0;
  float size = 0;
};

// The grid of [lower, max] for N iterations; nothing where the range cannot be searched (max <=
// lower, or a scale that is not finite).
std::optional<Grid> gridOf(float lower, float max, int iterations) {
  if (!(max > lower)) return std::nullopt;
  const float size = std::ldexp(1.0f, iterations);
  const float scaled = (1.0f / (max - lower)) * size;
  if (!std::isfinite(scaled)) return std::nullopt;
  return Grid{.lower = lower, .scaled = scaled, .size = size};
}

// The key of magnitude `a` on the grid: 0 below `lower`, else floor(min(t * 2^N, 2^N)) + 1 with
// t = (a - lower) / (max - lower). Non-decreasing in a.
uint32_t gridKey(float a, const Grid& grid) {
  const float d = a - grid.lower;
  // d * (c * 2^N) rounds like (d * c) * 2^N, as scaling by a power of two is exact (below
  // 2^-126, where it is not, both truncate to 0): the truncation is floor(t * 2^N), which is >=
  // m exactly when t >= m / 2^N, the bisection's comparison, for every integer m. Clamped on
  // both sides so that the conversion is defined for every finite input.
  const float v = std::min(std::max(d * grid.scaled, 0.0f), grid.size);
  const uint32_t onGrid = static_cast<uint32_t>(static_cast<int32_t>(v)) + 1;
  return d >= 0.0f ? onGrid : 0;
}

float magnitudeOf(float x) {
  return std::fabs(x);
}
float magnitudeOf(uint32_t bits) {  // a magnitude's bits (MagnitudeKeys)
  return std::bit_cast<float>(bits);
}

// The grid's keys of `values`: x's elements, or the magnitudes' bits the one pass gathered.
template <class Value>
class GridKeys final : public KeySource {
 public:
  GridKeys(std::span<const Value> values, const Grid& grid, int bits)
      : values_(values), grid_(grid), bits_(bits) {}
  size_t size() const override { return values_.size(); }
  int keyBits() const override { return bits_; }
  void fill(size_t begin, size_t count, uint32_t* keys) const override {
    const Value* v = values_.data() + begin;
    for (size_t j = 0; j < count; ++j) keys[j] = gridKey(magnitudeOf(v[j]), grid_);
  }

 private:
  std::span<const Value> values_;
  Grid grid_;
  int bits_;
};

// Called after each block of the statistics' pass with its [base, base + count), while the
// block is still in the first-level cache.
using BlockVisitor = std::function<void(size_t base, size_t count)>;

template <size_t kWidth>
struct Vectors;  // GCC takes no vector_size that depends on a template's parameter
template <>
struct Vectors<4> {
  using Floats = float __attribute__((vector_size(16)));
  using Ints = int32_t __attribute__((vector_size(16)));
};
template <>
struct Vectors<8> {
  using Floats = float __attribute__((vector_size(32)));
  using Ints = int32_t __attribute__((vector_size(32)));
};

// Eight accumulators for the sum and the max, in SIMD vectors of kWidth lanes (GCC's vector
// extension: the compiler leaves the equivalent loop over an array scalar): two of 4 lanes on
// the baseline (SSE2; a vector of 8 there is lowered element by element), one of 8 on the AVX
// paths. Lane l of a block sums elements j with j % 8 == l, always in the same order, so the
// result is the same on every machine and path.
template <size_t kWidth>
MagnitudeStats statsOf(std::span<const float> x, const BlockVisitor* visit) {
  using Floats = typename Vectors<kWidth>::Floats;
  using Ints = typename Vectors<kWidth>::Ints;
  constexpr size_t kLanes = 8, kVectors = kLanes / kWidth;
  MagnitudeStats stats;
  if (x.empty()) return stats;
  const Ints noSign = Ints{} + 0x7fffffff;
  double total = 0;
  Floats max[kVectors] = {};
  for (size_t base = 0; base < x.size(); base += kBlock) {
    const size_t count = std::min(kBlock, x.size() - base);
    const float* p = x.data() + base;
    Floats sum[kVectors] = {};
    size_t j = 0;
    for (; j + kLanes <= count; j += kLanes) {
      for (size_t v = 0; v < kVectors; ++v) {
        Floats raw;
        std::memcpy(&raw, p + j + v * kWidth, sizeof raw);
        const Floats a = reinterpret_cast<Floats>(reinterpret_cast<Ints>(raw) & noSign);
        sum[v] += a;
        max[v] = max[v] > a ? max[v] : a;
      }
    }
    float block = 0;
    for (size_t v = 0; v < kVectors; ++v) {
      for (size_t l = 0; l < kWidth; ++l) block += sum[v][l];
    }
    for (; j < count; ++j) {
      block += std::fabs(p[j]);
      stats.max = std::max(stats.max, std::fabs(p[j]));
    }
    total += block;
    if (visit != nullptr) (*visit)(base, count);
  }
  // A NaN or an infinity makes the sum NaN or infinite (the max may have kept or skipped it).
  stats.finite = std::isfinite(total);
  for (size_t v = 0; v < kVectors; ++v) {
    for (size_t l = 0; l < kWidth; ++l) stats.max = std::max(stats.max, max[v][l]);
  }
  stats.mean = static_cast<float>(total / static_cast<double>(x.size()));
  return stats;
}

[[gnu::flatten]] GS_TARGET_AVX512 MagnitudeStats statsAvx512(std::span<const float> x,
                                                             const BlockVisitor* visit) {
  return statsOf<8>(x, visit);
}
[[gnu::flatten]] GS_TARGET_AVX2 MagnitudeStats statsAvx2(std::span<const float> x,
                                                         const BlockVisitor* visit) {
  return statsOf<8>(x, visit);
}

// magnitudeStats, calling `visit` (if given) after each block.
MagnitudeStats visitingStats(std::span<const float> x, const BlockVisitor* visit) {
  switch (simd::active()) {
    case simd::Path::kAvx512:
      return statsAvx512(x, visit);
    case simd::Path::kAvx2:
      return statsAvx2(x, visit);
    case simd::Path::kScalar:
      break;
  }
  return statsOf<4>(x, visit);
}

}  // namespace

MagnitudeStats magnitudeStats(std::span<const float> x) {
  return visitingStats(x, nullptr);
}

ThresholdSelector::ThresholdSelector(int iterations) : iterations_(iterations) {
  GS_CHECK(iterations >= 1 && iterations <= 30);
}

std::optional<uint32_t> ThresholdSelector::selectInRange(std::span<const float> x, float lower,
                                                         float max, size_t k,
                                                         std::vector<uint32_t>& indices) {
  const std::optional<Grid> grid = gridOf(lower, max, iterations_);
  if (!grid) return std::nullopt;
  return selector_.select(GridKeys<float>(x, *grid, iterations_ + 1), k, indices);
}

bool ThresholdSelector::selectInOnePass(std::span<const float> x, size_t k,
                                        std::vector<uint32_t>& indices, MagnitudeStats& stats) {
  const MagnitudeKeys keys(x);
  const uint32_t floor = selector_.sampledFloor(keys, k);
  if (floor == 0) {
    stats = magnitudeStats(x);
    return false;
  }
  const size_t limit = TopKSelector::sampledLimit(x.size(), k);
  size_t gathered = 0;
  scratch_.resize(kBlock);
  const BlockVisitor gather = [&](size_t base, size_t count) {
    if (gathered > limit) return;                     // too many: the pass only sums from here on
    if (candidates_.size() < gathered + count + 1) {  // grown as they fill, as select.cc's
      candidates_.resize(gathered + count + 1);
      candidateKeys_.resize(gathered + count + 1);
    }
    gathered += keys.gatherAtLeast(base, count, floor, scratch_.data(),
                                   candidates_.data() + gathered, candidateKeys_.data() + gathered);
  };
  stats = visitingStats(x, &gather);
  if (gathered < k || gathered > limit || !stats.finite) return false;
  const std::optional<Grid> grid = gridOf(stats.mean, stats.max, iterations_);
  if (!grid) return false;
  // The keys from the gathered magnitudes: contiguous, where x's elements are scattered.
  const std::span<const uint32_t> magnitudes(candidateKeys_.data(), gathered);
  const uint32_t kth =
      selector_.select(GridKeys<uint32_t>(magnitudes, *grid, iterations_ + 1), k, chosen_);
  // Every element of key >= kth was gathered when the largest magnitude below the floor (the
  // floor's bits less one: magnitudes order as their bits) has a smaller key, as keys do not
  // decrease with the magnitude. A k-th key of 0: fewer than k lie above the mean.
  if (kth == 0 || gridKey(std::bit_cast<float>(floor - 1), *grid) >= kth) return false;
  indices.resize(k);
  for (size_t i = 0; i < k; ++i) indices[i] = candidates_[chosen_[i]];
  return true;
}

void ThresholdSelector::select(std::span<const float> x, size_t k, std::vector<uint32_t>& indices) {
  k = std::min(k, x.size());
  onePass_ = false;
  if (k > 0) {
    MagnitudeStats stats;  // selectInOnePass's, whether or not it selected
    if (selectInOnePass(x, k, indices, stats)) {
      onePass_ = true;
      lastRange_ = Range::kFromMean;
      return;
    }
    if (stats.finite) {
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
  }
  lastRange_ = Range::kExact;
  selector_.selectByMagnitude(x, k, indices);
}

}  // namespace gradsync
