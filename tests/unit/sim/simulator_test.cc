// The simulator against closed forms (docs/simulator.md, "Validation"), and its p3 order
// against the real scheduler's replay for the same inputs.
#include "sim/simulator.h"

#include <gtest/gtest.h>

#include <numeric>

#include "gradsync/error.h"
#include "schedule/priority_scheduler.h"

namespace gradsync::sim {
namespace {

constexpr double kGbit = 1e9 / 8;

LayerProfile layer(std::string name, std::vector<size_t> elements, double forward,
                   double backward) {
  LayerProfile l{std::move(name), {}, forward, backward};
  for (size_t i = 0; i < elements.size(); ++i)
    l.tensors.push_back(
        tensorShape(fmt::format("{}.p{}", l.name, i), {static_cast<int64_t>(elements[i])}));
  return l;
}

ModelProfile profileOf(std::vector<LayerProfile> layers, double update = 0) {
  ModelProfile p;
  p.name = "test";
  p.device = "test";
  p.batchSize = 32;
  p.layers = std::move(layers);
  p.updateSeconds = update;
  return p;
}

SimOptions options(ModelProfile profile, int workers, const std::string& schedule = "wfbp") {
  SimOptions o;
  o.profile = std::move(profile);
  o.cluster.workers = workers;
  o.cluster.bandwidth = 1 * kGbit;
  o.cluster.latency = 50e-6;
  o.schedule = ScheduleSpec::parse(schedule);
  return o;
}

double closedFormRing(double bytes, int p, double bandwidth, double latency) {
  return 2.0 * (p - 1) / p * bytes / bandwidth + 2.0 * (p - 1) * latency;
}

TEST(SimCluster, RingAllreduceIsTheClosedForm) {
  for (int p : {1, 2, 3, 4, 5, 8, 16, 4096}) {
    ClusterSpec c{.workers = p, .bandwidth = 10 * kGbit, .latency = 20e-6};
    const size_t n = size_t{4096} * 1000;  // divisible by every p above but 3 and 5
    const double expected = closedFormRing(n * 4.0, p, c.bandwidth, c.latency);
    if (n % p == 0) {
      EXPECT_NEAR(ringAllreduceSeconds(c, n, 4), expected, 1e-12) << p;
    } else {  // the largest block is one element more than the average
      EXPECT_GT(ringAllreduceSeconds(c, n, 4), expected) << p;
      EXPECT_NEAR(ringAllreduceSeconds(c, n, 4), expected, 2.0 * (p - 1) * 4 / c.bandwidth);
    }
  }
}

TEST(SimCluster, EdgeSizesCostNothingOrOneElementPerStep) {
  ClusterSpec c{.workers = 3, .bandwidth = kGbit, .latency = 1e-5};
  EXPECT_EQ(ringAllreduceSeconds(c, 0, 4), 0);
  EXPECT_DOUBLE_EQ(ringAllreduceSeconds(c, 1, 4), 4 * (1e-5 + 4 / kGbit));
  EXPECT_EQ(allgathervSeconds(c, 0), 0);
  c.workers = 1;
  EXPECT_EQ(ringAllreduceSeconds(c, 1000, 4), 0);
  EXPECT_EQ(treeSeconds(c, 1000), 0);
}

TEST(SimCluster, HierarchicalRingIsSetByTheNetworkHop) {
  ClusterSpec c{.workers = 16, .gpusPerHost = 8, .bandwidth = 25 * kGbit, .latency = 5e-6};
  const size_t n = 1600000;
  EXPECT_NEAR(ringAllreduceSeconds(c, n, 4), closedFormRing(n * 4.0, 16, c.bandwidth, 5e-6), 1e-12);
  c.workers = 8;  // one host: only the local links
  EXPECT_NEAR(ringAllreduceSeconds(c, n, 4),
              closedFormRing(n * 4.0, 8, c.localBandwidth, c.localLatency), 1e-12);
}

TEST(SimCluster, TreeAndAllgathervFollowTheirSteps) {
  ClusterSpec c{.workers = 8, .bandwidth = kGbit, .latency = 1e-5};
  const double message = 1e-5 + 1000 / kGbit;
  EXPECT_DOUBLE_EQ(treeSeconds(c, 1000), 2 * 3 * message);  // log2 8 rounds up, and down
  EXPECT_DOUBLE_EQ(allgathervSeconds(c, 1000), 7 * message);
  c.workers = 5;  // rounds at distances 1, 2, 4
  EXPECT_DOUBLE_EQ(treeSeconds(c, 1000), 2 * 3 * message);
}

TEST(Simulator, OneAllreduceStepIsTheClosedForm) {
  for (int p : {2, 3, 7, 16}) {
    const size_t n = 16 * 7 * 3 * 10000;
    SimOptions o = options(profileOf({layer("fc", {n}, 0, 0)}), p, "fifo");
    SimResult r = simulate(o);
    EXPECT_NEAR(r.stepSeconds, closedFormRing(n * 4.0, p, o.cluster.bandwidth, 50e-6), 1e-9) << p;
    EXPECT_NEAR(r.bytesSentPerStep, 2.0 * (p - 1) / p * n * 4, 1e-3);
    EXPECT_EQ(r.computeSeconds, 0);
  }
}

TEST(Simulator, ComputeOnlyIsTheProfilesSum) {
  ModelProfile profile = profileOf({layer("a", {100, 10}, 0.010, 0.020),
                                    layer("relu", {}, 0.001, 0), layer("b", {1000}, 0.003, 0.007)},
                                   0.002);
  const double expected = 0.010 + 0.020 + 0.001 + 0.003 + 0.007 + 0.002;
  for (const char* schedule : {"fifo", "wfbp", "fusion:1"}) {
    SimResult r = simulate(options(profile, 1, schedule));
    EXPECT_NEAR(r.stepSeconds, expected, 1e-12) << schedule;
    EXPECT_NEAR(r.scalingEfficiency, 1, 1e-9) << schedule;
    EXPECT_EQ(r.bytesSentPerStep, 0);
  }
  // p3 updates each slice on the communication thread: the update overlaps the next forward
  // except for the input layer's share, which the next forward waits for.
  SimResult p3 = simulate(options(profile, 1, "p3:slice=300"));
  EXPECT_GE(p3.stepSeconds, expected - 0.002);
  EXPECT_LT(p3.stepSeconds, expected);
}

// The last layer's gradient is ready as backward starts, and its allreduce runs while the
// layers below go back: the step is max(compute, communication) either way round.
TEST(Simulator, PerfectOverlapIsTheMaximum) {
  const size_t n = 4 * 250000;
  const double comm = closedFormRing(n * 4.0, 4, kGbit, 50e-6);
  for (double backward : {comm / 3, comm * 3}) {
    ModelProfile profile = profileOf({layer("stem", {}, 0, backward), layer("head", {n}, 0, 0)});
    SimResult r = simulate(options(profile, 4, "wfbp"));
    EXPECT_NEAR(r.stepSeconds, std::max(backward, comm), 1e-9) << backward;
    EXPECT_NEAR(r.exposedCommSeconds, std::max(0.0, comm - backward), 1e-9);
  }
}

// A chain of layers whose backward produces gradients one after the other.
ModelProfile chain(size_t layers, double seconds) {
  std::vector<LayerProfile> all;
  for (size_t l = 0; l < layers; ++l)
    all.push_back(layer(fmt::format("l{}", l), {20000 * (l % 3 + 1), 64}, seconds, 2 * seconds));
  return profileOf(std::move(all), seconds);
}

TEST(Simulator, P3OrderIsTheSchedulersOrderForTheSameInputs) {
  SimOptions o = options(chain(12, 0.004), 4, "p3:slice=15000,window=2");
  // Rank 0's picks reach the others one message later, which the replay does not have: with no
  // latency that message takes 64 ns, far from any tie between a ready time and a completion.
  o.cluster.latency = 0;
  SimResult r = simulate(o);
  // Replay: this step's units become ready as backward reaches their layers; each occupies
  // the wire for its allreduce plus its share of the update.
  const GradientLayout layout = planLayout(o.profile.tensors(), o.schedule);
  std::vector<double> readyAt(layout.units.size()), seconds(layout.units.size());
  std::vector<int> priorities;
  double t = 0;
  std::vector<double> layerReady(o.profile.layers.size());
  for (size_t l = o.profile.layers.size(); l-- > 0;)
    layerReady[l] = t += o.profile.layers[l].backwardSeconds;
  size_t tensor = 0;
  std::vector<size_t> layerOf;
  for (size_t l = 0; l < o.profile.layers.size(); ++l)
    for (size_t i = 0; i < o.profile.layers[l].tensors.size(); ++i) layerOf.push_back(l);
  (void)tensor;
  for (size_t u = 0; u < layout.units.size(); ++u) {
    const CommUnit& unit = layout.units[u];
    readyAt[u] = layerReady[layerOf[unit.tensors[0]]];
    seconds[u] = ringAllreduceSeconds(o.cluster, unit.elements, 4) +
                 o.profile.updateSeconds * unit.elements / layout.totalElements;
    priorities.push_back(unit.priority);
  }
  EXPECT_EQ(r.lastStepOrder, simulatePriorityOrder(priorities, readyAt, seconds, 2));
  EXPECT_GT(r.units, o.profile.layers.size());  // sliced
}

TEST(Simulator, P3OverlapsTheNextForward) {
  SimOptions wfbp = options(chain(12, 0.004), 4, "wfbp");
  wfbp.cluster.bandwidth = 0.2 * kGbit;
  SimOptions p3 = wfbp;
  p3.schedule = ScheduleSpec::parse("p3");
  SimResult a = simulate(wfbp);
  SimResult b = simulate(p3);
  EXPECT_LT(b.stepSeconds, a.stepSeconds);
  EXPECT_GE(b.stepSeconds, std::max(b.computeSeconds, b.commSeconds) - 1e-12);
}

TEST(Simulator, OneSeparateServerIsPushThenReplyThroughItsNic) {
  const size_t n = 300000;
  for (int p : {1, 3, 4}) {
    SimOptions o = options(profileOf({layer("fc", {n}, 0, 0)}), p, "wfbp");
    o.strategy.servers = 1;
    SimResult r = simulate(o);
    const double oneWay = 50e-6 + p * n * 4.0 / kGbit;
    EXPECT_NEAR(r.stepSeconds, 2 * oneWay, 1e-9) << p;
    EXPECT_NEAR(r.bytesSentPerStep, n * 4.0, 1e-6);
  }
}

TEST(Simulator, LocalSgdAveragesEveryHSteps) {
  const size_t n = 4 * 100000;
  ModelProfile profile = profileOf({layer("fc", {n}, 0.01, 0.02)}, 0.001);
  SimOptions o = options(profile, 4, "wfbp");
  o.sync = "localsgd:4";
  SimResult r = simulate(o);
  const double average = closedFormRing(n * 4.0, 4, kGbit, 50e-6);
  EXPECT_NEAR(r.stepSeconds, 0.031 + average / 4, 1e-9);
}

TEST(Simulator, CompressionShrinksTheBytesOnTheWire) {
  SimOptions o = options(chain(6, 0.001), 8, "wfbp");
  const double dense = simulate(o).bytesSentPerStep;
  o.compression.spec = "topk:0.01";
  SimResult topk = simulate(o);
  EXPECT_LT(topk.bytesSentPerStep, dense / 4);
  o.compression.spec = "fp16";
  EXPECT_NEAR(simulate(o).bytesSentPerStep, dense / 2, dense * 0.01);
}

TEST(Simulator, RefusesWhatTrainRefuses) {
  SimOptions o = options(chain(3, 0.001), 4, "p3");
  o.sync = "sharded";
  EXPECT_THROW(simulate(o), ConfigError);
  o = options(chain(3, 0.001), 4, "wfbp");
  o.strategy.ps = true;
  o.compression.spec = "topk:0.01";
  EXPECT_THROW(simulate(o), ConfigError);
  o = options(chain(3, 0.001), 0, "wfbp");
  EXPECT_THROW(simulate(o), ConfigError);
  o = options(chain(3, 0.001), 4, "wfbp");
  o.sync = "nope";
  EXPECT_THROW(simulate(o), ConfigError);
}

TEST(Simulator, EveryStrategyRuns) {
  for (const char* sync :
       {"ssgd", "sharded", "asgd", "ssp:2", "odsgd", "ssdsgd:4", "cdsgd:4", "localsgd:2"}) {
    for (int p : {1, 2, 5}) {
      SimOptions o = options(chain(5, 0.002), p, "wfbp");
      o.sync = sync;
      SimResult r = simulate(o);
      EXPECT_GE(r.stepSeconds, r.computeSeconds - 1e-12) << sync << " " << p;
      EXPECT_GT(r.samplesPerSecond, 0);
    }
  }
}

}  // namespace
}  // namespace gradsync::sim
