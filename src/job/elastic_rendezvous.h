// Membership rounds of an elastic job (`gradsync train --elastic MIN:MAX`, docs/cluster.md
// "Elastic workers"), agreed through the rendezvous store. Torch-free.
//
// A job runs in rounds. Each round has its members, ranks 0..size-1, and a mesh of its own. A
// round ends for all its members at one step boundary: when a member is lost (the others see
// their transport fail) or when a worker waits to come in. Its members then enter the next
// round, and so does any worker that starts later (a restarted or a new one):
//
//  1. Arrive: add 1 to the round's arrival counter (the arrival's number) and publish a record
//     (name, the progress of the state it holds, its last round and rank).
//  2. The first member of the previous round to arrive (for round 0, the first worker) closes
//     the round: it publishes the arrivals that are in, once
//       - every member of the previous round has arrived (a regroup to take a worker in: no
//         waiting), or for round 0 every initial worker, or MAX of them; else
//       - at least MIN have arrived and nobody else for a settle time (after a failure the
//         survivors notice within about a step: max(0.5 s, 3 step times)); else
//       - after the timeout: with those that came if at least MIN, or the round fails, and every
//         arrival throws PeerLostError naming the workers of the previous round that were lost.
//  3. The closer lists the members: up to MAX arrivals in rank order, except (after round 0)
//     those launched with other settings than its own, the job's, which it refuses: they throw
//     ConfigError naming the difference and the job goes on without them. Ranks go by the state
//     held: rank 0 holds the most advanced one (it sends it to the others), then the previous
//     round's order, then newcomers by launch slot. An arrival after the close, or left out by
//     MAX, enters the next round, which the members start as soon as they notice it (waiting(),
//     at a step boundary) if there is room.
//
// Store keys are under "elastic/" and carry the round number, so that no two rounds meet; the
// store itself must outlive every worker (gradsync launch serves it: docs/cluster.md).
// Nothing waits forever: the closer's wait is bounded by the timeout, and a worker waiting for a
// round to form gives up (TimeoutError) when the job shows no sign of life for that long (rank 0
// of a running round calls heartbeat() at its step-boundary checks, and a closer while it waits).
// Not thread-safe: one worker's thread uses an instance; many instances share a store.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gradsync/store.h"

namespace gradsync {

// --elastic MIN:MAX: the fewest workers the job may go on with and the most it takes in.
struct ElasticRange {
  int min = 0;
  int max = 0;
  bool enabled() const { return max > 0; }
  std::string describe() const;  // "MIN:MAX"
};

// "MIN:MAX" with 1 <= MIN <= MAX <= 1024, or "" (not elastic). ConfigError naming --elastic.
ElasticRange parseElasticRange(const std::string& text);

// A worker as it enters a round.
struct ElasticWorker {
  std::string name;        // stable for the process: "worker 2", "worker 2 (restart 1)"
  std::string where;       // "pid 4242 on host-a" (for messages)
  int slot = 0;            // the launcher's RANK: orders fresh workers
  int64_t progress = -1;   // steps of the training state it holds; -1: none yet
  int64_t lastRound = -1;  // the round it trained in last; -1: none
  int lastRank = -1;       // its rank there
  double stepSeconds = 0;  // how long its steps take (how long the others may take to notice)
  std::string settings;    // its launch's settings (encodeSettings): must be the job's
};

// "rank 2 (worker 2, pid 4242 on host-a)": a member of a round, for messages.
std::string describeMember(const ElasticWorker& worker, int rank);

struct ElasticMembership {
  int64_t round = -1;
  int rank = -1;                       // this worker's
  std::vector<ElasticWorker> members;  // by rank; rank 0 holds the most advanced state
  bool jobFinished = false;            // the job ended before this worker got in
  int size() const { return static_cast<int>(members.size()); }
};

struct ElasticRendezvousOptions {
  ElasticRange range;
  int initialWorkers = 1;  // round 0 waits for this many (the launch's WORLD_SIZE)
  std::chrono::milliseconds timeout{60'000};
  std::chrono::milliseconds poll{10};        // how often waits look at the store
  std::chrono::milliseconds minSettle{500};  // the least quiet time before closing a short round
};

class ElasticRendezvous {
 public:
  // Throws ConfigError when initialWorkers is outside the range. Keeps `store` by reference.
  ElasticRendezvous(Store& store, ElasticRendezvousOptions options);

  // The round a worker starting now enters: the next one to form.
  int64_t nextRound();
  // Enters round `round` (or a later one, if it forms without this worker) and blocks until it
  // has formed. Throws PeerLostError when it cannot (fewer than MIN came; the message names the
  // lost workers), TimeoutError when it did not form and the job showed no sign of life for the
  // timeout, ConfigError when the round refused this worker's settings; returns jobFinished
  // when the job ended first.
  ElasticMembership join(int64_t round, const ElasticWorker& me);
  // How many workers wait to enter the round after `round`. One store request, no waiting.
  int64_t waiting(int64_t round);
  // A sign of life of the running round for the workers waiting to enter the next one.
  void heartbeat();
  // The job is over: workers still waiting to come in return jobFinished.
  void finish();
  // Whether finish() was called on `store`'s job (the launcher asks, before restarting a worker).
  static bool finished(Store& store);

 private:
  struct Arrivals;
  void close(int64_t round, const ElasticWorker& closer);
  void publish(int64_t round, const ElasticWorker& closer, const Arrivals& arrivals);
  void fail(int64_t round, const Arrivals& arrivals);
  // Waits for round's verdict: the number of members, or 0 if the job finished first.
  int64_t awaitVerdict(int64_t round);
  // No round formed within the timeout: TimeoutError for round 0, StateLostError after.
  [[noreturn]] void throwNoRound(int64_t round) const;
  // This worker's place in the formed round; nullopt if it came too late.
  std::optional<ElasticMembership> placeIn(int64_t round, int64_t index);
  ElasticWorker record(int64_t round, int64_t index);

  Store& store_;
  const ElasticRendezvousOptions options_;
};

}  // namespace gradsync
