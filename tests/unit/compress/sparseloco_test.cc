// sparseloco:R (chunked top-k with B-bit values) against a naive reference (each chunk sorted by
// magnitude, its k largest kept, each rounded to the nearer point of the grid between the chunk's
// smallest and largest kept magnitudes): decoded values bitwise, chunks that never straddle two
// tensors, the bytes as documented, every rank the same bits, a non-finite value confined to its
// chunk, malformed encodings and parameters refused.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include <gtest/gtest.h>

#include "codec_checks.h"
#include "compress/impl/methods.h"
#include "compress/select.h"
#include "gradsync/error.h"

namespace gradsync {
namespace {

using testing::decodeOnce;
using testing::encodeOnce;
using testing::gaussian;

MethodArgs sparseLoCoArgs(double density, size_t chunk, int bits) {
  MethodArgs args = testing::valueArgs(density);
  args.keys.emplace_back("chunk", std::to_string(chunk));
  args.keys.emplace_back("bits", std::to_string(bits));
  return args;
}

// What one chunk decodes to, added into out[begin, begin + chunk.size()).
void naiveSparseLoCoChunk(std::span<const float> chunk, double density, int bits, float* out) {
  const size_t k = selectionCount(chunk.size(), density);
  std::vector<size_t> order(chunk.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return std::fabs(chunk[a]) > std::fabs(chunk[b]); });
  order.resize(k);
  float lo = std::numeric_limits<float>::infinity(), hi = 0;
  for (size_t i : order) {
    lo = std::min(lo, std::fabs(chunk[i]));
    hi = std::max(hi, std::fabs(chunk[i]));
  }
  const int levels = 1 << (bits - 1);
  const float step = (hi - lo) / static_cast<float>(levels - 1);
  for (size_t i : order) {
    long level = 0;
    if (step > 0)
      level = std::min<long>(std::lround((std::fabs(chunk[i]) - lo) / step), levels - 1);
    const float magnitude = lo + static_cast<float>(level) * step;
    out[i] += chunk[i] < 0 ? -magnitude : magnitude;
  }
}

// What sparseloco decodes `x` to, for tensors of the given sizes laid out back to back.
std::vector<float> naiveSparseLoCo(const std::vector<float>& x, const std::vector<size_t>& tensors,
                                   double density, size_t chunk, int bits) {
  std::vector<float> out(x.size(), 0.0f);
  size_t begin = 0;
  for (size_t size : tensors) {
    for (size_t offset = 0; offset < size; offset += chunk) {
      const size_t c = std::min(chunk, size - offset);
      naiveSparseLoCoChunk(std::span(x).subspan(begin + offset, c), density, bits,
                           out.data() + begin + offset);
    }
    begin += size;
  }
  return out;
}

TEST(SparseLoCo, DecodesTheTopKOfEachChunkOnItsGrid) {
  for (int bits : {2, 3, 8}) {
    for (size_t chunk : {size_t{1}, size_t{3}, size_t{64}, size_t{4096}}) {
      for (size_t n : {size_t{0}, size_t{1}, size_t{127}, size_t{1001}, size_t{9000}}) {
        const std::vector<float> x = gaussian(n, 60 + n);
        auto q = methods::makeSparseLoCo(sparseLoCoArgs(0.05, chunk, bits), {});
        const std::vector<float> decoded = decodeOnce(*q, encodeOnce(*q, x, 1), n);
        EXPECT_TRUE(testing::sameBits(decoded, naiveSparseLoCo(x, {n}, 0.05, chunk, bits)))
            << "bits " << bits << " chunk " << chunk << " n " << n;
      }
    }
  }
}

TEST(SparseLoCo, ChunksNeverStraddleTwoTensors) {
  const std::vector<TensorShape> unit = {testing::tensorShape(100), testing::tensorShape(37),
                                         testing::tensorShape(64)};
  const std::vector<float> x = gaussian(201, 5);
  auto q = methods::makeSparseLoCo(sparseLoCoArgs(0.1, 64, 2), unit);
  const std::vector<float> decoded = decodeOnce(*q, encodeOnce(*q, x, 1), x.size());
  EXPECT_TRUE(testing::sameBits(decoded, naiveSparseLoCo(x, {100, 37, 64}, 0.1, 64, 2)));
}

TEST(SparseLoCo, BytesAreTwoFloatsPerChunkAndAnIndexAndValueCodePerSelection) {
  // 4,096 elements in chunks of 4,096 at the default density: 64 codes of 12 + 2 bits.
  auto q = methods::makeSparseLoCo(testing::valueArgs(1.0 / 64), {});
  EXPECT_EQ(encodeOnce(*q, gaussian(4096, 1), 1).size(), 8u + 64 * 14 / 8);
  EXPECT_EQ(q->encodedBytes(4096), 8u + 64 * 14 / 8);
  // 1,000 elements in chunks of 300 (9-bit indices), 3-bit values: k = 15, 15, 15, 5.
  auto r = methods::makeSparseLoCo(sparseLoCoArgs(0.05, 300, 3), {});
  EXPECT_EQ(encodeOnce(*r, gaussian(1000, 2), 1).size(), 4 * 8u + (50 * 12 + 7) / 8);
  EXPECT_EQ(encodeOnce(*r, {}, 1).size(), 0u);
}

TEST(SparseLoCo, EncodesTheSameBytesWhateverTheSeed) {
  const std::vector<float> x = gaussian(5000, 4);
  auto q = methods::makeSparseLoCo(testing::valueArgs(0.02), {});
  EXPECT_EQ(encodeOnce(*q, x, 5), encodeOnce(*q, x, 6));
}

TEST(SparseLoCo, ExchangeGivesEveryRankTheSameBits) {
  for (int ranks : {1, 2, 3}) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{4097}, (size_t{1} << 20) + 3}) {
      if (n > 100000 && ranks != 3) continue;  // the large size once, on the most ranks
      auto make = [] { return methods::makeSparseLoCo(testing::valueArgs(1.0 / 64), {}); };
      auto input = [n](int rank) { return gaussian(n, 300 + rank); };
      auto out = testing::runExchange(ranks, make, [&](int, int rank) { return input(rank); });
      testing::expectConsistentExchange(out);
      for (int r = 0; r < ranks; ++r) {
        EXPECT_TRUE(
            testing::sameBits(out[r].sent, naiveSparseLoCo(input(r), {n}, 1.0 / 64, 4096, 2)))
            << ranks << " ranks, n " << n << ", rank " << r;
      }
    }
  }
}

