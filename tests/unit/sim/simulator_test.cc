// The simulator against closed forms (docs/simulator.md, "Validation"), and its p3 order
// against the real scheduler's replay for the same inputs.
#include "sim/simulator.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
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
    EXPECT_EQ(r.bytesSentPerStep, 0);
  }
  // p3 updates each slice on the communication thread as its gradient is ready: only the input
  // layer's share (110 of 1110 elements), ready last, delays the next forward.
  SimResult p3 = simulate(options(profile, 1, "p3:slice=300"));
  EXPECT_NEAR(p3.stepSeconds, expected - 0.002 + 0.002 * 110 / 1110, 1e-12);
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

// A naive replay of the ring engine's rule (StepPlanner's leader over the ring): whenever the
// communication thread is idle, rank 0 commits every pick its window allows; committed units
// go on the wire in order, each once rank 0's pick has reached the others.
std::vector<size_t> replayRingP3(const std::vector<int>& priorities,
                                 const std::vector<double>& readyAt,
                                 const std::vector<double>& seconds, size_t window,
                                 double decision) {
  PriorityScheduler scheduler(priorities, window);
  std::vector<size_t> byReady(readyAt.size());
  std::iota(byReady.begin(), byReady.end(), size_t{0});
  std::stable_sort(byReady.begin(), byReady.end(),
                   [&](size_t a, size_t b) { return readyAt[a] < readyAt[b]; });
  std::vector<size_t> order;
  std::deque<std::pair<size_t, double>> committed;
  size_t next = 0;
  double now = 0;
  while (order.size() < readyAt.size()) {
    while (next < byReady.size() && readyAt[byReady[next]] <= now) scheduler.ready(byReady[next++]);
    while (auto pick = scheduler.next()) committed.emplace_back(pick->unit, now);
    if (committed.empty()) {  // idle until the next unit is ready
      now = readyAt[byReady[next]];
      continue;
    }
    auto [unit, pickedAt] = committed.front();
    committed.pop_front();
    order.push_back(unit);
    now = std::max(now, pickedAt + decision) + seconds[unit];
    scheduler.completed(unit);
  }
  return order;
}

TEST(Simulator, P3OrderIsTheSchedulersOrderForTheSameInputs) {
  for (size_t window : {1, 2, 4}) {
    // Communication-bound, so that units queue and more urgent ones overtake.
    SimOptions o = options(chain(12, 0.004), 4, fmt::format("p3:slice=15000,window={}", window));
    o.cluster.bandwidth = 0.05 * kGbit;
    SimResult r = simulate(o);
    const GradientLayout layout = planLayout(o.profile.tensors(), o.schedule);
    std::vector<double> layerReady(o.profile.layers.size());
    double t = 0;
    for (size_t l = o.profile.layers.size(); l-- > 0;)
      layerReady[l] = t += o.profile.layers[l].backwardSeconds;
    std::vector<size_t> layerOf;
    for (size_t l = 0; l < o.profile.layers.size(); ++l)
      for (size_t i = 0; i < o.profile.layers[l].tensors.size(); ++i) layerOf.push_back(l);
    std::vector<double> readyAt, seconds;
    for (const CommUnit& unit : layout.units) {
      readyAt.push_back(layerReady[layerOf[unit.tensors[0]]]);
      seconds.push_back(ringAllreduceSeconds(o.cluster, unit.elements, 4) +
                        o.profile.updateSeconds * unit.elements / layout.totalElements);
    }
    // Rank 0's pick reaches ranks 1..3: latency, then three 8-byte messages back to back.
    const double decision = 50e-6 + 3 * 8 / o.cluster.bandwidth;
    const std::vector<size_t> expected =
        replayRingP3(prioritiesOf(layout), readyAt, seconds, window, decision);
    EXPECT_EQ(r.lastStepOrder, expected) << "window " << window;
    EXPECT_NE(expected,
              [&] {  // priorities did reorder the units
                std::vector<size_t> byIndex(expected.size());
                std::iota(byIndex.begin(), byIndex.end(), size_t{0});
                return byIndex;
              }())
        << "window " << window;
  }
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
  // The compressed all-reduce sends 2 (P - 1) / P encodings where the all-gather sends P - 1.
  o.compression.spec = "onebit,bucket=512";
  const double gathered = simulate(o).bytesSentPerStep;
  o.compression.spec = "onebit,bucket=512,allreduce=on";
  EXPECT_NEAR(simulate(o).bytesSentPerStep, gathered * 2 / 8, gathered * 0.01);
}

