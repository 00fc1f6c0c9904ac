// The compressed all-reduce (",allreduce=on"): against a naive average with a lossless codec at
// world sizes 1-5 and unit sizes 0, 1, non-divisible and large on every in-process transport;
// onebit's server residual and bytes; its state through a checkpoint; the spec's rules.
#include <cstring>

#include <gtest/gtest.h>

#include "compress/compressed_allreduce.h"
#include "compress/error_feedback.h"
#include "compress/push_codec.h"
#include "compress/registry.h"
#include "compress/spec.h"
#include "exchange_harness.h"
#include "gradsync/error.h"
#include "support/transports.h"

namespace gradsync {
namespace {

using testing::gaussian;
using testing::sameBits;
using testing::TransportKind;

// Lossless: every value as its float32 bytes.
class RawFloats final : public CodecCompressor {
 public:
  size_t encodedBytes(size_t elements) const override { return elements * 4; }
  void encode(std::span<const float> x, std::vector<uint8_t>& out, uint64_t) override {
    out.resize(x.size() * 4);
    if (!x.empty()) std::memcpy(out.data(), x.data(), out.size());
  }
  void decodeAdd(std::span<const uint8_t> in, std::span<float> out) const override {
    if (in.size() != out.size() * 4) throw ProtocolError("bad size");
    for (size_t i = 0; i < out.size(); ++i) {
      float v;
      std::memcpy(&v, in.data() + 4 * i, 4);
      out[i] += v;
    }
  }
};

std::unique_ptr<Compressor> rawAllreduce() {
  return std::make_unique<CompressedAllreduce>(std::make_unique<RawFloats>(), "raw", true);
}

std::unique_ptr<Compressor> fromSpec(const std::string& text, size_t elements) {
  TensorShape shape = testing::tensorShape(elements);
  return makeCompressor(CompressSpec::parse(text), {&shape, 1});
}

// The average the naive way: sum in rank order, then one multiplication by 1 / P.
std::vector<float> naiveAverage(size_t n, int ranks, int step) {
  std::vector<float> sum(n, 0.0f);
  for (int r = 0; r < ranks; ++r) {
    const std::vector<float> x = gaussian(n, 100 * step + r);
    for (size_t i = 0; i < n; ++i) sum[i] += x[i];
  }
  for (float& v : sum) v *= 1.0f / static_cast<float>(ranks);
  return sum;
}

TEST(CompressedAllreduce, ShardsCoverTheUnitOnAlignedBoundaries) {
  for (int p : {1, 2, 3, 4, 5, 8}) {
    for (size_t n :
         {size_t{0}, size_t{1}, size_t{7}, size_t{513}, size_t{3 * 512 + 5}, size_t{1000003}}) {
      const std::vector<size_t> b = CompressedAllreduce::shardBounds(n, p);
      ASSERT_EQ(b.size(), static_cast<size_t>(p) + 1);
      EXPECT_EQ(b.front(), 0u);
      EXPECT_EQ(b.back(), n) << p << " ranks, " << n;
      for (int s = 0; s < p; ++s) EXPECT_LE(b[s], b[s + 1]);
      // Large units: every inner boundary aligned, and no rank without a shard.
      if (n >= 1000000) {
        for (int s = 1; s < p; ++s) {
          EXPECT_EQ(b[s] % CompressedAllreduce::kShardAlignment, 0u) << p << " ranks, " << n;
          EXPECT_LT(b[s - 1], b[s]) << p << " ranks, " << n;
        }
      }
    }
  }
}

TEST(CompressedAllreduce, LosslessCodecGivesTheNaiveAverageOnEveryRank) {
  for (int p : {1, 2, 3, 4, 5}) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{3 * 512 + 5}, size_t{100003}}) {
      auto out = testing::runExchange(
          p, rawAllreduce, [&](int step, int rank) { return gaussian(n, 100 * step + rank); }, 2);
      for (int r = 0; r < p; ++r) {
        EXPECT_TRUE(sameBits(out[r].result, naiveAverage(n, p, 1))) << p << " ranks, " << n;
        EXPECT_TRUE(sameBits(out[r].sent, gaussian(n, 100 + r))) << p << " ranks, " << n;
      }
    }
  }
}

TEST(CompressedAllreduce, EveryTransportGivesTheSameBits) {
  const size_t n = 4099;
  const int p = 3;
  for (TransportKind kind : {TransportKind::kLoopback, TransportKind::kTcp, TransportKind::kShm,
                             TransportKind::kShmCopy}) {
    std::vector<std::vector<float>> results(p);
    testing::runWithTransports(kind, p, [&](Transport& transport) {
      auto compressor = fromSpec("onebit,allreduce=on", n);
      std::vector<float> grad = gaussian(n, transport.rank()), sent(n);
      ExchangeContext context{transport, {}, 0, 7};
      ExchangeStats stats;
      compressor->exchange(context, grad, sent, stats);
      results[transport.rank()] = grad;
    });
    for (int r = 1; r < p; ++r) EXPECT_TRUE(sameBits(results[r], results[0]));
  }
}

// Units smaller than the world (ranks without a shard) and empty ones: a quantizer's result is
// the same on every rank, and with every value alike it is that value.
TEST(CompressedAllreduce, TinyUnitsGiveEveryRankTheSameResult) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}}) {
    auto out = testing::runExchange(
        5, [&] { return fromSpec("onebit,allreduce=on", n); },
        [&](int, int) { return std::vector<float>(n, 0.25f); });
    for (int r = 0; r < 5; ++r) {
      EXPECT_TRUE(sameBits(out[r].result, out[0].result)) << n;
      EXPECT_TRUE(sameBits(out[r].result, std::vector<float>(n, 0.25f))) << n;
    }
  }
}

