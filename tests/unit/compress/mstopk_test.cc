// MSTopK (threshold_select.h, impl/mstopk.cc) against a literal N-pass bisection, written as
// the re-implementations write it (count, halve, remember theta1 and theta2, fill), and
// against exact top-k for the share of the squared magnitude it keeps.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include <gtest/gtest.h>

#include "compress/impl/methods.h"
#include "compress/select.h"
#include "compress/threshold_select.h"
#include "exchange_harness.h"
#include "gradsync/error.h"

namespace gradsync {
namespace {

using Range = ThresholdSelector::Range;
using testing::gaussian;
using testing::runExchange;

struct MsTopKReference {
  std::vector<uint32_t> indices;
  Range range = Range::kExact;
};

std::vector<uint32_t> exactTopK(const std::vector<float>& x, size_t k) {
  std::vector<uint32_t> indices;
  selectTopKBySort(x, k, indices);
  return indices;
}

// The N-pass bisection on [lower, max] (threshold_select.h states the rules it follows).
std::vector<uint32_t> bisect(const std::vector<float>& x, size_t k, int iters, float lower,
                             float max) {
  const float c = 1.0f / (max - lower);
  std::vector<double> t(x.size());
  for (size_t i = 0; i < x.size(); ++i) t[i] = (std::fabs(x[i]) - lower) * c;
  auto count = [&](double rho) {
    return static_cast<size_t>(
        std::count_if(t.begin(), t.end(), [&](double v) { return v >= rho; }));
  };
  double lo = 0, hi = 1, theta1 = 0, theta2 = 0;  // theta2 starts at the lower end
  size_t k1 = 0, k2 = x.size() + 1;
  bool haveTheta1 = false;
  for (int i = 0; i < iters; ++i) {
    const double rho = lo + (hi - lo) / 2;
    const size_t nnz = count(rho);
    if (nnz <= k) {
      hi = rho;
      if (nnz > k1 || !haveTheta1) {
        k1 = nnz;
        theta1 = rho;
        haveTheta1 = true;
      }
    } else {
      lo = rho;
      if (nnz < k2) {
        k2 = nnz;
        theta2 = rho;
      }
    }
  }
  if (!haveTheta1) {  // the top end counts as tested too
    const size_t atMax = count(1.0);
    if (atMax <= k) {
      theta1 = 1;
      k1 = atMax;
    } else {
      theta2 = 1;
      theta1 = std::numeric_limits<double>::infinity();
      k1 = 0;
    }
  }
  std::vector<uint32_t> indices;
  size_t fill = k - k1;
  for (size_t i = 0; i < x.size(); ++i) {
    if (t[i] >= theta1) {
      indices.push_back(static_cast<uint32_t>(i));
    } else if (t[i] >= theta2 && fill > 0) {
      indices.push_back(static_cast<uint32_t>(i));
      --fill;
    }
  }
  return indices;
}

MsTopKReference bisectionReference(const std::vector<float>& x, size_t k, int iters) {
  k = std::min(k, x.size());
  const MagnitudeStats stats = magnitudeStats(x);
  const float grid = std::ldexp(1.0f, iters);
  auto searchable = [&](float lower) {
    return stats.max > lower && std::isfinite((1.0f / (stats.max - lower)) * grid);
  };
  if (k > 0 && stats.finite) {
    size_t atLeastMean = 0;
    for (float v : x) atLeastMean += std::fabs(v) >= stats.mean;
    if (atLeastMean >= k && searchable(stats.mean)) {
      return {bisect(x, k, iters, stats.mean, stats.max), Range::kFromMean};
    }
    if (searchable(0.0f)) return {bisect(x, k, iters, 0.0f, stats.max), Range::kFromZero};
  }
  return {exactTopK(x, k), Range::kExact};
}

std::vector<float> heavyTailed(size_t n, uint64_t seed) {  // Gaussian times exp(Gaussian)
  std::vector<float> x = gaussian(n, seed), scale = gaussian(n, seed + 1);
  for (size_t i = 0; i < n; ++i) x[i] *= std::exp(scale[i]);
  return x;
}

std::vector<float> studentT(size_t n, uint64_t seed, float dof) {
  std::mt19937_64 engine(seed);
  std::student_t_distribution<float> t(dof);
  std::vector<float> x(n);
  for (float& v : x) v = t(engine);
  return x;
}

// Named inputs covering every branch of the rules.
std::vector<std::pair<std::string, std::vector<float>>> inputs(size_t n, uint64_t seed) {
  std::mt19937_64 engine(seed);
  std::vector<float> ties(n), outliers(n, 1e-3f), equal(n, 0.75f), zeros(n, 0.0f);
  const float levels[] = {0.0f, 0.5f, -0.5f, 1.0f, -2.0f, 2.0f};
  for (size_t i = 0; i < n; ++i) ties[i] = levels[engine() % 6];
  for (size_t i = 0; i < n; i += 97) outliers[i] = 1e6f;  // ~1% far above a mean they set
  std::vector<float> nan = gaussian(n, seed), inf = gaussian(n, seed);
  nan[n / 2] = std::numeric_limits<float>::quiet_NaN();
  inf[n / 3] = -std::numeric_limits<float>::infinity();
  return {{"gaussian", gaussian(n, seed)},
          {"gaussian*exp(gaussian)", heavyTailed(n, seed)},
          {"student-t 3", studentT(n, seed, 3)},
          {"cauchy", studentT(n, seed, 1)},
          {"ties", ties},
          {"outliers", outliers},
          {"equal", equal},
          {"zeros", zeros},
          {"nan", nan},
          {"inf", inf}};
}

TEST(MagnitudeStats, MatchesADoubleSum) {
  for (size_t n : {size_t{1}, size_t{1000}, size_t{1025}, size_t{300007}}) {
    const std::vector<float> x = heavyTailed(n, n);
    double sum = 0;
    float max = 0;
    for (float v : x) {
      sum += std::fabs(v);
      max = std::max(max, std::fabs(v));
    }
    const MagnitudeStats stats = magnitudeStats(x);
    EXPECT_NEAR(stats.mean, sum / static_cast<double>(n), 1e-6 * sum / static_cast<double>(n));
    EXPECT_EQ(stats.max, max);
    EXPECT_TRUE(stats.finite);
  }
  std::vector<float> x = gaussian(5000, 1);
  x[4321] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(magnitudeStats(x).finite);
  x[4321] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(magnitudeStats(x).finite);
  EXPECT_EQ(magnitudeStats({}).max, 0.0f);
}

TEST(ThresholdSelector, EqualsTheLiteralNPassBisection) {
  size_t ranges[3] = {};
  for (int iters : {1, 3, 20, 30}) {
    ThresholdSelector selector(iters);  // reused: buffers must not leak between calls
    std::vector<uint32_t> got;
    for (size_t n : {size_t{1}, size_t{2}, size_t{7}, size_t{1000}, size_t{40009}}) {
      for (const auto& [name, x] : inputs(n, n + iters)) {
        for (size_t k : {size_t{1}, size_t{2}, n / 100, n / 3, n - 1, n}) {
          const MsTopKReference expected = bisectionReference(x, k, iters);
          selector.select(x, k, got);
          ASSERT_EQ(got, expected.indices) << name << " n " << n << " k " << k << " N " << iters;
          ASSERT_EQ(selector.lastRange(), expected.range) << name << " n " << n << " k " << k;
          ++ranges[static_cast<int>(expected.range)];
        }
      }
    }
  }
  // Every rule was exercised.
  EXPECT_GT(ranges[0], 0u);
  EXPECT_GT(ranges[1], 0u);
  EXPECT_GT(ranges[2], 0u);
}

TEST(ThresholdSelector, EqualsTheBisectionOnAMillionElements) {
  ThresholdSelector selector(20);
  std::vector<uint32_t> got;
  const std::vector<float> x = studentT(1 << 20, 4, 2.5f);
  for (size_t k : {size_t{1049}, size_t{10486}}) {
    selector.select(x, k, got);
    ASSERT_EQ(got, bisectionReference(x, k, 20).indices) << k;
  }
}

TEST(ThresholdSelector, SelectsExactlyKDistinctIndicesInOrder) {
  ThresholdSelector selector(20);
  std::vector<uint32_t> got;
  for (size_t n : {size_t{1}, size_t{3}, size_t{1001}, size_t{65537}}) {
    for (const auto& [name, x] : inputs(n, 77)) {
      for (double r : {0.001, 0.01, 0.3, 0.9, 1.0}) {
        const size_t k = selectionCount(n, r);
        selector.select(x, k, got);
        ASSERT_EQ(got.size(), k) << name << " n " << n << " R " << r;
        ASSERT_TRUE(std::adjacent_find(got.begin(), got.end(), std::greater_equal<uint32_t>()) ==
                    got.end())
            << name << " n " << n << " R " << r;
        ASSERT_LT(got.back(), n);
      }
    }
  }
}

double squaredMagnitude(const std::vector<float>& x, const std::vector<uint32_t>& indices) {
  double sum = 0;
  for (uint32_t i : indices) sum += static_cast<double>(x[i]) * x[i];
  return sum;
}

TEST(ThresholdSelector, KeepsAtLeast95PercentOfTheExactTopKSquaredMagnitude) {
  ThresholdSelector selector(20);
  std::vector<uint32_t> got;
  const size_t n = 1 << 20;
  std::vector<std::pair<std::string, std::vector<float>>> cases = {
      {"gaussian", gaussian(n, 11)},
      {"gaussian*exp(gaussian)", heavyTailed(n, 12)},
      {"student-t 3", studentT(n, 13, 3)},
      {"cauchy", studentT(n, 14, 1)}};
  for (const auto& [name, x] : cases) {
    for (double r : {0.01, 0.001}) {
      const size_t k = selectionCount(n, r);
      selector.select(x, k, got);
      ASSERT_EQ(got.size(), k);
      const double share = squaredMagnitude(x, got) / squaredMagnitude(x, exactTopK(x, k));
      EXPECT_GE(share, 0.95) << name << " R " << r;
      EXPECT_LE(share, 1.0 + 1e-12) << name << " R " << r;  // exact top-k is the maximum
    }
  }
}

MethodArgs mstopkArgs(double r, std::vector<std::pair<std::string, std::string>> keys = {}) {
  MethodArgs args;
  args.value = r;
  args.hasValue = true;
  args.keys = std::move(keys);
  return args;
}

using testing::sameBits;

TEST(MsTopK, ExchangeSendsTheBisectionsSelectionAveragedInRankOrder) {
  const double r = 0.01;
  for (size_t n : {size_t{0}, size_t{1}, size_t{1001}, size_t{1} << 20}) {
    std::vector<std::vector<float>> xs, sentBy(3, std::vector<float>(n, 0.0f));
    for (int q = 0; q < 3; ++q) {
      xs.push_back(heavyTailed(n, 500 + q));
      for (uint32_t i : bisectionReference(xs[q], selectionCount(n, r), 20).indices) {
        sentBy[q][i] = xs[q][i];
      }
    }
    for (int ranks : {1, 2, 3}) {
      auto outputs = runExchange(
          ranks, [&] { return methods::makeMsTopK(mstopkArgs(r), {}); },
          [&](int, int rank) { return xs[rank]; });
      std::vector<float> sum(n, 0.0f);
      for (int q = 0; q < ranks; ++q) {
        ASSERT_TRUE(sameBits(outputs[q].sent, sentBy[q])) << "rank " << q << " n " << n;
        for (size_t i = 0; i < n; ++i) sum[i] += sentBy[q][i];
      }
      for (float& v : sum) v *= 1.0f / static_cast<float>(ranks);
      for (int q = 0; q < ranks; ++q) {
        ASSERT_TRUE(sameBits(outputs[q].result, sum)) << "rank " << q << " n " << n;
      }
    }
  }
}

TEST(MsTopK, MalformedEncodingsThrow) {
  auto c = methods::makeMsTopK(mstopkArgs(0.01), {});
  auto& codec = dynamic_cast<CodecCompressor&>(*c);
  std::vector<uint8_t> good;
  codec.encode(gaussian(1001, 2), good, 0);
  ASSERT_EQ(good.size(), 4u + 8u * 10u);
  std::vector<float> out(1001);
  codec.decodeAdd(good, out);
  EXPECT_THROW(codec.decodeAdd({good.data(), good.size() - 3}, out), ProtocolError);
  std::vector<uint8_t> fewer(good.begin(), good.end() - 8);
  const uint32_t nine = 9;
  std::memcpy(fewer.data(), &nine, 4);
  EXPECT_THROW(codec.decodeAdd(fewer, out), ProtocolError);
  std::vector<uint8_t> outside = good;
  const uint32_t past = 1001;
  std::memcpy(outside.data() + 4, &past, 4);
  EXPECT_THROW(codec.decodeAdd(outside, out), ProtocolError);
}

TEST(MsTopK, RejectsOutOfRangeParameters) {
  for (double r : {0.0, -1.0, 1.01}) {
    EXPECT_THROW(methods::makeMsTopK(mstopkArgs(r), {}), ConfigError) << r;
  }
  for (const char* iters : {"0", "31", "2.5", "-1"}) {
    try {
      methods::makeMsTopK(mstopkArgs(0.01, {{"iters", iters}}), {});
      ADD_FAILURE() << "accepted iters=" << iters;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("mstopk iters needs"), std::string::npos) << e.what();
    }
  }
  for (const char* iters : {"1", "30"}) {
    EXPECT_NE(methods::makeMsTopK(mstopkArgs(0.01, {{"iters", iters}}), {}), nullptr);
  }
}

}  // namespace
}  // namespace gradsync
