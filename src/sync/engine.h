// The one engine that synchronizes a model's gradients across workers, whatever the strategy
// (torch-free: the torch layer copies each gradient into its slot from an autograd hook and
// calls markReady).
//
// It owns the slots, each tensor's and unit's readiness, one background communication thread,
// the waits, errors, statistics and tracing, all on an injected Clock. Its StepPlanner
// (schedule/step_planner.h) decides which operation starts when, the same planner the
// simulator runs; an executor carries each operation out:
//   RingExecutor (ring_executor.h)        collectives among the workers: fifo, wfbp and fusion
//                                         leave the averages in the slots (gradient mode); p3
//                                         and sharded apply the optimizer's rule to the
//                                         parameters as each unit's average arrives (update mode)
//   PsWorkerClient (ps/worker_client.h)   pushes to parameter servers, whose replies carry the
//                                         updated parameters (update mode): ssgd with servers,
//                                         asgd, ssp, odsgd, ssdsgd, cdsgd
// Units the compression plan compresses go through their compressor after its warm-up steps.
//
// A step: backward fills the slots (markReady per tensor) and endBackward() ends it without
// waiting; waitFor(t) blocks until tensor t's result of every ended step is in place (gradient
// mode: its average in slot(t); update mode: its updated parameters), and drain() until every
// result is and nothing is in flight. In update mode the next forward calls waitFor before each
// layer: the step's communication overlaps it. Every call is valid in every mode.
//
// Threading: slot and markReady may be called from the thread running backward, the others
// from the training thread; a step's markReady calls precede its endBackward. Every wait is
// bounded (the transport's timeout per operation) and rethrows a communication error. The
// communication threads sleep on a condition variable while nothing can start: one thread, or
// with p3 over the ring (concurrent, the default) one per slice of the window, so that the
// committed slices' collectives are in flight at once, each on its unit's stream, or with
// sharded:concurrent=N N of them.
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "common/tensor_shape.h"
#include "compress/guard.h"
#include "compress/policy.h"
#include "gradsync/clock.h"
#include "gradsync/trace.h"
#include "gradsync/transport.h"
#include "optim/update_rule.h"
#include "ps/worker_client.h"
#include "schedule/executor.h"
#include "schedule/schedule.h"
#include "schedule/step_planner.h"
#include "sync/fc_exchange.h"

namespace gradsync {

struct EngineOptions {
  ScheduleSpec schedule;
  CompressionConfig compression;  // default: every tensor dense
  // The optimizer's rule: applied by the engine in update mode over the ring (p3, sharded); its
  // learning rate goes to the parameter servers; its momentum to compressors that apply
  // momentum themselves (DGC).
  UpdateRule update;
  uint64_t seed = 0;     // identical on all ranks; stochastic compressors draw from it
  bool sharded = false;  // --sync sharded (dense only; not with p3)
  // sharded: how many units' collectives may be in flight at once (each on its own stream; a
  // unit's allgather waits for its reduce-scatter). 1: one operation after the other.
  size_t concurrent = 1;
  // sharded: the weights whose gradients the fully-connected exchange delivers (sync/
  // fc_exchange.h): each its own unit, its owned columns' average put in its slot before
  // markReady, no reduce-scatter. The caller (DistributedModel) runs the exchange.
  std::vector<ExchangedTensor> exchanged;
  // Through parameter servers instead of the ring (the transport then spans the servers too).
  std::optional<PsOptions> servers;
  // What the statistics and traces measure time with (must outlive the engine). Waits are
  // bounded by the transport's timeout, in real time.
  const Clock* clock = &SteadyClock::instance();
};

// What steps cost, measured by the engine.
struct StepStats {
  double commSeconds = 0;    // time during which any operation or reply was in flight
  uint64_t bytesSent = 0;    // bytes this rank put on the network for the steps' gradients
  uint64_t denseBytes = 0;   // bytes a dense ring allreduce of the same gradients would send
  double encodeSeconds = 0;  // compressors' encoding time (part of commSeconds)
  double decodeSeconds = 0;  // compressors' decoding time (part of commSeconds)
  // asgd, ssp: the pushes the servers answered, and the sum and maximum of their staleness.
  uint64_t asyncPushes = 0;
  uint64_t stalenessSum = 0;
  uint64_t stalenessMax = 0;

