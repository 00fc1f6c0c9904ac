// gtopk against a naive reference that holds every rank's local top-k in one place (sorted
// maps, full stable sorts) and merges them in the same tree order; the error-feedback invariant
// through the decorator; bytes on the wire; malformed lists from a peer; parameter validation.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>

#include <gtest/gtest.h>

#include "compress/error_feedback.h"
#include "compress/impl/methods.h"
#include "compress/sparse.h"
#include "exchange_harness.h"
#include "gradsync/error.h"
#include "support/transports.h"

namespace gradsync {
namespace {

using testing::gaussian;
using testing::runExchange;
using Pairs = std::map<uint32_t, float>;

size_t gtopkCount(double density, size_t n) {
  return n == 0 ? 0 : std::min<size_t>(n, std::max<long long>(1, std::llround(density * n)));
}

// The k pairs of largest |value| (ties: lower index), by a stable sort of all of them.
Pairs naiveTopPairs(const Pairs& all, size_t k) {
  std::vector<std::pair<uint32_t, float>> sorted(all.begin(), all.end());
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
    return std::fabs(a.second) > std::fabs(b.second);
  });
  sorted.resize(std::min(k, sorted.size()));
  return Pairs(sorted.begin(), sorted.end());
}

// The same for a dense vector, without building a map of all of it.
Pairs naiveTopPairs(const std::vector<float>& x, size_t k) {
  std::vector<uint32_t> order(x.size());
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(),
                   [&](uint32_t a, uint32_t b) { return std::fabs(x[a]) > std::fabs(x[b]); });
  Pairs top;
  for (size_t j = 0; j < k; ++j) top[order[j]] = x[order[j]];
  return top;
}

struct GtopkReference {
  std::vector<float> result;             // the same on every rank
  std::vector<std::vector<float>> sent;  // per rank
};

// Every rank's local top-k, merged pairwise in the binomial tree's order: in the round of
// distance d, rank r (a multiple of 2d) absorbs r + d, summing common indices, then keeps k.
GtopkReference naiveGTopK(const std::vector<std::vector<float>>& inputs, double density) {
  const int ranks = static_cast<int>(inputs.size());
  const size_t n = inputs[0].size();
  const size_t k = gtopkCount(density, n);
  std::vector<Pairs> local(ranks), lists(ranks);
  for (int r = 0; r < ranks; ++r) lists[r] = local[r] = naiveTopPairs(inputs[r], k);
  for (int d = 1; d < ranks; d *= 2) {
    for (int r = 0; r + d < ranks; r += 2 * d) {
      Pairs sum = lists[r];
      for (const auto& [index, value] : lists[r + d]) sum[index] += value;
      lists[r] = naiveTopPairs(sum, k);
    }
  }
  GtopkReference out{std::vector<float>(n, 0.0f), {}};
  for (const auto& [index, value] : lists[0]) {
    out.result[index] = value * (1.0f / static_cast<float>(ranks));
  }
  for (int r = 0; r < ranks; ++r) {
    out.sent.emplace_back(n, 0.0f);
    for (const auto& [index, value] : local[r]) {
      if (lists[0].count(index)) out.sent[r][index] = value;
    }
  }
  return out;
}

std::unique_ptr<Compressor> makeGTopK(double density, size_t n = 0) {
  MethodArgs args;
  args.value = density;
  args.hasValue = true;
  TensorShape shape = testing::tensorShape(n);
  return methods::makeGTopK(args, {&shape, 1});
}

// Inputs whose local top-k overlap across ranks (a shared component), so merges sum.
std::vector<float> correlated(size_t n, int rank, int step = 0) {
  std::vector<float> x = gaussian(n, 1000 + step);
  std::vector<float> own = gaussian(n, 77 * step + rank);
  for (size_t i = 0; i < n; ++i) x[i] += 0.7f * own[i];
  return x;
}

