// qsgd:L against a naive reference (per-bucket norms in double, element by element): decoded
// values sit on one of the two levels around |v_i| * L / ||v||, the mean of many decodes is v
// (within standard errors computed from the known Bernoulli variance), the variance is the
// exact one and within the paper's bound, and the bytes are as documented.
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

struct RefBucket {
  size_t begin, size;
  float norm;  // as the encoder rounds it
};

// Buckets tensor by tensor (no tensors: the whole buffer), norms summed in double in order.
std::vector<RefBucket> refBuckets(const std::vector<float>& x, size_t bucket,
                                  std::vector<size_t> tensors = {}) {
  if (tensors.empty()) tensors = {x.size()};
  if (bucket == 0) bucket = x.size() + 1;
  std::vector<RefBucket> buckets;
  size_t begin = 0;
  for (size_t tensor : tensors) {
    for (size_t offset = 0; offset < tensor; offset += bucket) {
      RefBucket b{begin + offset, std::min(bucket, tensor - offset), 0};
      double squares = 0;
      for (size_t i = b.begin; i < b.begin + b.size; ++i) squares += double{x[i]} * x[i];
      b.norm = static_cast<float>(std::sqrt(squares));
      buckets.push_back(b);
    }
    begin += tensor;
  }
  return buckets;
}

size_t levelBits(int levels) {
  size_t bits = 0;
  while ((size_t{1} << bits) < static_cast<size_t>(levels) + 1) ++bits;
  return bits;
}

// Each decoded value is sign(v_i) * l * ||v|| / L with l = floor(r) or floor(r) + 1.
void expectOnNeighbouringLevels(const std::vector<float>& x, const std::vector<float>& decoded,
                                int levels, const std::vector<RefBucket>& buckets) {
  for (const RefBucket& b : buckets) {
    const float unit = b.norm / static_cast<float>(levels);
    for (size_t i = b.begin; i < b.begin + b.size; ++i) {
      if (b.norm == 0) {
        ASSERT_EQ(decoded[i], 0.0f) << i;
        continue;
      }
      const double r = std::fabs(double{x[i]}) * levels / b.norm;
      const double level = std::fabs(decoded[i]) / unit;
      ASSERT_NEAR(level, std::round(level), 1e-4) << "not on a level at " << i;
      ASSERT_GE(std::round(level), std::floor(r - 1e-5)) << i;
      ASSERT_LE(std::round(level), std::min<double>(std::ceil(r + 1e-5), levels)) << i;
      if (decoded[i] != 0) {
        ASSERT_EQ(decoded[i] < 0, x[i] < 0) << "sign at " << i;
      }
    }
  }
}

TEST(Qsgd, BytesAreOneNormPerBucketAndSignPlusLevelBitsPerElement) {
  for (int levels : {1, 3, 16, 127}) {
    for (size_t bucket : {size_t{1}, size_t{100}, size_t{512}}) {
      for (size_t n : {0, 1, 99, 100, 101, 511, 512, 513, 1000}) {
        auto q = methods::makeQsgd(testing::valueArgs(levels, static_cast<double>(bucket)), {});
        const size_t buckets = (n + bucket - 1) / bucket;
        const size_t expected = 4 * buckets + (n * (1 + levelBits(levels)) + 7) / 8;
        EXPECT_EQ(encodeOnce(*q, gaussian(n, n), 1).size(), expected) << levels << " " << n;
        EXPECT_EQ(q->encodedBytes(n), expected);
      }
    }
  }
  // Buckets restart at every tensor: 3 | 512 + 188 | (empty) | 10 -> 4 buckets.
  std::vector<TensorShape> unit = {testing::tensorShape(3), testing::tensorShape(700),
                                   testing::tensorShape(0), testing::tensorShape(10)};
  auto q = methods::makeQsgd(testing::valueArgs(16), unit);
  EXPECT_EQ(encodeOnce(*q, gaussian(713, 1), 1).size(), 4 * 4 + (713 * 6 + 7) / 8);
  EXPECT_EQ(q->encodedBytes(713), 4 * 4 + (713 * 6 + 7) / 8);
  auto perTensor = methods::makeQsgd(testing::valueArgs(16, 0), unit);
  EXPECT_EQ(encodeOnce(*perTensor, gaussian(713, 1), 1).size(), 4 * 3 + (713 * 6 + 7) / 8);
}

