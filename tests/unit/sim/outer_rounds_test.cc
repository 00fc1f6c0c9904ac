// localsgd and the DiLoCo family in the simulator (sim/outer_rounds.h) against closed forms built
// from the cluster's collective costs: what each variant adds to a local step, averaged over a
// period of H steps.
#include "sim/outer_rounds.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "gradsync/collectives.h"
#include "gradsync/error.h"

namespace gradsync::sim {
namespace {

constexpr double kForward = 0.010, kBackward = 0.020, kUpdate = 0.004;
constexpr double kLocal = kForward + kBackward + kUpdate;
// Largest first: fragments of 2 are {400k, 100k} and {300k, 200k}.
const std::vector<size_t> kElements{400000, 300000, 200000, 100000};

SimOptions options(const std::string& sync, int workers = 4, double gbits = 1) {
  LayerProfile layer{"fc", {}, kForward, kBackward};
  for (size_t i = 0; i < kElements.size(); ++i)
    layer.tensors.push_back(
        tensorShape(fmt::format("fc.p{}", i), {static_cast<int64_t>(kElements[i])}));
  SimOptions o;
  o.profile.name = "test";
  o.profile.device = "test";
  o.profile.batchSize = 32;
  o.profile.layers = {layer};
  o.profile.updateSeconds = kUpdate;
  o.cluster.workers = workers;
  o.cluster.bandwidth = gbits * 1e9 / 8;
  o.cluster.latency = 50e-6;
  o.sync = sync;
  o.steps = 40;
  return o;
}

double total() {
  double n = 0;
  for (size_t e : kElements) n += static_cast<double>(e);
  return n;
}

// The one dense all-reduce of tensors `of` (indices into kElements), packed in one buffer.
size_t packed(const std::vector<size_t>& of) {
  size_t n = 0;
  for (size_t i : of) n += kElements[i];
  return n;
}
double syncSeconds(const ClusterSpec& c, const std::vector<size_t>& of) {
  return denseAllreduceSeconds(c, packed(of), sizeof(float));
}
double syncBytes(const ClusterSpec& c, const std::vector<size_t>& of) {
  return denseAllreduceBytes(c, packed(of), sizeof(float));
}
double outerSeconds(const std::vector<size_t>& of) {
  double n = 0;
  for (size_t i : of) n += static_cast<double>(kElements[i]);
  return kUpdate * n / total();
}

const std::vector<size_t> kAll{0, 1, 2, 3};
const std::vector<std::vector<size_t>> kHalves{{0, 3}, {1, 2}};

TEST(OuterRounds, LocalSgdAndDilocoAddTheirSyncEveryHSteps) {
  const SimOptions localsgd = options("localsgd:4");
  const ClusterSpec& c = localsgd.cluster;
  const SimResult l = simulate(localsgd);
  EXPECT_NEAR(l.stepSeconds, kLocal + syncSeconds(c, kAll) / 4, 1e-12);
  EXPECT_NEAR(l.bytesSentPerStep, syncBytes(c, kAll) / 4, 1e-6);
  EXPECT_NEAR(l.largestSyncBytes, syncBytes(c, kAll), 1e-6);
  EXPECT_NEAR(l.computeSeconds, kLocal, 1e-12);
  EXPECT_NEAR(l.scalingEfficiency, kLocal / l.stepSeconds, 1e-12);
  // diloco adds its outer step (an optimizer pass); at lr 1 without momentum it is localsgd.
  const SimResult d = simulate(options("diloco:4"));
  EXPECT_NEAR(d.stepSeconds, kLocal + (syncSeconds(c, kAll) + kUpdate) / 4, 1e-12);
  EXPECT_EQ(d.bytesSentPerStep, l.bytesSentPerStep);
  EXPECT_EQ(simulate(options("diloco:4,outer_lr=1,outer_momentum=0")).stepSeconds, l.stepSeconds);
}

TEST(OuterRounds, FragmentsWithoutDelaySendTheSameBytesInSmallerSyncs) {
  const SimResult whole = simulate(options("diloco:4"));
  const SimOptions o = options("diloco:4,fragments=2");
  const SimResult halves = simulate(o);
  // Two all-reduces, each paying its own latencies.
  const double syncs = syncSeconds(o.cluster, kHalves[0]) + syncSeconds(o.cluster, kHalves[1]);
  EXPECT_NEAR(halves.stepSeconds, kLocal + (syncs + kUpdate) / 4, 1e-12);
  EXPECT_GT(halves.stepSeconds, whole.stepSeconds);
  EXPECT_NEAR(halves.bytesSentPerStep, whole.bytesSentPerStep, 1e-6);
  EXPECT_NEAR(halves.largestSyncBytes,
              std::max(syncBytes(o.cluster, kHalves[0]), syncBytes(o.cluster, kHalves[1])), 1e-6);
  EXPECT_NEAR(halves.largestSyncBytes, whole.largestSyncBytes / 2, whole.largestSyncBytes * 0.01);
}

// A delayed fragment's all-reduce overlaps τ local steps; its merge waits for the rest. At
// 100 Mbit/s a fragment's sync (about 0.24 s) outlasts 1 and 3 local steps (34 ms each) but not
// 8; eager's τ is H/P.
TEST(OuterRounds, DelayHidesAFragmentsSyncBehindTauLocalSteps) {
  for (const auto& [sync, tau] :
       std::vector<std::pair<std::string, int>>{{"diloco:16,fragments=2,delay=1", 1},
                                                {"diloco:16,fragments=2,delay=3", 3},
                                                {"diloco:16,fragments=2,eager=on", 8},
                                                {"diloco:8,eager=on", 8}}) {
    const SimOptions o = options(sync, 4, 0.1);
    const bool halves = sync.find("fragments=2") != std::string::npos;
    const int period = halves ? 16 : 8;
    const std::vector<std::vector<size_t>> fragments =
        halves ? kHalves : std::vector<std::vector<size_t>>{kAll};
    double added = 0, comm = 0;
    for (const std::vector<size_t>& f : fragments) {
      added += std::max(0.0, syncSeconds(o.cluster, f) - tau * kLocal) + outerSeconds(f);
      comm += syncSeconds(o.cluster, f);
    }
    const SimResult r = simulate(o);
    EXPECT_NEAR(r.stepSeconds, kLocal + added / period, 1e-12) << sync;
    EXPECT_NEAR(r.commSeconds, comm / period, 1e-12) << sync;
  }
}

// The int8 ring's buffer: every tensor from a chunk boundary, the whole a multiple of P chunks.
TEST(OuterRounds, Int8SendsAQuarterOfTheBytes) {
  const SimOptions o = options("diloco:4,quantize=int8");
  const double p = o.cluster.workers;
  size_t elements = 0;
  for (size_t e : kElements) elements += (e + 1023) / 1024 * 1024;
  elements = (elements + 4 * 1024 - 1) / (4 * 1024) * (4 * 1024);
  const double bytes = 2 * (p - 1) / p * static_cast<double>(int8WireBytes(elements));
  const SimResult r = simulate(o);
  EXPECT_NEAR(r.bytesSentPerStep, bytes / 4, 1e-6);
  EXPECT_LT(r.bytesSentPerStep, simulate(options("diloco:4")).bytesSentPerStep / 3.9);
  EXPECT_LT(r.stepSeconds, simulate(options("diloco:4")).stepSeconds);
}

// One all-reduce per sync, not one per tensor: on a 50 ms link a ring pays 2 (P - 1) latencies
// once.
TEST(OuterRounds, ASyncPaysItsLatencyOnce) {
  SimOptions o = options("localsgd:4");
  o.cluster.latency = 0.05;
  const double ring = 2 * 3 * 0.05 + 2.0 * 3 / 4 * packed(kAll) * 4.0 / (1e9 / 8);
  EXPECT_NEAR(simulate(o).stepSeconds, kLocal + ring / 4, 1e-9);
}

TEST(OuterRounds, CompressedPseudoGradientsTravelAsTheirEncoding) {
  SimOptions o = options("diloco:4");
  o.compression.spec = "topk:0.01";
  EXPECT_LT(simulate(o).bytesSentPerStep, simulate(options("diloco:4")).bytesSentPerStep / 10);
}

// group=host: a local step is the host's own ssgd step; the outer sync spans every device.
TEST(OuterRounds, AHostIsOneWorkerTrainingDataParallelInside) {
  SimOptions o = options("diloco:4,group=host", 8);
  o.cluster.gpusPerHost = 4;
  SimOptions host = options("ssgd", 4);
  host.cluster.gpusPerHost = 4;
  const SimResult inside = simulate(host);
  const SimResult r = simulate(o);
  EXPECT_GT(inside.stepSeconds, kLocal);
  EXPECT_NEAR(r.stepSeconds, inside.stepSeconds + (syncSeconds(o.cluster, kAll) + kUpdate) / 4,
              1e-12);
  EXPECT_NEAR(r.bytesSentPerStep, inside.bytesSentPerStep + syncBytes(o.cluster, kAll) / 4, 1e-6);
  // group=rank on the same cluster: every device is a worker, with no step inside the host.
  o.sync = "diloco:4";
  EXPECT_NEAR(simulate(o).stepSeconds, kLocal + (syncSeconds(o.cluster, kAll) + kUpdate) / 4,
              1e-12);
}

TEST(OuterRounds, RefusesWhatTrainRefuses) {
  EXPECT_THROW(simulate(options("diloco:8,fragments=8")), ConfigError);  // 4 tensors
  SimOptions o = options("diloco:4");
  o.strategy.servers = 1;
  EXPECT_THROW(simulate(o), ConfigError);
  o = options("diloco:4,quantize=int8");
  o.compression.spec = "topk:0.01";
  EXPECT_THROW(simulate(o), ConfigError);
  o = options("localsgd:4");
  o.steps = 2;
  EXPECT_THROW(simulate(o), ConfigError);
}

}  // namespace
}  // namespace gradsync::sim
