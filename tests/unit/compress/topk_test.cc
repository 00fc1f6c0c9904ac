// The radix top-k selection (select.h) against a full sort, and the topk compressor against a
// naive sparse exchange: per-rank top-k by sorting, decoded and averaged in rank order.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <random>

#include <gtest/gtest.h>

#include "compress/error_feedback.h"
#include "compress/impl/methods.h"
#include "compress/select.h"
#include "compress/sparse.h"
#include "exchange_harness.h"
#include "gradsync/error.h"
#include "support/transports.h"

namespace gradsync {
namespace {

using testing::gaussian;
using testing::runExchange;

// Naive reference: every index sorted by key, largest first, lower index first among equal
// keys. The top k are the first k of this order.
std::vector<uint32_t> rankByKey(const std::vector<uint32_t>& keys) {
  // (key, complemented index) packed in 64 bits: one descending sort orders both ways.
  std::vector<uint64_t> packed(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    packed[i] = uint64_t{keys[i]} << 32 | (0xffffffffu - static_cast<uint32_t>(i));
  }
  std::sort(packed.begin(), packed.end(), std::greater<uint64_t>());
  std::vector<uint32_t> order(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    order[i] = 0xffffffffu - static_cast<uint32_t>(packed[i]);
  }
  return order;
}

// The first k of a ranking, ascending.
std::vector<uint32_t> firstOf(const std::vector<uint32_t>& order, size_t k) {
  std::vector<uint32_t> top(order.begin(), order.begin() + std::min(k, order.size()));
  std::sort(top.begin(), top.end());
  return top;
}

std::vector<uint32_t> topKBySorting(const std::vector<uint32_t>& keys, size_t k) {
  return firstOf(rankByKey(keys), k);
}

std::vector<uint32_t> magnitudeKeys(const std::vector<float>& x) {
  std::vector<uint32_t> keys(x.size());
  for (size_t i = 0; i < x.size(); ++i) keys[i] = std::bit_cast<uint32_t>(x[i]) & 0x7fffffffu;
  return keys;
}

std::vector<uint32_t> naiveTopK(const std::vector<float>& x, size_t k) {
  return topKBySorting(magnitudeKeys(x), k);
}

// Keys given outright, to drive the selector through every bit width.
class FixedKeys final : public KeySource {
 public:
  FixedKeys(std::vector<uint32_t> keys, int bits) : keys_(std::move(keys)), bits_(bits) {}
  size_t size() const override { return keys_.size(); }
  int keyBits() const override { return bits_; }
  void fill(size_t begin, size_t count, uint32_t* keys) const override {
    std::copy_n(keys_.begin() + static_cast<ptrdiff_t>(begin), count, keys);
  }