TEST(Qsgd, DecodesOntoTheNeighbouringLevelsOfEachBucket) {
  for (int levels : {1, 2, 16, 127}) {
    for (size_t n : {1, 511, 512, 513, 5000}) {
      std::vector<float> x = gaussian(n, n + levels);
      for (size_t i = 0; i < n; i += 7) x[i] = 0;
      if (n > 600) std::fill(x.begin() + 512, x.begin() + 1024, 0.0f);  // a zero bucket
      auto q = methods::makeQsgd(testing::valueArgs(levels), {});
      std::vector<float> decoded = decodeOnce(*q, encodeOnce(*q, x, levels), n);
      expectOnNeighbouringLevels(x, decoded, levels, refBuckets(x, 512));
      if (n == 1) {  // the element is its bucket's norm: level L
        EXPECT_NEAR(decoded[0], x[0], 1e-6 * std::fabs(x[0]));
      }
    }
  }
}

TEST(Qsgd, MeanOfManyDecodesIsTheInput) {
  const size_t n = 1000;  // buckets of 512 and 488
  const int levels = 4;
  const int trials = 4000;
  std::vector<float> x = gaussian(n, 3);
  auto q = methods::makeQsgd(testing::valueArgs(levels), {});
  std::vector<double> sum(n, 0.0);
  for (int t = 0; t < trials; ++t) {
    std::vector<float> decoded = decodeOnce(*q, encodeOnce(*q, x, rng::mixSeed(123, t)), n);
    for (size_t i = 0; i < n; ++i) sum[i] += decoded[i];
  }
  // Per element within 5 standard errors; and the errors towards larger magnitude, summed
  // over elements in units of their standard errors (N(0, 1) once divided by the square root
  // of their count), catch a bias too small to show in any one element.
  double z = 0;
  size_t uncertain = 0;
  for (const RefBucket& b : refBuckets(x, 512)) {
    const double unit = double{b.norm} / levels;
    for (size_t i = b.begin; i < b.begin + b.size; ++i) {
      const double r = std::fabs(double{x[i]}) * levels / b.norm;
      const double p = r - std::floor(r);
      const double standardError = unit * std::sqrt(p * (1 - p) / trials);
      const double error = sum[i] / trials - x[i];
      EXPECT_LE(std::fabs(error), 5 * standardError + 1e-6 * b.norm)
          << "element " << i << ": p " << p;
      if (p > 0.1 && p < 0.9) {
        z += (x[i] < 0 ? -error : error) / standardError;
        ++uncertain;
      }
    }
  }
  EXPECT_GT(uncertain, n / 2);  // most elements are genuinely random, so the test has teeth
  EXPECT_LT(std::fabs(z / std::sqrt(static_cast<double>(uncertain))), 5.0);
}

