// demo:K (top-K 2-D DCT coefficients per chunk) against a naive reference in double (the DCT
// summed term by term, coefficients sorted by magnitude, the inverse of the kept ones): decoded
// values to float rounding, every coefficient kept gives the input back, chunks that never
// straddle two tensors, the bytes as documented, every rank the same bits, malformed encodings and
// parameters refused.
#include <algorithm>
#include <cmath>
#include <numbers>
#include <numeric>

#include <gtest/gtest.h>

#include "codec_checks.h"
#include "compress/impl/methods.h"
#include "gradsync/error.h"

namespace gradsync {
namespace {

using testing::decodeOnce;
using testing::encodeOnce;
using testing::gaussian;

MethodArgs demoArgs(size_t k, size_t side) {
  MethodArgs args = testing::valueArgs(static_cast<double>(k));
  args.keys.emplace_back("side", std::to_string(side));
  return args;
}

double dctBasis(size_t n, size_t k, size_t i) {
  const double scale = std::sqrt((k == 0 ? 1.0 : 2.0) / static_cast<double>(n));
  return scale * std::cos(std::numbers::pi * static_cast<double>((2 * i + 1) * k) /
                          static_cast<double>(2 * n));
}

// What one chunk (zero-padded to n×n) decodes to, added into out[0, chunk.size()).
void naiveDemoChunk(std::span<const float> chunk, size_t k, size_t n, double* out) {
  std::vector<double> x(n * n, 0.0), y(n * n, 0.0);
  std::copy(chunk.begin(), chunk.end(), x.begin());
  for (size_t u = 0; u < n; ++u) {
    for (size_t v = 0; v < n; ++v) {
      for (size_t i = 0; i < n; ++i) {
        for (size_t j = 0; j < n; ++j)
          y[u * n + v] += dctBasis(n, u, i) * x[i * n + j] * dctBasis(n, v, j);
      }
    }
  }
  std::vector<size_t> order(n * n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return std::fabs(y[a]) > std::fabs(y[b]); });
  for (size_t c = 0; c < k; ++c) {
    const size_t u = order[c] / n, v = order[c] % n;
    for (size_t t = 0; t < chunk.size(); ++t) {
      out[t] += y[order[c]] * dctBasis(n, u, t / n) * dctBasis(n, v, t % n);
    }
  }
}

std::vector<double> naiveDemo(const std::vector<float>& x, const std::vector<size_t>& tensors,
                              size_t k, size_t n) {
  std::vector<double> out(x.size(), 0.0);
  size_t begin = 0;
  for (size_t size : tensors) {
    for (size_t offset = 0; offset < size; offset += n * n) {
      const size_t c = std::min(n * n, size - offset);
      naiveDemoChunk(std::span(x).subspan(begin + offset, c), k, n, out.data() + begin + offset);
    }
    begin += size;
  }
  return out;
}

// Close to the reference, relative to the input's scale. The inputs are continuous, so a float
// rounding never changes which coefficients are kept (their magnitudes are not near ties).
void expectCloseToReference(const std::vector<float>& got, const std::vector<double>& expected,
                            double scale, const std::string& what) {
  ASSERT_EQ(got.size(), expected.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], expected[i], 2e-5 * scale) << what << " at " << i;
  }
}

TEST(Demo, DecodesTheLargestDctCoefficientsOfEachChunk) {
  for (size_t side : {size_t{1}, size_t{3}, size_t{8}}) {
    for (size_t k : {size_t{1}, size_t{3}}) {
      if (k > side * side) continue;
      for (size_t n : {size_t{0}, size_t{1}, size_t{10}, size_t{64}, size_t{100}}) {
        const std::vector<float> x = gaussian(n, 70 + n);
        auto q = methods::makeDemo(demoArgs(k, side), {});
        const std::vector<float> decoded = decodeOnce(*q, encodeOnce(*q, x, 1), n);
        expectCloseToReference(
            decoded, naiveDemo(x, {n}, k, side), 1 + testing::maxAbs(x),
            "side " + std::to_string(side) + " k " + std::to_string(k) + " n " + std::to_string(n));
      }
    }
  }
}