 private:
  std::vector<uint32_t> keys_;
  int bits_;
};

// Inputs that stress the tie rule and the bucket refinement.
std::vector<std::vector<float>> awkwardInputs(size_t n, uint64_t seed) {
  std::mt19937_64 engine(seed);
  std::vector<std::vector<float>> inputs;
  inputs.push_back(gaussian(n, seed));
  std::vector<float> ties(n), narrow(n), equal(n, -0.25f), zeros(n, 0.0f), tiny(n);
  const float levels[] = {0.0f, -0.0f, 0.5f, -0.5f, 1.0f, -1.0f, 2.0f, -2.0f};
  for (size_t i = 0; i < n; ++i) {
    ties[i] = levels[engine() % 8];
    // All in one top-level bucket: only the refinement levels tell them apart.
    narrow[i] =
        (engine() % 2 ? 1.0f : -1.0f) * (1.0f + static_cast<float>(engine() % 1000) * 1e-6f);
    tiny[i] = std::bit_cast<float>(static_cast<uint32_t>(engine() % 64));  // subnormals and 0
    if (engine() % 3 == 0) zeros[i] = static_cast<float>(engine() % 5) - 2.0f;
  }
  for (auto* v : {&ties, &narrow, &equal, &zeros, &tiny}) inputs.push_back(*v);
  return inputs;
}

TEST(SelectionCount, RoundsAndClamps) {
  EXPECT_EQ(selectionCount(0, 0.01), 0u);
  EXPECT_EQ(selectionCount(1, 0.01), 1u);
  EXPECT_EQ(selectionCount(99, 0.01), 1u);
  EXPECT_EQ(selectionCount(150, 0.01), 2u);  // 1.5 rounds away from zero
  EXPECT_EQ(selectionCount(1001, 0.01), 10u);
  EXPECT_EQ(selectionCount(1001, 1.0), 1001u);
  EXPECT_EQ(selectionCount(25'000'000, 0.001), 25'000u);
}

TEST(SelectTopK, MatchesAFullSortOnAwkwardInputs) {
  TopKSelector selector;  // one selector throughout: reused buffers must not leak between calls
  std::vector<uint32_t> got, bySort;
  size_t streamed[2] = {};
  for (size_t n : {size_t{1}, size_t{2}, size_t{7}, size_t{1000}, size_t{4099}, size_t{30011}}) {
    for (const auto& x : awkwardInputs(n, n)) {
      for (size_t k : {size_t{0}, size_t{1}, size_t{2}, n / 3, n - 1, n, n + 5}) {
        const auto expected = naiveTopK(x, k);
        selector.selectByMagnitude(x, k, got);
        ASSERT_EQ(got, expected) << "n " << n << " k " << k << " x[0] " << x[0];
        ++streamed[selector.lastStreamed()];
        selectTopKBySort(x, k, bySort);
        ASSERT_EQ(bySort, expected) << "n " << n << " k " << k;
      }
    }
  }
  // Both ways of refining the bucket ran (collected candidates; passes over the input).
  EXPECT_GT(streamed[0], 0u);
  EXPECT_GT(streamed[1], 0u);
}

TEST(SelectTopK, MatchesAFullSortOnAMillionElements) {
  const std::vector<float> x = gaussian(1 << 20, 5);
  const std::vector<uint32_t> order = rankByKey(magnitudeKeys(x));
  std::vector<uint32_t> got;
  for (size_t k : {size_t{1}, size_t{1049}, size_t{10486}, size_t{300000}}) {
    selectTopK(x, k, got);
    ASSERT_EQ(got, firstOf(order, k)) << k;
  }
}

TEST(SelectTopK, NaNAndInfinityRankFirst) {
  std::vector<float> x = {1.0f, -std::numeric_limits<float>::infinity(), 3.0f,
                          std::numeric_limits<float>::quiet_NaN(), -2.0f};
  std::vector<uint32_t> got;
  selectTopK(x, 2, got);
  EXPECT_EQ(got, (std::vector<uint32_t>{1, 3}));
  selectTopK(x, 3, got);
  EXPECT_EQ(got, (std::vector<uint32_t>{1, 2, 3}));
}

TEST(TopKSelector, SelectsByAnyKeyWidthAndReturnsTheKthKey) {
  TopKSelector selector;
  std::mt19937_64 engine(3);
  std::vector<uint32_t> got;
  size_t streamed[2] = {};
  for (int bits : {1, 5, 11, 12, 21, 22, 31}) {
    for (size_t n : {size_t{1}, size_t{33}, size_t{5000}, size_t{20000}}) {
      std::vector<uint32_t> keys(n);
      // Few distinct values half the time, so that ties cross every level.
      const uint64_t spread = engine() % 2 ? 7 : (uint64_t{1} << bits);
      for (auto& key : keys) {
        key = static_cast<uint32_t>((engine() % spread) & ((uint64_t{1} << bits) - 1));
      }
      for (size_t k : {size_t{1}, n / 2 + 1, n}) {
        const uint32_t kth = selector.select(FixedKeys(keys, bits), k, got);
        const auto expected = topKBySorting(keys, k);
        ASSERT_EQ(got, expected) << "bits " << bits << " n " << n << " k " << k;
        ++streamed[selector.lastStreamed()];
        uint32_t smallest = UINT32_MAX;
        for (uint32_t i : expected) smallest = std::min(smallest, keys[i]);
        EXPECT_EQ(kth, smallest);
      }
    }
  }
  EXPECT_GT(streamed[0], 0u);
  EXPECT_GT(streamed[1], 0u);
}

// The sampled path (2^18 keys and more) against sorting, where its sample judges well and where
// it cannot: the largest keys only where the sample does not look, only where it does (fewer
// than k gathered: the full path takes over), everything equal (too many gathered).
TEST(TopKSelector, TheSampledPathEqualsSortingAndFallsBackWhereTheSampleMisjudges) {
  TopKSelector selector;
  std::mt19937_64 engine(11);
  const size_t n = 300'007;
  const int bits = 31;
  std::vector<bool> inSample(n, false);  // the runs select.cc's sample reads (256 of 64 keys)
  for (size_t c = 0; c < 256; ++c) {
    const size_t base = c * (n - 64) / 255;
    for (size_t j = 0; j < 64; ++j) inSample[base + j] = true;
  }
  auto uniform = [&](uint32_t below) { return static_cast<uint32_t>(engine() % below); };
  const std::vector<std::pair<const char*, std::function<uint32_t(size_t)>>> shapes = {
      {"uniform", [&](size_t) { return uniform(1u << 31); }},
      {"few values", [&](size_t) { return uniform(5) << 20; }},
      {"ascending", [&](size_t i) { return static_cast<uint32_t>(i * 7000); }},
      {"large keys outside the sample",
       [&](size_t i) { return inSample[i] ? uniform(1u << 20) : (1u << 30) + uniform(1u << 20); }},
      {"large keys only in the sample",
       [&](size_t i) { return inSample[i] ? (1u << 30) + uniform(1u << 20) : uniform(1u << 20); }},
      {"all equal", [&](size_t) { return 12345u; }}};
  size_t sampled[2] = {};
  std::vector<uint32_t> got;
  for (const auto& [name, keyOf] : shapes) {
    std::vector<uint32_t> keys(n);
    for (size_t i = 0; i < n; ++i) keys[i] = keyOf(i);
    for (size_t k : {size_t{1}, size_t{3000}, n / 16}) {
      const uint32_t kth = selector.select(FixedKeys(keys, bits), k, got);
      const auto expected = topKBySorting(keys, k);
      ASSERT_EQ(got, expected) << name << ", k " << k;
      uint32_t smallest = UINT32_MAX;
      for (uint32_t i : expected) smallest = std::min(smallest, keys[i]);
      EXPECT_EQ(kth, smallest) << name << ", k " << k;
      ++sampled[selector.lastSampled()];
    }
  }
  EXPECT_GT(sampled[1], 0u) << "the sampled path never ran";
  EXPECT_GT(sampled[0], 0u) << "the sample never misjudged: the fallback is untested";
}

using testing::sameBits;

MethodArgs topkDensity(double r) {
  return testing::withValue(r);
}

std::unique_ptr<Compressor> makeTopK(double r) {
  return methods::makeTopK(topkDensity(r), {});
}

// The naive exchange: every rank's top-k by sorting, summed in rank order, then scaled as the
// shared exchange scales.
TEST(TopK, ExchangeEqualsPerRankSortedTopKAveragedInRankOrder) {
  const double r = 0.01;
  for (size_t n : {size_t{0}, size_t{1}, size_t{1001}, size_t{1} << 20}) {
    std::vector<std::vector<float>> xs, sentBy(3, std::vector<float>(n, 0.0f));
    for (int q = 0; q < 3; ++q) {
      xs.push_back(gaussian(n, 1000 * n + q));
      for (uint32_t i : naiveTopK(xs[q], selectionCount(n, r))) sentBy[q][i] = xs[q][i];
    }
    auto input = [&](int, int rank) { return xs[rank]; };
    for (int ranks : {1, 2, 3}) {
      auto outputs = runExchange(
          ranks, [&] { return makeTopK(r); }, input);
      std::vector<float> sum(n, 0.0f);
      for (int q = 0; q < ranks; ++q) {
        ASSERT_TRUE(sameBits(outputs[q].sent, sentBy[q]))
            << "rank " << q << " of " << ranks << ", n " << n;
        for (size_t i = 0; i < n; ++i) sum[i] += sentBy[q][i];
      }
      for (float& v : sum) v *= 1.0f / static_cast<float>(ranks);
      for (int q = 0; q < ranks; ++q) {
        ASSERT_TRUE(sameBits(outputs[q].result, sum))
            << "rank " << q << " of " << ranks << ", n " << n;
      }
    }
  }
}

TEST(TopK, EncodesFourPlusEightBytesPerPair) {
  auto c = makeTopK(0.01);
  EXPECT_EQ(c->aggregation(), Aggregation::kAllgather);
  EXPECT_EQ(c->encodedBytes(0), 4u);
  EXPECT_EQ(c->encodedBytes(1001), 4u + 8u * 10u);
  auto* codec = dynamic_cast<CodecCompressor*>(c.get());
  ASSERT_NE(codec, nullptr);
  std::vector<uint8_t> bytes;
  codec->encode(gaussian(1001, 1), bytes, 0);
  EXPECT_EQ(bytes.size(), c->encodedBytes(1001));
}

TEST(TopK, ErrorFeedbackKeepsWhatWasNotSent) {
  const size_t n = 1003;
  const int steps = 6;
  testing::runWithTransports(testing::TransportKind::kLoopback, 2, [&](Transport& transport) {
    ErrorFeedback ef(makeTopK(0.05), n);
    std::vector<double> inputs(n, 0), sent(n, 0);
    std::vector<float> corrected(n), mine(n);
    ExchangeStats stats;
    for (int s = 0; s < steps; ++s) {
      std::vector<float> grad = gaussian(n, 31 * s + transport.rank());
      for (size_t i = 0; i < n; ++i) {
        inputs[i] += grad[i];
        corrected[i] = grad[i] + ef.residual()[i];
      }
      ExchangeContext context{transport, {}, static_cast<uint64_t>(s), 1};
      ef.exchange(context, grad, mine, stats);
      // What went out is the top-k of the corrected gradient, and it left the residual.
      std::vector<float> expected(n, 0.0f);
      for (uint32_t i : naiveTopK(corrected, selectionCount(n, 0.05))) expected[i] = corrected[i];
      // (EXPECT, not ASSERT: a rank that returned early would leave its peer waiting.)
      EXPECT_TRUE(sameBits(mine, expected)) << "step " << s;
      for (size_t i = 0; i < n; ++i) {
        sent[i] += mine[i];
        if (mine[i] != 0.0f) {
          EXPECT_EQ(ef.residual()[i], 0.0f) << i;
        }
      }
    }
    for (size_t i = 0; i < n; ++i) {
      EXPECT_NEAR(ef.residual()[i] + sent[i], inputs[i], 1e-5) << i;
    }
  });
}

// A valid encoding of `n` elements, to corrupt.
std::vector<uint8_t> validEncoding(CodecCompressor& codec, size_t n) {
  std::vector<uint8_t> bytes;
  codec.encode(gaussian(n, 9), bytes, 0);
  return bytes;
}

void setWord(std::vector<uint8_t>& bytes, size_t offset, uint32_t value) {
  std::memcpy(bytes.data() + offset, &value, 4);
}

TEST(TopK, MalformedEncodingsThrowAndLeaveTheOutputAlone) {
  auto c = makeTopK(0.01);
  auto& codec = dynamic_cast<CodecCompressor&>(*c);
  const size_t n = 1001, k = 10;
  const std::vector<uint8_t> good = validEncoding(codec, n);
  std::vector<float> out(n, 1.0f);
  codec.decodeAdd(good, out);  // the baseline decodes

  std::vector<std::vector<uint8_t>> bad;
  bad.push_back({});                              // empty
  bad.push_back({good.begin(), good.end() - 1});  // truncated
  bad.push_back(good);
  bad.back().push_back(0);  // trailing byte
  bad.push_back(good);
  setWord(bad.back(), 0, k + 1);  // count larger than the bytes
  bad.push_back({good.begin(), good.end() - 8});
  setWord(bad.back(), 0, k - 1);  // consistent, but not k pairs
  bad.push_back(good);
  setWord(bad.back(), 4 + 4 * 3, static_cast<uint32_t>(n));  // index past the end
  bad.push_back(good);
  setWord(bad.back(), 4 + 4 * 3, 0xffffffffu);
  bad.push_back(good);
  std::memcpy(bad.back().data() + 8, bad.back().data() + 4, 4);  // a repeated index
  bad.push_back(good);
  std::swap_ranges(bad.back().begin() + 4, bad.back().begin() + 8, bad.back().begin() + 8);
  for (size_t b = 0; b < bad.size(); ++b) {
    std::vector<float> before = out;
    EXPECT_THROW(codec.decodeAdd(bad[b], out), ProtocolError) << "case " << b;
    EXPECT_EQ(out, before) << "case " << b;
  }
  // An encoding of another size does not decode into this one.
  std::vector<float> bigger(2001);
  EXPECT_THROW(codec.decodeAdd(good, bigger), ProtocolError);
}

TEST(TopK, RejectsDensitiesOutsideZeroToOne) {
  for (double r : {0.0, -0.1, 1.5, std::nan("")}) {
    try {
      makeTopK(r);
      ADD_FAILURE() << "accepted R = " << r;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("topk:R needs 0 < R <= 1"), std::string::npos)
          << e.what();
    }
  }
  EXPECT_NE(makeTopK(1.0), nullptr);
  EXPECT_NE(makeTopK(1e-9), nullptr);
}

}  // namespace
}  // namespace gradsync
