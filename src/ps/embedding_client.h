// A worker's side of the embedding servers (ps/embedding_server.h): pulls and pushes a batch's
// distinct rows, one request per server per round, and reconnects to a failed server's
// replacement. A lost server does not throw: pull() and push() report which servers answered,
// so that the workers can agree on a recovery (the trainer's per-step status) before anyone
// acts on a partial view.
//
// Threading: one thread (the training thread) calls everything. Blocking, bounded by the star
// transports' timeout.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gradsync/error.h"
#include "gradsync/transport.h"
#include "ps/embedding_batch.h"
#include "ps/embedding_protocol.h"
#include "ps/embedding_server.h"

namespace gradsync {

// How a worker reaches an embedding server (job/embedding_links.h: through the store).
class EmbeddingConnector {
 public:
  virtual ~EmbeddingConnector() = default;
  // The newest incarnation of `server` newer than `after` (waiting until one is announced, up to
  // a timeout: TimeoutError naming the server), connected: its star transport and its number.
  virtual std::pair<std::unique_ptr<Transport>, int> connect(int server, int after) = 0;
};

// What a recovery request got back from one server.
struct RecoveryAnswer {
  int server = 0;
  EmbReply reply;
  std::string message;  // !reply.ok: the error; else what the server wants known (corrupt files)
};

class EmbeddingClient {
 public:
  // Connects to every server's first incarnation. `rank` among `workers`.
  EmbeddingClient(const EmbeddingSpec& spec, int workers, int rank, EmbeddingConnector& connector);
  // Tells every live server that this worker is done (errors are only logged).
  ~EmbeddingClient();
  EmbeddingClient(const EmbeddingClient&) = delete;
  EmbeddingClient& operator=(const EmbeddingClient&) = delete;

  int servers() const { return static_cast<int>(links_.size()); }
  // Round `step`: the values of `batch`'s rows, per table (distinct rows x dim, resized).
  // Returns, per server, whether it answered (false: lost; those tables' values are stale).
  // flags kSaveFull: each server first saves its state before the round, if it has not yet
  // (the run's first checkpoint, at step 0).
  std::vector<bool> pull(uint64_t step, uint64_t epoch, uint32_t flags, const EmbeddingBatch& batch,
                         std::vector<std::vector<float>>& tableValues);
  // The saves the servers reported in this round's pull answers: kinds or-ed, rows summed, the
  // longest time (they save in parallel).
  const SaveReport& saveReport() const { return saveReport_; }
  // Round `step`'s gradients (per table, distinct rows x dim). Returns, per server, whether the
  // push went out (false: lost).
  std::vector<bool> push(uint64_t step, uint64_t epoch, uint32_t flags, double clock,
                         const EmbeddingBatch& batch,
                         const std::vector<std::vector<float>>& tableGradients);
  // Evaluation: the rows' values after `step` rounds; throws PeerLostError on a lost server.
  void read(uint64_t step, uint64_t epoch, const EmbeddingBatch& batch,
            std::vector<std::vector<float>>& tableValues);

  // Partial recovery (every worker calls it alike): connects to the replacements of `failed` and
  // has them resume at round `step`. Throws when a replacement does not come or refuses.
  std::vector<RecoveryAnswer> resume(const std::vector<int>& failed, uint64_t step, uint64_t epoch);
  // Full recovery: connects to the replacements of `failed`, then puts every server back to the
  // full save of `step`; a server that cannot (corrupt file) answers !ok with its message.
  std::vector<RecoveryAnswer> restore(const std::vector<int>& failed, uint64_t step,
                                      uint64_t epoch);

  // Accesses (row-sample uses) this worker has pushed to `server`, over the whole run.
  uint64_t accessesPushed(int server) const { return links_[server].accesses; }
  uint64_t bytesPushed() const { return bytesPushed_; }
  uint64_t bytesPulled() const { return bytesPulled_; }  // requests sent for pulls and reads

 private:
  struct Link {
    std::unique_ptr<Transport> star;
    int incarnation = 0;
    uint64_t accesses = 0;
    std::string lost;  // why it was lost ("" while alive)
  };
  struct Exchange;
  bool receiveRows(int server, Exchange& x, const EmbeddingBatch& batch,
                   std::vector<std::vector<float>>& tableValues);
  std::vector<bool> fetch(EmbRequest request, uint64_t step, uint64_t epoch, uint32_t flags,
                          const EmbeddingBatch& batch,
                          std::vector<std::vector<float>>& tableValues);
  void reconnect(int server);
  std::vector<RecoveryAnswer> ask(const std::vector<int>& servers, EmbHeader header);
  void markLost(int server, const Error& error);

  EmbeddingSpec spec_;
  int workers_;
  int rank_;
  EmbeddingConnector& connector_;
  std::vector<Link> links_;
  SaveReport saveReport_;
  uint64_t bytesPushed_ = 0;
  uint64_t bytesPulled_ = 0;
};

}  // namespace gradsync
