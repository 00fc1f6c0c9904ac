// dgc:R (Deep Gradient Compression; Lin et al., ICLR'18): sparsification with its own
// accumulation instead of the error-feedback decorator. Per element, with g the (optionally
// clipped) gradient and m the optimizer's momentum: u <- m*u + g (momentum correction),
// v <- v + u (local accumulation); the elements with |v| >= a threshold estimated from a random
// sample of |v| are sent as (index, v) pairs, and u and v are cleared there (momentum factor
// masking). The trainer runs its optimizer without momentum, since u already carries it.
//
// Contract: the encoding is the sparse wire format (compress/sparse.h), indices increasing, at
// most 2k pairs for the step's target k (more fall back to the exact top-k of the selected);
// `sent` is the v values sent. Deterministic given the exchange's seed (the sample positions).
#include "compress/impl/dgc.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>
#include <numeric>
#include <random>

#include <fmt/format.h>

#include "common/check.h"
#include "common/random.h"
#include "compress/impl/methods.h"
#include "compress/sparse.h"
#include "gradsync/error.h"

namespace gradsync::methods {
namespace {

// The paper's warm-up densities (sparsity 75%, 93.75%, 98.4375%, 99.6%), one per quarter.
constexpr double kWarmupDensities[] = {0.25, 0.0625, 0.015625, 0.004};
// The sample is at least this large, so the threshold of a small tensor is not a coin toss.
constexpr size_t kMinSample = 512;
// ... and expects at least this many sampled elements above the threshold (DGC's code: 2/R).
constexpr double kMinSampledAbove = 2;
// Elements tested at once by the selection pass before it looks at them one by one.
constexpr size_t kBlock = 16;

// |value|'s float bits: non-negative floats order like these integers (as select.h's keys).
inline uint32_t keyOf(float value) {
  return std::bit_cast<uint32_t>(value) & 0x7fffffffu;
}

}  // namespace

Dgc::Dgc(const DgcOptions& options, size_t elements) : options_(options), elements_(elements) {}

void Dgc::allocate() {
  if (velocity_.size() == elements_) return;
  momentum_.assign(elements_, 0.0f);
  velocity_.assign(elements_, 0.0f);
}

double Dgc::density(uint64_t step) const {
  const uint64_t warmup = options_.warmupSteps;
  if (step >= warmup) return options_.density;
  // step < warmup <= 2^53, so 4 * step cannot overflow.
  const double stage = kWarmupDensities[step * 4 / warmup];
  return std::max(stage, options_.density);  // never sparser than R itself
}

size_t Dgc::encodedBytes(size_t elements) const {
  const double densest =
      options_.warmupSteps > 0 ? std::max(kWarmupDensities[0], options_.density) : options_.density;
  return sparseBytes(std::min(elements, 2 * selectionCount(elements, densest)));
}

void Dgc::exchange(ExchangeContext& context, std::span<float> grad, std::span<float> sent,
                   ExchangeStats& stats) {
  step_ = context.step;
  CodecCompressor::exchange(context, grad, sent, stats);
}

void Dgc::encode(std::span<const float> x, std::vector<uint8_t>& out, uint64_t seed) {
  allocate();
  GS_CHECK_EQ(x.size(), velocity_.size());
  const size_t n = x.size();
  const double density = this->density(step_);
  const size_t k = selectionCount(n, density);
  accumulate(x, clipScale(x));
  if (k == n) {
    selected_.resize(n);
    std::iota(selected_.begin(), selected_.end(), 0u);
  } else {
    selectAtLeast(sampledThreshold(density, seed));
    if (selected_.size() > 2 * k) {
      // The sample underestimated the threshold: exact top-k among the selected (DGC's code).
      selectedValues_.resize(selected_.size());
      for (size_t j = 0; j < selected_.size(); ++j) selectedValues_[j] = velocity_[selected_[j]];
      selector_.selectByMagnitude(selectedValues_, k, chosen_);
      for (size_t j = 0; j < k; ++j) selected_[j] = selected_[chosen_[j]];  // chosen_[j] >= j
      selected_.resize(k);
    }
  }
  encodeSparseGather(velocity_, selected_, out);
  for (uint32_t i : selected_) {
    momentum_[i] = 0.0f;
    velocity_[i] = 0.0f;
  }
}

void Dgc::saveState(StateWriter& out) const {
  if (velocity_.size() != elements_) {  // never encoded: both are still zero
    const std::vector<float> zeros(elements_, 0.0f);
    out.write(zeros);
    out.write(zeros);
    return;
  }
  out.write(momentum_);
  out.write(velocity_);
}

void Dgc::loadState(StateReader& in) {
  allocate();
  in.readExact(momentum_);
  in.readExact(velocity_);
}

void Dgc::decodeAdd(std::span<const uint8_t> in, std::span<float> out) const {
  decodeSparseAdd(in, out);
}

// Local gradient clipping: the factor that brings the L2 norm of x down to `clip`, or 1.
float Dgc::clipScale(std::span<const float> x) const {
  if (options_.clip <= 0) return 1.0f;
  // Four double partial sums: exact enough for any size, and independent chains run in parallel.
  double partial[4] = {0, 0, 0, 0};
  size_t i = 0;
  for (; i + 4 <= x.size(); i += 4) {
    for (size_t lane = 0; lane < 4; ++lane) {
      const double value = x[i + lane];
      partial[lane] += value * value;
    }
  }
  for (; i < x.size(); ++i) partial[0] += static_cast<double>(x[i]) * x[i];
  const double norm = std::sqrt((partial[0] + partial[1]) + (partial[2] + partial[3]));
  return norm > options_.clip ? static_cast<float>(options_.clip / norm) : 1.0f;
}

void Dgc::accumulate(std::span<const float> x, float scale) {
  const float m = static_cast<float>(options_.momentum);
  const float* __restrict g = x.data();
  float* __restrict u = momentum_.data();
  float* __restrict v = velocity_.data();
  for (size_t i = 0; i < x.size(); ++i) {
    const float corrected = m * u[i] + g[i] * scale;
    u[i] = corrected;
    v[i] += corrected;
  }
}

// The key of the sample's top-R quantile: its round(R * samples)-th largest |v|. The sample is
// drawn with replacement at positions from the seed; a tensor no larger than the sample is
// taken whole, which makes the threshold exact.
uint32_t Dgc::sampledThreshold(double density, uint64_t seed) {
  const size_t n = velocity_.size();
  const size_t wanted =
      std::max({kMinSample, static_cast<size_t>(std::ceil(options_.sampleFraction * n)),
                static_cast<size_t>(std::ceil(kMinSampledAbove / density))});
  const size_t samples = std::min(n, wanted);
  sample_.resize(samples);
  if (samples == n) {
    for (size_t i = 0; i < n; ++i) sample_[i] = keyOf(velocity_[i]);
  } else {
    std::mt19937_64 engine(seed);
    for (uint32_t& key : sample_) key = keyOf(velocity_[rng::uniformBelow(engine, n)]);
  }
  const size_t top = std::clamp<size_t>(std::llround(density * samples), 1, samples);
  std::nth_element(sample_.begin(), sample_.begin() + static_cast<ptrdiff_t>(top - 1),
                   sample_.end(), std::greater<>());
  return sample_[top - 1];
}

// selected_ = the indices with |v| >= the threshold, in increasing order. Most blocks hold no
// such element at the usual densities, and testing a block is a loop the compiler vectorises;
// within a block every index is written and kept by advancing the count, without a branch.
void Dgc::selectAtLeast(uint32_t threshold) {
  const size_t n = velocity_.size();
  const float* v = velocity_.data();
  size_t count = 0;
  auto scan = [&](size_t begin, size_t end) {
    if (count + kBlock > selected_.size()) {
      selected_.resize(std::max(2 * selected_.size(), count + kBlock));
    }
    for (size_t i = begin; i < end; ++i) {
      selected_[count] = static_cast<uint32_t>(i);
      count += keyOf(v[i]) >= threshold;
    }
  };
  size_t begin = 0;
  for (; begin + kBlock <= n; begin += kBlock) {
    uint32_t hits = 0;
    for (size_t i = begin; i < begin + kBlock; ++i) hits |= keyOf(v[i]) >= threshold;
    if (hits != 0) scan(begin, begin + kBlock);
  }
  scan(begin, n);
  selected_.resize(count);
}

std::unique_ptr<Compressor> makeDgc(const MethodArgs& args, std::span<const TensorShape> unit) {
  DgcOptions options;
  options.density = args.value;
  options.momentum = args.momentum;
  options.clip = args.number("clip", 0);
  const double warmup = args.number("warmup", 0);
  if (!(options.density > 0 && options.density <= 1)) {
    throw ConfigError(fmt::format("dgc:R needs 0 < R <= 1, got {}", options.density));
  }
  if (!(options.momentum >= 0 && options.momentum < 1)) {
    throw ConfigError(
        fmt::format("dgc needs the optimizer's momentum in [0, 1), got {}", options.momentum));
  }
  if (!(options.clip >= 0 && std::isfinite(options.clip))) {
    throw ConfigError(
        fmt::format("dgc clip needs 0 <= clip < inf (0 = off), got {}", options.clip));
  }
  if (!(warmup >= 0 && warmup <= 0x1p53 && warmup == std::floor(warmup))) {
    throw ConfigError(fmt::format(
        "dgc warmup needs a whole number of steps, 0 <= warmup <= 2^53, got {}", warmup));
  }
  options.warmupSteps = static_cast<uint64_t>(warmup);
  size_t elements = 0;
  for (const TensorShape& t : unit) elements += t.elements;
  if (elements > UINT32_MAX) {
    throw ConfigError(fmt::format(
        "dgc: a unit of {} elements is beyond the 2^32 - 1 that sparse indices address", elements));
  }
  return std::make_unique<Dgc>(options, elements);
}

}  // namespace gradsync::methods
