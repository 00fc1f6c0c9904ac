#include "ps/embedding_session.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "ckpt/shard_checkpoints.h"
#include "common/elapsed.h"
#include "common/logging.h"
#include "common/tags.h"
#include "gradsync/collectives.h"
#include "gradsync/error.h"

namespace gradsync {

EmbeddingSession::EmbeddingSession(Transport& workers, EmbeddingClient& client,
                                   EmbeddingSessionOptions options, RecoveryLedger& ledger)
    : workers_(workers), client_(client), options_(std::move(options)), ledger_(ledger) {}

EmbeddingSession::Agreement EmbeddingSession::pull(uint64_t step, uint32_t flags,
                                                   const EmbeddingBatch& batch,
                                                   std::vector<std::vector<float>>& tableValues,
                                                   bool stopRequested) {
  const std::vector<bool> ok = client_.pull(step, epoch_, flags, batch, tableValues);
  std::vector<float> votes(ok.size() + 1, 0.0f);
  for (size_t s = 0; s < ok.size(); ++s) votes[s] = ok[s] ? 0.0f : 1.0f;
  votes.back() = stopRequested ? 1.0f : 0.0f;
  allreduce(workers_, votes, ReduceOp::kSum, {.tag = tags::kRecStatus});
  Agreement agreement;
  for (size_t s = 0; s < ok.size(); ++s) {
    if (votes[s] > 0) agreement.failed.push_back(static_cast<int>(s));
  }
  agreement.stop = votes.back() > 0;
  return agreement;
}

void EmbeddingSession::push(uint64_t step, uint32_t flags, double clock,
                            const EmbeddingBatch& batch,
                            const std::vector<std::vector<float>>& tableGradients) {
  client_.push(step, epoch_, flags, clock, batch, tableGradients);
}

RecoveryEvent EmbeddingSession::resume(const std::vector<int>& failed, uint64_t step) {
  const auto start = std::chrono::steady_clock::now();
  RecoveryEvent event{failed, false, static_cast<int64_t>(step)};
  ++epoch_;
  ++ledger_.recoveries;
  for (const RecoveryAnswer& answer : client_.resume(failed, step, epoch_)) {
    const auto s = static_cast<size_t>(answer.server);
    const auto since = static_cast<uint64_t>(
        std::max<int64_t>(0, static_cast<int64_t>(step) - answer.reply.fullStep));
    ledger_.lostSamples[s] += since * options_.globalBatch;
    ledger_.lostAccesses[s] = answer.reply.lostAccesses;  // the shard's total so far
    event.lostSamples += since * options_.globalBatch;
    event.loadSeconds = std::max(event.loadSeconds, answer.reply.loadSeconds);
    ++ledger_.failures;
    event.notes += answer.message;
    GS_LOG(kWarn,
           "embedding server {} replaced at round {}: restored its full save of step {} and "
           "saves up to step {}{}; its shard has lost {} row updates so far",
           answer.server, step, answer.reply.fullStep, answer.reply.newestStep,
           answer.reply.corruptFilesSkipped ? fmt::format(" ({})", answer.message) : "",
           answer.reply.lostAccesses);
  }
  event.recoverySeconds = secondsSince(start);
  return event;
}

RecoveryEvent EmbeddingSession::rollBack(const std::vector<int>& failed, uint64_t step,
                                         const std::function<bool(int64_t)>& loadDense) {
  const auto start = std::chrono::steady_clock::now();
  RecoveryEvent event{failed, true, static_cast<int64_t>(step)};
  const CheckpointDir dense(options_.denseDir);
  std::vector<int> reconnect = failed;
  int64_t below = static_cast<int64_t>(step) + 1;  // never a step of an abandoned timeline
  for (;;) {
    std::optional<int64_t> c =
        newestCompleteStep(options_.checkpointRoot, client_.servers(), dense, below);
    if (!c) {
      throw DataError(fmt::format("full recovery at step {}: no step at or before it has the "
                                  "workers' and every shard's checkpoints intact in '{}'",
                                  step, options_.checkpointRoot),
                      {.operation = "full recovery"});
    }
    below = *c;
    if (!loadDense(*c)) continue;
    ++epoch_;
    std::vector<RecoveryAnswer> answers = client_.restore(reconnect, *c, epoch_);
    reconnect.clear();
    auto bad = std::find_if(answers.begin(), answers.end(),
                            [](const RecoveryAnswer& a) { return !a.reply.ok; });
    if (bad != answers.end()) {
      GS_LOG(kError, "full recovery: step {} cannot be restored ({}); trying an older one", *c,
             bad->message);
      continue;
    }
    for (const RecoveryAnswer& a : answers) {
      event.loadSeconds = std::max(event.loadSeconds, a.reply.loadSeconds);
    }
    event.restoredTo = *c;
    break;
  }
  ledger_.failures += static_cast<int>(failed.size());
  ++ledger_.recoveries;
  ledger_.redoneSteps += step - static_cast<uint64_t>(event.restoredTo);
  event.recoverySeconds = secondsSince(start);
  GS_LOG(kWarn, "full recovery at round {}: every server and worker back to step {}", step,
         event.restoredTo);
  return event;
}

void EmbeddingSession::restoreAt(int64_t step) {
  ++epoch_;
  for (const RecoveryAnswer& a : client_.restore({}, static_cast<uint64_t>(step), epoch_)) {
    if (!a.reply.ok) {
      throw DataError(fmt::format("resuming at step {}: embedding server {} cannot restore: {}",
                                  step, a.server, a.message),
                      {.operation = "resume"});
    }
  }
}

}  // namespace gradsync