  StepStats& operator+=(const StepStats& other);
};

class Engine final : private EngineEvents {
 public:
  // `parameters` (by tensor; the model's storage) are needed, and only used, when
  // updatesParameters(options): the engine (or the servers) then write the updated values into
  // them. Throws ConfigError for a combination it cannot run.
  Engine(Transport& transport, const std::vector<TensorShape>& tensors, EngineOptions options,
         std::vector<std::span<float>> parameters = {});
  ~Engine() override;
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Throws ConfigError for options the engine cannot run on these tensors (a bad compression
  // spec; sharded with p3 or with compression; a compressor that cannot push to servers),
  // before any work starts.
  static void validate(const EngineOptions& options, const std::vector<TensorShape>& tensors);
  // Why an engine with `options` cannot hand over to one of another schedule between steps
  // (state that does not carry over: compressors', servers', sharded's, a rule other than SGD in
  // update mode), or "" if it can (--schedule auto).
  static std::string whyNotReschedulable(const EngineOptions& options);
  // Whether the engine (or the servers) update the parameters instead of returning averages.
  static bool updatesParameters(const EngineOptions& options) {
    return options.servers || options.sharded || options.schedule.prioritized();
  }
  bool updatesParameters() const { return updates_; }

  // Where tensor `t`'s gradient goes; in gradient mode, after waitFor(t), its average.
  std::span<float> slot(int t);
  // Tensor `t`'s gradient is in its slot. Thread-safe. Past the warm-up of 1-bit Adam in update
  // mode (UpdateRule::varianceFrozenAfter), first turns it into this rank's momentum.
  void markReady(int t);
  // Ends the step's backward without waiting: tensors never marked ready (unused parameters)
  // count as zero gradients (with a warning naming them, once). Rethrows an earlier error.
  void endBackward();
  // Blocks until tensor t's result of every ended step is in place.
  void waitFor(int t);
  // Blocks until every ended step is complete and nothing is in flight.
  void drain();
  // endBackward(), then drain(): gradient mode's end of a step.
  void finishStep();
  // Between steps, for checkpoints and elastic commits (collective: every rank calls them): the
  // optimizer state the engine (update mode over the ring) or the servers keep, and back: SGD's
  // velocity, or Adam's and AdamW's first moment then second moment, each by tensor in
  // registration order (sharded: gathered whole from the ranks that own each block); empty in
  // gradient mode, where the caller's optimizer keeps it. Through servers (SGD only)
  // optimizerState() also makes this worker's parameters the servers', and setOptimizerState()
  // is only possible before the first step.
  // `stateSteps`: how many steps the state has taken (Adam's and AdamW's count, their bias
  // correction, as torch keeps it), counted on from the engine's step however setStep() moves it
  // before or after; none (SGD, whose velocity has no count): the job's steps. So zero moments
  // with a count of 0 at step 100 update as a fresh Adam does, not as moments of 100 steps.
  std::vector<float> optimizerState();
  void setOptimizerState(std::span<const float> state,
                         std::optional<uint64_t> stateSteps = std::nullopt);
  // The steps the optimizer state has taken: nextStep() unless setOptimizerState gave a count.
  uint64_t optimizerSteps() const;
  // Makes this worker's parameters the one global model (the servers', where each worker may
  // train its own copy); nothing to do over the ring. Between steps; collective.
  void pullGlobalModel();
  // This rank's state beyond the parameters and the optimizer state (Executor::saveState:
  // compressors, the delayed strategies' local models), as bytes for a checkpoint, and back into
  // a fresh engine of the same run before its first step (after setOptimizerState). This rank's
  // own, not collective. loadState also reads the older format that held Adam's moments (this
  // rank's) here. loadState throws DataError for state of another run (another schedule,
  // compressor, strategy or model).
  std::vector<uint8_t> saveState();
  void loadState(std::span<const uint8_t> state);
  // The format saveState's `state` is in (1: it also held Adam's moments in update mode); 0 for
  // none (empty). Throws DataError for bytes too short to say.
  static uint64_t stateFormat(std::span<const uint8_t> state);

  // Sums over every completed operation. Thread-safe.
  StepStats totals() const;
  // Records each unit's queueing and operations on the communication lane (null: no tracing).
  // Set before the first step; the recorder must outlive the engine.
  void setTrace(TraceRecorder* trace) { trace_ = trace; }
  const GradientLayout& layout() const { return layout_; }
  const CompressionPlan& compression() const { return plan_; }
  // Whether parameter t's compressor applies momentum itself (its optimizer must not).
  bool absorbsMomentum(size_t t) const { return plan_.absorbsMomentum(t); }
  // The compression guard's decisions so far (compress/guard.h): over the ring the same on every
  // rank; through servers this worker's own, for its pushes (GuardEvent::rank). Empty without
  // compression or with CompressionConfig::guard off.
  std::vector<GuardEvent> guardEvents() const;
  // This rank's training loss of the step whose backward comes next, for the guard's loss
  // signal (compress/loss_trend.h); nothing without a guard. Training thread, between the forward
  // and the end of that backward.
  void reportLoss(double loss);
  // The global step the next step is (compression warm-up, seeds, delays); set it when resuming,
  // before the first step.
  void setStep(uint64_t step);
  // The global step the next backward produces: setStep's, plus the steps ended since.
  uint64_t nextStep() const;

 private:
  // EngineEvents, for the executor's own threads.
  void unitDone(size_t unit, uint64_t step) override;
  void busy(int delta) override;
  void traceSpan(size_t unit, const std::string& name, Nanos start,
                 const std::string& detail) override;
  void pushAnswered(uint64_t staleness) override;
  void fail(std::exception_ptr error) override;

  std::unique_ptr<Executor> makeExecutor(std::vector<std::span<float>> parameters);
  // The compression guard over the compressed units (the ring's exchanges or this worker's
  // pushes), or null (guard off, nothing compressed).
  std::unique_ptr<CompressionGuard> makeGuard() const;
  // On the training thread after the backward of step `ended - 1` ended: at the end of a guard
  // window, waits for the step it measured, then runs the guard's check (a collective).
  void watchCompression(uint64_t ended);
  void communicate();
  // Blocks until the next operation may start (none: the engine is stopping).
  std::optional<PlannedOp> nextOp(std::unique_lock<std::mutex>& lock);
  // How many operations may be in flight at once (communication threads).
  size_t lanes() const;
  void announce(const PlannedOp& pick);  // p3's leader over the ring, with the lock held
  void settleSends(std::vector<WorkPtr>& sends) noexcept;
  void followPick(std::unique_lock<std::mutex>& lock);
  void finishOp(const PlannedOp& op, const OpOutcome& outcome);  // with the lock held
  void markTensorReady(int t);                                   // with the lock held
  void markUnitReady(size_t unit);                               // with the lock held
  void markDone(size_t unit, uint64_t step);                     // with the lock held
  void busyLocked(int delta);
  // Waits until `done()` (or a failure, rethrown); throws InternalError naming `what` if the
  // bound passes first, which only a broken engine lets happen.
  template <typename Done>
  void waitUntil(std::unique_lock<std::mutex>& lock, Done done, const std::string& what);
  std::chrono::milliseconds waitBound() const;
  std::string unitName(size_t unit) const;
  void traceOp(const PlannedOp& op, Nanos readyAt, Nanos start, const OpOutcome& outcome);

  Transport& transport_;
  const std::vector<TensorShape> tensors_;
  const EngineOptions options_;
  const CompressionPlan plan_;
  const GradientLayout layout_;
  const bool updates_;
  const int workers_;             // ranks that train (the transport may span servers too)
  std::vector<float> gradients_;  // the slots, flat by layout

  mutable std::mutex mutex_;  // guards everything below
  std::condition_variable cv_;
  StepPlanner planner_;
  struct Announcement {  // p3's leader over the ring: a pick being announced
    uint64_t decision = 0;
    std::vector<WorkPtr> sends;  // read `decision` until done
  };
  std::vector<Announcement> announcements_;
  size_t picks_ = 0;
  std::vector<bool> ready_;          // by tensor, this backward
  std::vector<size_t> waitingIn_;    // by unit: tensors not ready yet this backward
  std::vector<Nanos> readyAt_;       // by unit: when it last became ready
  std::vector<uint64_t> doneSteps_;  // by unit: steps whose result is in place
  std::vector<bool> warnedUnused_;   // by tensor
  uint64_t stepsEnded_ = 0;          // the global step backward produces now
  // The step at which the optimizer state had taken no step (Adam's bias correction counts from
  // it): 0 unless setOptimizerState gave the state's own count (stateCounted_).
  int64_t stateOrigin_ = 0;
  bool stateCounted_ = false;
  bool following_ = false;  // a communication thread is receiving rank 0's next pick
  int active_ = 0;          // operations and replies in flight
  Nanos busySince_{0};
  bool stop_ = false;
  std::exception_ptr error_;
  StepStats totals_;
  TraceRecorder* trace_ = nullptr;

  std::unique_ptr<CompressionGuard> guard_;  // before executor_, which keeps a pointer to it
  std::unique_ptr<Executor> executor_;
  std::vector<std::thread> threads_;  // lanes() communication threads
};

}  // namespace gradsync
