// Averages gradients across ranks while backward is still running (torch-free: the torch layer
// copies each gradient into its slot from an autograd hook and calls markReady). Units the
// compression plan compresses go through their Compressor's exchange instead of a dense
// allreduce (after the plan's warm-up steps).
//
// One background communication thread per engine executes the schedule's units in index order
// (identical on every rank, so the collectives match), each as soon as all its tensors are
// ready (wfbp, fusion) or once backward is over (fifo). finishStep() blocks until every unit is
// averaged and rethrows any communication error on the training thread.
//
// Threading: slot/markReady may be called from the thread running backward; finishStep from the
// training thread; a step's markReady calls must all precede its finishStep.
#pragma once

#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "common/tensor_shape.h"
#include "compress/compressor.h"
#include "compress/policy.h"
#include "gradsync/transport.h"
#include "schedule/schedule.h"
#include "trace/trace_recorder.h"

namespace gradsync {

struct EngineOptions {
  ScheduleSpec schedule;
  CompressionConfig compression;  // default: every tensor dense
  double momentum = 0;            // the optimizer's, for compressors that absorb it (DGC)
  uint64_t seed = 0;              // identical on all ranks; stochastic compressors draw from it
};

// What one step cost, measured by the engine.
struct StepStats {
  double commSeconds = 0;     // time the communication thread spent in collectives
  double exposedSeconds = 0;  // time finishStep blocked the training thread (not overlapped)
  uint64_t bytesSent = 0;     // bytes this rank put on the network for the step's gradients
  uint64_t denseBytes = 0;    // bytes a dense ring allreduce of the same gradients would send
  double encodeSeconds = 0;   // compressors' encoding time (part of commSeconds)
  double decodeSeconds = 0;   // compressors' decoding time (part of commSeconds)
};

class GradientEngine {
 public:
  GradientEngine(Transport& transport, const std::vector<TensorShape>& tensors,
                 EngineOptions options);
  ~GradientEngine();
  GradientEngine(const GradientEngine&) = delete;
  GradientEngine& operator=(const GradientEngine&) = delete;

  // Where tensor `t`'s gradient goes; after finishStep it holds the average over ranks.
  std::span<float> slot(int t);
  // Tensor `t`'s gradient is in its slot. Thread-safe.
  void markReady(int t);
  // Ends the step: tensors never marked ready (unused parameters) count as zero gradients (with
  // a warning naming them, once); waits for every unit; rethrows a communication error.
  void finishStep();

  const StepStats& lastStep() const { return lastStep_; }
  // Records each unit's queueing and allreduce on the communication lane (null: no tracing).
  // Set before the first step; the recorder must outlive the engine.
  void setTrace(TraceRecorder* trace) { trace_ = trace; }
  const GradientLayout& layout() const { return layout_; }
  const CompressionPlan& compression() const { return plan_; }
  // The global step the next finishStep completes (compression warm-up and seeds follow it);
  // set it when resuming. Not while a step is in progress.
  void setStep(uint64_t step) { step_ = step; }

 private:
  bool unitStartable(size_t unit) const;
  void communicate();
  void resetStep();
  bool exchangeUnit(size_t unit, ExchangeStats& stats);
  // `compressed`: the exchange's statistics, or null for a dense allreduce.
  void traceUnit(size_t unit, Nanos readyAt, Nanos start, uint64_t bytes,
                 const ExchangeStats* compressed);

  Transport& transport_;
  const std::vector<TensorShape> tensors_;
  const EngineOptions options_;
  const CompressionPlan plan_;
  const GradientLayout layout_;
  std::vector<float> flat_;
  std::vector<std::unique_ptr<Compressor>> compressors_;  // by unit; null: dense
  std::vector<float> sent_;                               // scratch for exchanges
  uint64_t step_ = 0;                                     // written between steps only

  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<bool> ready_;        // by tensor
  std::vector<size_t> waitingIn_;  // tensors not ready yet, by unit
  std::vector<Nanos> readyAt_;     // when each unit's last tensor became ready
  size_t nextUnit_ = 0;            // next unit the communication thread takes
  size_t unitsDone_ = 0;
  bool backwardDone_ = false;
  bool stop_ = false;
  std::exception_ptr error_;
  StepStats stepStats_;  // accumulated by the communication thread during the step
  std::vector<bool> warnedUnused_;

  StepStats lastStep_;
  TraceRecorder* trace_ = nullptr;
  std::thread thread_;
};

}  // namespace gradsync