void expectLikeReference(int ranks, size_t n, double density,
                         const std::function<std::vector<float>(int)>& input) {
  std::vector<std::vector<float>> inputs;
  for (int r = 0; r < ranks; ++r) inputs.push_back(input(r));
  GtopkReference expected = naiveGTopK(inputs, density);
  auto got = runExchange(
      ranks, [&] { return makeGTopK(density, n); }, [&](int, int r) { return inputs[r]; });
  for (int r = 0; r < ranks; ++r) {
    SCOPED_TRACE(::testing::Message() << ranks << " ranks, n " << n << ", rank " << r);
    ASSERT_EQ(got[r].result, expected.result);
    ASSERT_EQ(got[r].sent, expected.sent[r]);
    ASSERT_EQ(std::memcmp(got[r].result.data(), got[0].result.data(), 4 * n), 0);
    size_t nonzero = std::count_if(got[r].result.begin(), got[r].result.end(),
                                   [](float v) { return v != 0.0f; });
    ASSERT_LE(nonzero, gtopkCount(density, n));
  }
}

TEST(GTopK, MatchesTheNaiveTreeMergeForOneToEightRanks) {
  for (int ranks : {1, 2, 3, 4, 5, 6, 7, 8}) {
    for (size_t n : {size_t{1}, size_t{2}, size_t{1001}}) {
      expectLikeReference(ranks, n, 0.05, [&](int r) { return correlated(n, r); });
    }
  }
}

TEST(GTopK, MatchesTheNaiveTreeMergeWithTies) {
  // Small integers: many equal magnitudes inside and across ranks, and sums that cancel.
  const size_t n = 3001;
  for (int ranks : {2, 3, 5}) {
    expectLikeReference(ranks, n, 0.02, [&](int r) {
      std::vector<float> x(n);
      for (size_t i = 0; i < n; ++i)
        x[i] = static_cast<float>(static_cast<int>((i * 31 + r) % 7) - 3);
      return x;
    });
  }
}

TEST(GTopK, MatchesTheNaiveTreeMergeOnAMillionElements) {
  const size_t n = (size_t{1} << 20) + 7;
  expectLikeReference(3, n, 0.01, [&](int r) { return correlated(n, r); });
}

TEST(GTopK, HandlesAnEmptyUnit) {
  auto got = runExchange(
      3, [] { return makeGTopK(0.01); }, [](int, int) { return std::vector<float>{}; });
  for (const auto& rank : got) EXPECT_TRUE(rank.result.empty() && rank.sent.empty());
}

TEST(GTopK, RunsOverTcp) {
  const size_t n = 5003;
  const int ranks = 3;
  std::vector<std::vector<float>> inputs;
  for (int r = 0; r < ranks; ++r) inputs.push_back(correlated(n, r));
  GtopkReference expected = naiveGTopK(inputs, 0.01);
  testing::runWithTransports(testing::TransportKind::kTcp, ranks, [&](Transport& transport) {
    auto gtopk = makeGTopK(0.01, n);
    std::vector<float> grad = inputs[transport.rank()], sent(n);
    ExchangeContext context{transport, {.tag = 5}, 0, 1};
    ExchangeStats stats;
    gtopk->exchange(context, grad, sent, stats);
    EXPECT_EQ(grad, expected.result);
    EXPECT_EQ(sent, expected.sent[transport.rank()]);
  });
}

// Every non-root rank sends one list up and receives one down: 2 (P - 1) lists in all.
TEST(GTopK, SendsOneListUpAndOneDownPerRank) {
  const size_t n = 10'000;
  for (int ranks : {2, 3, 5, 8}) {
    std::vector<uint64_t> bytes(ranks);
    testing::runWithTransports(testing::TransportKind::kLoopback, ranks, [&](Transport& t) {
      auto gtopk = makeGTopK(0.01, n);
      std::vector<float> grad = correlated(n, t.rank()), sent(n);
      ExchangeContext context{t, {}, 0, 1};
      ExchangeStats stats;
      gtopk->exchange(context, grad, sent, stats);
      bytes[t.rank()] = t.bytesSent();
    });
    EXPECT_EQ(makeGTopK(0.01, n)->encodedBytes(n), 4 + 8 * 100u);
    EXPECT_EQ(std::accumulate(bytes.begin(), bytes.end(), uint64_t{0}),
              2 * (ranks - 1) * (4 + 8 * 100u))
        << ranks << " ranks";
  }
}

