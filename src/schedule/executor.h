// What carries out the planner's operations (step_planner.h) for the engine (sync/engine.h):
// over the ring among the workers (sync/ring_executor.h) or through parameter servers
// (ps/worker_client.h). The engine owns the slots, readiness, the communication thread, waits,
// errors, statistics and tracing; an executor only moves data and applies updates.
#pragma once

#include <cstdint>
#include <exception>
#include <span>
#include <string>
#include <vector>

#include "common/state_bytes.h"
#include "gradsync/clock.h"
#include "schedule/step_planner.h"

namespace gradsync {

// What one operation did.
struct OpOutcome {
  bool unitDone = false;     // the unit's result for op.step is in place (average or parameters)
  uint64_t bytesSent = 0;    // what this rank put on the network for it
  std::string method;        // the compressor that encoded it; empty: dense
  double encodeSeconds = 0;  // the compressor's encoding time (part of the operation's)
  double decodeSeconds = 0;
  int server = -1;  // a push: the parameter server it went to
};

// How an executor tells its engine what happens off the communication thread (a server's reply
// on a receiver thread). Every method is thread-safe.
class EngineEvents {
 public:
  virtual ~EngineEvents() = default;
  // The unit's result for `step` is in place.
  virtual void unitDone(size_t unit, uint64_t step) = 0;
  // Communication outside any operation (a reply on its way) starts (+1) or ends (-1): the
  // engine counts the time anything is outstanding as communication time.
  virtual void busy(int delta) = 0;
  // Traces a span of communication on the unit that no operation covers (a push's reply).
  virtual void traceSpan(size_t unit, const std::string& name, Nanos start,
                         const std::string& detail) = 0;
  // A push was answered by an asynchronous or stale-synchronous server (asgd, ssp), `staleness`
  // updates stale (ps/protocol.h, PsStaleness).
  virtual void pushAnswered(uint64_t staleness) = 0;
  // Fails the engine: its waits rethrow `error`.
  virtual void fail(std::exception_ptr error) = 0;
};

class Executor {
 public:
  virtual ~Executor() = default;
  // Carries out `op` on the engine's communication thread, without the engine's lock, reading
  // the unit's gradients from the engine's slots. Blocking; throws the transport's errors.
  virtual OpOutcome run(const PlannedOp& op) = 0;
  // The optimizer state the executor keeps, whole on every rank (sharded: gathered from the
  // ranks that own each block), and back: SGD's velocity, or Adam's first moment then its
  // second, each by tensor in registration order; empty when the caller's optimizer keeps it.
  // Between steps, after the engine drained; collective (every rank calls it).
  virtual std::vector<float> optimizerState() = 0;
  virtual void setOptimizerState(std::span<const float> state) = 0;
  // The global step at which the optimizer state had taken no step: an update of step s is the
  // state's (s - origin + 1)-th, which Adam's bias correction uses (Engine::setOptimizerState).
  // 0 until set. Between steps.
  virtual void setStateOrigin(int64_t origin) { (void)origin; }
  // Makes this worker's parameters the one global model where workers may differ (the
  // servers'); nothing to do where they cannot. Between steps; collective.
  virtual void pullGlobalModel() = 0;
  // This rank's state beyond the model and the optimizer state above, for checkpoints:
  // compressors' state, the delayed strategies' local models. This rank's own (not collective).
  // saveState between steps, after the engine drained; loadState before the first step, after
  // setOptimizerState. `format` is the engine state's (Engine::saveState): 1 also held Adam's
  // moments in update mode, this rank's, which loadState then takes. loadState throws DataError
  // for another run's state.
  virtual void saveState(StateWriter& out) const = 0;
  virtual void loadState(StateReader& in, uint64_t format) = 0;
  // 1-bit Adam in update mode (UpdateRule::varianceFrozenAfter): tensor t's gradient in
  // `gradient` (its slot) becomes this rank's momentum (gradientToMomentum) from the executor's
  // first moment. On the training thread, after the step before has updated t and before t is
  // marked ready. Only the ring's executor keeps the moments (Engine::validate refuses the rest).
  virtual void gradientToMomentum(int t, std::span<float> gradient) {
    (void)t;
    (void)gradient;
  }
};

}  // namespace gradsync
