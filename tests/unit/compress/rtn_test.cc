// rtn:B against a naive reference (each bucket's largest magnitude, each element rounded to the
// nearest of its L = 2^(B-1) - 1 levels): decoded values bitwise, the bytes as documented, the same
// bytes whatever the seed, every rank the same bits, a non-finite input confined to its bucket,
// malformed encodings and parameters refused.
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

// What rtn:B should decode `x` to, buckets of `bucket` elements (0: one) within one tensor.
std::vector<float> naiveRtn(const std::vector<float>& x, int bits, size_t bucket) {
  const int levels = (1 << (bits - 1)) - 1;
  if (bucket == 0) bucket = x.size() + 1;
  std::vector<float> out(x.size());
  for (size_t begin = 0; begin < x.size(); begin += bucket) {
    const size_t end = std::min(x.size(), begin + bucket);
    float scale = 0;
    for (size_t i = begin; i < end; ++i) scale = std::max(scale, std::fabs(x[i]));
    for (size_t i = begin; i < end; ++i) {
      if (scale == 0) continue;
      const long level = std::lround(std::fabs(x[i]) / scale * static_cast<float>(levels));
      const float magnitude = static_cast<float>(level) * (scale / static_cast<float>(levels));
      out[i] = x[i] < 0 ? -magnitude : magnitude;
    }
  }
  return out;
}

TEST(Rtn, DecodesToTheNearestLevelOfEachBucketsLargestMagnitude) {
  for (int bits : {2, 3, 4, 8}) {
    for (size_t bucket : {size_t{3}, size_t{128}, size_t{0}}) {
      for (size_t n : {size_t{0}, size_t{1}, size_t{127}, size_t{128}, size_t{1001}}) {
        const std::vector<float> x = gaussian(n, 40 + n);
        auto q = methods::makeRtn(testing::valueArgs(bits, static_cast<double>(bucket)), {});
        const std::vector<float> decoded = decodeOnce(*q, encodeOnce(*q, x, 1), n);
        const std::vector<float> expected = naiveRtn(x, bits, bucket);
        for (size_t i = 0; i < n; ++i) {
          ASSERT_EQ(decoded[i], expected[i])
              << "rtn:" << bits << ",bucket=" << bucket << " n " << n << " at " << i;
        }
      }
    }
  }
}

TEST(Rtn, BytesAreAScalePerBucketAndBBitsPerElement) {
  for (int bits : {2, 4, 8}) {
    for (size_t n : {size_t{1}, size_t{128}, size_t{1000}}) {
      auto q = methods::makeRtn(testing::valueArgs(bits), {});
      const size_t buckets = (n + 127) / 128;
      EXPECT_EQ(encodeOnce(*q, gaussian(n, 3), 1).size(), buckets * 4 + (n * bits + 7) / 8)
          << "rtn:" << bits << " n " << n;
    }
  }
}

TEST(Rtn, EncodesTheSameBytesWhateverTheSeed) {
  const std::vector<float> x = gaussian(2000, 4);
  auto q = methods::makeRtn(testing::valueArgs(4), {});
  EXPECT_EQ(encodeOnce(*q, x, 5), encodeOnce(*q, x, 6));
}

TEST(Rtn, ExchangeGivesEveryRankTheSameBits) {
  for (int ranks : {1, 2, 3}) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{129}, (size_t{1} << 20) + 3}) {
      if (n > 100000 && ranks != 3) continue;  // the large size once, on the most ranks
      auto make = [] { return methods::makeRtn(testing::valueArgs(4), {}); };
      auto input = [n](int rank) { return gaussian(n, 200 + rank); };
      auto out = testing::runExchange(ranks, make, [&](int, int rank) { return input(rank); });
      testing::expectConsistentExchange(out);
      for (int r = 0; r < ranks; ++r) EXPECT_EQ(out[r].sent, naiveRtn(input(r), 4, 128));
    }
  }
}

TEST(Rtn, NonFiniteInputPoisonsOnlyItsBucket) {
  for (float bad :
       {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    std::vector<float> x = gaussian(256, 8);
    x[100] = bad;
    auto q = methods::makeRtn(testing::valueArgs(4), {});
    const std::vector<float> decoded = decodeOnce(*q, encodeOnce(*q, x, 1), x.size());
    for (size_t i = 0; i < 128; ++i) ASSERT_TRUE(std::isnan(decoded[i])) << i;
    const std::vector<float> tail(x.begin() + 128, x.end());
    const std::vector<float> expected = naiveRtn(tail, 4, 128);
    for (size_t i = 128; i < x.size(); ++i) ASSERT_EQ(decoded[i], expected[i - 128]) << i;
  }
}

TEST(Rtn, RejectsMalformedEncodingsAndParameters) {
  auto q = methods::makeRtn(testing::valueArgs(4), {});
  const std::vector<uint8_t> good = encodeOnce(*q, gaussian(300, 2), 1);
  std::vector<float> out(300);
  EXPECT_NO_THROW(testing::asCodec(*q).decodeAdd(good, out));
  const std::vector<uint8_t> shorter(good.begin(), good.end() - 1);
  EXPECT_THROW(testing::asCodec(*q).decodeAdd(shorter, out), ProtocolError);
  for (double bits : {1.0, 9.0, 2.5, std::numeric_limits<double>::quiet_NaN()}) {
    EXPECT_THROW(methods::makeRtn(testing::valueArgs(bits), {}), ConfigError) << bits;
  }
}

}  // namespace
}  // namespace gradsync
