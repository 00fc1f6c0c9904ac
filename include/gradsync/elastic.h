// Elastic membership for a program of one's own: the rounds of `gradsync train --elastic`
// (docs/cluster.md, "Elastic workers") behind a small API, which the Python package's
// hvd.elastic is built on (docs/python.md).
//
// A job runs in rounds. Each round has its members, ranks 0..size-1, and a Context of its own
// (its mesh over the job's store, connected as gradsync::init connects a fixed job's). A program
// trains in a round until a collective fails (a member was lost: PeerLostError or TimeoutError) or,
// at a point where all members agree to look, waiting() says a worker waits to come in; every
// member then leaves the round (abort() the round's transport after a failure, so that the others
// hear of it at once) and calls joinNextRound() again. Ranks go by the state each worker holds:
// rank 0 of a round is a worker with the most advanced `progress`, and should give its state to the
// others (broadcast).
//
// The store must outlive every worker: `gradsync launch --elastic` serves it (and restarts
// failed workers with --max-restarts); without that launcher, worker 0 serves it and the job ends
// with worker 0.
//
// Not thread-safe: one thread of a worker uses a session.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "gradsync/context.h"

namespace gradsync {

struct ElasticSessionOptions {
  // "MIN:MAX": the fewest workers the job goes on with and the most it takes in. Empty: 1 to
  // the launch's world size. Every worker of a job must give the same range (a worker with
  // another is refused: ConfigError naming both).
  std::string range;
  // The job as gradsync::init takes it (launcher environment, flags). The ranks of a round talk
  // as a fixed job's do: through shared memory inside a host (bootstrap.sharedMemory, on by
  // default), over TCP between hosts (TLS with bootstrap.tls); link emulation applies (an
  // emulated link makes every rank a host of its own). The round's Context has its local rank
  // and size.
  InitOptions init;
  // A member of a round whose heartbeats (a thread of each member's own, through the job's
  // store) stop this long is named, within about 1.5 times it, by the member before it, which
  // aborts its round's transport: every member's collective then throws (TimeoutError on that
  // member, naming the hung one; PeerLostError elsewhere) and the job re-forms without it, as
  // for a lost member, whatever the bootstrap timeout is. 0: no watch (the timeout bounds a
  // silent member). docs/cluster.md, "Elastic workers".
  std::chrono::milliseconds hangTimeout{10'000};
};

class ElasticSession {
 public:
  // Resolves the job and connects to its store. Blocking up to the bootstrap timeout; throws as
  // gradsync::init does, and ConfigError for a bad range.
  explicit ElasticSession(const ElasticSessionOptions& options);
  ~ElasticSession();
  ElasticSession(const ElasticSession&) = delete;
  ElasticSession& operator=(const ElasticSession&) = delete;

  // Enters the next round holding a state of `progress` (a count the members agree on, such as
  // committed steps; -1: no state yet), blocks until the round has formed and its mesh is
  // connected, and returns the round's Context (its rank and size; local rank and size are the
  // launch's). The Context must be destroyed before the next call. nullopt when the job finished
  // before this worker got in. Throws PeerLostError when fewer than MIN workers are left (naming
  // the lost ones), TimeoutError when no round forms and the job shows no sign of life for the
  // timeout, ConfigError when the round refused this worker's settings.
  std::optional<Context> joinNextRound(int64_t progress);

  // The round joined last (-1 before the first).
  int64_t round() const;
  // How many workers wait to enter the round after the current one: one store request, no
  // waiting. A member that sees one should lead every member out of the round at the same step.
  int64_t waiting();
  // A sign of life of the running round for workers waiting to come in: rank 0 should call it
  // well within the timeout (every step, or every check of waiting()).
  void heartbeat();
  // The job is over (rank 0 calls it at the end): workers still waiting to come in get nullopt.
  void finish();
  // "worker 2 (restart 1)": this worker as messages name it.
  const std::string& name() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace gradsync
