// An embedding server: one shard of the embedding tables (ps/embedding_shard.h), served to the
// workers in synchronous rounds over its star transport (ps/embedding_protocol.h):
//   - round t's pulls are answered once rounds < t are applied;
//   - round t is applied once every worker pushed it: each row's gradients are summed in worker
//     order (not arrival order, so runs repeat bitwise), averaged over the workers, and applied
//     with Adagrad or SGD; then, if the pushes asked for it, the shard is saved (full, or the rows
//     CPR-MFU or CPR-SSU choose) before any pull of the next round is answered.
// Recovery (docs/checkpoints.md, "Partial recovery"): a replacement server (a respawned process,
// or a restarted thread) waits for every worker's kResume, loads its shard's newest saves and
// continues at the workers' round; kRestore puts any server back to the full save of a step.
// Requests of an older recovery epoch are dropped.
//
// Threading: one receiving thread per worker; they share the state under one lock. Construct,
// then wait(); crash() may be called from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/cpr_planner.h"
#include "ckpt/shard_checkpoints.h"
#include "gradsync/transport.h"
#include "ps/embedding_protocol.h"
#include "ps/embedding_shard.h"

namespace gradsync {

struct EmbeddingServerOptions {
  EmbeddingSpec spec;
  int shard = 0;
  int workers = 1;
  UpdateRule rule = UpdateRule::adagrad(0.05);
  RecoveryMode mode = RecoveryMode::kFull;  // what kSavePartial saves (MFU or SSU rows)
  double mfuFraction = 0.125;
  double ssuRate = 0.01;
  std::string checkpointRoot;  // "": saving is refused
  bool replacement = false;    // waits for kResume or kRestore before serving
  // An injected failure: the server dies at the first push whose clock reaches it, by calling
  // `die` (a process: SIGKILL), or, without one, by crash() (a thread).
  std::optional<double> deathClock;
  std::function<void()> die;
  std::chrono::milliseconds timeout{60'000};  // bound on a round's wait for the other workers
};

// What a server tells about its saves and restores (a worker's ledger).
struct SaveReport {
  uint32_t kind = 0;  // EmbFlags
  uint64_t step = 0;
  uint64_t rows = 0;
  double seconds = 0;
};

class EmbeddingServer {
 public:
  // `star`: the server is rank options.workers, the workers the ranks below. Starts serving.
  EmbeddingServer(Transport& star, EmbeddingServerOptions options);
  ~EmbeddingServer();
  EmbeddingServer(const EmbeddingServer&) = delete;
  EmbeddingServer& operator=(const EmbeddingServer&) = delete;

  enum class End { kStopped, kCrashed };
  // Blocks until every worker sent kStop (kStopped) or the server crashed (kCrashed); rethrows
  // the first failure otherwise (a lost worker, a malformed request, a round that never filled).
  End wait();
  // An in-process failure: breaks the star as a killed process would (the workers see the server
  // lost) and stops serving; the state is abandoned. Thread-safe, idempotent.
  void crash();

 private:
  struct Round {  // the round being gathered
    struct Push {
      bool arrived = false;
      uint32_t flags = 0;
      std::vector<uint64_t> rows;  // local
      std::vector<uint32_t> accesses;
      std::vector<float> gradients;
    };
    std::vector<Push> pushes;  // by worker
    int arrived = 0;
  };
  struct Recovery {           // kResume or kRestore requests being gathered
    std::vector<bool> asked;  // by worker
    int count = 0;
    EmbHeader first;
    uint64_t accesses = 0;  // kResume: summed over the workers
  };

  void serveWorker(int worker);
  bool handle(int worker, const EmbHeader& header, std::vector<uint8_t>& payload);
  void answerRows(int worker, const EmbHeader& header, std::span<const uint8_t> payload,
                  bool inRound);
  void push(int worker, const EmbHeader& header, std::span<const uint8_t> payload);
  void applyRound(uint32_t flags);  // with the lock held
  void save(uint32_t flags);        // with the lock held
  void recover(int worker, const EmbHeader& header);
  void finishRecovery(const EmbHeader& header);  // with the lock held, once every worker asked
  // Waits (lock held) until `ready()`, the server broke, or the timeout passed (ProtocolError).
  template <typename Ready>
  void waitFor(std::unique_lock<std::mutex>& lock, const char* what, Ready ready);
  std::vector<uint64_t> localRows(int worker, std::span<const uint64_t> keys) const;
  void reply(int worker, EmbReply header, std::shared_ptr<const std::vector<uint8_t>> payload);
  void fail(int worker);  // in a catch block

  Transport& star_;
  const EmbeddingServerOptions options_;
  std::mutex mutex_;
  std::condition_variable changed_;
  EmbeddingShard shard_;
  std::unique_ptr<ShardCheckpoints> checkpoints_;
  bool ready_;
  uint64_t applied_ = 0;  // rounds applied: the next round to gather
  uint64_t epoch_ = 0;
  std::unique_ptr<Round> round_;
  std::unique_ptr<Recovery> recovery_;
  SaveReport lastSave_;
  std::vector<bool> stopped_;
  bool crashed_ = false;
  std::exception_ptr error_;
  struct InFlight {
    WorkPtr header;
    WorkPtr payload;
    std::shared_ptr<const EmbReply> headerBytes;
    std::shared_ptr<const std::vector<uint8_t>> payloadBytes;
  };
  std::vector<InFlight> sends_;
  std::vector<std::thread> threads_;
};

}  // namespace gradsync