TEST(Qsgd, VarianceIsTheBernoulliVarianceWithinThePaperBound) {
  const int trials = 400;
  for (int levels : {1, 2, 16}) {
    for (size_t bucket : {size_t{64}, size_t{512}}) {
      const size_t n = 2 * bucket + 17;
      std::vector<float> x = gaussian(n, bucket + levels);
      auto q = methods::makeQsgd(testing::valueArgs(levels, static_cast<double>(bucket)), {});
      std::vector<RefBucket> buckets = refBuckets(x, bucket);
      std::vector<double> error(buckets.size(), 0.0);
      for (int t = 0; t < trials; ++t) {
        std::vector<float> decoded = decodeOnce(*q, encodeOnce(*q, x, rng::mixSeed(9, t)), n);
        for (size_t k = 0; k < buckets.size(); ++k) {
          for (size_t i = buckets[k].begin; i < buckets[k].begin + buckets[k].size; ++i) {
            error[k] += (double{decoded[i]} - x[i]) * (double{decoded[i]} - x[i]) / trials;
          }
        }
      }
      for (size_t k = 0; k < buckets.size(); ++k) {
        const RefBucket& b = buckets[k];
        const double unit = double{b.norm} / levels;
        double exact = 0, varianceOfError = 0;
        for (size_t i = b.begin; i < b.begin + b.size; ++i) {
          const double r = std::fabs(double{x[i]}) * levels / b.norm;
          const double p = r - std::floor(r);
          exact += unit * unit * p * (1 - p);
          varianceOfError += std::pow(unit, 4) * p * (1 - p) * (1 - 2 * p) * (1 - 2 * p);
        }
        const double m = static_cast<double>(b.size);
        const double bound =
            std::min(m / (levels * levels), std::sqrt(m) / levels) * double{b.norm} * b.norm;
        EXPECT_NEAR(error[k], exact, 5 * std::sqrt(varianceOfError / trials) + 1e-9)
            << "L " << levels << " bucket " << bucket << " #" << k;
        EXPECT_LE(error[k], bound) << "L " << levels << " bucket " << bucket << " #" << k;
      }
    }
  }
}

TEST(Qsgd, ExchangeAveragesTheSameQuantizationOnEveryRank) {
  for (int ranks : {1, 2, 3}) {
    for (size_t n :
         {size_t{0}, size_t{1}, size_t{511}, size_t{512}, size_t{513}, (size_t{1} << 20) + 3}) {
      if (n > 100000 && ranks != 3) continue;  // the large size once, on the most ranks
      auto make = [] { return methods::makeQsgd(testing::valueArgs(16), {}); };
      auto input = [n](int rank) { return gaussian(n, 100 + rank); };
      auto out = testing::runExchange(ranks, make, [&](int, int rank) { return input(rank); });
      testing::expectConsistentExchange(out);
      auto q = make();
      for (int r = 0; r < ranks; ++r) {
        std::vector<float> x = input(r);
        EXPECT_EQ(out[r].sent,
                  decodeOnce(*q, encodeOnce(*q, x, testing::exchangeSeed(7, 0, r)), n));
        expectOnNeighbouringLevels(x, out[r].sent, 16, refBuckets(x, 512));
      }
    }
  }
}

TEST(Qsgd, BucketsFollowTensorBoundaries) {
  // A small tensor beside a large one is quantized against its own norm: with a shared bucket
  // its elements would all round to level 0 most of the time.
  std::vector<float> x = gaussian(703, 5, 10.0f);
  x[0] = 1e-3f, x[1] = -2e-3f, x[2] = 3e-3f;
  std::vector<TensorShape> unit = {testing::tensorShape(3), testing::tensorShape(700)};
  auto q = methods::makeQsgd(testing::valueArgs(16), unit);
  for (uint64_t seed = 0; seed < 20; ++seed) {
    std::vector<float> decoded = decodeOnce(*q, encodeOnce(*q, x, seed), x.size());
    expectOnNeighbouringLevels(x, decoded, 16, refBuckets(x, 512, {3, 700}));
    EXPECT_GT(decoded[2], 2e-3f);  // r = 12.8: level 12 or 13 of a 3.7e-3 norm
  }
}

TEST(Qsgd, TinyNormsStillQuantize) {
  // L / ||v|| overflows float here: the encoder divides first instead.
  std::vector<float> x = {3e-39f, -1e-39f, 2e-39f, 5e-40f, 0.0f};
  auto q = methods::makeQsgd(testing::valueArgs(16), {});
  for (uint64_t seed = 0; seed < 20; ++seed) {
    std::vector<float> decoded = decodeOnce(*q, encodeOnce(*q, x, seed), x.size());
    expectOnNeighbouringLevels(x, decoded, 16, refBuckets(x, 512));
    EXPECT_GT(decoded[0], 0.0f);  // r = 12.9: level 12 or 13
  }
}

