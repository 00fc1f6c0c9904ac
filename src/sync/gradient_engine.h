// Averages gradients across ranks while backward is still running (torch-free: the torch layer
// copies each gradient into its slot from an autograd hook and calls markReady).
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
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "gradsync/transport.h"
#include "schedule/schedule.h"
#include "trace/trace_recorder.h"

namespace gradsync {

struct TensorInfo {
  std::string name;
  size_t elements = 0;
};

// What one step cost, measured by the engine.
struct StepStats {
  double commSeconds = 0;     // time the communication thread spent in collectives
  double exposedSeconds = 0;  // time finishStep blocked the training thread (not overlapped)
  uint64_t bytesSent = 0;     // bytes this rank put on the network for the step's gradients
};

class GradientEngine {
 public:
  GradientEngine(Transport& transport, const std::vector<TensorInfo>& tensors,
                 const ScheduleSpec& schedule);
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

 private:
  bool unitStartable(size_t unit) const;
  void communicate();
  void resetStep();
  void traceUnit(const CommUnit& unit, Nanos readyAt, Nanos start, uint64_t bytes);

  Transport& transport_;
  const std::vector<TensorInfo> tensors_;
  const ScheduleSpec schedule_;
  const GradientLayout layout_;
  std::vector<float> flat_;

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
  double commSeconds_ = 0;
  uint64_t bytesSent_ = 0;  // by this step's collectives only
  std::vector<bool> warnedUnused_;

  StepStats lastStep_;
  TraceRecorder* trace_ = nullptr;
  std::thread thread_;
};

}  // namespace gradsync