// onebit: every rank ends with the same result; the server residual is what the re-encoding
// of this rank's shard missed (the average of what the ranks sent, minus the result there).
TEST(CompressedAllreduce, ServerResidualIsWhatTheReencodingMissed) {
  const size_t n = 5000;
  const int p = 3;
  std::vector<std::vector<float>> results(p), sents(p), residuals(p);
  testing::runWithTransports(TransportKind::kLoopback, p, [&](Transport& transport) {
    const int rank = transport.rank();
    CompressedAllreduce exchange(findMethod("onebit").make({}, {}), "onebit", true);
    std::vector<float> grad = gaussian(n, rank), sent(n);
    ExchangeContext context{transport, {}, 0, 7};
    ExchangeStats stats;
    exchange.exchange(context, grad, sent, stats);
    results[rank] = grad;
    sents[rank] = sent;
    const auto residual = exchange.serverResidual();
    residuals[rank].assign(residual.begin(), residual.end());
  });
  const std::vector<size_t> bounds = CompressedAllreduce::shardBounds(n, p);
  for (int r = 0; r < p; ++r) {
    EXPECT_TRUE(sameBits(results[r], results[0]));
    ASSERT_EQ(residuals[r].size(), bounds[r + 1] - bounds[r]);
    for (size_t i = 0; i < residuals[r].size(); ++i) {
      const size_t at = bounds[r] + i;
      float average = 0;
      for (int q = 0; q < p; ++q) average += sents[q][at];
      average *= 1.0f / static_cast<float>(p);
      ASSERT_EQ(residuals[r][i], average - results[r][at]) << "rank " << r << ", " << i;
    }
  }
}

// Each rank sends 2 (P - 1) / P of an encoding where the all-gather sends P - 1.
TEST(CompressedAllreduce, SendsHalfTheAllGathersBytesAtFourRanks) {
  const size_t n = 1 << 16;
  const int p = 4;
  auto bytesOf = [&](const std::string& spec) {
    std::vector<uint64_t> bytes(p);
    testing::runWithTransports(TransportKind::kLoopback, p, [&](Transport& transport) {
      auto compressor = fromSpec(spec, n);
      std::vector<float> grad = gaussian(n, transport.rank()), sent(n);
      ExchangeContext context{transport, {}, 0, 7};
      ExchangeStats stats;
      const uint64_t before = transport.bytesSent();
      compressor->exchange(context, grad, sent, stats);
      bytes[transport.rank()] = transport.bytesSent() - before;
    });
    return bytes;
  };
  const auto gathered = bytesOf("onebit,bucket=512");
  const auto reduced = bytesOf("onebit,bucket=512,allreduce=on");
  const double encoding = static_cast<double>(
      findMethod("onebit").make(testing::withOption("bucket", 512), {})->encodedBytes(n));
  for (int r = 0; r < p; ++r) {
    EXPECT_GE(static_cast<double>(gathered[r]), 3.0 * encoding);
    EXPECT_LE(static_cast<double>(reduced[r]), 1.5 * encoding * 1.01) << "rank " << r;
    EXPECT_LE(static_cast<double>(reduced[r]), 0.51 * static_cast<double>(gathered[r]));
  }
}

// Saved after two exchanges and loaded into a fresh instance, the third exchange repeats the
// uninterrupted one bitwise (worker and server residuals both kept).
TEST(CompressedAllreduce, StateResumesBitwise) {
  const size_t n = 3001;
  const int p = 3;
  std::vector<std::vector<float>> straight(p), resumed(p);
  testing::runWithTransports(TransportKind::kLoopback, p, [&](Transport& transport) {
    const int rank = transport.rank();
    auto a = fromSpec("onebit,allreduce=on", n);
    auto b = fromSpec("onebit,allreduce=on", n);
    ExchangeStats stats;
    std::vector<float> sent(n);
    for (uint64_t step = 0; step < 3; ++step) {
      if (step == 2) {
        StateWriter out;
        a->saveState(out);
        StateReader in(out.bytes(), "test");
        b->loadState(in);
        in.expectEnd();
      }
      for (Compressor* c : {a.get(), b.get()}) {
        if (c == b.get() && step < 2) continue;
        std::vector<float> grad = gaussian(n, 10 * step + rank);
        ExchangeContext context{transport, {}, step, 7};
        c->exchange(context, grad, sent, stats);
        if (step == 2) (c == a.get() ? straight : resumed)[rank] = grad;
      }
    }
  });
  for (int r = 0; r < p; ++r) EXPECT_TRUE(sameBits(resumed[r], straight[r]));
}

TEST(CompressedAllreduce, SpecRules) {
  const CompressSpec spec = CompressSpec::parse("onebit,bucket=512,allreduce=on");
  EXPECT_TRUE(spec.compressedAllreduce);
  EXPECT_EQ(CompressSpec::parse(spec.toString()).toString(), spec.toString());
  EXPECT_FALSE(CompressSpec::parse("onebit,allreduce=off").compressedAllreduce);
  for (const char* bad :
       {"topk:0.01,allreduce=on", "powersgd:4,allreduce=on", "gtopk:0.01,allreduce=on",
        "dgc:0.01,allreduce=on", "fp16,allreduce=on", "onebit,allreduce=maybe"}) {
    EXPECT_THROW(CompressSpec::parse(bad), ConfigError) << bad;
  }
  TensorShape shape = testing::tensorShape(64);
  EXPECT_THROW(PushCodec(CompressSpec::parse("onebit,allreduce=on"), {&shape, 1}), ConfigError);
  EXPECT_EQ(fromSpec("signsgd,allreduce=on", 64)->aggregation(), Aggregation::kCompressedAllreduce);
}

}  // namespace
}  // namespace gradsync
