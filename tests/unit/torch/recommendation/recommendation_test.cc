// The recommendation trainer (`train --model dlrm`): DLRM's shapes and lookups, Adagrad against
// torch's, the servers' sparse path against the dense-gradient path, full recovery repeating a
// run bitwise, partial recovery and CPR-MFU/SSU charged exactly to the simulated clock, and the
// planner's interval in a run. Workers and servers are threads (trainRecommendationThreads).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <random>

#include <fmt/format.h>

#include "ckpt/cpr_planner.h"
#include "data/criteo_tsv.h"
#include "torch/recommendation/dlrm.h"
#include "torch/recommendation/recommendation.h"
#include "train_on_threads.h"

namespace gradsync {
namespace {

RecommendationOptions smallRun(int servers, int64_t steps) {
  RecommendationOptions o;
  o.train.model = "dlrm";
  o.train.dataset = "synthetic";
  o.train.steps = steps;
  o.train.batchSize = 32;
  o.train.lr = 0.1;
  o.train.momentum = 0;
  o.train.seed = 3;
  o.train.quiet = true;
  o.train.evalSamples = 2048;
  o.train.strategy.servers = servers;
  o.tables = 8;
  o.embeddingRows = 300;
  o.embeddingDim = 8;
  o.bottomMlp = {16, 8};
  o.topMlp = {16};
  o.embeddingLr = 0.05;
  o.trainSamples = 1 << 16;
  o.testSamples = 4096;
  return o;
}

TEST(Dlrm, InteractionWidthAndLookups) {
  DlrmConfig config;
  config.embedding = {.tableRows = criteoTableRows(50), .dim = 16, .shards = 1, .seed = 1};
  EXPECT_EQ(dlrmInteractionWidth(config), 16 + 27 * 26 / 2);  // 367
  config.localTables = true;
  DlrmModel local(config, 5);
  const int64_t batch = 5;
  torch::Tensor dense = torch::rand({batch, 13});
  std::vector<torch::Tensor> positions, pulled, pulledPositions;
  for (int t = 0; t < 26; ++t) {
    torch::Tensor ids =
        torch::randint(static_cast<int64_t>(config.embedding.tableRows[t]), {batch}, torch::kLong);
    positions.push_back(ids);
    // As a server would send them: the distinct rows, and each sample's index among them.
    auto [unique, inverse] = torch::_unique(ids, /*sorted=*/false, /*return_inverse=*/true);
    pulled.push_back(local.tables()[t].index_select(0, unique).detach());
    pulledPositions.push_back(inverse);
  }
  torch::NoGradGuard noGrad;
  torch::Tensor a = local.forward(dense, local.tables(), positions);
  EXPECT_EQ(a.sizes(), torch::IntArrayRef({batch}));
  config.localTables = false;
  DlrmModel remote(config, 5);  // the same seed: the same MLPs
  EXPECT_TRUE(torch::equal(a, remote.forward(dense, pulled, pulledPositions)));
  config.bottom = {64, 8};
  EXPECT_THROW(dlrmInteractionWidth(config), ConfigError);  // 8 != the embedding dim 16
}

TEST(Dlrm, AdagradRuleMatchesTorch) {
  torch::manual_seed(1);
  torch::Tensor p = torch::randn({257});
  torch::Tensor mine = p.clone();
  std::vector<float> sum(257, 0.0f);
  torch::optim::Adagrad adagrad({p}, torch::optim::AdagradOptions(0.05).eps(1e-10));
  for (int step = 0; step < 6; ++step) {
    torch::Tensor g = torch::randn({257});
    p.mutable_grad() = g.clone();
    adagrad.step();
    applyUpdate(UpdateRule::adagrad(0.05), {mine.data_ptr<float>(), 257},
                {g.data_ptr<float>(), 257}, {sum, {}}, static_cast<uint64_t>(step + 1));
  }
  EXPECT_LE((p - mine).abs().max().item<float>(), 1e-6f);
}

// The servers' sparse rows (pulled, pushed, Adagrad on the server) train what replicated tables
// with dense gradients averaged over the ring train (Adagrad in torch): up to float rounding.
TEST(Recommendation, ServersMatchTheDenseGradientPath) {
  const auto sparse = trainRecommendationThreads(2, smallRun(2, 15));
  const auto dense = trainRecommendationThreads(2, smallRun(0, 15));
  ASSERT_EQ(sparse[0].parameters.size(), dense[0].parameters.size());
  float worst = 0;
  for (size_t i = 0; i < dense[0].parameters.size(); ++i) {
    worst = std::max(worst, std::abs(sparse[0].parameters[i] - dense[0].parameters[i]));
  }
  EXPECT_LE(worst, 2e-5f);
  EXPECT_NEAR(sparse[0].testAuc, dense[0].testAuc, 1e-4);
  // Sparse pushes carry each distinct row once: 76 bytes for a row of 8 floats (key, count,
  // gradient), within twice the rows' size.
  EXPECT_GT(sparse[0].pushBytesPerStep, 0);
  EXPECT_LE(sparse[0].pushBytesPerStep, 2 * sparse[0].touchedRowBytesPerStep);
}

// A seed whose trace fails `count` times before step `before`, so the test does not depend on
// luck (the trace is a pure function of the seed).
FailureSpec failuresBefore(double mtbf, int shards, int count, double before) {
  for (uint64_t seed = 0;; ++seed) {
    FailureSpec spec{.mtbf = mtbf, .seed = seed, .maxFailures = count};
    auto trace = failureTrace(spec, shards, before);
    if (static_cast<int>(trace.size()) == count && trace.front().time > 3) return spec;
  }
}

std::string specText(const FailureSpec& spec) {
  return fmt::format("mtbf={},seed={},max={}", spec.mtbf, spec.seed, spec.maxFailures);
}

TEST(Recommendation, FullRecoveryRepeatsTheRunBitwise) {
  RecommendationOptions o = smallRun(2, 30);
  o.train.checkpointEvery = 5;
  o.train.checkpointDir = testing::scratchPath("recommendation", "full-clean");
  const auto reference = trainRecommendationThreads(2, o);
  o.train.checkpointDir = testing::scratchPath("recommendation", "full-failing");
  o.injectFailures = specText(failuresBefore(12, 2, 2, 26));
  const auto recovered = trainRecommendationThreads(2, o);
  EXPECT_EQ(recovered[0].ledger.failures, 2);
  EXPECT_GT(recovered[0].ledger.redoneSteps, 0u);
  for (int w = 0; w < 2; ++w) {
    EXPECT_EQ(recovered[w].parameters, reference[w].parameters) << w;
    EXPECT_EQ(recovered[w].testLogits, reference[w].testLogits) << w;
  }
  EXPECT_EQ(recovered[0].testAuc, reference[0].testAuc);
}

// The Criteo TSV reader feeds the trainer: a synthetic log written out as Criteo TSV trains
// exactly as the synthetic log itself.
TEST(Recommendation, CriteoTsvTrainsAsTheLogItWasWrittenFrom) {
  RecommendationOptions o = smallRun(2, 20);
  o.tables = kCriteoTables;
  o.trainSamples = 4096;
  o.testSamples = 2048;
  const std::string dir = testing::scratchPath("recommendation", "criteo");
  std::filesystem::create_directories(dir);
  writeCriteoTsv(dir + "/train.txt", *openClickLog(o, false), 0, o.trainSamples);
  writeCriteoTsv(dir + "/test.txt", *openClickLog(o, true), 0, o.testSamples);
  const auto synthetic = trainRecommendationThreads(2, o);
  o.train.dataset = "criteo";
  o.train.dataDir = dir;
  const auto criteo = trainRecommendationThreads(2, o);
  EXPECT_EQ(criteo[0].parameters, synthetic[0].parameters);
  EXPECT_EQ(criteo[0].testAuc, synthetic[0].testAuc);
}

// --resume restarts every worker and server from the newest complete checkpoint, and the run
// ends as the uninterrupted one, bitwise.
TEST(Recommendation, ResumeContinuesBitwise) {
  RecommendationOptions o = smallRun(2, 30);
  o.train.checkpointEvery = 10;
  o.train.checkpointDir = testing::scratchPath("recommendation", "straight");
  const auto straight = trainRecommendationThreads(2, o);
  o.train.checkpointDir = testing::scratchPath("recommendation", "resumed");
  o.train.steps = 20;
  trainRecommendationThreads(2, o);
  o.train.steps = 30;
  o.train.resume = true;
  const auto resumed = trainRecommendationThreads(2, o);
  EXPECT_EQ(resumed[0].parameters, straight[0].parameters);
  EXPECT_EQ(resumed[1].testLogits, straight[1].testLogits);
}

// Partial recovery on the simulated clock: every step, save, load and restart costs exactly its
// set amount, no step is redone, and the lost updates are counted.
TEST(Recommendation, PartialRecoveryChargesTheSimulatedClock) {
  RecommendationOptions o = smallRun(2, 40);
  o.train.checkpointEvery = 4;
  o.train.checkpointDir = testing::scratchPath("recommendation", "partial");
  o.recovery = "partial";
  o.simClock = "step=60s,save=300s,load=300s,restart=120s";
  FailureSpec failures = failuresBefore(900, 2, 3, 40 * 60 - 300);
  failures.duration = true;
  o.injectFailures = fmt::format("mtbf={}s,seed={},max=3", failures.mtbf, failures.seed);
  const RecommendationResult r = trainRecommendationThreads(2, o)[0];
  const RecoveryLedger& l = r.ledger;
  EXPECT_EQ(l.failures, 3);
  EXPECT_DOUBLE_EQ(l.trainingTime, 40 * 60.0);
  EXPECT_EQ(l.redoneTime, 0.0);
  // Servers failing together are replaced in parallel: one restart and one shard's load each.
  EXPECT_GE(l.recoveries, 1);
  EXPECT_DOUBLE_EQ(l.restartTime, l.recoveries * 120.0);
  EXPECT_DOUBLE_EQ(l.loadTime, l.recoveries * 150.0);  // one of two shards
  // Step 0, every 4th step and the last: 11 full saves of every row; a replacement's first
  // round may repeat a save it missed, so count what the servers reported.
  EXPECT_GE(l.fullSaves, 11);
  const double rows = static_cast<double>(embeddingSpecOf(o).totalRows());
  EXPECT_NEAR(l.saveTime, 300.0 * static_cast<double>(l.savedRows) / rows, 1e-6);
  EXPECT_GE(l.saveTime, 300.0 * 11);
  uint64_t lost = 0;
  for (uint64_t s : l.lostSamples) lost += s;
  EXPECT_GT(lost, 0u);
  EXPECT_GT(l.pls(), 0.0);
  EXPECT_LT(l.pls(), 0.5);
  EXPECT_NEAR(l.overheadFraction(), (l.saveTime + l.loadTime + l.restartTime) / l.totalTime(),
              1e-12);
}

TEST(Recommendation, MfuAndSsuSavePartialRows) {
  for (const char* mode : {"cpr-mfu", "cpr-ssu"}) {
    RecommendationOptions o = smallRun(2, 24);
    o.train.checkpointEvery = 2;
    o.train.checkpointDir = testing::scratchPath("recommendation", mode);
    o.recovery = mode;
    o.cpr = "mfu=0.25,ssu=0.05,k=4";
    const RecommendationResult r = trainRecommendationThreads(2, o)[0];
    // Save points at 2, 4, ..., 22: every 4th (8, 16) full, the others partial; plus step 0 and
    // the last step (24), full.
    EXPECT_EQ(r.ledger.fullSaves, 4) << mode;
    EXPECT_EQ(r.ledger.partialSaves, 9) << mode;
    const uint64_t rows = embeddingSpecOf(o).totalRows();  // every row of every table
    EXPECT_GT(r.ledger.savedRows, 4 * rows) << mode;
    EXPECT_LE(r.ledger.savedRows, 4 * rows + 9 * (rows / 4 + 2)) << mode;  // at most r per shard
  }
}

TEST(Recommendation, PlansTheIntervalOnTheSimulatedClock) {
  RecommendationOptions o = smallRun(2, 12);
  o.train.checkpointDir = testing::scratchPath("recommendation", "plan");
  o.recovery = "partial";
  o.cpr = "pls=0.001";
  o.simClock = "step=60s,save=300s,load=300s,restart=120s";
  o.injectFailures = "mtbf=24h,seed=1,max=0";
  const RecommendationResult r = trainRecommendationThreads(2, o)[0];
  // 2 shards · 86400 s · 2 · 0.001 = 345.6 s = 5.76 steps of 60 s: a save every 6 steps.
  EXPECT_DOUBLE_EQ(r.plan.interval, 6.0);
  const CprPlan expected =
      planRecovery(RecoveryMode::kPartial,
                   {.mtbf = 86400, .saveFull = 300, .loadFull = 300, .restart = 120, .shards = 2},
                   {.plsTarget = 0.001});
  EXPECT_NEAR(r.plan.expectedOverhead, expected.expectedOverhead, 1e-6);
  EXPECT_EQ(r.ledger.fullSaves, 3);  // steps 0, 6 and 12
}

}  // namespace
}  // namespace gradsync