TEST(Demo, EveryCoefficientKeptGivesTheInputBack) {
  const std::vector<float> x = gaussian(4096 + 1000, 3);  // a full 64x64 chunk and a padded one
  auto q = methods::makeDemo(demoArgs(4096, 64), {});
  const std::vector<float> decoded = decodeOnce(*q, encodeOnce(*q, x, 1), x.size());
  for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(decoded[i], x[i], 2e-5) << i;
}

TEST(Demo, ChunksNeverStraddleTwoTensors) {
  const std::vector<TensorShape> unit = {testing::tensorShape(20), testing::tensorShape(7)};
  const std::vector<float> x = gaussian(27, 9);
  auto q = methods::makeDemo(demoArgs(2, 4), unit);
  const std::vector<float> decoded = decodeOnce(*q, encodeOnce(*q, x, 1), x.size());
  expectCloseToReference(decoded, naiveDemo(x, {20, 7}, 2, 4), 1 + testing::maxAbs(x),
                         "two tensors");
}

TEST(Demo, BytesAreAnIndexAndAFloatPerKeptCoefficient) {
  // 4,096 elements, one 64x64 chunk, the default 32 kept: 12-bit indices and float32 values.
  auto q = methods::makeDemo(testing::valueArgs(32), {});
  EXPECT_EQ(encodeOnce(*q, gaussian(4096, 1), 1).size(), 32u * 12 / 8 + 32 * 4);
  EXPECT_EQ(q->encodedBytes(4097), 64u * 12 / 8 + 64 * 4);  // a second, padded chunk
  EXPECT_EQ(encodeOnce(*q, {}, 1).size(), 0u);
}

TEST(Demo, ExchangeGivesEveryRankTheSameBits) {
  for (int ranks : {1, 2, 3}) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{4097}, size_t{300001}}) {
      if (n > 100000 && ranks != 3) continue;  // the large size once, on the most ranks
      auto make = [] { return methods::makeDemo(testing::valueArgs(32), {}); };
      auto out =
          testing::runExchange(ranks, make, [&](int, int rank) { return gaussian(n, 400 + rank); });
      testing::expectConsistentExchange(out);
    }
  }
}

TEST(Demo, RejectsMalformedEncodingsAndParameters) {
  // Chunks of 4x4 (4-bit indices), 2 kept: two chunks of 20 elements, 4 indices in 2 bytes.
  auto q = methods::makeDemo(demoArgs(2, 4), {});
  const std::vector<uint8_t> good = encodeOnce(*q, gaussian(20, 2), 1);
  ASSERT_EQ(good.size(), 2u + 4 * 4);
  std::vector<float> out(20, 0.0f);
  EXPECT_NO_THROW(testing::asCodec(*q).decodeAdd(good, out));
  auto refused = [&](const std::vector<uint8_t>& bytes, const char* what) {
    std::vector<float> untouched(20, 0.0f);
    EXPECT_THROW(testing::asCodec(*q).decodeAdd(bytes, untouched), ProtocolError) << what;
    EXPECT_EQ(untouched, std::vector<float>(20, 0.0f)) << what << ": written before the throw";
  };
  refused({good.begin(), good.end() - 1}, "one byte short");
  std::vector<uint8_t> repeated = good;  // the second index of chunk 0 equal to the first
  repeated[0] = static_cast<uint8_t>((repeated[0] & 0x0f) | (repeated[0] & 0x0f) << 4);
  refused(repeated, "an index repeated");

  for (double k : {0.0, 17.0, 1.5}) {  // 1 <= K <= side² = 16, whole
    MethodArgs args = testing::valueArgs(k);
    args.keys.emplace_back("side", "4");
    EXPECT_THROW(methods::makeDemo(args, {}), ConfigError) << k;
  }
  for (double side : {0.0, 257.0, 2.5}) {
    MethodArgs args = testing::valueArgs(1);
    args.keys.emplace_back("side", std::to_string(side));
    EXPECT_THROW(methods::makeDemo(args, {}), ConfigError) << side;
  }
}

}  // namespace
}  // namespace gradsync
