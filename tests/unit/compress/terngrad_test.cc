// terngrad against a naive reference (per-tensor scale s = min(max |g|, c * rms) in double):
// decoded values are only -s, 0 and s with the input's sign, elements at or beyond the clip are
// always sent, the mean of many decodes is the clipped gradient, and the bytes are as
// documented.
#include <cmath>
#include <limits>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "codec_checks.h"
#include "compress/impl/methods.h"
#include "gradsync/error.h"

namespace gradsync {
namespace {

using testing::decodeOnce;
using testing::encodeOnce;
using testing::gaussian;

MethodArgs clipArgs(double clip) {
  return testing::withOption("clip", clip);
}

float refScale(const std::vector<float>& g, size_t begin, size_t size, double clip) {
  double squares = 0, largest = 0;
  for (size_t i = begin; i < begin + size; ++i) {
    squares += double{g[i]} * g[i];
    largest = std::max(largest, std::fabs(double{g[i]}));
  }
  double scale = largest;
  if (clip > 0) scale = std::min(scale, clip * std::sqrt(squares / size));
  return static_cast<float>(scale);
}

// Decoded values of one tensor are 0 or +-s (s the reference scale) with the input's sign, and
// every element at or beyond s is sent.
void expectTernary(const std::vector<float>& g, const std::vector<float>& decoded, size_t begin,
                   size_t size, double clip) {
  const float s = refScale(g, begin, size, clip);
  float observed = 0;
  for (size_t i = begin; i < begin + size; ++i) {
    if (decoded[i] == 0) {
      ASSERT_LE(std::fabs(g[i]), s * (1 + 1e-6f)) << "an element beyond the clip was dropped";
      continue;
    }
    if (observed == 0) observed = std::fabs(decoded[i]);
    ASSERT_EQ(std::fabs(decoded[i]), observed) << "two magnitudes in one tensor at " << i;
    ASSERT_EQ(decoded[i] < 0, g[i] < 0) << "sign at " << i;
    ASSERT_NE(g[i], 0.0f) << "a zero was sent at " << i;
  }
  if (observed != 0) {
    ASSERT_NEAR(observed, s, 1e-6 * s);
  }
}

TEST(TernGrad, SendsOnlyMinusScaleZeroOrScale) {
  for (size_t n : {1, 2, 3, 4, 5, 1000, 4097}) {
    std::vector<float> g = gaussian(n, n);
    if (n > 10) g[7] = 40, g[8] = 0;
    auto t = methods::makeTernGrad({}, {});
    for (uint64_t seed = 0; seed < 5; ++seed) {
      expectTernary(g, decodeOnce(*t, encodeOnce(*t, g, seed), n), 0, n, 2.5);
    }
  }
}

TEST(TernGrad, ClipsAtCTimesTheDeviation) {
  std::vector<float> g = gaussian(10000, 11);
  g[0] = 50, g[1] = -80;
  const float clipped = refScale(g, 0, g.size(), 2.5);
  ASSERT_LT(clipped, 4.0f);  // 2.5 * rms, far below the outliers
  for (double clip : {2.5, 0.0, 100.0}) {
    auto t = methods::makeTernGrad(clip == 2.5 ? MethodArgs{} : clipArgs(clip), {});
    std::vector<float> decoded = decodeOnce(*t, encodeOnce(*t, g, 3), g.size());
    expectTernary(g, decoded, 0, g.size(), clip);
    const float s = clip == 2.5 ? clipped : 80.0f;  // no clip, or one above the largest
    EXPECT_NEAR(decoded[0], s, 1e-6 * s) << clip;
    EXPECT_NEAR(decoded[1], -s, 1e-6 * s) << clip;
  }
}

TEST(TernGrad, MeanOfManyDecodesIsTheClippedGradient) {
  const size_t n = 600;
  const int trials = 4000;
  std::vector<float> g = gaussian(n, 12);
  g[0] = 20, g[1] = -30;
  const double s = refScale(g, 0, n, 2.5);
  auto t = methods::makeTernGrad({}, {});
  std::vector<double> sum(n, 0.0);
  for (int k = 0; k < trials; ++k) {
    std::vector<float> decoded = decodeOnce(*t, encodeOnce(*t, g, rng::mixSeed(5, k)), n);
    for (size_t i = 0; i < n; ++i) sum[i] += decoded[i];
  }
  // Per element within 5 standard errors, and the signed errors summed in units of their
  // standard errors (N(0, 1) once divided by the root of their count) for small biases.
  double z = 0;
  size_t uncertain = 0, clippedCount = 0;
  for (size_t i = 0; i < n; ++i) {
    const double clipped = std::copysign(std::min(std::fabs(double{g[i]}), s), g[i]);
    const double p = std::fabs(clipped) / s;
    const double standardError = s * std::sqrt(p * (1 - p) / trials);
    const double error = sum[i] / trials - clipped;
    EXPECT_LE(std::fabs(error), 5 * standardError + 1e-6 * s) << i;
    clippedCount += std::fabs(g[i]) > s;
    if (p > 0.05 && p < 0.95) {
      z += (g[i] < 0 ? -error : error) / standardError;
      ++uncertain;
    }
  }
  EXPECT_GE(clippedCount, 2u);  // the outliers at least
  EXPECT_GT(uncertain, n / 2);
  EXPECT_LT(std::fabs(z / std::sqrt(static_cast<double>(uncertain))), 5.0);
}

TEST(TernGrad, OneScalePerTensor) {
  std::vector<TensorShape> unit = {testing::tensorShape(5), testing::tensorShape(300),
                                   testing::tensorShape(0), testing::tensorShape(40)};
  std::vector<float> g = gaussian(345, 13);
  for (size_t i = 0; i < 5; ++i) g[i] *= 0.01f;
  for (size_t i = 305; i < 345; ++i) g[i] *= 100.0f;
  auto t = methods::makeTernGrad({}, unit);
  std::vector<uint8_t> bytes = encodeOnce(*t, g, 1);
  EXPECT_EQ(bytes.size(), 4 * 3 + (345 * 2 + 7) / 8);
  EXPECT_EQ(t->encodedBytes(345), bytes.size());
  std::vector<float> decoded = decodeOnce(*t, bytes, g.size());
  expectTernary(g, decoded, 0, 5, 2.5);
  expectTernary(g, decoded, 5, 300, 2.5);
  expectTernary(g, decoded, 305, 40, 2.5);
}

TEST(TernGrad, ConstantAndOneElementTensorsAreNotClippedAway) {
  auto t = methods::makeTernGrad({}, {});
  std::vector<float> one = {0.3f};
  EXPECT_EQ(decodeOnce(*t, encodeOnce(*t, one, 1), 1), one);
  std::vector<float> constant(100, -0.5f);
  EXPECT_EQ(decodeOnce(*t, encodeOnce(*t, constant, 1), 100), constant);
  std::vector<float> zeros(33, 0.0f);
  EXPECT_EQ(decodeOnce(*t, encodeOnce(*t, zeros, 1), 33), zeros);
}

TEST(TernGrad, ExchangeAveragesTheSameTernaryGradientOnEveryRank) {
  for (int ranks : {1, 2, 3}) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{2}, size_t{3}, size_t{4}, size_t{5}, size_t{1000},
                     (size_t{1} << 20) + 1}) {
      if (n > 100000 && ranks != 3) continue;
      auto make = [] { return methods::makeTernGrad({}, {}); };
      auto input = [n](int rank) { return gaussian(n, 200 + rank); };
      auto out = testing::runExchange(ranks, make, [&](int, int rank) { return input(rank); });
      testing::expectConsistentExchange(out);
      auto t = make();
      for (int r = 0; r < ranks; ++r) {
        std::vector<float> g = input(r);
        EXPECT_EQ(out[r].sent,
                  decodeOnce(*t, encodeOnce(*t, g, testing::exchangeSeed(7, 0, r)), n));
        expectTernary(g, out[r].sent, 0, n, 2.5);
      }
    }
  }
}

