// Averages gradients across ranks while backward is still running (torch-free: the torch layer
// copies each gradient into its slot from an autograd hook and calls markReady). Units the
// compression plan compresses go through their Compressor's exchange instead of a dense
// allreduce (after the plan's warm-up steps).
//
// One background communication thread per engine runs each step's operations, every rank in
// the same order (collectives must match):
//   fifo, wfbp, fusion  one allreduce per unit, in unit order, each once its tensors are ready
//                       (fifo: once backward is over). finishStep() waits for them all; the
//                       caller then reads the averages from the slots and runs its optimizer.
//   p3                  one allreduce per slice, in the order rank 0's PriorityScheduler picks
//                       (rank 0 sends each pick to the others, who follow it). The engine
//                       applies the optimizer's rule (optim/update_rule.h: SGD, Adam, AdamW)
//                       to each slice as its average arrives.
//   sharded (Lee et al.) a reduce-scatter per unit as it becomes ready; each rank applies the rule
//                       to the block it owns (its velocity is that block only: 1/P of the
//                       optimizer state); then an allgather of the updated parameters per unit,
//                       in forward order (the input layer first).
// With p3 and sharded (updatesParameters()), endBackward() returns at once and the next
// forward calls waitParameters(t) before each layer: it overlaps the step's communication.
//
// Threading: slot/markReady may be called from the thread running backward; the others from
// the training thread; a step's markReady calls must all precede its finishStep/endBackward.
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "common/tensor_shape.h"
#include "compress/compressor.h"
#include "compress/policy.h"
#include "gradsync/clock.h"
#include "gradsync/transport.h"
#include "optim/update_rule.h"
#include "schedule/priority_scheduler.h"
#include "schedule/schedule.h"
#include "sync/sync_engine.h"
#include "trace/trace_recorder.h"

namespace gradsync {

struct EngineOptions {
  ScheduleSpec schedule;
  CompressionConfig compression;  // default: every tensor dense
  // The optimizer's rule: applied by the engine when it updates parameters (p3, sharded); its
  // momentum also goes to compressors that apply momentum themselves (DGC).
  UpdateRule update;
  uint64_t seed = 0;     // identical on all ranks; stochastic compressors draw from it
  bool sharded = false;  // --sync sharded (dense only; not with p3)
  // What the statistics and traces measure time with (must outlive the engine). Waits are
  // bounded by the transport's timeout, in real time.
  const Clock* clock = &SteadyClock::instance();
};

class GradientEngine final : public SyncEngine {
 public:
  // `parameters` (by tensor; the model's storage) are needed, and only used, when
  // updatesParameters(options): the engine then writes the updated values into them.
  // Throws ConfigError for a combination it cannot run.
  GradientEngine(Transport& transport, const std::vector<TensorShape>& tensors,
                 EngineOptions options, std::vector<std::span<float>> parameters = {});
  ~GradientEngine() override;
  GradientEngine(const GradientEngine&) = delete;
  GradientEngine& operator=(const GradientEngine&) = delete;

  // Where tensor `t`'s gradient goes; after finishStep it holds the average over ranks.
  std::span<float> slot(int t) override;
  // Tensor `t`'s gradient is in its slot. Thread-safe.
  void markReady(int t) override;
  // Ends the step: tensors never marked ready (unused parameters) count as zero gradients (with
  // a warning naming them, once); waits for every unit; rethrows a communication error.
  // Not when updatesParameters().
  void finishStep() override;

  // Throws ConfigError for options the engine cannot run on these tensors (a bad compression
  // spec; sharded with p3 or with compression), before any work starts.
  static void validate(const EngineOptions& options, const std::vector<TensorShape>& tensors);
  // Whether the engine applies the update itself (p3, sharded) instead of returning averages.
  static bool updatesParameters(const EngineOptions& options) {
    return options.sharded || options.schedule.prioritized();
  }
  // Update mode: ends the step's backward (as finishStep, without waiting).
  void endBackward() override;
  // Update mode: blocks until tensor t's parameters include every ended step's update.
  void waitParameters(int t) override;
  // Waits until every ended step is complete; rethrows a communication error.
  void drain() override;
  // Update mode with SGD: the velocity of every tensor, flattened in registration order (sharded:
  // gathered from the ranks that own it, a collective every rank must call), and back. Only
  // between steps (after drain()); for checkpoints.
  std::vector<float> velocity() override;
  void setVelocity(std::span<const float> velocity) override;

