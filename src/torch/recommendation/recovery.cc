// The recommendation trainer's checkpoints and recoveries (torch/recommendation/trainer.h):
// when to save, the plan, and what saves and failures cost on the run's clock.
#include <algorithm>
#include <chrono>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/elapsed.h"
#include "common/logging.h"
#include "common/stop_request.h"
#include "common/tags.h"
#include "gradsync/collectives.h"
#include "gradsync/error.h"
#include "torch/recommendation/checkpoint.h"
#include "torch/recommendation/trainer.h"

namespace gradsync {

int64_t RecommendationTrainer::recover(const std::vector<int>& failed, int64_t step) {
  RecoveryEvent event;
  int64_t next = step;
  if (isPartial(mode_)) {
    event = session_->resume(failed, static_cast<uint64_t>(step));
  } else {
    event = session_->rollBack(failed, static_cast<uint64_t>(step),
                               [this](int64_t c) { return loadDense(c); });
    next = event.restoredTo;
  }
  if (sim_.enabled) {
    // The failed servers are replaced in parallel: one restart, one shard's (or, for full
    // recovery, every shard's) load.
    const double load = event.full ? sim_.load : sim_.load / spec_.shards;
    ledger_.restartTime += sim_.restart;
    ledger_.loadTime += load;
    simTime_ += sim_.restart + load;
  } else {
    ledger_.loadTime += event.loadSeconds;
    ledger_.restartTime += std::max(0.0, event.recoverySeconds - event.loadSeconds);
  }
  if (ring_.rank() == 0 && !train_.quiet) {
    std::printf("step %lld: embedding server(s) %s failed; %s\n", static_cast<long long>(step),
                fmt::format("{}", fmt::join(failed, ", ")).c_str(),
                event.full
                    ? fmt::format("everyone back to step {}", next).c_str()
                    : fmt::format("partial recovery, {} samples lost", event.lostSamples).c_str());
    std::fflush(stdout);
  }
  return next;
}

uint32_t RecommendationTrainer::saveFlags(int64_t steps) const {
  if (!dense_) return 0;
  if (steps == totalSteps()) return kSaveFull;  // the run's last checkpoint
  if (interval_ <= 0 || steps % interval_ != 0) return 0;
  const int64_t point = steps / interval_;
  const int64_t k = std::max(1, plan_.partialPerFull);
  return k == 1 || point % k == 0 ? kSaveFull : kSavePartial;
}

// The plan, in steps: from the simulated clock's costs at the start, or on a real clock from
// what the first steps and the first checkpoint took (loading taken as long as saving).
// Worker 0 decides and tells the others, so that every worker and server saves alike.
void RecommendationTrainer::plan(int64_t step) {
  std::vector<float> decided(7, 0.0f);
  if (ring_.rank() == 0) {
    CprCosts costs;
    double unit = 1;  // seconds per step
    if (sim_.enabled) {
      costs = {failures_->mtbf, sim_.save, sim_.load, sim_.restart, spec_.shards};
      unit = sim_.step;
    } else {
      unit = timing_->steps > 0 ? timing_->stepSeconds / timing_->steps : 1;
      const double save = std::max(timing_->saveSeconds, 1e-3);
      costs = {failures_->mtbf * unit, save, save, restartSeconds_, spec_.shards};
    }
    plan_ = planRecovery(mode_, costs, knobs_);
    plan_.reason += fmt::format(" (one step = {:.4g} s{})", unit, sim_.enabled ? " simulated" : "");
    decided = {static_cast<float>(std::max(1.0, std::round(plan_.interval / unit))),
               static_cast<float>(plan_.partialPerFull),
               static_cast<float>(plan_.saveFraction),
               static_cast<float>(plan_.expectedOverhead),
               static_cast<float>(plan_.expectedPls),
               static_cast<float>(plan_.fullOverhead),
               static_cast<float>(plan_.partialOverhead)};
    GS_LOG(kInfo, "checkpoint plan at step {}: {}", step, plan_.reason);
  }
  broadcast(ring_, decided, 0, {.tag = tags::kRecStatus});
  interval_ = static_cast<int64_t>(decided[0]);
  plan_.mode = mode_;
  plan_.interval = decided[0];
  plan_.partialPerFull = static_cast<int>(decided[1]);
  plan_.saveFraction = decided[2];
  plan_.expectedOverhead = decided[3];
  plan_.expectedPls = decided[4];
  plan_.fullOverhead = decided[5];
  plan_.partialOverhead = decided[6];
}

void RecommendationTrainer::chargeSaves(const SaveReport& report) {
  if (report.kind == 0) return;
  GS_LOG(kDebug, "worker {}: the servers saved step {} ({} rows, kind {}, {:.4f} s)", ring_.rank(),
         report.step, report.rows, report.kind, report.seconds);
  const bool full = (report.kind & kSaveFull) != 0;
  ++(full ? ledger_.fullSaves : ledger_.partialSaves);
  ledger_.savedRows += report.rows;
  if (sim_.enabled) {
    const double cost =
        sim_.save * static_cast<double>(report.rows) / static_cast<double>(spec_.totalRows());
    ledger_.saveTime += cost;
    simTime_ += cost;
    return;
  }
  ledger_.saveTime += report.seconds;
  stepSaveSeconds_ += report.seconds;
  if (report.step == 0) timing_->saveSeconds += report.seconds;
}

// Rank 0 writes; a failed periodic save costs only itself (the previous one stays), the last
// one's failure ends the run.
void RecommendationTrainer::saveDense(int64_t steps) {
  if (!dense_) return;
  if (sim_.enabled && !session_) {  // without servers, the workers' save is the checkpoint
    ledger_.saveTime += sim_.save;
    simTime_ += sim_.save;
    ++ledger_.fullSaves;
  }
  if (ring_.rank() != 0) return;
  const auto start = std::chrono::steady_clock::now();
  try {
    saveRecommendationCheckpoint(*dense_, steps, identity_, *model_, mlpOptimizer_,
                                 tableOptimizer_.get());
  } catch (const SystemError& e) {
    if (steps == totalSteps() || stopped_) throw;
    GS_LOG(kError, "checkpoint of step {} not written, training goes on: {}", steps, e.what());
  }
  const double seconds = secondsSince(start);
  if (!sim_.enabled) {
    ledger_.saveTime += seconds;
    stepSaveSeconds_ += seconds;
    if (steps == 0) timing_->saveSeconds += seconds;
  }
}

bool RecommendationTrainer::loadDense(int64_t steps) {
  try {
    loadRecommendationCheckpoint(*dense_, steps, identity_, *model_, mlpOptimizer_,
                                 tableOptimizer_.get());
    return true;
  } catch (const DataError& e) {
    GS_LOG(kError, "full recovery: the workers' checkpoint of step {} cannot be loaded: {}", steps,
           e.what());
    return false;
  }
}

// Without servers nothing else agrees each step: one allreduce of one float when a stop may come.
bool RecommendationTrainer::agreeToStop() {
  if (!train_.stopOnSignal) return false;
  std::vector<float> vote = {stopRequested() != 0 ? 1.0f : 0.0f};
  allreduce(ring_, vote, ReduceOp::kSum, {.tag = tags::kRecStatus});
  return vote[0] > 0;
}

}  // namespace gradsync
