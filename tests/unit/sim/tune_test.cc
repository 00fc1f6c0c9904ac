// gradsync tune's search (sim/tune.h) against the simulator's own predictions times the
// convergence table's factors, recomputed here; and the table's own rules.
#include "sim/tune.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <optional>

#include "gradsync/error.h"

namespace gradsync::sim {
namespace {

LayerProfile layer(std::string name, int64_t elements, double forward, double backward) {
  return {name, {tensorShape(name + ".weight", {elements})}, forward, backward};
}

SimOptions base() {
  SimOptions o;
  o.profile.name = "tune-test";
  o.profile.device = "test";
  o.profile.batchSize = 32;
  o.profile.layers = {layer("conv1", 200000, 2e-3, 4e-3), layer("conv2", 800000, 3e-3, 6e-3),
                      layer("fc", 2000000, 1e-3, 2e-3)};
  o.cluster.workers = 4;
  o.cluster.bandwidth = 1e9 / 8;  // 1 Gbit/s: communication-bound, so compression matters
  return o;
}

TuneGrid smallGrid() {
  return {
      {"fifo", "wfbp", "fusion:4", "p3:slice=160000,window=2"},
      {"none", "fp16", "mstopk:0.01", "topk:0.01", "powersgd:4", "onebit,bucket=512", "topk:0.001"},
      {{"ssgd"}, {"sharded"}, {"ssgd", true, 0}, {"localsgd:4"}}};
}

const ConvergenceCost& row(const std::string& method) {
  for (const ConvergenceCost& r : convergenceCosts()) {
    if (r.method == method) return r;
  }
  throw std::runtime_error("no row " + method);
}

// The factor a candidate should get, from the table's rows directly.
double expectedFactor(const TuneCandidate& c) {
  if (c.sync.sync == "ssgd" && !c.sync.throughServers()) return row(c.compress).factor;
  EXPECT_EQ(c.compress, "none") << "a compressor off ring ssgd has no measured factor";
  return row(c.sync.throughServers() ? "sync:ssgd/ps" : "sync:" + c.sync.sync).factor;
}

TEST(Tune, RankingIsTheSimulatorsStepTimesTheMeasuredFactors) {
  const TuneResult result = tune(base(), smallGrid());
  ASSERT_GE(result.ranked.size(), 10u);
  std::vector<std::pair<double, std::string>> expected;
  for (const TuneCandidate& c : result.ranked) {
    SimOptions o = base();
    o.schedule = ScheduleSpec::parse(c.schedule);
    o.compression.spec = c.compress;
    o.sync = c.sync.sync;
    o.strategy.ps = c.sync.ps;
    const double step = simulate(o).stepSeconds;
    EXPECT_DOUBLE_EQ(c.stepSeconds, step) << c.schedule << " " << c.compress;
    expected.emplace_back(step * expectedFactor(c),
                          c.schedule + " " + c.compress + " " + c.sync.label());
  }
  std::vector<std::pair<double, std::string>> sorted = expected;
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_DOUBLE_EQ(expected[i].first, sorted[i].first)
        << "rank " << i << ": " << expected[i].second;
  // Compression pays at 1 Gbit/s even after its cost, so the ranking is not dense-first.
  EXPECT_NE(result.ranked.front().compress, "none");
  EXPECT_EQ(result.ranked[result.topPick].cost.status, Convergence::kMeasured);
}

// Compute-bound (1 Tbit/s): every candidate is within a hair of the others, at the stated rate
// and at half of it, and the pick is dense, whose factor is exact, not a compressor a rounding
// error ranks first.
TEST(Tune, ATieIsRecommendedWithoutCompression) {
  SimOptions o = base();
  o.cluster.bandwidth = 1e12 / 8;
  const TuneResult result = tune(o, smallGrid());
  const TuneCandidate& pick = result.ranked.at(result.topPick);
  EXPECT_EQ(pick.compress, "none");
  EXPECT_LE(pick.timeToAccuracy(), result.ranked.front().timeToAccuracy() * 1.01);
  // At 1 Gbit/s compression wins by far more than the tie: the pick is compressed.
  const TuneResult slow = tune(base(), smallGrid());
  EXPECT_NE(slow.ranked.at(slow.topPick).compress, "none");
}

// Where dense only just hides its communication, it ties with the compressors at the stated
// rate but not with the links at half speed: the pick is then the candidate with the most slack,
// the one predicted fastest on the slower links (not dense).
TEST(Tune, ATieGoesToTheCandidateThatLosesLeastOnSlowerLinks) {
  bool found = false;
  for (double gbit = 1; gbit <= 64 && !found; gbit *= 1.25) {
    SimOptions o = base();
    o.cluster.bandwidth = gbit * 1e9 / 8;
    const TuneResult r = tune(o, smallGrid());
    const double best = r.ranked.front().timeToAccuracy();
    const auto slow = [&](const TuneCandidate& c) {
      SimOptions s = o;
      s.cluster.bandwidth /= 2;
      s.cluster.localBandwidth /= 2;
      s.schedule = ScheduleSpec::parse(c.schedule);
      s.compression.spec = c.compress;
      s.sync = c.sync.sync;
      s.strategy.ps = c.sync.ps;
      return simulate(s).stepSeconds * c.cost.factor;
    };
    std::optional<double> denseSlow, fastestSlow;
    for (const TuneCandidate& c : r.ranked) {
      if (c.timeToAccuracy() > best * 1.01) break;
      if (c.cost.status != Convergence::kMeasured) continue;
      const double t = slow(c);
      fastestSlow = std::min(fastestSlow.value_or(t), t);
      if (c.compress == "none" && !denseSlow) denseSlow = t;
    }
    if (!denseSlow || *denseSlow <= *fastestSlow * 1.01) continue;  // dense not tied, or robust
    found = true;
    const TuneCandidate& pick = r.ranked.at(r.topPick);
    EXPECT_NE(pick.compress, "none") << gbit << " Gbit/s";
    EXPECT_LE(pick.timeToAccuracy(), best * 1.01) << gbit << " Gbit/s";
    EXPECT_LE(slow(pick), *fastestSlow * 1.01) << gbit << " Gbit/s";
  }
  EXPECT_TRUE(found) << "no rate where dense ties only at the stated rate: the test shows nothing";
}

// Without a stated latency tune hedges: every measured candidate is simulated again at the
// other latencies, its worst ratio to each latency's best is recomputed here, and the pick
// minimises it (within the tie). Somewhere between 1 and 64 Gbit/s the plain ranking's pick
// holds only at the stated latency (its worst ratio beyond the tie); the hedged pick is then
// another.
TEST(Tune, WithoutAStatedLatencyThePickHasTheSmallestWorstRatio) {
  const std::vector<double> others = {5e-6, 100e-6};
  TuneGrid grid = smallGrid();
  grid.schedules.insert(grid.schedules.end(), {"fusion:64", "p3:slice=40000,window=1"});
  const auto key = [](const TuneCandidate& c) {
    return c.schedule + " " + c.compress + " " + c.sync.label();
  };
  bool differs = false;
  for (double gbit = 1; gbit <= 64; gbit *= 1.25) {
    SimOptions o = base();
    o.cluster.bandwidth = gbit * 1e9 / 8;
    o.cluster.latency = 25e-6;
    o.cluster.localLatency = 5e-6;
    const TuneResult r = tune(o, grid, others);
    std::map<std::string, double> worst;  // recomputed
    for (double latency : {25e-6, 5e-6, 100e-6}) {
      std::map<std::string, double> times;
      double best = 0;
      for (const TuneCandidate& c : r.ranked) {
        if (c.cost.status != Convergence::kMeasured) continue;
        SimOptions s = o;
        s.cluster.latency = latency;
        s.cluster.localLatency = 5e-6 * latency / 25e-6;
        s.schedule = ScheduleSpec::parse(c.schedule);
        s.compression.spec = c.compress;
        s.sync = c.sync.sync;
        s.strategy.ps = c.sync.ps;
        times[key(c)] = simulate(s).stepSeconds * c.cost.factor;
        best = best == 0 ? times[key(c)] : std::min(best, times[key(c)]);
      }
      for (const auto& [k, t] : times) worst[k] = std::max(worst[k], t / best);
    }
    double lowest = 1e30;
    for (const TuneCandidate& c : r.ranked) {
      if (c.cost.status != Convergence::kMeasured) {
        EXPECT_EQ(c.worstRatio, 0) << key(c);
        continue;
      }
      EXPECT_NEAR(c.worstRatio, worst.at(key(c)), 1e-9) << key(c) << " at " << gbit;
      EXPECT_GE(c.worstRatio, 1.0) << key(c);
      lowest = std::min(lowest, c.worstRatio);
    }
    const TuneCandidate& pick = r.ranked.at(r.topPick);
    EXPECT_LE(pick.worstRatio, lowest * 1.01) << gbit << " Gbit/s";
    const TuneResult plain = tune(o, grid);  // the latency stated: no hedging
    for (const TuneCandidate& c : plain.ranked) EXPECT_EQ(c.worstRatio, 0);
    const std::string plainPick = key(plain.ranked.at(plain.topPick));
    if (worst.at(plainPick) <= lowest * 1.01) continue;  // the plain pick holds as well
    differs = true;
    EXPECT_NE(key(pick), plainPick) << gbit << " Gbit/s";
  }
  EXPECT_TRUE(differs) << "the plain pick always held at every latency: the test shows nothing";
}

TEST(Tune, ImpossibleCombinationsAreRejectedNeverRanked) {
  const TuneResult result = tune(base(), smallGrid());
  ASSERT_FALSE(result.rejected.empty());  // e.g. sharded with p3, which train refuses
  bool shardedP3 = false;
  for (const TuneRejection& r : result.rejected) {
    shardedP3 |= r.sync.sync == "sharded" && r.schedule.starts_with("p3");
    SimOptions o = base();
    o.schedule = ScheduleSpec::parse(r.schedule);
    o.compression.spec = r.compress;
    o.sync = r.sync.sync;
    o.strategy.ps = r.sync.ps;
    EXPECT_THROW(simulate(o), ConfigError) << r.schedule << " " << r.compress;
    for (const TuneCandidate& c : result.ranked) {
      EXPECT_FALSE(c.schedule == r.schedule && c.compress == r.compress &&
                   c.sync.label() == r.sync.label());
    }
  }
  EXPECT_TRUE(shardedP3);
}

TEST(Tune, MethodsThatDoNotReachDenseOrAreUnmeasuredAreExcludedWithTheReason) {
  const TuneResult result = tune(base(), smallGrid());
  std::map<std::string, std::string> reasons;
  for (const TuneExclusion& e : result.excluded)
    reasons[e.compress + " " + e.sync.label()] = e.cost.reason;
  EXPECT_NE(reasons["onebit,bucket=512 ssgd"].find("does not reach"), std::string::npos);
  EXPECT_NE(reasons["topk:0.001 ssgd"].find("no convergence measurement"), std::string::npos);
  EXPECT_NE(reasons["none localsgd:4"].find("no steps-to-accuracy"), std::string::npos);
  EXPECT_NE(reasons["mstopk:0.01 sharded"].find("ring ssgd only"), std::string::npos);
  for (const TuneCandidate& c : result.ranked) {
    EXPECT_NE(c.compress, "onebit,bucket=512");
    EXPECT_NE(c.compress, "topk:0.001");
    EXPECT_NE(c.sync.sync, "localsgd:4");
  }
}

TEST(ConvergenceCosts, EveryRowHasProvenanceAndAFactorOnlyWhereMeasured) {
  for (const ConvergenceCost& r : convergenceCosts()) {
    EXPECT_FALSE(r.source.empty()) << r.method;
    EXPECT_FALSE(r.derivation.empty()) << r.method;
    const bool hasFactor = r.status == Convergence::kMeasured || r.status == Convergence::kAtLeast;
    if (hasFactor) {
      EXPECT_GE(r.factor, 1.0) << r.method;
    } else {
      EXPECT_EQ(r.factor, 0.0) << r.method;
    }
  }
  EXPECT_NEAR(row("mstopk:0.01").factor, 170.0 / 110, 1e-12);
  EXPECT_EQ(row("terngrad").factor, 1.0);  // 90 steps against 110: clamped
  EXPECT_EQ(row("randomk:0.1").status, Convergence::kDoesNotReach);
}

TEST(Tune, TrainFlagsSpellTheCandidate) {
  TuneCandidate c{"p3:slice=160000,window=2", "mstopk:0.01", {"ssgd", false, 2}, 0, {}};
  EXPECT_EQ(trainFlags(c, 4),
            "--workers 4 --schedule p3:slice=160000,window=2 --compress mstopk:0.01 --sync ssgd "
            "--servers 2");
  c.sync = {"ssgd", true, 0};
  EXPECT_NE(trainFlags(c, 4).find(" --ps"), std::string::npos);
}

TEST(Tune, NoValidCandidateIsAConfigError) {
  EXPECT_THROW(tune(base(), {{"wfbp"}, {"onebit"}, {{"ssgd"}}}), ConfigError);
}

// The DiLoCo rows were measured on the language model; the compressors' on the cnn: each applies
// to its own workload only, dense and its same-update strategies to both.
TEST(ConvergenceCosts, RowsApplyToTheWorkloadTheyWereMeasuredOn) {
  EXPECT_EQ(workloadOf("gpt:layers=2,width=128,heads=4,context=64"), Workload::kLanguage);
  EXPECT_EQ(workloadOf("llama-10.2b"), Workload::kLanguage);
  EXPECT_EQ(workloadOf("resnet50"), Workload::kVision);
  const CandidateCost diloco = convergenceCostOf("none", "diloco:50", false, Workload::kLanguage);
  EXPECT_EQ(diloco.status, Convergence::kMeasured);
  EXPECT_NEAR(diloco.factor, 1191.0 / 480, 1e-12);
  const CandidateCost onCnn = convergenceCostOf("none", "diloco:50", false, Workload::kVision);
  EXPECT_EQ(onCnn.status, Convergence::kNotMeasured);
  EXPECT_NE(onCnn.reason.find("language-model"), std::string::npos) << onCnn.reason;
  const CandidateCost mstopk = convergenceCostOf("mstopk:0.01", "ssgd", false, Workload::kLanguage);
  EXPECT_EQ(mstopk.status, Convergence::kNotMeasured);
  EXPECT_NE(mstopk.reason.find("vision"), std::string::npos) << mstopk.reason;
  // topk:0.01 was measured on both, with different factors.
  EXPECT_NEAR(convergenceCostOf("topk:0.01", "ssgd", false, Workload::kLanguage).factor,
              886.0 / 480, 1e-12);
  EXPECT_EQ(convergenceCostOf("topk:0.01", "ssgd", false, Workload::kVision).status,
            Convergence::kAtLeast);
  for (Workload w : {Workload::kVision, Workload::kLanguage}) {
    EXPECT_EQ(convergenceCostOf("none", "ssgd", false, w).factor, 1.0);
    EXPECT_EQ(convergenceCostOf("none", "sharded", false, w).factor, 1.0);
  }
}

// On a language model's profile the DiLoCo family is ranked, each with one schedule (its syncs
// ignore --schedule), by its simulated step times its measured factor.
TEST(Tune, ALanguageModelRanksTheDilocoFamilyOnce) {
  SimOptions o = base();
  o.profile.name = "gpt:test";
  for (int i = 0; i < 3; ++i)  // fragments=5 needs five tensors
    o.profile.layers.push_back(layer(fmt::format("block{}", i), 100000, 1e-3, 2e-3));
  o.cluster.bandwidth = 10e6 / 8;
  const TuneResult result = tune(o, defaultTuneGrid(0));
  std::map<std::string, int> bySync;
  for (const TuneCandidate& c : result.ranked) {
    ++bySync[c.sync.label()];
    if (!c.sync.sync.starts_with("diloco")) continue;
    EXPECT_EQ(c.schedule, "wfbp");
    SimOptions one = o;
    one.sync = c.sync.sync;
    EXPECT_NEAR(c.timeToAccuracy(), simulate(one).stepSeconds * c.cost.factor, 1e-12);
  }
  EXPECT_EQ(bySync["diloco:50"], 1);
  EXPECT_EQ(bySync["diloco:50,fragments=5,delay=9"], 1);
  ASSERT_LT(result.topPick, result.ranked.size());
  EXPECT_TRUE(result.ranked[result.topPick].sync.sync.starts_with("diloco"))
      << "at 10 Mbit/s dense ssgd waits on every step";
}

}  // namespace
}  // namespace gradsync::sim
