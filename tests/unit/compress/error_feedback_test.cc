// The error-feedback decorator and the shared all-gather exchange, with a deliberately lossy
// codec: it sends only the elements at even indices, as raw floats.
#include <cstring>

#include <gtest/gtest.h>

#include "compress/error_feedback.h"
#include "exchange_harness.h"
#include "gradsync/error.h"
#include "support/transports.h"

namespace gradsync {
namespace {

using testing::gaussian;

class EvenIndices final : public CodecCompressor {
 public:
  size_t encodedBytes(size_t elements) const override { return (elements + 1) / 2 * 4; }
  void encode(std::span<const float> x, std::vector<uint8_t>& out, uint64_t) override {
    out.resize(encodedBytes(x.size()));
    for (size_t i = 0; i < x.size(); i += 2) std::memcpy(&out[i / 2 * 4], &x[i], 4);
  }
  void decodeAdd(std::span<const uint8_t> in, std::span<float> out) const override {
    if (in.size() != encodedBytes(out.size())) throw ProtocolError("bad size");
    for (size_t i = 0; i < out.size(); i += 2) {
      float v;
      std::memcpy(&v, &in[i / 2 * 4], 4);
      out[i] += v;
    }
  }
};

TEST(CodecExchange, AveragesWhatEveryRankSent) {
  const size_t n = 7;
  auto out = testing::runExchange(
      3, [] { return std::make_unique<EvenIndices>(); },
      [&](int, int rank) { return gaussian(n, rank); });
  for (int r = 0; r < 3; ++r) {
    for (size_t i = 0; i < n; ++i) {
      float mean = 0;
      for (int q = 0; q < 3; ++q) mean += i % 2 == 0 ? gaussian(n, q)[i] : 0.0f;
      EXPECT_FLOAT_EQ(out[r].result[i], mean / 3) << i;
      EXPECT_EQ(out[r].sent[i], i % 2 == 0 ? gaussian(n, r)[i] : 0.0f);
    }
  }
}

TEST(ErrorFeedback, ResidualPlusEverythingSentEqualsTheSumOfInputs) {
  const size_t n = 9;
  const int steps = 5;
  testing::runWithTransports(testing::TransportKind::kLoopback, 2, [&](Transport& transport) {
    ErrorFeedback ef(std::make_unique<EvenIndices>(), n);
    std::vector<double> inputs(n, 0), sent(n, 0);
    ExchangeStats stats;
    for (int s = 0; s < steps; ++s) {
      std::vector<float> grad = gaussian(n, 31 * s + transport.rank());
      for (size_t i = 0; i < n; ++i) inputs[i] += grad[i];
      std::vector<float> mine(n);
      ExchangeContext context{transport, {}, static_cast<uint64_t>(s), 1};
      ef.exchange(context, grad, mine, stats);
      for (size_t i = 0; i < n; ++i) sent[i] += mine[i];
    }
    for (size_t i = 0; i < n; ++i) {
      EXPECT_NEAR(ef.residual()[i] + sent[i], inputs[i], 1e-5) << i;
      // Odd elements are never sent: all of them waits in the residual.
      if (i % 2 == 1) {
        EXPECT_NEAR(ef.residual()[i], inputs[i], 1e-5);
      }
    }
  });
}

// With decay β the residual is scaled before it is added: an element never sent holds
// Σ_s β^(S-1-s) g_s after S steps (SparseLoCo's accumulator), and one always sent holds nothing.
TEST(ErrorFeedback, ADecayScalesTheResidualBeforeItIsAdded) {
  const size_t n = 6;
  const int steps = 4;
  const float decay = 0.5f;
  testing::runWithTransports(testing::TransportKind::kLoopback, 1, [&](Transport& transport) {
    ErrorFeedback ef(std::make_unique<EvenIndices>(), n, decay);
    std::vector<float> expected(n, 0);
    ExchangeStats stats;
    for (int s = 0; s < steps; ++s) {
      std::vector<float> grad = gaussian(n, 50 + s);
      for (size_t i = 1; i < n; i += 2) expected[i] = decay * expected[i] + grad[i];
      std::vector<float> mine(n);
      ExchangeContext context{transport, {}, static_cast<uint64_t>(s), 1};
      ef.exchange(context, grad, mine, stats);
    }
    for (size_t i = 0; i < n; ++i) {
      EXPECT_EQ(ef.residual()[i], i % 2 == 1 ? expected[i] : 0.0f) << i;
    }
  });
}

}  // namespace
}  // namespace gradsync
