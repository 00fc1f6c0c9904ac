// randomk (impl/randomk.cc): shared indices across ranks, fresh ones every step, the average
// of the inputs at those indices, and a uniform draw. The naive reference is the plain average
// of the inputs at the indices the ranks report as sent.
#include <algorithm>
#include <cmath>
#include <numeric>

#include <gtest/gtest.h>

#include "compress/impl/methods.h"
#include "compress/select.h"
#include "exchange_harness.h"
#include "gradsync/error.h"

namespace gradsync {
namespace {

using testing::gaussian;
using testing::runExchange;

MethodArgs randomkDensity(double r) {
  return testing::withValue(r);
}

// Inputs that are never zero, so the non-zeros of `sent` are exactly the selected indices.
std::vector<float> nonZero(size_t n, uint64_t seed) {
  std::vector<float> x = gaussian(n, seed);
  for (float& v : x) v = std::copysign(0.5f + std::fabs(v), v);
  return x;
}

std::vector<uint32_t> support(const std::vector<float>& v) {
  std::vector<uint32_t> indices;
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] != 0.0f) indices.push_back(static_cast<uint32_t>(i));
  }
  return indices;
}

// The indices a fresh compressor draws for `n` elements under the exchange seed `seed`.
std::vector<uint32_t> drawn(Compressor& c, size_t n, uint64_t seed) {
  auto& linear = dynamic_cast<LinearCompressor&>(c);
  std::vector<float> x(n), code(linear.codeLength(n));
  std::iota(x.begin(), x.end(), 0.0f);
  linear.encode(x, code, seed);
  return std::vector<uint32_t>(code.begin(), code.end());
}

TEST(RandomK, AllRanksSendTheSameKIndicesAndGetTheirAverage) {
  const double r = 0.01;
  for (size_t n : {size_t{0}, size_t{1}, size_t{1001}, size_t{1} << 20}) {
    std::vector<std::vector<float>> xs;
    for (int q = 0; q < 3; ++q) xs.push_back(nonZero(n, 70 + q));
    for (int ranks : {1, 2, 3}) {
      auto outputs = runExchange(
          ranks, [&] { return methods::makeRandomK(randomkDensity(r), {}); },
          [&](int, int rank) { return xs[rank]; });
      const std::vector<uint32_t> selected = support(outputs[0].sent);
      ASSERT_EQ(selected.size(), selectionCount(n, r)) << "n " << n;
      for (int q = 0; q < ranks; ++q) {
        ASSERT_EQ(support(outputs[q].sent), selected) << "rank " << q << " n " << n;
        for (uint32_t i : selected) ASSERT_EQ(outputs[q].sent[i], xs[q][i]);  // raw, unscaled
        ASSERT_EQ(outputs[q].result, outputs[0].result) << "ranks disagree, n " << n;
      }
      // The ring adds in its own order, in float: the sum is within (ranks - 1) u sum|x| of
      // the exact one (u = 2^-24), and rounding 1/ranks and the product adds 2 u |sum|, so the
      // average is within (ranks + 1) u sum|x| / ranks of the exact average.
      std::vector<double> expected(n, 0.0), bound(n, 0.0);
      for (uint32_t i : selected) {
        for (int q = 0; q < ranks; ++q) {
          expected[i] += xs[q][i];
          bound[i] += std::fabs(xs[q][i]);
        }
        expected[i] /= ranks;
        bound[i] *= std::ldexp(1.0, -24) * (ranks + 1) / ranks;
      }
      for (size_t i = 0; i < n; ++i) {
        ASSERT_NEAR(outputs[0].result[i], expected[i], bound[i]) << "n " << n << " element " << i;
      }
    }
  }
}

TEST(RandomK, DrawsFreshIndicesEveryStep) {
  const size_t n = 10000;
  auto make = [] { return methods::makeRandomK(randomkDensity(0.01), {}); };
  auto input = [&](int, int rank) { return nonZero(n, rank); };
  const auto first = support(runExchange(2, make, input, 1)[1].sent);
  const auto second = support(runExchange(2, make, input, 2)[1].sent);
  const auto again = support(runExchange(2, make, input, 1)[1].sent);
  ASSERT_EQ(first.size(), 100u);
  ASSERT_EQ(second.size(), 100u);
  EXPECT_NE(first, second);
  EXPECT_EQ(first, again);  // a function of (seed, step) only
}

TEST(RandomK, UnitsOfEqualSizeButDifferentTensorsDrawDifferentIndices) {
  TensorShape a{"layer1.weight", {1000}, 1000}, b{"layer2.weight", {1000}, 1000};
  auto ca = methods::makeRandomK(randomkDensity(0.05), {&a, 1});
  auto cb = methods::makeRandomK(randomkDensity(0.05), {&b, 1});
  auto ca2 = methods::makeRandomK(randomkDensity(0.05), {&a, 1});
  EXPECT_NE(drawn(*ca, 1000, 42), drawn(*cb, 1000, 42));
  EXPECT_EQ(drawn(*ca, 1000, 42), drawn(*ca2, 1000, 42));
}

// Every index equally likely: counts over many seeds against the binomial spread, and the
// draws always k distinct indices in order.
TEST(RandomK, DrawsEveryIndexWithEqualProbability) {
  const size_t n = 100, seeds = 4000;
  auto c = methods::makeRandomK(randomkDensity(0.1), {});
  std::vector<double> counts(n, 0);
  for (uint64_t seed = 0; seed < seeds; ++seed) {
    const std::vector<uint32_t> indices = drawn(*c, n, seed);
    ASSERT_EQ(indices.size(), 10u);
    ASSERT_TRUE(std::adjacent_find(indices.begin(), indices.end(),
                                   std::greater_equal<uint32_t>()) == indices.end());
    for (uint32_t i : indices) counts[i] += 1;
  }
  const double expected = seeds * 0.1, sd = std::sqrt(seeds * 0.1 * 0.9);
  double chi2 = 0;
  for (double count : counts) {
    EXPECT_NEAR(count, expected, 5 * sd);
    chi2 += (count - expected) * (count - expected) / expected;
  }
  // Chi-square with 99 degrees of freedom: mean 99, standard deviation 14; 6 sigma above.
  EXPECT_LT(chi2, 99 + 6 * 14.1);
  // k = n selects everything.
  auto all = methods::makeRandomK(randomkDensity(1.0), {});
  std::vector<uint32_t> everything(37);
  std::iota(everything.begin(), everything.end(), 0u);
  EXPECT_EQ(drawn(*all, 37, 5), everything);
}

TEST(RandomK, CodeIsKFloatsSummedInTheRing) {
  auto c = methods::makeRandomK(randomkDensity(0.01), {});
  EXPECT_EQ(c->aggregation(), Aggregation::kAllreduce);
  auto& linear = dynamic_cast<LinearCompressor&>(*c);
  EXPECT_EQ(linear.codeLength(0), 0u);
  EXPECT_EQ(linear.codeLength(1), 1u);
  EXPECT_EQ(linear.codeLength(1001), 10u);
  EXPECT_EQ(c->encodedBytes(1001), 40u);
}

TEST(RandomK, RejectsDensitiesOutsideZeroToOne) {
  for (double r : {0.0, -0.5, 2.0, std::nan("")}) {
    try {
      methods::makeRandomK(randomkDensity(r), {});
      ADD_FAILURE() << "accepted R = " << r;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("randomk:R needs 0 < R <= 1"), std::string::npos);
    }
  }
}

}  // namespace
}  // namespace gradsync
