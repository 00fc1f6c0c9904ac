// The half conversions, the half-precision ring, and the fp16 compressor.
#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "common/half.h"
#include "compress/impl/methods.h"
#include "exchange_harness.h"
#include "gradsync/collectives.h"
#include "support/transports.h"

namespace gradsync {
namespace {

using testing::gaussian;
using testing::runExchange;

// Naive reference: the nearest half by exhaustive search over all finite halves (ties to even).
uint16_t nearestHalf(float x) {
  uint16_t best = 0;
  double bestError = std::numeric_limits<double>::infinity();
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    double error = std::fabs(std::fabs(static_cast<double>(x)) - floatFromHalf(h));
    if (error < bestError || (error == bestError && (h & 1) == 0)) {
      best = static_cast<uint16_t>(h);
      bestError = error;
    }
  }
  return static_cast<uint16_t>(best | (std::signbit(x) ? 0x8000 : 0));
}

TEST(Half, RoundTripsEveryHalfExactly) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = floatFromHalf(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(floatFromHalf(halfFromFloat(f))));
    } else {
      EXPECT_EQ(halfFromFloat(f), h) << h;
    }
  }
}

TEST(Half, RoundsToNearestEvenLikeExhaustiveSearch) {
  std::vector<float> samples = {1.0f + 1.0f / 4096,
                                1.0f + 3.0f / 4096,
                                65504.0f,
                                65519.0f,
                                5.9604645e-8f,
                                2.9802322e-8f,
                                8.940697e-8f,
                                -0.1f,
                                3.14159f,
                                1e-5f,
                                -6.1e-5f};
  for (float x : gaussian(2000, 1, 10.0f)) samples.push_back(x);
  for (float x : samples) EXPECT_EQ(halfFromFloat(x), nearestHalf(x)) << x;
  EXPECT_EQ(halfFromFloat(65520.0f), 0x7c00);  // rounds past the largest half: infinity
  EXPECT_EQ(halfFromFloat(-1e9f), 0xfc00);
}

TEST(AllreduceHalf, SumsLikeFloatWithinHalfPrecision) {
  for (int ranks : {1, 2, 3, 5}) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{1003}, size_t{100003}}) {
      testing::runWithTransports(testing::TransportKind::kLoopback, ranks, [&](Transport& t) {
        std::vector<float> mine = gaussian(count, 100 + t.rank());
        std::vector<uint16_t> half(count);
        halfFromFloat(mine.data(), half.data(), count);
        allreduceHalf(t, half, {.tag = 0, .segmentBytes = 4096});
        for (size_t i = 0; i < count; ++i) {
          float expected = 0;
          for (int r = 0; r < ranks; ++r) expected += gaussian(count, 100 + r)[i];
          ASSERT_NEAR(floatFromHalf(half[i]), expected, 0.004f * ranks * (1 + std::fabs(expected)))
              << "rank " << t.rank() << " element " << i;
          if (i > 20) break;  // the naive reference is quadratic: spot-check the head
        }
      });
    }
  }
}

TEST(Fp16, AveragesAndReportsTheRoundedContribution) {
  const size_t n = 5001;
  auto outputs = runExchange(
      3, [] { return methods::makeFp16({}, {}); },
      [&](int, int rank) { return gaussian(n, 10 + rank, 0.01f); });
  for (int r = 0; r < 3; ++r) {
    std::vector<float> input = gaussian(n, 10 + r, 0.01f);
    for (size_t i = 0; i < n; ++i) {
      EXPECT_EQ(outputs[r].sent[i], floatFromHalf(halfFromFloat(input[i])));
      float mean =
          (gaussian(n, 10, 0.01f)[i] + gaussian(n, 11, 0.01f)[i] + gaussian(n, 12, 0.01f)[i]) / 3;
      ASSERT_NEAR(outputs[r].result[i], mean, 2e-5f) << i;
      EXPECT_EQ(outputs[r].result[i], outputs[0].result[i]) << "ranks disagree at " << i;
      if (i > 50) break;
    }
  }
}

}  // namespace
}  // namespace gradsync
