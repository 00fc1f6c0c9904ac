// CD-SGD's 2-bit threshold quantizer against a naive element-by-element reading of its rule.
#include <gtest/gtest.h>

#include <cmath>

#include "compress/two_bit.h"
#include "gradsync/error.h"

namespace gradsync {
namespace {

TEST(TwoBit, MatchesTheRuleWithErrorFeedback) {
  for (size_t n : {0u, 1u, 3u, 4u, 1001u}) {
    std::vector<float> gradient(n), residual(n), naiveResidual(n);
    for (size_t i = 0; i < n; ++i) {
      gradient[i] = std::sin(static_cast<float>(i)) * 0.8f;
      residual[i] = naiveResidual[i] = std::cos(static_cast<float>(i)) * 0.3f;
    }
    const float threshold = 0.5f;
    std::vector<uint8_t> codes = twoBitEncode(gradient, residual, threshold);
    ASSERT_EQ(codes.size(), (2 * n + 7) / 8);
    std::vector<float> sum(n, 1.0f);
    twoBitAccumulate(codes, threshold, sum);
    for (size_t i = 0; i < n; ++i) {
      float r = naiveResidual[i] + gradient[i];
      float sent = r >= threshold ? threshold : r <= -threshold ? -threshold : 0.0f;
      EXPECT_FLOAT_EQ(sum[i], 1.0f + sent) << i;
      EXPECT_FLOAT_EQ(residual[i], r - sent) << i;
    }
  }
}

TEST(TwoBit, RefusesAMalformedCode) {
  std::vector<uint8_t> codes = {0b11};
  std::vector<float> sum(1);
  EXPECT_THROW(twoBitAccumulate(codes, 0.5f, sum), ProtocolError);
}

}  // namespace
}  // namespace gradsync