TEST(GTopK, ErrorFeedbackKeepsWhatDidNotMakeTheGlobalTopK) {
  const size_t n = 1001;
  const int ranks = 3, steps = 5;
  testing::runWithTransports(testing::TransportKind::kLoopback, ranks, [&](Transport& t) {
    ErrorFeedback ef(makeGTopK(0.02, n), n);
    std::vector<double> inputs(n, 0), sentSum(n, 0);
    ExchangeStats stats;
    for (int s = 0; s < steps; ++s) {
      std::vector<float> grad = correlated(n, t.rank(), s), input = grad;
      std::vector<float> sent(n);
      ExchangeContext context{t, {}, static_cast<uint64_t>(s), 1};
      ef.exchange(context, grad, sent, stats);
      for (size_t i = 0; i < n; ++i) {
        inputs[i] += input[i];
        sentSum[i] += sent[i];
        // The first step's corrected input is the input itself: the residual is exactly the
        // part not sent.
        if (s == 0) {
          ASSERT_EQ(ef.residual()[i], sent[i] != 0 ? 0.0f : input[i]) << i;
        }
      }
    }
    for (size_t i = 0; i < n; ++i) {
      EXPECT_NEAR(ef.residual()[i] + sentSum[i], inputs[i], 1e-5) << i;
    }
  });
}

// Rank 1 plays a faulty peer: it hands rank 0 a hand-made list instead of running gtopk.
void expectRejected(const std::function<std::vector<uint8_t>(size_t k)>& forge) {
  const size_t n = 1000, k = 10;
  testing::runWithTransports(testing::TransportKind::kLoopback, 2, [&](Transport& t) {
    if (t.rank() == 1) {
      std::vector<uint8_t> bytes = forge(k);
      t.send(0, 0, bytes.data(), bytes.size())->wait();
      return;
    }
    auto gtopk = makeGTopK(0.01, n);
    std::vector<float> grad = gaussian(n, 1), sent(n);
    ExchangeContext context{t, {}, 0, 1};
    ExchangeStats stats;
    EXPECT_THROW(gtopk->exchange(context, grad, sent, stats), ProtocolError);
  });
}

std::vector<uint8_t> listOf(std::vector<uint32_t> indices) {
  std::vector<float> values(indices.size(), 1.0f);
  std::vector<uint8_t> bytes;
  encodeSparse(indices, values, bytes);
  return bytes;
}

TEST(GTopK, RejectsMalformedListsFromAPeer) {
  std::vector<uint32_t> good = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  expectRejected([&](size_t) {  // truncated: the receive names the exact size
    auto bytes = listOf(good);
    bytes.pop_back();
    return bytes;
  });
  expectRejected([&](size_t) {  // header count disagrees with the size
    auto bytes = listOf(good);
    bytes[0] = 9;
    return bytes;
  });
  expectRejected([&](size_t) {  // index beyond the unit
    auto indices = good;
    indices[9] = 1000;
    return listOf(indices);
  });
  expectRejected([&](size_t) {  // repeated index
    auto indices = good;
    indices[5] = 4;
    return listOf(indices);
  });
  expectRejected([&](size_t) { return listOf({9, 8, 7, 6, 5, 4, 3, 2, 1, 0}); });
}

TEST(GTopK, RejectsAMalformedResultFromTheRoot) {
  const size_t n = 1000;
  testing::runWithTransports(testing::TransportKind::kLoopback, 2, [&](Transport& t) {
    if (t.rank() == 0) {
      std::vector<uint8_t> list(sparseBytes(10));
      t.recv(1, 0, list.data(), list.size())->wait();
      std::vector<uint8_t> bad = listOf({0, 1, 2, 3, 4, 5, 6, 7, 8, 5000});
      t.send(1, 0, bad.data(), bad.size())->wait();
      return;
    }
    auto gtopk = makeGTopK(0.01, n);
    std::vector<float> grad = gaussian(n, 1), sent(n);
    ExchangeContext context{t, {}, 0, 1};
    ExchangeStats stats;
    EXPECT_THROW(gtopk->exchange(context, grad, sent, stats), ProtocolError);
  });
}

TEST(GTopK, RejectsDensitiesOutsideZeroToOne) {
  for (double bad : {0.0, -0.1, 1.5, std::nan("")}) {
    EXPECT_THROW(makeGTopK(bad), ConfigError) << bad;
  }
  EXPECT_THROW(methods::makeGTopK(MethodArgs{}, {}), ConfigError);  // no ":R" at all
  EXPECT_NO_THROW(makeGTopK(1.0));
  try {
    makeGTopK(2.0);
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("gtopk:R needs 0 < R <= 1"), std::string::npos);
  }
}

}  // namespace
}  // namespace gradsync
