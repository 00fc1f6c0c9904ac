// A worker's rounds with the embedding servers and its part of every recovery, the same on every
// worker (docs/algorithms.md, "Partial recovery (CPR)"):
//   1. pull the round's rows from every server;
//   2. agree with the other workers, in one small allreduce, on which servers failed (a server
//      may die after answering some workers) and whether to stop;
//   3. if any failed: every worker recovers them together, then the round is pulled again:
//        partial (partial, cpr-mfu, cpr-ssu): the replacements load their shard's newest saves and
//          continue at this round; the other servers and the workers keep their state;
//        full: every server and every worker goes back to the newest step whose checkpoints are
//          complete and intact, and the steps since are trained again.
// Deciding together after the pulls means no worker starts a round's compute with another view
// of the servers than the others, and nobody is inside a collective during a recovery.
//
// Threading: the training thread only. Collective over the workers' transport.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ckpt/cpr_failures.h"
#include "ckpt/cpr_planner.h"
#include "gradsync/transport.h"
#include "ps/embedding_client.h"

namespace gradsync {

struct EmbeddingSessionOptions {
  RecoveryMode mode = RecoveryMode::kFull;
  std::string checkpointRoot;  // the shards' saves; full recovery also needs denseDir's
  std::string denseDir;        // the workers' checkpoints (full recovery's consistent steps)
  uint64_t globalBatch = 1;    // samples per step (lost samples)
};

// What one recovery did, for the caller's clock.
struct RecoveryEvent {
  std::vector<int> servers;  // that failed
  bool full = false;
  int64_t step = 0;            // the round at which the failure was found
  int64_t restoredTo = 0;      // full: the step everyone went back to
  double loadSeconds = 0;      // the slowest server's load, as measured by the servers
  double recoverySeconds = 0;  // from the agreement to the end of the recovery (measured)
  uint64_t lostSamples = 0;
  std::string notes;  // corrupt saves passed over, each naming its shard and file
};

class EmbeddingSession {
 public:
  EmbeddingSession(Transport& workers, EmbeddingClient& client, EmbeddingSessionOptions options,
                   RecoveryLedger& ledger);

  struct Agreement {
    std::vector<int> failed;  // servers that failed (for every worker alike)
    bool stop = false;        // some worker asked to stop
  };
  // Steps 1 and 2 for round `step` (flags: EmbeddingClient::pull's).
  Agreement pull(uint64_t step, uint32_t flags, const EmbeddingBatch& batch,
                 std::vector<std::vector<float>>& tableValues, bool stopRequested);
  // The round's pushes; a failed push shows at the next pull.
  void push(uint64_t step, uint32_t flags, double clock, const EmbeddingBatch& batch,
            const std::vector<std::vector<float>>& tableGradients);
  // Step 3, partial: the replacements of `failed` resume at round `step`.
  RecoveryEvent resume(const std::vector<int>& failed, uint64_t step);
  // Step 3, full: `loadDense(c)` puts the worker back to its checkpoint of step c and returns
  // false when that checkpoint is corrupt (an older step is tried then). Throws DataError when
  // no step at or before `step` has complete, intact checkpoints.
  RecoveryEvent rollBack(const std::vector<int>& failed, uint64_t step,
                         const std::function<bool(int64_t)>& loadDense);
  // --resume: every server back to step c (as rollBack, without a failure).
  void restoreAt(int64_t step);

  uint64_t epoch() const { return epoch_; }
  EmbeddingClient& client() { return client_; }

 private:
  Transport& workers_;
  EmbeddingClient& client_;
  EmbeddingSessionOptions options_;
  RecoveryLedger& ledger_;
  uint64_t epoch_ = 0;
};

}  // namespace gradsync