  // The last completed step's statistics; read it after finishStep (not in update mode, where
  // steps complete on the communication thread: use totals()).
  const StepStats& lastStep() const { return lastStep_; }
  // Sums over every completed step. Thread-safe.
  StepStats totals() const override;
  // Records each unit's queueing and allreduce on the communication lane (null: no tracing).
  // Set before the first step; the recorder must outlive the engine.
  void setTrace(TraceRecorder* trace) override { trace_ = trace; }
  const GradientLayout& layout() const { return layout_; }
  const CompressionPlan& compression() const { return plan_; }
  bool absorbsMomentum(size_t t) const override { return plan_.absorbsMomentum(t); }
  bool updatesParameters() const override { return updates_; }
  // The global step the next finishStep completes (compression warm-up and seeds follow it);
  // set it when resuming. Not while a step is in progress.
  void setStep(uint64_t step) override { step_ = step; }

 private:
  // One collective of a step on one unit.
  struct Op {
    enum class Kind { kAllreduce, kReduceScatter, kAllgather };
    Kind kind = Kind::kAllreduce;
    size_t unit = 0;
    size_t overtook = 0;  // p3: queued units this one overtook (for the trace)
  };

  std::vector<Op> fixedOrder() const;
  bool opStartable(const Op& op) const;
  // Blocks until the step's next operation may start (null: the engine is stopping).
  std::optional<Op> nextOp(std::unique_lock<std::mutex>& lock);
  std::optional<Op> nextPrioritized(std::unique_lock<std::mutex>& lock);
  void communicate();
  // Runs `op` without the lock (its unit's span is not touched by anyone else meanwhile);
  // returns whether it went compressed.
  bool execute(const Op& op, ExchangeStats& stats);
  bool exchangeUnit(size_t unit, ExchangeStats& stats);
  // Applies the update rule to the flat elements [begin, end) of `unit`, whose optimizer state
  // starts at velocity_[velocityAt] (and secondMoment_[velocityAt]).
  void update(size_t unit, size_t begin, size_t end, size_t velocityAt);
  void allgatherParameters(size_t unit);
  void finishOp(const Op& op);  // with the lock held
  void completeStepIfDone();    // with the lock held
  void markTensorReady(int t);  // with the lock held
  void markUnitReady(size_t unit);
  std::string unitName(size_t unit) const;
  void zeroUnusedGradients();
  void waitSteps(std::unique_lock<std::mutex>& lock, uint64_t steps);
  // Every wait's bound: each collective is bounded by the transport timeout, so this bound is
  // never the one to fire unless the engine itself is broken.
  std::chrono::milliseconds waitBound() const;
  void resetStep();
  // `compressed`: the exchange's statistics, or null for a dense collective.
  void traceOp(const Op& op, Nanos readyAt, Nanos start, uint64_t bytes,
               const ExchangeStats* compressed);

  Transport& transport_;
  const std::vector<TensorShape> tensors_;
  const EngineOptions options_;
  const CompressionPlan plan_;
  const GradientLayout layout_;
  const bool updates_;  // updatesParameters(options_)
  const std::vector<std::span<float>> parameters_;
  std::vector<float> flat_;
  std::vector<std::unique_ptr<Compressor>> compressors_;  // by unit; null: dense
  std::vector<float> sent_;                               // scratch for exchanges
  std::vector<float> velocity_;      // update mode: by flat element (sharded: own blocks only);
                                     // SGD's velocity or Adam's first moment
  std::vector<float> secondMoment_;  // Adam's, laid out as velocity_ (empty for SGD)
  std::vector<size_t> velocityAt_;   // by unit: where its velocity starts in velocity_
  const std::vector<Op> order_;      // fifo, wfbp, fusion, sharded: every step's operations
  std::unique_ptr<PriorityScheduler> scheduler_;  // p3 on rank 0
  std::vector<uint64_t> decisions_;               // p3: this step's picks (unit | overtook << 32)
  std::deque<Op> committed_;                      // p3 on rank 0: picked, not yet started
  uint64_t step_ = 0;                             // the step in progress (or the next one)

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<bool> ready_;             // by tensor
  std::vector<size_t> waitingIn_;       // tensors not ready yet, by unit
  std::vector<Nanos> readyAt_;          // when each unit's last tensor became ready
  std::vector<int> opsLeftOf_;          // update mode, by tensor: operations before it is updated
  std::vector<uint64_t> updatedSteps_;  // update mode, by tensor: steps whose update is applied
  size_t opsStarted_ = 0;
  size_t opsDone_ = 0;
  size_t opsPerStep_ = 0;
  bool stepStarted_ = false;  // a tensor is ready or backward is over
  bool backwardDone_ = false;
  uint64_t stepsEnded_ = 0;  // endBackward/finishStep calls
  uint64_t stepsDone_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  StepStats stepStats_;  // accumulated by the communication thread during the step
  StepStats totals_;
  std::vector<bool> warnedUnused_;

  StepStats lastStep_;
  TraceRecorder* trace_ = nullptr;
  std::thread thread_;
};

}  // namespace gradsync