TEST(Qsgd, NonFiniteInputPoisonsOnlyItsBucket) {
  for (float bad :
       {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    std::vector<float> x = gaussian(1024, 8);
    x[100] = bad;
    auto q = methods::makeQsgd(testing::valueArgs(16), {});
    std::vector<float> decoded = decodeOnce(*q, encodeOnce(*q, x, 1), x.size());
    for (size_t i = 0; i < 512; ++i) ASSERT_TRUE(std::isnan(decoded[i])) << i;
    std::vector<float> tail(x.begin() + 512, x.end());
    std::vector<float> decodedTail(decoded.begin() + 512, decoded.end());
    expectOnNeighbouringLevels(tail, decodedTail, 16, refBuckets(tail, 512));
  }
}

TEST(Qsgd, SameSeedSameBytesOtherSeedOtherBytes) {
  std::vector<float> x = gaussian(2000, 4);
  auto q = methods::makeQsgd(testing::valueArgs(16), {});
  EXPECT_EQ(encodeOnce(*q, x, 5), encodeOnce(*q, x, 5));
  EXPECT_NE(encodeOnce(*q, x, 5), encodeOnce(*q, x, 6));
}

TEST(Qsgd, RejectsMalformedEncodings) {
  const size_t n = 5000;  // codes in two staging chunks
  auto q = methods::makeQsgd(testing::valueArgs(16), {});
  std::vector<uint8_t> good = encodeOnce(*q, gaussian(n, 2), 1);
  const size_t codesStart = 4 * 10;  // 10 norms
  std::vector<float> out(n);
  EXPECT_NO_THROW(testing::asCodec(*q).decodeAdd(good, out));
  std::vector<uint8_t> shorter(good.begin(), good.end() - 1), longer = good;
  longer.push_back(0);
  EXPECT_THROW(testing::asCodec(*q).decodeAdd(shorter, out), ProtocolError);
  EXPECT_THROW(testing::asCodec(*q).decodeAdd(longer, out), ProtocolError);
  EXPECT_THROW(testing::asCodec(*q).decodeAdd({}, out), ProtocolError);
  for (size_t index : {size_t{0}, size_t{4500}}) {
    std::vector<uint8_t> top = good, beyond = good;
    testing::writeCode(top, codesStart, 6, index, 2 * 16 + 1);  // level L, negative: valid
    EXPECT_NO_THROW(testing::asCodec(*q).decodeAdd(top, out));
    testing::writeCode(beyond, codesStart, 6, index, 2 * 17);  // level L + 1
    EXPECT_THROW(testing::asCodec(*q).decodeAdd(beyond, out), ProtocolError) << index;
  }
}

TEST(Qsgd, RejectsInvalidParameters) {
  for (double levels : {0.0, -1.0, 1.5, 128.0, 1e300, std::numeric_limits<double>::quiet_NaN()}) {
    EXPECT_THROW(methods::makeQsgd(testing::valueArgs(levels), {}), ConfigError) << levels;
  }
  EXPECT_THROW(methods::makeQsgd(MethodArgs{}, {}), ConfigError);  // no L
  for (double bucket : {-1.0, 1.5, 1e20}) {
    MethodArgs args = testing::valueArgs(16);
    args.keys.emplace_back("bucket", fmt::format("{}", bucket));
    EXPECT_THROW(methods::makeQsgd(args, {}), ConfigError) << bucket;
  }
  EXPECT_NO_THROW(methods::makeQsgd(testing::valueArgs(1), {}));
  EXPECT_NO_THROW(methods::makeQsgd(testing::valueArgs(127, 0), {}));
  try {
    methods::makeQsgd(testing::valueArgs(200), {});
    ADD_FAILURE() << "accepted L = 200";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("qsgd:L"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gradsync
