// twobit:T, CD-SGD's 2-bit codec as an ordinary compressor, against naive references: each
// element decodes to +T, -T or 0 by its own comparison with T, and with error feedback (what a
// push to parameter servers carries) a run of steps sends exactly what CD-SGD's own encoder
// (compress/two_bit.h, MXNet's residual rule) sends.
#include <cmath>

#include <gtest/gtest.h>

#include "codec_checks.h"
#include "compress/impl/methods.h"
#include "compress/push_codec.h"
#include "compress/spec.h"
#include "compress/two_bit.h"
#include "gradsync/error.h"

namespace gradsync {
namespace {

using testing::decodeOnce;
using testing::encodeOnce;
using testing::gaussian;

MethodArgs thresholdArgs(double threshold) {
  return testing::withValue(threshold);
}

TEST(TwoBit, EachElementDecodesByItsOwnComparison) {
  for (size_t n : {1, 2, 3, 4, 5, 1000, 4097}) {
    std::vector<float> g = gaussian(n, n);
    if (n > 10) g[7] = 0.5f, g[8] = -0.5f, g[9] = 0.4999f;  // at and just below T
    auto codec = methods::makeTwoBit(thresholdArgs(0.5), {});
    std::vector<uint8_t> bytes = encodeOnce(*codec, g, 0);
    EXPECT_EQ(bytes.size(), sizeof(float) + twoBitBytes(n)) << n;
    std::vector<float> decoded = decodeOnce(*codec, bytes, n);
    for (size_t i = 0; i < n; ++i) {
      const float expected = g[i] >= 0.5f ? 0.5f : g[i] <= -0.5f ? -0.5f : 0.0f;
      ASSERT_EQ(decoded[i], expected) << "n " << n << " element " << i << " of value " << g[i];
    }
  }
}

TEST(TwoBit, WithErrorFeedbackSendsWhatCdSgdsEncoderSends) {
  constexpr size_t kElements = 777;
  const std::vector<TensorShape> unit = {tensorShape("w", {kElements})};
  PushCodec push(CompressSpec::parse("twobit:0.2"), unit);
  std::vector<float> residual(kElements, 0.0f);
  for (uint64_t step = 0; step < 6; ++step) {
    std::vector<float> g = gaussian(kElements, 100 + step);
    for (float& x : g) x *= 0.15f;
    std::vector<uint8_t> bytes;
    push.encode(g, bytes, push.seedFor(0, step, 0));
    std::vector<float> sent(kElements, 0.0f);
    push.decodeAdd(bytes, sent, push.seedFor(0, step, 0));
    std::vector<float> reference(kElements, 0.0f);
    twoBitAccumulate(twoBitEncode(g, residual, 0.2f), 0.2f, reference);
    for (size_t i = 0; i < kElements; ++i) {
      ASSERT_EQ(sent[i], reference[i]) << "step " << step << " element " << i;
    }
  }
}

TEST(TwoBit, RefusesABadThresholdAndMalformedCodes) {
  EXPECT_THROW(methods::makeTwoBit(thresholdArgs(0), {}), ConfigError);
  EXPECT_THROW(methods::makeTwoBit(thresholdArgs(-1), {}), ConfigError);
  auto codec = methods::makeTwoBit(thresholdArgs(0.5), {});
  std::vector<uint8_t> bytes = encodeOnce(*codec, std::vector<float>(8, 0.0f), 0);
  bytes.back() = 0xff;  // code 3 everywhere in the last byte
  EXPECT_THROW(decodeOnce(*codec, bytes, 8), ProtocolError);
}

}  // namespace
}  // namespace gradsync
