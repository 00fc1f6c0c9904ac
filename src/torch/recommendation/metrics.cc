// The --metrics file of a recommendation run (docs/metrics.md, "Recommendation runs").
// Torch-free.
#include <cstdio>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "gradsync/error.h"
#include "torch/loop/metrics.h"
#include "torch/recommendation/recommendation.h"

namespace gradsync {
namespace {

nlohmann::json recoveryJson(const RecommendationOptions& options, const RecommendationResult& r) {
  const RecoveryLedger& l = r.ledger;
  const CprPlan& p = r.plan;
  return {{"mode", options.recovery},
          {"clock", r.simulatedClock ? "simulated" : "real"},
          {"plan",
           {{"interval_steps", p.interval},
            {"partial_saves_per_full", p.partialPerFull},
            {"save_fraction", p.saveFraction},
            {"expected_overhead", p.expectedOverhead},
            {"expected_pls", p.expectedPls},
            {"full_recovery_overhead", p.fullOverhead},
            {"partial_recovery_overhead", p.partialOverhead},
            {"reason", p.reason}}},
          {"failures", l.failures},
          {"recoveries", l.recoveries},
          {"lost_samples", l.lostSamples},
          {"lost_accesses", l.lostAccesses},
          {"total_accesses", l.totalAccesses},
          {"pls", l.pls()},
          {"overhead_fraction", l.overheadFraction()},
          {"training_s", l.trainingTime},
          {"save_s", l.saveTime},
          {"load_s", l.loadTime},
          {"restart_s", l.restartTime},
          {"redone_s", l.redoneTime},
          {"total_s", l.totalTime()},
          {"redone_steps", l.redoneSteps},
          {"full_saves", l.fullSaves},
          {"partial_saves", l.partialSaves},
          {"saved_rows", l.savedRows}};
}

}  // namespace

void writeRecommendationMetrics(const std::string& path, const RecommendationOptions& options,
                                int workers, const RecommendationResult& result) {
  const TrainOptions& t = options.train;
  nlohmann::json config = {{"model", "dlrm"},
                           {"dataset", t.dataset},
                           {"workers", workers},
                           {"servers", t.strategy.servers},
                           {"batch_size", t.batchSize},
                           {"global_batch", t.batchSize * static_cast<size_t>(workers)},
                           {"steps", t.steps},
                           {"epochs", t.epochs},
                           {"lr", t.lr},
                           {"momentum", t.momentum},
                           {"seed", t.seed},
                           {"schedule", t.schedule},
                           {"tables", options.tables},
                           {"embedding_rows", options.embeddingRows},
                           {"embedding_dim", options.embeddingDim},
                           {"bottom_mlp", options.bottomMlp},
                           {"top_mlp", options.topMlp},
                           {"embedding_optimizer", options.embeddingOptimizer},
                           {"embedding_lr", options.embeddingLr},
                           {"zipf", options.zipf},
                           {"recovery", options.recovery},
                           {"cpr", options.cpr},
                           {"inject_failures", options.injectFailures},
                           {"sim_clock", options.simClock},
                           {"checkpoint_every", t.checkpointEvery}};
  nlohmann::json evaluations = nlohmann::json::array();
  for (const auto& e : result.evaluations) {
    evaluations.push_back({{"step", e.step}, {"auc", e.auc}, {"log_loss", e.logLoss}});
  }
  nlohmann::json doc = {{"config", config},
                        {"evaluations", evaluations},
                        {"summary",
                         {{"steps", result.steps},
                          {"seconds", result.seconds},
                          {"samples_per_s", result.samplesPerSecond},
                          {"test_auc", result.testAuc},
                          {"test_log_loss", result.testLogLoss},
                          {"stopped", result.stopped}}},
                        {"per_step",
                         {{"push_bytes", result.pushBytesPerStep},
                          {"pull_request_bytes", result.pullRequestBytesPerStep},
                          {"touched_row_bytes", result.touchedRowBytesPerStep},
                          {"ring_bytes", result.ringBytesPerStep}}},
                        {"recovery", recoveryJson(options, result)}};
  writeMetricsFile(path, doc.dump(2) + "\n");
}

}  // namespace gradsync