TEST(TernGrad, NonFiniteInputPoisonsOnlyItsTensor) {
  std::vector<TensorShape> unit = {testing::tensorShape(10), testing::tensorShape(20)};
  for (float bad :
       {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()}) {
    std::vector<float> g = gaussian(30, 14);
    g[3] = bad;
    auto t = methods::makeTernGrad({}, unit);
    std::vector<float> decoded = decodeOnce(*t, encodeOnce(*t, g, 1), g.size());
    for (size_t i = 0; i < 10; ++i) ASSERT_TRUE(std::isnan(decoded[i])) << i;
    expectTernary(g, decoded, 10, 20, 2.5);
  }
}

TEST(TernGrad, RejectsMalformedEncodings) {
  const size_t n = 6000;  // codes in two staging chunks
  auto t = methods::makeTernGrad({}, {});
  auto& codec = testing::asCodec(*t);
  std::vector<uint8_t> good = encodeOnce(*t, gaussian(n, 15), 1);
  std::vector<float> out(n);
  EXPECT_NO_THROW(codec.decodeAdd(good, out));
  std::vector<uint8_t> shorter(good.begin(), good.end() - 1), longer = good;
  longer.push_back(0);
  EXPECT_THROW(codec.decodeAdd(shorter, out), ProtocolError);
  EXPECT_THROW(codec.decodeAdd(longer, out), ProtocolError);
  EXPECT_THROW(codec.decodeAdd({}, out), ProtocolError);
  for (size_t index : {size_t{0}, size_t{5000}}) {
    std::vector<uint8_t> corrupt = good;
    testing::writeCode(corrupt, 4, 2, index, 3);
    EXPECT_THROW(codec.decodeAdd(corrupt, out), ProtocolError) << index;
  }
}

TEST(TernGrad, RejectsInvalidClip) {
  for (double clip : {-1.0, -1e-9, std::numeric_limits<double>::infinity(),
                      std::numeric_limits<double>::quiet_NaN()}) {
    EXPECT_THROW(methods::makeTernGrad(clipArgs(clip), {}), ConfigError) << clip;
  }
  EXPECT_NO_THROW(methods::makeTernGrad(clipArgs(0), {}));
}

}  // namespace
}  // namespace gradsync
