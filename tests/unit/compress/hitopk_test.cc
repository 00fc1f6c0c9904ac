// hitopk (impl/hitopk.h) against a naive reference that holds every rank's data in one place:
// host sums added rank by rank, shards by blockOf, the selection of MSTopK's selector (itself
// checked against a literal bisection in mstopk_test.cc), fp16 rounding, the hosts' lists summed
// in host order, 1/P. Topologies (hosts x ranks per host) 1x4, 2x2, 3x2, 2x3 and none (every rank
// its own host), non-divisible sizes, three steps so that error feedback carries; the
// error-feedback invariant on random data; the small-unit bypass; malformed lists; options.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "common/half.h"
#include "compress/impl/hitopk.h"
#include "compress/registry.h"
#include "compress/select.h"
#include "compress/spec.h"
#include "compress/threshold_select.h"
#include "exchange_harness.h"
#include "gradsync/collectives.h"
#include "gradsync/error.h"
#include "gradsync/loopback.h"
#include "gradsync/topology.h"
#include "support/rank_threads.h"
#include "transport/routed_transport.h"

namespace gradsync {
namespace {

using methods::HiTopK;
using Vectors = std::vector<std::vector<float>>;

// Integers, so that every host sum is exact whatever its order; distinct enough to rank.
float hitopkInput(int step, int rank, size_t i) {
  return static_cast<float>(static_cast<int>((i * 7919 + rank * 104729 + step * 31) % 2001) - 1000);
}

struct Outcome {
  Vectors result, sent, residual;  // by rank
};

// One step of HiTopKComm computed in one place. `residual` (by rank) carries between steps.
Outcome naiveStep(const Topology& topology, const Vectors& inputs, Vectors& residual,
                  double density, bool half) {
  const int p = topology.size();
  const size_t count = inputs[0].size();
  Outcome out{Vectors(p), Vectors(p, std::vector<float>(count, 0.0f)), {}};
  std::vector<float> total(count, 0.0f);  // the sum of every host's lists, shard by shard
  for (int r = 0; r < p; ++r) {
    const int n = topology.localSize(r);
    const Block block = blockOf(count, n, topology.localRank(r));
    std::vector<float> x(block.size(), 0.0f);
    for (int mate : topology.localGroup(r)) {
      for (size_t i = 0; i < x.size(); ++i) x[i] += inputs[mate][block.begin + i];
    }
    if (residual[r].empty()) residual[r].assign(x.size(), 0.0f);
    for (size_t i = 0; i < x.size(); ++i) x[i] += residual[r][i];
    std::vector<uint32_t> chosen;
    ThresholdSelector(20).select(x, selectionCount(x.size(), density), chosen);
    for (uint32_t i : chosen) {
      out.sent[r][block.begin + i] = half ? floatFromHalf(halfFromFloat(x[i])) : x[i];
    }
    for (size_t i = 0; i < x.size(); ++i) residual[r][i] = x[i] - out.sent[r][block.begin + i];
  }
  // The cross groups: each shard position sums the hosts' lists in host order.
  for (int host = 0; host < topology.hosts(); ++host) {
    for (int r : topology.ranksOn(host)) {
      const Block block = blockOf(count, topology.localSize(r), topology.localRank(r));
      for (size_t i = block.begin; i < block.end; ++i) total[i] += out.sent[r][i];
    }
  }
  for (float& v : total) v *= 1.0f / static_cast<float>(p);
  for (int r = 0; r < p; ++r) out.result[r] = total;
  out.residual = residual;
  return out;
}

// Runs `steps` exchanges of a hitopk unit on every rank (threads over loopback, with
// `topology` attached unless null); returns each step's outcome.
std::vector<Outcome> runHiTopK(int ranks, const Topology* topology, size_t count, double density,
                               bool half, int steps,
                               const std::function<float(int, int, size_t)>& value) {
  LoopbackFabric fabric(ranks);
  std::vector<Outcome> out(steps, Outcome{Vectors(ranks), Vectors(ranks), Vectors(ranks)});
  testing::runRankThreads(ranks, [&](int rank) {
    std::unique_ptr<Transport> transport = fabric.connect(rank);
    if (topology != nullptr) transport = withTopology(std::move(transport), *topology);
    HiTopK hitopk(density, 20, /*errorFeedback=*/true, half, /*bypass=*/0);
    std::vector<float> grad(count), sent(count);
    for (int s = 0; s < steps; ++s) {
      for (size_t i = 0; i < count; ++i) grad[i] = value(s, rank, i);
      ExchangeContext context{*transport, {}, static_cast<uint64_t>(s), 1};
      ExchangeStats stats;
      hitopk.exchange(context, grad, sent, stats);
      out[s].result[rank] = grad;
      out[s].sent[rank] = sent;
      out[s].residual[rank].assign(hitopk.residual().begin(), hitopk.residual().end());
    }
  });
  return out;
}

struct HiTopKShape {
  int hosts;
  int perHost;  // 0: no topology at all (every rank its own host), `hosts` ranks
  bool half;
};

class HiTopKReference : public ::testing::TestWithParam<HiTopKShape> {};

TEST_P(HiTopKReference, MatchesNaiveReferenceOverSteps) {
  const HiTopKShape shape = GetParam();
  const int ranks = shape.perHost > 0 ? shape.hosts * shape.perHost : shape.hosts;
  const Topology topology =
      shape.perHost > 0 ? Topology::uniform(ranks, shape.perHost) : Topology::flat(ranks);
  for (size_t count : {size_t{7}, size_t{1003}, size_t{20011}}) {
    constexpr int kSteps = 3;
    Vectors residual(ranks);
    Outcome expected;
    for (int s = 0; s < kSteps; ++s) {
      Vectors inputs(ranks, std::vector<float>(count));
      for (int r = 0; r < ranks; ++r) {
        for (size_t i = 0; i < count; ++i) inputs[r][i] = hitopkInput(s, r, i);
      }
      expected = naiveStep(topology, inputs, residual, 0.1, shape.half);
    }
    const Outcome got = runHiTopK(ranks, shape.perHost > 0 ? &topology : nullptr, count, 0.1,
                                  shape.half, kSteps, hitopkInput)
                            .back();
    for (int r = 0; r < ranks; ++r) {
      EXPECT_TRUE(testing::sameBits(got.result[r], expected.result[r]))
          << "rank " << r << " n " << count;
      EXPECT_TRUE(testing::sameBits(got.sent[r], expected.sent[r])) << "rank " << r;
      EXPECT_TRUE(testing::sameBits(got.residual[r], expected.residual[r])) << "rank " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, HiTopKReference,
                         ::testing::Values(HiTopKShape{1, 4, true}, HiTopKShape{2, 2, true},
                                           HiTopKShape{3, 2, true}, HiTopKShape{2, 3, true},
                                           HiTopKShape{2, 3, false}, HiTopKShape{4, 0, true}),
                         [](const auto& info) {
                           const HiTopKShape& s = info.param;
                           return (s.perHost > 0
                                       ? std::to_string(s.hosts) + "x" + std::to_string(s.perHost)
                                       : "none" + std::to_string(s.hosts)) +
                                  (s.half ? "_fp16" : "_fp32");
                         });

// On random data (sums round), after every step: residual + what was sent so far = the host's
// reduced shard inputs so far, on every rank.
TEST(HiTopK, ErrorFeedbackKeepsResidualPlusSentEqualToInputs) {
  const Topology topology = Topology::uniform(6, 3);  // 2 hosts x 3
  constexpr size_t kCount = 4099;
  constexpr int kSteps = 4;
  std::vector<Vectors> data(kSteps, Vectors(6));  // by step and rank
  for (int s = 0; s < kSteps; ++s) {
    for (int r = 0; r < 6; ++r) data[s][r] = testing::gaussian(kCount, 100 * s + r);
  }
  auto value = [&](int s, int r, size_t i) { return data[s][r][i]; };
  const std::vector<Outcome> steps = runHiTopK(6, &topology, kCount, 0.05, true, kSteps, value);
  for (int r = 0; r < 6; ++r) {
    const Block block = blockOf(kCount, 3, topology.localRank(r));
    std::vector<double> inputs(block.size(), 0), sent(block.size(), 0);
    for (int s = 0; s < kSteps; ++s) {
      for (size_t i = 0; i < block.size(); ++i) {
        for (int mate : topology.localGroup(r)) inputs[i] += value(s, mate, block.begin + i);
        sent[i] += steps[s].sent[r][block.begin + i];
        const double residual = steps[s].residual[r][i];
        ASSERT_NEAR(residual + sent[i], inputs[i], 1e-5 * (1 + std::fabs(inputs[i])))
            << "rank " << r << " element " << i << " after step " << s;
      }
    }
  }
}

TEST(HiTopK, SmallUnitsBypassToTheDenseAverage) {
  const Topology topology = Topology::uniform(4, 2);
  LoopbackFabric fabric(4);
  testing::runRankThreads(4, [&](int rank) {
    auto transport = withTopology(fabric.connect(rank), topology);
    HiTopK hitopk(0.01, 20, true, true, /*bypass=*/1000);
    std::vector<float> grad(999), sent(999);
    for (size_t i = 0; i < grad.size(); ++i) grad[i] = hitopkInput(0, rank, i);
    ExchangeContext context{*transport, {}, 0, 1};
    ExchangeStats stats;
    hitopk.exchange(context, grad, sent, stats);
    for (size_t i = 0; i < grad.size(); ++i) {
      float sum = 0;
      for (int r = 0; r < 4; ++r) sum += hitopkInput(0, r, i);
      ASSERT_FLOAT_EQ(grad[i], sum / 4) << i;
      ASSERT_EQ(sent[i], hitopkInput(0, rank, i));
    }
    EXPECT_TRUE(hitopk.residual().empty());
  });
}

TEST(HiTopK, MalformedListsAreRefused) {
  std::vector<float> shard(10, 0.0f);
  auto list = [](std::vector<uint32_t> indices, size_t claimed) {
    std::vector<uint8_t> bytes(HiTopK::listBytes(indices.size(), false));
    const auto count = static_cast<uint32_t>(claimed);
    std::memcpy(bytes.data(), &count, 4);
    std::memcpy(bytes.data() + 4, indices.data(), indices.size() * 4);
    return bytes;
  };
  methods::addShardList(list({1, 4}, 2), 2, false, shard, 3);  // well formed
  EXPECT_THROW(methods::addShardList(list({1, 4}, 3), 2, false, shard, 3), ProtocolError);
  EXPECT_THROW(methods::addShardList(list({4, 1}, 2), 2, false, shard, 3), ProtocolError);
  EXPECT_THROW(methods::addShardList(list({1, 10}, 2), 2, false, shard, 3), ProtocolError);
  EXPECT_THROW(methods::addShardList(list({1, 1}, 2), 2, false, shard, 3), ProtocolError);
  EXPECT_THROW(methods::addShardList({}, 2, false, shard, 3), ProtocolError);
  try {
    methods::addShardList(list({1}, 1), 2, false, shard, 3);
    FAIL();
  } catch (const ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 3"), std::string::npos) << e.what();
  }
}

TEST(HiTopK, SpecOptionsAndTheirLimits) {
  const CompressSpec spec = CompressSpec::parse("hitopk:0.01,fp16=0,bypass=0,iters=10");
  EXPECT_TRUE(spec.errorFeedback);
  EXPECT_TRUE(findMethod("hitopk").ownErrorFeedback);
  auto compressor = makeCompressor(spec, {});
  EXPECT_NE(dynamic_cast<HiTopK*>(compressor.get()), nullptr) << "not wrapped in ErrorFeedback";
  EXPECT_EQ(compressor->aggregation(), Aggregation::kHierarchical);
  EXPECT_EQ(compressor->encodedBytes(1000), HiTopK::listBytes(10, false));
  EXPECT_THROW(CompressSpec::parse("hitopk:0"), ConfigError);
  EXPECT_THROW(CompressSpec::parse("hitopk:0.01,fp16=2"), ConfigError);
  EXPECT_THROW(CompressSpec::parse("hitopk:0.01,iters=31"), ConfigError);
  EXPECT_THROW(CompressSpec::parse("hitopk:0.01,bypass=-1"), ConfigError);
  const CompressSpec off = CompressSpec::parse("hitopk:0.01,ef=off");
  EXPECT_FALSE(off.errorFeedback);
}

}  // namespace
}  // namespace gradsync
