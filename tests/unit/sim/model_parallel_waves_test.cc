// Model-parallel Wavelet (sim/model_parallel_waves.h): rotated waves against naive model
// parallelism, by hand computation, and the one-operation-per-device rule from the event list.
#include "sim/model_parallel_waves.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "gradsync/error.h"

namespace gradsync::sim {
namespace {

ModelParallelWaveOptions options(std::vector<PipelineStageCosts> parts, int waves,
                                 WavePlacement placement = WavePlacement::kRotated) {
  return {.partitions = std::move(parts), .waves = waves, .placement = placement, .steps = 12};
}

double naiveSeconds(const std::vector<PipelineStageCosts>& parts, double hop = 0) {
  ModelParallelWaveOptions o = options(parts, 1);
  o.hopSeconds = hop;
  return simulateModelParallelWaves(o).secondsPerIteration;
}

// Every resource runs one operation at a time: sorted by start (an empty operation before one
// that starts with it), each starts after the previous one ended.
void expectNoOverlap(const ModelParallelWaveResult& r) {
  std::map<int, std::vector<WaveOperation>> byResource;
  for (const WaveOperation& op : r.operations) byResource[op.resource].push_back(op);
  for (auto& [resource, ops] : byResource) {
    std::sort(ops.begin(), ops.end(), [](const auto& a, const auto& b) {
      return std::pair{a.start, a.end} < std::pair{b.start, b.end};
    });
    for (size_t i = 1; i < ops.size(); ++i)
      ASSERT_GE(ops[i].start, ops[i - 1].end) << "resource " << resource << " op " << i;
  }
}

TEST(ModelParallelWaves, NaiveRunsOneDeviceAtATime) {
  const std::vector<PipelineStageCosts> parts{{1, 2, 0.5}, {3, 6, 1.5}, {2, 4, 0.25}};
  // The next forward of partition 0 waits for its update; the others' updates overlap.
  EXPECT_DOUBLE_EQ(naiveSeconds(parts), 1 + 3 + 2 + 4 + 6 + 2 + 0.5);
  // Two hops forward and two back.
  EXPECT_DOUBLE_EQ(naiveSeconds(parts, 0.125), 18.5 + 4 * 0.125);
}

// k equal partitions, no hop, no update: the k rotated waves move in lockstep, each on its own
// device, so k mini-batches take as long as one does naively.
TEST(ModelParallelWaves, EqualPartitionsGiveExactlyKTimes) {
  for (int k : {1, 2, 3, 5, 8}) {
    const std::vector<PipelineStageCosts> parts(k, {1.5, 3, 0});
    const auto r = simulateModelParallelWaves(options(parts, k));
    EXPECT_DOUBLE_EQ(r.secondsPerMiniBatch * k, naiveSeconds(parts)) << k;
    EXPECT_DOUBLE_EQ(r.utilisation, 1.0) << k;
    expectNoOverlap(r);
  }
}

// Two unequal partitions with updates, by hand. Naive: F0 F1 B1 B0 U0 = 12.5 per mini-batch.
// Rotated: both waves run partition 0, then 1, then back in lockstep, each on its own device;
// after the backward of partition 1 each device has a wave's backward of partition 0 and the
// other wave's update of partition 1 to run, then the first wave's update of partition 0: two
// mini-batches per F0 + F1 + B1 + B0 + U1 + U0 = 14 s.
TEST(ModelParallelWaves, UnequalPartitionsAndUpdatesByHand) {
  const std::vector<PipelineStageCosts> parts{{1, 2, 0.5}, {3, 6, 1.5}};
  EXPECT_DOUBLE_EQ(naiveSeconds(parts), 12.5);
  const auto r = simulateModelParallelWaves(options(parts, 2));
  EXPECT_DOUBLE_EQ(r.secondsPerIteration, 14);
  EXPECT_DOUBLE_EQ(naiveSeconds(parts) / r.secondsPerMiniBatch, 2 * 12.5 / 14);
  expectNoOverlap(r);
}

// Point-to-point hops delay every wave alike, as they delay naive model parallelism.
TEST(ModelParallelWaves, HopsBetweenPairsKeepTheSpeedUp) {
  for (int k : {2, 4, 7}) {
    const std::vector<PipelineStageCosts> parts(k, {1, 2, 0});
    ModelParallelWaveOptions o = options(parts, k);
    o.hopSeconds = 0.25;
    const auto r = simulateModelParallelWaves(o);
    EXPECT_DOUBLE_EQ(naiveSeconds(parts, 0.25), k * 3 + 2 * (k - 1) * 0.25);
    EXPECT_NEAR(naiveSeconds(parts, 0.25) / r.secondsPerMiniBatch, k, 1e-9) << k;
    expectNoOverlap(r);
    o.sharedLink = true;  // one transfer at a time: never faster
    const auto shared = simulateModelParallelWaves(o);
    EXPECT_GE(shared.secondsPerIteration, r.secondsPerIteration - 1e-12);
    expectNoOverlap(shared);
  }
}

// One wave is naive model parallelism whatever the placement; one partition is one device.
TEST(ModelParallelWaves, OneWaveOrOnePartitionIsNaive) {
  const std::vector<PipelineStageCosts> parts{{1, 2, 0.5}, {3, 6, 1.5}, {2, 4, 0.25}};
  const auto same = simulateModelParallelWaves(options(parts, 1, WavePlacement::kSame));
  EXPECT_DOUBLE_EQ(same.secondsPerIteration, naiveSeconds(parts));
  const std::vector<PipelineStageCosts> one{{1, 2, 0.5}};
  const auto r = simulateModelParallelWaves(options(one, 3));
  EXPECT_DOUBLE_EQ(r.secondsPerMiniBatch, 3.5);  // three waves on one device take turns
  expectNoOverlap(r);
}

// The same placement pipelines the waves: it runs at the pace of the busiest device, so unequal
// partitions cost it what rotation does not.
TEST(ModelParallelWaves, SamePlacementIsBoundByTheSlowestPartition) {
  const std::vector<PipelineStageCosts> parts{{1, 2, 0}, {3, 6, 0}};
  const auto same = simulateModelParallelWaves(options(parts, 2, WavePlacement::kSame));
  const auto rotated = simulateModelParallelWaves(options(parts, 2));
  EXPECT_GE(same.secondsPerMiniBatch, 9 - 1e-12);
  EXPECT_DOUBLE_EQ(rotated.secondsPerMiniBatch, 6);
  expectNoOverlap(same);
}

TEST(ModelParallelWaves, RefusesBadOptions) {
  EXPECT_THROW(simulateModelParallelWaves(options({}, 1)), ConfigError);
  EXPECT_THROW(simulateModelParallelWaves(options({{1, 2, 0}}, 0)), ConfigError);
  EXPECT_THROW(simulateModelParallelWaves(options({{1, -2, 0}}, 1)), ConfigError);
  ModelParallelWaveOptions o = options({{1, 2, 0}}, 1);
  o.hopSeconds = -1;
  EXPECT_THROW(simulateModelParallelWaves(o), ConfigError);
}

}  // namespace
}  // namespace gradsync::sim