TEST(SparseLoCo, NonFiniteInputPoisonsOnlyTheSelectionOfItsChunk) {
  for (float bad :
       {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    std::vector<float> x = gaussian(256, 8);
    x[100] = bad;
    auto q = methods::makeSparseLoCo(sparseLoCoArgs(0.05, 128, 2), {});
    const std::vector<float> decoded = decodeOnce(*q, encodeOnce(*q, x, 1), x.size());
    size_t poisoned = 0;
    for (size_t i = 0; i < 128; ++i) poisoned += std::isnan(decoded[i]) ? 1 : 0;
    EXPECT_EQ(poisoned, selectionCount(128, 0.05));
    EXPECT_TRUE(std::isnan(decoded[100]));
    const std::vector<float> tail(x.begin() + 128, x.end());
    const std::vector<float> expected = naiveSparseLoCo(tail, {128}, 0.05, 128, 2);
    EXPECT_TRUE(testing::sameBits({decoded.begin() + 128, decoded.end()}, expected));
  }
}

TEST(SparseLoCo, RejectsMalformedEncodingsAndParameters) {
  // Chunks of 16 (4-bit indices), 4-bit values: a code is one byte, index in the low nibble.
  auto q = methods::makeSparseLoCo(sparseLoCoArgs(0.25, 16, 4), {});
  const std::vector<uint8_t> good = encodeOnce(*q, gaussian(20, 2), 1);  // chunks of 16 and 4
  ASSERT_EQ(good.size(), 2 * 8u + 4 + 1);
  std::vector<float> out(20, 0.0f);
  EXPECT_NO_THROW(testing::asCodec(*q).decodeAdd(good, out));
  auto refused = [&](std::vector<uint8_t> bytes, const char* what) {
    std::vector<float> untouched(20, 0.0f);
    EXPECT_THROW(testing::asCodec(*q).decodeAdd(bytes, untouched), ProtocolError) << what;
    EXPECT_EQ(untouched, std::vector<float>(20, 0.0f)) << what << ": written before the throw";
  };
  refused({good.begin(), good.end() - 1}, "one byte short");
  std::vector<uint8_t> outside = good;
  outside.back() = static_cast<uint8_t>((outside.back() & 0xf0) | 4);  // index 4 of a chunk of 4
  refused(outside, "an index outside its chunk");
  std::vector<uint8_t> repeated = good;
  repeated[17] = static_cast<uint8_t>((repeated[17] & 0xf0) | (repeated[16] & 0x0f));
  refused(repeated, "an index repeated");

  EXPECT_THROW(methods::makeSparseLoCo(testing::valueArgs(0), {}), ConfigError);
  for (double bits : {1.0, 9.0, 2.5}) {
    MethodArgs args = testing::valueArgs(0.01);
    args.keys.emplace_back("bits", std::to_string(bits));
    EXPECT_THROW(methods::makeSparseLoCo(args, {}), ConfigError) << bits;
  }
  for (double chunk : {0.0, 65537.0, 2.5}) {
    MethodArgs args = testing::valueArgs(0.01);
    args.keys.emplace_back("chunk", std::to_string(chunk));
    EXPECT_THROW(methods::makeSparseLoCo(args, {}), ConfigError) << chunk;
  }
}

}  // namespace
}  // namespace gradsync