// A codec's cost lands on the communication thread: the encode once per unit, the decode once
// per encoding received, P times for the all-gathered methods and once for the summed ones; the
// compressed all-reduce encodes 1 + 1/P units and decodes two, at the codec's measured costs.
TEST(Simulator, CodecCostsAreEncodeOnceAndDecodePerEncodingReceived) {
  const ModelProfile profile =
      profileOf({layer("a", {300000}, 1e-3, 2e-3), layer("b", {500000, 200000}, 1e-3, 2e-3)});
  const double elements = 1000000;
  struct Case {
    std::string spec, codec;
    double encodes, decodes;
  };
  for (const Case& c : {Case{"qsgd:16", "qsgd:16", 1.0, 5.0}, Case{"fp16", "fp16", 1.0, 1.0},
                        Case{"qsgd:16,allreduce=on", "qsgd:16", 1.2, 2.0}}) {
    const std::string& spec = c.spec;
    SimOptions o = options(profile, 5, "wfbp");
    o.compression.spec = spec;
    const SimResult free = simulate(o);
    std::vector<std::string> asked;
    o.codecCost = [&asked](const std::string& s) {
      asked.push_back(s);
      return CodecCost{2e-9, 3e-9};
    };
    const SimResult charged = simulate(o);
    EXPECT_NEAR(charged.commSeconds - free.commSeconds,
                (c.encodes * 2e-9 + c.decodes * 3e-9) * elements, 1e-9)
        << spec;
    ASSERT_FALSE(asked.empty());
    for (const std::string& s : asked) EXPECT_EQ(s, c.codec);
  }
}

