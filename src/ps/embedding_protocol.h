// The wire protocol between workers and embedding servers (docs/algorithms.md, "Embeddings on
// parameter servers"; ps/embedding_server.h has the semantics).
//
// Each embedding server has a star transport of its own with every worker: ranks [0, workers)
// are the workers, rank `workers` the server, built through the rendezvous store under the key
// prefix "emb/<server>/<incarnation>". A server's death breaks only its own star (the workers'
// ring and the other servers go on), and its replacement (the next incarnation) gets a fresh one.
//
// A request is an EmbHeader on tags::kEmbRequest, then its payload on tags::kEmbPayload when it
// has rows. An answer is an EmbReply on tags::kEmbReply, then its payload (rows' values, or an
// error's text) on tags::kEmbReplyPayload. A worker's requests are handled in order.
#pragma once

#include <cstdint>

#include "common/tags.h"

namespace gradsync {

enum class EmbRequest : uint32_t {
  kPull = 1,     // rows' values for round `step` (answered once rounds < step are applied)
  kPush = 2,     // rows' gradients of round `step` (no answer)
  kRead = 3,     // rows' values after `step` rounds, outside rounds (evaluation)
  kResume = 4,   // partial recovery: a replacement continues at round `step`
  kRestore = 5,  // full recovery (or --resume): every server goes back to the save of `step`
  kStop = 6,     // this worker sends nothing more
};

enum EmbFlags : uint32_t {
  kSaveFull = 1,     // kPush: after this round, save every row; kPull: save before answering,
                     // unless this step is saved already (a run's first checkpoint)
  kSavePartial = 2,  // kPush: after this round, save the rows the recovery mode chooses
};

struct EmbHeader {
  EmbRequest request = EmbRequest::kPull;
  uint32_t flags = 0;  // EmbFlags
  uint64_t step = 0;   // see EmbRequest
  // Recovery epoch: how many recoveries the job has made. A server drops requests of an older
  // epoch (sent before a recovery its state went through).
  uint64_t epoch = 0;
  double clock = 0;       // kPush: the failure clock (steps run, or simulated seconds)
  uint64_t rows = 0;      // rows in the payload
  uint64_t accesses = 0;  // kResume: every access this worker has pushed to this server
};

// kPull, kRead: payload = rows x uint64 keys (ps/embedding_shard.h's rowKey).
// kPush: payload = rows x uint64 keys, rows x uint32 accesses (the samples that used each row),
//        rows x dim float gradients (the worker's batch mean; the server averages over workers).
inline uint64_t embPushBytes(uint64_t rows, int dim) {
  return rows * (sizeof(uint64_t) + sizeof(uint32_t) + static_cast<uint64_t>(dim) * sizeof(float));
}

struct EmbReply {
  uint32_t ok = 1;        // 0: payload is the error's text
  uint32_t saveKind = 0;  // the save made before this answer (EmbFlags), 0: none since the last
  uint64_t rows = 0;
  uint64_t payloadBytes = 0;
  uint64_t saveStep = 0;  // the save's step
  uint64_t savedRows = 0;
  double saveSeconds = 0;
  // kResume, kRestore: what was restored.
  int64_t fullStep = -1;      // the full save restored
  int64_t newestStep = -1;    // the newest save applied (a partial one, in partial modes)
  uint64_t lostAccesses = 0;  // kResume: the updates this shard has lost, in all
  double loadSeconds = 0;
  uint64_t corruptFilesSkipped = 0;  // passed over for older ones (named in the server's log)
  uint64_t accessesHeld = 0;         // the updates the restored rows hold
};

}  // namespace gradsync
