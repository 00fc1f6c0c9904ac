// CPR's torch-free pieces: the planner against hand-computed intervals, the rows MFU and SSU
// choose against naive references, the failure trace, and per-shard checkpoint files.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "ckpt/cpr_failures.h"
#include "ckpt/cpr_planner.h"
#include "ckpt/cpr_rows.h"
#include "ckpt/shard_checkpoints.h"
#include "ckpt_test_util.h"
#include "gradsync/error.h"

namespace gradsync {
namespace {

using testing::ScratchDir;

// Production-like ratios in minutes: a day between failures, 5-minute saves and loads, 2 minutes
// to restart a server, 8 embedding servers.
CprCosts dayCosts() {
  return {.mtbf = 1440, .saveFull = 5, .loadFull = 5, .restart = 2, .shards = 8};
}

TEST(CprPlanner, IntervalsAndOverheadsByHand) {
  EXPECT_DOUBLE_EQ(youngInterval(5, 1440), 120.0);                              // sqrt(2·5·1440)
  EXPECT_NEAR(dalyInterval(5, 1440, 2), std::sqrt(2 * 5 * 1442.0) - 5, 1e-12);  // 115.0833
  EXPECT_NEAR(dalyInterval(5, 1440, 2), 115.08331, 1e-5);
  EXPECT_DOUBLE_EQ(dalyInterval(10, 4, 0), 4.0);  // saving costs more than 2 MTBF: T = MTBF
  const CprCosts costs = dayCosts();
  // 5/115.0833 + (115.0833/2 + 5 + 2)/1440 = 0.0434468 + 0.0448206
  EXPECT_NEAR(fullRecoveryOverhead(costs, 115.08331), 0.0882674, 1e-6);
  EXPECT_DOUBLE_EQ(plsLimitedInterval(costs, 0.05), 1152.0);  // 2·8·1440·0.05
  // 5/1152 + (5/8 + 2)/1440 = 0.00434028 + 0.00182292
  EXPECT_NEAR(partialRecoveryOverhead(costs, 1152, 5), 0.0061632, 1e-7);
  EXPECT_DOUBLE_EQ(expectedPls(costs, 1152), 0.05);
}

TEST(CprPlanner, PlansPerMode) {
  const CprCosts costs = dayCosts();
  CprKnobs knobs{.plsTarget = 0.05, .mfuFraction = 0.125, .partialPerFull = 8};
  CprPlan full = planRecovery(RecoveryMode::kFull, costs, knobs);
  EXPECT_NEAR(full.interval, 115.08331, 1e-5);
  EXPECT_EQ(full.partialPerFull, 1);
  EXPECT_NEAR(full.expectedOverhead, 0.0882674, 1e-6);
  CprPlan partial = planRecovery(RecoveryMode::kPartial, costs, knobs);
  EXPECT_DOUBLE_EQ(partial.interval, 1152.0);
  EXPECT_NEAR(partial.expectedOverhead, 0.0061632, 1e-7);
  EXPECT_DOUBLE_EQ(partial.expectedPls, 0.05);
  // MFU: k = 8 points cost 7·0.125 + 1 = 1.875 full saves: one point every 1152·1.875/8 = 270.
  for (RecoveryMode mode : {RecoveryMode::kCprMfu, RecoveryMode::kCprSsu}) {
    CprPlan cpr = planRecovery(mode, costs, knobs);
    EXPECT_DOUBLE_EQ(cpr.interval, 270.0);
    EXPECT_EQ(cpr.partialPerFull, 8);
    EXPECT_DOUBLE_EQ(cpr.saveFraction, 0.125);
    EXPECT_NEAR(cpr.expectedOverhead, partial.expectedOverhead, 1e-12);  // the same budget
    EXPECT_DOUBLE_EQ(cpr.expectedPls, 270.0 * 8 / (2 * 8 * 1440));       // uniform access: 0.09375
  }
  // The paper's ratio: partial recovery's overhead is a small fraction of full recovery's.
  EXPECT_LT(partial.expectedOverhead, full.expectedOverhead / 10);
}

TEST(CprPlanner, ChoosesFullWhenPartialCostsMore) {
  const CprCosts costs = dayCosts();
  EXPECT_EQ(chooseRecovery(costs, {.plsTarget = 0.05}).mode, RecoveryMode::kPartial);
  // A PLS target of 1e-4 allows saving only every 2.3 minutes: 5/2.304 > full recovery's 8.8%.
  CprPlan tight = chooseRecovery(costs, {.plsTarget = 1e-4});
  EXPECT_EQ(tight.mode, RecoveryMode::kFull);
  EXPECT_NE(tight.reason.find("partial recovery would cost"), std::string::npos);
}

TEST(CprPlanner, RefusesImpossibleInputs) {
  CprCosts costs = dayCosts();
  EXPECT_THROW(planRecovery(RecoveryMode::kFull, {.mtbf = 0, .saveFull = 1}, {}), ConfigError);
  EXPECT_THROW(planRecovery(RecoveryMode::kFull, costs, {.plsTarget = 1.5}), ConfigError);
  EXPECT_THROW(planRecovery(RecoveryMode::kCprMfu, costs, {.mfuFraction = 0}), ConfigError);
  EXPECT_THROW(planRecovery(RecoveryMode::kCprMfu, costs, {.partialPerFull = 0}), ConfigError);
  costs.shards = 0;
  EXPECT_THROW(planRecovery(RecoveryMode::kPartial, costs, {}), ConfigError);
  EXPECT_EQ(parseRecoveryMode("cpr-ssu"), RecoveryMode::kCprSsu);
  EXPECT_THROW(parseRecoveryMode("half"), ConfigError);
}

// The naive reference: sort every row by (pending desc, row asc), keep the budget, drop zeros.
std::vector<uint64_t> naiveMostUsed(const std::vector<uint32_t>& pending, double fraction) {
  std::vector<uint64_t> rows(pending.size());
  std::iota(rows.begin(), rows.end(), 0);
  std::stable_sort(rows.begin(), rows.end(),
                   [&](uint64_t a, uint64_t b) { return pending[a] > pending[b]; });
  rows.resize(static_cast<size_t>(std::ceil(fraction * static_cast<double>(pending.size()))));
  std::erase_if(rows, [&](uint64_t r) { return pending[r] == 0; });
  std::sort(rows.begin(), rows.end());
  return rows;
}

TEST(CprRows, MostUsedMatchesAFullSort) {
  std::mt19937 random(5);
  for (size_t size : {0, 1, 7, 100, 1000}) {
    for (double fraction : {0.01, 0.125, 0.5, 1.0}) {
      std::vector<uint32_t> pending(size);
      for (auto& p : pending) p = random() % 4 == 0 ? 0 : random() % 6;  // many ties and zeros
      EXPECT_EQ(mostUsedRows(pending, fraction), naiveMostUsed(pending, fraction))
          << size << " " << fraction;
    }
  }
  EXPECT_EQ(mostUsedRows(std::vector<uint32_t>{0, 9, 3, 9}, 0.5), (std::vector<uint64_t>{1, 3}));
}

TEST(CprRows, SubSampleFollowsItsRate) {
  RowSubSample all(1.0, 3);
  all.record(7, 1, 0);
  all.record(2, 5, 0);
  all.record(9, 0, 0);  // not accessed: never sampled
  EXPECT_EQ(all.take(), (std::vector<uint64_t>{2, 7}));
  EXPECT_EQ(all.size(), 0u);
  const double p = 0.05;
  RowSubSample sample(p, 11);
  for (uint32_t accesses : {1u, 4u, 20u}) {
    int hits = 0;
    constexpr int kRows = 20000;
    for (uint64_t row = 0; row < kRows; ++row) hits += sample.wouldSample(row, accesses, 3);
    const double expected = 1 - std::pow(1 - p, accesses);
    EXPECT_NEAR(hits / double(kRows), expected, 5 * std::sqrt(expected / kRows)) << accesses;
  }
  // The draw is a function of (seed, round, row): the same rows every time, others next round.
  RowSubSample again(p, 11);
  EXPECT_EQ(sample.wouldSample(123, 4, 3), again.wouldSample(123, 4, 3));
}

TEST(CprFailures, TraceIsReproducibleAndExponential) {
  const FailureSpec spec = parseFailureSpec("mtbf=50,seed=9");
  EXPECT_FALSE(spec.duration);
  auto trace = failureTrace(spec, 4, 1e6);
  EXPECT_EQ(trace.size(), failureTrace(spec, 4, 1e6).size());
  EXPECT_EQ(trace[10].time, failureTrace(spec, 4, 1e6)[10].time);
  // About 20000 events: the mean gap is the MTBF, and every shard fails about as often.
  EXPECT_NEAR(trace.back().time / static_cast<double>(trace.size()), 50.0, 1.5);
  std::vector<int> perShard(4, 0);
  for (const auto& e : trace) ++perShard[e.shard];
  for (int n : perShard) EXPECT_NEAR(n, trace.size() / 4.0, 5 * std::sqrt(trace.size() / 4.0));
  EXPECT_EQ(failureTrace({.mtbf = 50, .seed = 9, .maxFailures = 2}, 4, 1e6).size(), 2u);
  EXPECT_LE(failureTrace(spec, 4, 60).size(), 10u);
  ASSERT_TRUE(nthFailureOf(trace, trace[0].shard, 1));
  EXPECT_EQ(*nthFailureOf(trace, trace[0].shard, 1), trace[0].time);
  EXPECT_FALSE(nthFailureOf(trace, 0, 1'000'000));
  // Drawn lazily from the spec, the same events.
  for (int n : {1, 2, 7}) {
    EXPECT_EQ(nthFailureOf(spec, 4, 2, n), nthFailureOf(trace, 2, n)) << n;
  }
  EXPECT_FALSE(nthFailureOf({.mtbf = 50, .seed = 9, .maxFailures = 3}, 4, 2, 4));
}

TEST(CprFailures, SpecParsing) {
  FailureSpec hours = parseFailureSpec("mtbf=8h,seed=1,max=3");
  EXPECT_TRUE(hours.duration);
  EXPECT_DOUBLE_EQ(hours.mtbf, 8 * 3600.0);
  EXPECT_EQ(hours.maxFailures, 3);
  EXPECT_DOUBLE_EQ(parseFailureSpec("seed=4,mtbf=30min").mtbf, 1800.0);
  EXPECT_THROW(parseFailureSpec("seed=4"), ConfigError);
  EXPECT_THROW(parseFailureSpec("mtbf=0"), ConfigError);
  EXPECT_THROW(parseFailureSpec("mtbf=10,often=1"), ConfigError);
  EXPECT_THROW(parseFailureSpec("mtbf"), ConfigError);
}

TEST(CprFailures, Ledger) {
  RecoveryLedger ledger(2);
  ledger.trainingTime = 90;
  ledger.saveTime = 4;
  ledger.loadTime = 3;
  ledger.restartTime = 2;
  ledger.redoneTime = 1;
  EXPECT_DOUBLE_EQ(ledger.overheadFraction(), 0.1);
  ledger.totalAccesses = 1000;
  ledger.lostAccesses = {30, 20};
  EXPECT_DOUBLE_EQ(ledger.pls(), 0.05);
}

std::vector<Section> sectionsOf(const std::string& text) {
  return {{"rows", std::vector<uint8_t>(text.begin(), text.end())}};
}

std::string textOf(const LoadedCheckpoint& c) {
  const auto& d = c.sections.at(0).data;
  return {d.begin(), d.end()};
}

TEST(ShardCheckpoints, NewestFullAndLaterPartials) {
  ScratchDir dir;
  ShardCheckpoints shard(dir.path(), 1);
  shard.writeFull(10, sectionsOf("full10"));
  shard.writePartial(15, sectionsOf("part15"));
  shard.writePartial(20, sectionsOf("part20"));
  ShardRestore r = shard.loadNewest();
  EXPECT_EQ(r.full.step, 10);
  ASSERT_EQ(r.partials.size(), 2u);
  EXPECT_EQ(textOf(r.partials[1]), "part20");
  EXPECT_EQ(r.newestStep(), 20);
  shard.writeFull(30, sectionsOf("full30"));  // supersedes the partial saves
  shard.writePartial(35, sectionsOf("part35"));
  r = shard.loadNewest();
  EXPECT_EQ(textOf(r.full), "full30");
  ASSERT_EQ(r.partials.size(), 1u);
  EXPECT_EQ(r.partials[0].step, 35);
  EXPECT_TRUE(r.problems.empty());
  EXPECT_EQ(textOf(shard.loadFullAt(10)), "full10");
  ShardCheckpoints other(dir.path(), 0);
  EXPECT_THROW(other.loadNewest(), DataError);
}

TEST(ShardCheckpoints, CorruptFileIsNamedAndThePreviousOneUsed) {
  ScratchDir dir;
  ShardCheckpoints shard(dir.path(), 3);
  shard.writeFull(10, sectionsOf("full10"));
  shard.writeFull(20, sectionsOf("full20"));
  const std::string newest = shard.fullPath(20);
  std::vector<uint8_t> bytes = testing::readBytes(newest);
  bytes[bytes.size() / 2] ^= 0x40;
  testing::writeBytes(newest, bytes);
  ShardRestore r = shard.loadNewest();
  EXPECT_EQ(textOf(r.full), "full10");
  ASSERT_EQ(r.problems.size(), 1u);
  EXPECT_NE(r.problems[0].find("shard 3"), std::string::npos) << r.problems[0];
  EXPECT_NE(r.problems[0].find(newest), std::string::npos) << r.problems[0];
  try {
    shard.loadFullAt(20);
    FAIL();
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("shard 3"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find(newest), std::string::npos);
  }
}

TEST(ShardCheckpoints, NewestCompleteStepNeedsEveryShard) {
  ScratchDir dir;
  CheckpointDir dense(dir / "dense");
  for (int64_t step : {0, 10, 20}) dense.write(step, sectionsOf("d"));
  ShardCheckpoints(dir.path(), 0, 5).writeFull(10, sectionsOf("a"));
  ShardCheckpoints(dir.path(), 0, 5).writeFull(20, sectionsOf("a"));
  ShardCheckpoints(dir.path(), 1, 5).writeFull(0, sectionsOf("b"));
  ShardCheckpoints(dir.path(), 1, 5).writeFull(10, sectionsOf("b"));
  EXPECT_EQ(newestCompleteStep(dir.path(), 2, dense), 10);
  EXPECT_EQ(newestCompleteStep(dir.path(), 1, dense), 20);
  EXPECT_EQ(newestCompleteStep(dir.path(), 2, dense, 10), std::nullopt);
  EXPECT_EQ(newestCompleteStep(dir.path(), 3, dense), std::nullopt);
}

}  // namespace
}  // namespace gradsync
