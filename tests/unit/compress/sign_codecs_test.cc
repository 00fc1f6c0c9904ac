// The two 1-bit codecs, onebit and signsgd, against naive references (per bucket, sums in
// double in element order): onebit decodes every element to its bucket's mean of its side
// (x >= 0 or x < 0), signsgd to +-its bucket's mean magnitude. Decoding reproduces the reference
// exactly, the bytes are as documented, and under the error-feedback decorator each step sends
// the quantization of the corrected gradient and keeps exactly the rest. One suite, run for
// both: they share the bucket layout and differ only in what a bucket sends.
#include <cmath>
#include <limits>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "codec_checks.h"
#include "compress/error_feedback.h"
#include "compress/impl/methods.h"
#include "gradsync/error.h"
#include "support/transports.h"

namespace gradsync {
namespace {

using testing::decodeOnce;
using testing::encodeOnce;
using testing::gaussian;

MethodArgs bucketArgs(double bucket) {
  return testing::withOption("bucket", bucket);
}

// What the elements [first, last) of one bucket decode to.
using BucketReference = void (*)(const std::vector<float>& x, size_t first, size_t last,
                                 std::vector<float>& out);

void oneBitBucket(const std::vector<float>& x, size_t first, size_t last, std::vector<float>& out) {
  double positives = 0, negatives = 0, positiveCount = 0, negativeCount = 0;
  for (size_t i = first; i < last; ++i) {
    if (x[i] >= 0) {
      positives += x[i];
      positiveCount += 1;
    } else {
      negatives += x[i];
      negativeCount += 1;
    }
  }
  const float positive = static_cast<float>(positives / positiveCount);
  const float negative = static_cast<float>(negatives / negativeCount);
  for (size_t i = first; i < last; ++i) out[i] = x[i] >= 0 ? positive : negative;
}

void signBucket(const std::vector<float>& x, size_t first, size_t last, std::vector<float>& out) {
  double magnitudes = 0;
  for (size_t i = first; i < last; ++i) magnitudes += std::fabs(x[i]);
  const float scale = static_cast<float>(magnitudes / static_cast<double>(last - first));
  for (size_t i = first; i < last; ++i) out[i] = x[i] < 0 ? -scale : scale;
}

struct SignCodec {
  const char* name;
  CompressorFactory make;
  BucketReference bucket;
  size_t headerBytes;    // per bucket
  size_t defaultBucket;  // without a bucket option
};

const SignCodec kOneBit{"onebit", methods::makeOneBit, oneBitBucket, 8, 16};
const SignCodec kSignSgd{"signsgd", methods::makeSignSgd, signBucket, 4, 32};

class SignCodecs : public ::testing::TestWithParam<SignCodec> {
 protected:
  const SignCodec& codec() const { return GetParam(); }
  std::unique_ptr<Compressor> make(const MethodArgs& args = {},
                                   std::span<const TensorShape> unit = {}) const {
    return codec().make(args, unit);
  }
  // What every element decodes to; buckets restart at each tensor boundary.
  std::vector<float> reference(const std::vector<float>& x, size_t bucket,
                               std::vector<size_t> tensors = {}) const {
    if (tensors.empty()) tensors = {x.size()};
    if (bucket == 0) bucket = x.size() + 1;
    std::vector<float> out(x.size());
    size_t begin = 0;
    for (size_t tensor : tensors) {
      for (size_t offset = 0; offset < tensor; offset += bucket) {
        codec().bucket(x, begin + offset, begin + offset + std::min(bucket, tensor - offset), out);
      }
      begin += tensor;
    }
    return out;
  }
};

std::vector<float> awkwardInput(size_t n, uint64_t seed) {
  std::vector<float> x = gaussian(n, seed);
  for (size_t i = 0; i < n; i += 11) x[i] = 0.0f;
  for (size_t i = 5; i < n; i += 13) x[i] = -0.0f;
  if (n >= 1024) {
    for (size_t i = 512; i < 1024; ++i) x[i] = std::fabs(x[i]);  // a bucket of one sign
  }
  if (n >= 1536) {
    for (size_t i = 1024; i < 1536; ++i) x[i] = -1 - std::fabs(x[i]);  // and one of the other
  }
  return x;
}

TEST_P(SignCodecs, DecodesToTheReferenceExactly) {
  for (size_t bucket : {size_t{512}, size_t{100}, size_t{1}, size_t{0}}) {
    for (size_t n : {1, 99, 511, 512, 513, 1000, 5000}) {
      std::vector<float> x = awkwardInput(n, n + bucket);
      auto c = make(bucketArgs(static_cast<double>(bucket)));
      EXPECT_EQ(decodeOnce(*c, encodeOnce(*c, x, 0), n), reference(x, bucket))
          << "bucket " << bucket << " n " << n;
    }
  }
  std::vector<TensorShape> unit = {testing::tensorShape(3), testing::tensorShape(600)};
  std::vector<float> x = awkwardInput(603, 1);
  auto c = make({}, unit);
  EXPECT_EQ(decodeOnce(*c, encodeOnce(*c, x, 0), x.size()),
            reference(x, codec().defaultBucket, {3, 600}));
}

TEST_P(SignCodecs, BytesAreTheBucketHeadersAndOneBitPerElement) {
  const size_t header = codec().headerBytes;
  for (size_t bucket : {size_t{1}, size_t{100}, size_t{512}}) {
    for (size_t n : {0, 1, 7, 8, 9, 99, 100, 101, 511, 512, 513}) {
      auto c = make(bucketArgs(static_cast<double>(bucket)));
      const size_t expected = header * ((n + bucket - 1) / bucket) + (n + 7) / 8;
      EXPECT_EQ(encodeOnce(*c, gaussian(n, 1), 0).size(), expected) << bucket << " " << n;
      EXPECT_EQ(c->encodedBytes(n), expected);
    }
  }
  std::vector<TensorShape> unit = {testing::tensorShape(3), testing::tensorShape(600)};
  const size_t b = codec().defaultBucket;  // buckets never straddle the two tensors
  EXPECT_EQ(make({}, unit)->encodedBytes(603),
            header * ((3 + b - 1) / b + (600 + b - 1) / b) + (603 + 7) / 8);
}

TEST_P(SignCodecs, ExchangeAveragesTheReferenceOnEveryRank) {
  for (int ranks : {1, 2, 3}) {
    for (size_t n :
         {size_t{0}, size_t{1}, size_t{511}, size_t{512}, size_t{513}, (size_t{1} << 20) + 5}) {
      if (n > 100000 && ranks != 3) continue;
      auto input = [n](int rank) { return gaussian(n, 300 + rank); };
      auto out = testing::runExchange(
          ranks, [&] { return make(); }, [&](int, int rank) { return input(rank); });
      testing::expectConsistentExchange(out);
      for (int r = 0; r < ranks; ++r)
        EXPECT_EQ(out[r].sent, reference(input(r), codec().defaultBucket)) << r;
    }
  }
}

TEST_P(SignCodecs, ErrorFeedbackSendsTheCorrectedGradientAndKeepsTheRest) {
  const size_t n = 1029;
  const int steps = 8;
  testing::runWithTransports(testing::TransportKind::kLoopback, 2, [&](Transport& transport) {
    ErrorFeedback ef(make(), n);
    std::vector<double> inputs(n, 0), sent(n, 0);
    std::vector<float> residual(n, 0.0f);
    ExchangeStats stats;
    for (int s = 0; s < steps; ++s) {
      std::vector<float> grad = gaussian(n, 31 * s + transport.rank());
      std::vector<float> corrected(n);
      for (size_t i = 0; i < n; ++i) {
        inputs[i] += grad[i];
        corrected[i] = grad[i] + residual[i];
      }
      std::vector<float> mine(n);
      ExchangeContext context{transport, {}, static_cast<uint64_t>(s), 1};
      ef.exchange(context, grad, mine, stats);
      ASSERT_EQ(mine, reference(corrected, codec().defaultBucket)) << "step " << s;
      for (size_t i = 0; i < n; ++i) {
        sent[i] += mine[i];
        residual[i] = corrected[i] - mine[i];
        ASSERT_EQ(ef.residual()[i], residual[i]) << "step " << s << " element " << i;
      }
    }
    for (size_t i = 0; i < n; ++i) {
      EXPECT_NEAR(ef.residual()[i] + sent[i], inputs[i], 1e-4) << i;
      EXPECT_LT(std::fabs(ef.residual()[i]), 10.0f) << "the residual grows at " << i;
    }
  });
}

TEST_P(SignCodecs, RejectsMalformedEncodings) {
  auto c = make();
  auto& codec = testing::asCodec(*c);
  for (size_t n : {1, 513, 5000}) {
    std::vector<uint8_t> good = encodeOnce(*c, gaussian(n, 3), 0);
    std::vector<float> out(n);
    EXPECT_NO_THROW(codec.decodeAdd(good, out));
    std::vector<uint8_t> shorter(good.begin(), good.end() - 1), longer = good;
    longer.push_back(0);
    EXPECT_THROW(codec.decodeAdd(shorter, out), ProtocolError) << n;
    EXPECT_THROW(codec.decodeAdd(longer, out), ProtocolError) << n;
    EXPECT_THROW(codec.decodeAdd({}, out), ProtocolError) << n;
  }
  std::vector<float> none;
  EXPECT_THROW(codec.decodeAdd(std::vector<uint8_t>(1), none), ProtocolError);
}

TEST_P(SignCodecs, RejectsInvalidBuckets) {
  for (double bucket : {-1.0, 1.5, 1e20, std::numeric_limits<double>::quiet_NaN()}) {
    EXPECT_THROW(make(bucketArgs(bucket)), ConfigError) << bucket;
  }
  EXPECT_NO_THROW(make(bucketArgs(0)));
}

INSTANTIATE_TEST_SUITE_P(Methods, SignCodecs, ::testing::Values(kOneBit, kSignSgd),
                         [](const auto& info) { return std::string(info.param.name); });

// Where the two differ: how far a non-finite input spreads.
TEST(OneBit, NonFiniteInputPoisonsOnlyItsSideOfItsBucket) {
  std::vector<float> x = gaussian(1024, 2);
  x[10] = std::numeric_limits<float>::quiet_NaN();  // compares false: the negative side
  x[600] = std::numeric_limits<float>::infinity();
  auto o = methods::makeOneBit(bucketArgs(512), {});
  std::vector<float> decoded = decodeOnce(*o, encodeOnce(*o, x, 0), x.size());
  for (size_t i = 0; i < 512; ++i) {
    ASSERT_EQ(std::isnan(decoded[i]), !(x[i] >= 0)) << i;
    if (x[i] >= 0) {
      ASSERT_TRUE(std::isfinite(decoded[i])) << i;
    }
  }
  for (size_t i = 512; i < 1024; ++i) {
    ASSERT_EQ(std::isinf(decoded[i]), x[i] >= 0) << i;
    if (x[i] < 0) {
      ASSERT_TRUE(std::isfinite(decoded[i])) << i;
    }
  }
}

TEST(SignSgd, NonFiniteInputPoisonsOnlyItsBucket) {
  std::vector<float> x = gaussian(1024, 2);
  x[10] = std::numeric_limits<float>::quiet_NaN();
  x[600] = -std::numeric_limits<float>::infinity();
  auto q = methods::makeSignSgd(bucketArgs(512), {});
  std::vector<float> decoded = decodeOnce(*q, encodeOnce(*q, x, 0), x.size());
  for (size_t i = 0; i < 512; ++i) ASSERT_TRUE(std::isnan(decoded[i])) << i;
  for (size_t i = 512; i < 1024; ++i) ASSERT_TRUE(std::isinf(decoded[i])) << i;
}

}  // namespace
}  // namespace gradsync