// p3 without slice= takes the slice of the ring's slowest link, and is then never behind wfbp
// on a model of many tensors at 16 ranks (what P3's 40,000 elements were: 1.4-8.7x slower).
TEST(Simulator, P3WithoutASliceTakesTheLinksSlice) {
  std::vector<LayerProfile> layers;
  for (size_t l = 0; l < 12; ++l)
    layers.push_back(layer(fmt::format("l{}", l), {1'000'000 + 100'000 * l, 64}, 2e-3, 4e-3));
  SimOptions o = options(profileOf(std::move(layers), 1e-3), 16, "p3");
  o.cluster.latency = 5e-6;
  for (double gbit : {10.0, 100.0}) {
    o.cluster.bandwidth = gbit * kGbit;
    const SimResult p3 = simulate(o);
    const size_t slice = p3SliceForLink(16, 5e-6, gbit * kGbit);
    EXPECT_EQ(p3.schedule, fmt::format("p3:slice={},window=2", slice));
    SimOptions explicitSlice = o;
    explicitSlice.schedule = ScheduleSpec::parse(fmt::format("p3:slice={}", slice));
    EXPECT_EQ(simulate(explicitSlice).stepSeconds, p3.stepSeconds);
    SimOptions wfbp = o;
    wfbp.schedule = ScheduleSpec::parse("wfbp");
    EXPECT_LE(p3.stepSeconds, simulate(wfbp).stepSeconds * 1.001) << gbit << " Gbit/s";
    SimOptions p3default = o;
    p3default.schedule = ScheduleSpec::parse("p3:slice=40000");
    EXPECT_GT(simulate(p3default).stepSeconds, p3.stepSeconds) << gbit << " Gbit/s";
  }
}

TEST(Simulator, RefusesWhatTrainRefuses) {
  SimOptions o = options(chain(3, 0.001), 4, "p3");
  o.sync = "sharded";
  EXPECT_THROW(simulate(o), ConfigError);
  o = options(chain(3, 0.001), 4, "wfbp");
  o.strategy.ps = true;
  o.compression.spec = "powersgd:2";  // needs rounds among the workers
  EXPECT_THROW(simulate(o), ConfigError);
  o = options(chain(3, 0.001), 0, "wfbp");
  EXPECT_THROW(simulate(o), ConfigError);
  o = options(chain(3, 0.001), 4, "wfbp");
  o.sync = "nope";
  EXPECT_THROW(simulate(o), ConfigError);
}

TEST(Simulator, EveryStrategyRunsUnderEverySchedule) {
  for (const char* sync :
       {"ssgd", "sharded", "asgd", "ssp:2", "odsgd", "ssdsgd:4", "cdsgd:4", "localsgd:2"}) {
    for (const char* schedule : {"fifo", "wfbp", "fusion:1", "p3:slice=5000"}) {
      for (int p : {1, 2, 5}) {
        SimOptions o = options(chain(5, 0.002), p, schedule);
        o.sync = sync;
        if (o.sync == "sharded" && o.schedule.prioritized()) {
          EXPECT_THROW(simulate(o), ConfigError);  // as train refuses it
          continue;
        }
        SimResult r = simulate(o);
        const double alone = 5 * 0.002 * 3 + 0.002;  // forward + backward + update
        EXPECT_GE(r.stepSeconds, 5 * 0.002 * 3 - 1e-12) << sync << " " << schedule << " " << p;
        if (p == 1) {
          EXPECT_NEAR(r.stepSeconds, alone, 0.002) << sync << " " << schedule;
        }
      }
    }
  }
}

TEST(Simulator, ShardedIsAReduceScatterAndAnAllgather) {
  const size_t n = 5 * 3 * 100000;
  SimOptions o = options(profileOf({layer("fc", {n}, 0, 0)}), 5, "wfbp");
  o.sync = "sharded";
  EXPECT_NEAR(simulate(o).stepSeconds, closedFormRing(n * 4.0, 5, kGbit, 50e-6), 1e-9);
}

// The all-to-all: every NIC carries its host's messages to the other hosts; on one host, each
// device's local link its messages to the others.
TEST(SimCluster, AlltoallIsCarriedByTheNics) {
  ClusterSpec flat{.workers = 5, .bandwidth = kGbit, .latency = 20e-6};
  EXPECT_NEAR(alltoallSeconds(flat, 1000), 20e-6 + 4 * 1000 / kGbit, 1e-12);
  ClusterSpec hosts{.workers = 16, .gpusPerHost = 8, .bandwidth = kGbit, .latency = 20e-6};
  EXPECT_NEAR(alltoallSeconds(hosts, 1000), 20e-6 + 8 * 8 * 1000 / kGbit, 1e-12);
  ClusterSpec one{.workers = 4, .gpusPerHost = 4, .localBandwidth = 8 * kGbit};
  EXPECT_NEAR(alltoallSeconds(one, 1000), 3 * 1000 / (8 * kGbit), 1e-12);
  EXPECT_EQ(alltoallSeconds(ClusterSpec{.workers = 1}, 1000), 0.0);
  EXPECT_EQ(alltoallSeconds(flat, 0), 0.0);
}

// sharded's FC exchange on one wide linear layer (out x in = 1000 x 3000, batch 32, 4 workers):
// its reduce-scatter gives way to the activations' all-to-all in forward and the errors'
// allgather in backward, on the training thread; the updated weights' allgather stays. So the
// bytes are the allgather's plus the exchange's, and the step: the activations' all-to-all
// (started with forward, longer than forward and backward here), then the errors' allgather,
// then the weights'.
TEST(Simulator, ShardedFcExchangeReplacesTheReduceScatter) {
  LayerProfile fc{"fc", {tensorShape("fc.weight", {1000, 3000})}, 0.001, 0.001};
  fc.kind = kLinearLayer;
  SimOptions o = options(profileOf({fc}), 4, "wfbp");
  o.cluster.latency = 0;
  o.sync = "sharded:fc=exchange";
  const SimResult exchange = simulate(o);
  o.sync = "sharded";
  const SimResult reduce = simulate(o);
  const double weights = 3000.0 * 1000 * 4;
  const double activations = 3.0 / 4 * 32 * 3000 * 4;
  const double errors = 3.0 * 32 * 1000 * 4;
  EXPECT_NEAR(reduce.bytesSentPerStep, 2 * 3.0 / 4 * weights, 1);
  EXPECT_NEAR(exchange.bytesSentPerStep, 3.0 / 4 * weights + activations + errors, 1);
  const double alltoall = 3 * (activations / 3) / kGbit;  // 3 messages of 32 x 750 floats
  EXPECT_NEAR(exchange.stepSeconds,
              std::max(0.002, alltoall) + (3.0 / 4 * weights + errors) / kGbit, 1e-9);
  EXPECT_LT(exchange.stepSeconds, reduce.stepSeconds);
  // fc=auto takes it (32 rows against 3000 x 1000), and leaves a layer narrow against its rows.
  o.sync = "sharded:fc=auto";
  EXPECT_NEAR(simulate(o).bytesSentPerStep, exchange.bytesSentPerStep, 1);
  o.profile.batchSize = 4000;
  EXPECT_NEAR(simulate(o).bytesSentPerStep, reduce.bytesSentPerStep, 1);
}

// Two servers take the two units' pushes in parallel; one server takes them one after the
// other. Pushes: the workers' NICs send each unit once (b / bandwidth), each server's NIC takes
// P copies; replies likewise.
TEST(Simulator, ServersShareTheLoadAndContendOnTheirNics) {
  const size_t n = 250000;
  const double b = n * 4.0 / kGbit;
  const int p = 4;
  for (int servers : {1, 2}) {
    SimOptions o = options(profileOf({layer("a", {n}, 0, 0), layer("b", {n}, 0, 0)}), p, "wfbp");
    o.strategy.servers = servers;
    const double expected = servers == 1 ? 3 * p * b + 2 * 50e-6 : (2 * p + 1) * b + 2 * 50e-6;
    EXPECT_NEAR(simulate(o).stepSeconds, expected, 1e-9) << servers << " servers";
  }
}

// One unit over a link whose latency dominates: PS ssgd waits a round trip before each forward;
// odsgd overlaps it with the next step's compute (the push waits for the last pull); ssdsgd:4
// asks for a pull one step in four; cdsgd:4 pushes 2-bit codes three steps in four.
TEST(Simulator, DelayedStrategiesHideOrSkipTraffic) {
  const size_t n = 100000;
  SimOptions o = options(profileOf({layer("fc", {n}, 0.001, 0.002)}), 4, "wfbp");
  o.cluster.latency = 5e-3;
  o.strategy.servers = 1;
  const double oneWay = 5e-3 + 4 * n * 4.0 / kGbit;
  EXPECT_NEAR(simulate(o).stepSeconds, 0.003 + 2 * oneWay, 1e-9);
  o.sync = "odsgd";  // a round trip per step, the compute inside it
  const SimResult od = simulate(o);
  EXPECT_NEAR(od.stepSeconds, 2 * oneWay, 1e-9);
  o.sync = "ssdsgd:4";  // one round trip per four steps
  EXPECT_LT(simulate(o).stepSeconds, 0.6 * od.stepSeconds);
  o.sync = "cdsgd:4";
  const SimResult cd = simulate(o);
  EXPECT_NEAR(cd.bytesSentPerStep, od.bytesSentPerStep * (1 + 3.0 / 16) / 4,
              od.bytesSentPerStep * 0.01);
}

TEST(Simulator, RefusesCompressionWhereTrainDoes) {
  SimOptions o = options(chain(3, 0.001), 4, "wfbp");
  o.compression.spec = "topk:0.01";
  o.sync = "localsgd:2";
  EXPECT_THROW(simulate(o), ConfigError);
  o.sync = "cdsgd:4";
  EXPECT_THROW(simulate(o), ConfigError);
}

// Through servers a compressed push costs its encoding; the replies (parameters) stay dense.
TEST(Simulator, CompressedPushesToServers) {
  SimOptions o = options(profileOf({layer("fc", {400000}, 0, 0)}), 4, "wfbp");
  o.strategy.ps = true;
  const double dense = simulate(o).bytesSentPerStep;
  o.compression.spec = "topk:0.01";
  const double topk = simulate(o).bytesSentPerStep;
  EXPECT_LT(topk, dense);
  // A push is 1% as (index, value) pairs, 2% of the dense push: the saving is at most the push.
  EXPECT_NEAR(dense - topk, 400000 * 4 * 0.98, 400000 * 4 * 0.01);
}

}  // namespace
}  // namespace gradsync::sim
