// The embedding server's side of recovery (ps/embedding_server.h): gathering every worker's
// kResume or kRestore, restoring the shard, and answering all of them alike.
#include <chrono>

#include <fmt/format.h>

#include "common/elapsed.h"
#include "common/logging.h"
#include "gradsync/error.h"
#include "ps/embedding_server.h"

namespace gradsync {

// Every worker asks (the recovery is collective); the last request does the work, and every
// worker gets the same answer.
void EmbeddingServer::recover(int worker, const EmbHeader& header) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!recovery_) {
    recovery_ = std::make_unique<Recovery>();
    recovery_->asked.assign(options_.workers, false);
    recovery_->first = header;
  }
  Recovery& r = *recovery_;
  if (r.asked[worker] || header.request != r.first.request || header.step != r.first.step ||
      header.epoch != r.first.epoch) {
    throw ProtocolError(
        fmt::format("workers disagree on the recovery of embedding server {} "
                    "(request {} step {} epoch {}, then {} {} {})",
                    options_.shard, static_cast<uint32_t>(r.first.request), r.first.step,
                    r.first.epoch, static_cast<uint32_t>(header.request), header.step,
                    header.epoch),
        {.rank = star_.rank(), .peer = worker});
  }
  r.asked[worker] = true;
  r.accesses += header.accesses;
  if (++r.count == options_.workers) finishRecovery(header);
}

void EmbeddingServer::finishRecovery(const EmbHeader& header) {
  const uint64_t accesses = recovery_->accesses;
  recovery_.reset();
  EmbReply answer;
  std::shared_ptr<std::vector<uint8_t>> text;
  const auto start = std::chrono::steady_clock::now();
  try {
    if (!checkpoints_) {
      throw DataError(
          fmt::format("embedding server {} has no checkpoint directory to recover "
                      "from",
                      options_.shard));
    }
    if (header.request == EmbRequest::kResume) {
      if (!options_.replacement) {
        throw ProtocolError(
            fmt::format("embedding server {} did not fail: nothing to resume", options_.shard));
      }
      ShardRestore restore = checkpoints_->loadNewest();
      shard_.restore(restore.full, restore.partials);
      answer.fullStep = restore.full.step;
      answer.newestStep = restore.newestStep();
      answer.corruptFilesSkipped = restore.problems.size();
      std::string notes;
      for (const std::string& problem : restore.problems) {
        notes += (notes.empty() ? "" : "; ") + problem;
      }
      if (!notes.empty()) text = std::make_shared<std::vector<uint8_t>>(notes.begin(), notes.end());
      const uint64_t held = shard_.accessesHeld();
      answer.lostAccesses = accesses > held ? accesses - held : 0;
    } else {
      LoadedCheckpoint full = checkpoints_->loadFullAt(static_cast<int64_t>(header.step));
      shard_.restore(full, {});
      answer.fullStep = answer.newestStep = full.step;
    }
    shard_.takeSubSample();
    answer.accessesHeld = shard_.accessesHeld();
    answer.loadSeconds = secondsSince(start);
    applied_ = header.step;
    epoch_ = header.epoch;
    ready_ = true;
    for (auto& push : round_->pushes) push = Round::Push{};
    round_->arrived = 0;
    lastSave_ = {};
    GS_LOG(kInfo, "embedding server {}: restored step {} (newest save {}) in {:.3f} s; round {}",
           options_.shard, answer.fullStep, answer.newestStep, answer.loadSeconds, applied_);
  } catch (const DataError& e) {
    answer.ok = 0;
    const std::string message = e.what();
    text = std::make_shared<std::vector<uint8_t>>(message.begin(), message.end());
    GS_LOG(kError, "{}", message);
  }
  for (int w = 0; w < options_.workers; ++w) reply(w, answer, text);
  changed_.notify_all();
}

}  // namespace gradsync
