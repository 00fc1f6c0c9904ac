// What the torch layer drives during training, whichever way gradients are synchronized:
// GradientEngine (collectives among the workers: ssgd, p3, sharded) or PsEngine (parameter
// servers: ssgd over PS, asgd, ssp, odsgd, ssdsgd, cdsgd). Each implementation's header states
// its threading and which calls apply to it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "compress/policy.h"
#include "trace/trace_recorder.h"

namespace gradsync {

// What steps cost, measured by an engine.
struct StepStats {
  double commSeconds = 0;    // time spent communicating gradients (see the engine)
  uint64_t bytesSent = 0;    // bytes this rank put on the network for the steps' gradients
  uint64_t denseBytes = 0;   // bytes a dense ring allreduce of the same gradients would send
  double encodeSeconds = 0;  // compressors' encoding time (part of commSeconds)
  double decodeSeconds = 0;  // compressors' decoding time (part of commSeconds)

  StepStats& operator+=(const StepStats& other) {
    commSeconds += other.commSeconds;
    bytesSent += other.bytesSent;
    denseBytes += other.denseBytes;
    encodeSeconds += other.encodeSeconds;
    decodeSeconds += other.decodeSeconds;
    return *this;
  }
};

class SyncEngine {
 public:
  virtual ~SyncEngine() = default;

  // Where tensor `t`'s gradient goes (from the backward's autograd hook).
  virtual std::span<float> slot(int t) = 0;
  // Tensor `t`'s gradient is in its slot. Thread-safe.
  virtual void markReady(int t) = 0;
  // Gradient mode: ends the step and waits until every slot holds the average over ranks.
  virtual void finishStep() = 0;
  // Whether the engine updates the parameters itself (then the step ends with endBackward and
  // the next forward calls waitParameters before each layer).
  virtual bool updatesParameters() const = 0;
  // Update mode: ends the step's backward without waiting.
  virtual void endBackward() = 0;
  // Update mode: blocks until tensor t's parameters are ready for the next forward.
  virtual void waitParameters(int t) = 0;
  // Waits until every ended step is complete; rethrows a communication error.
  virtual void drain() = 0;
  // Update mode, between steps: the SGD velocity by tensor, flattened in registration order,
  // and back (for checkpoints). Every rank calls them together.
  virtual std::vector<float> velocity() = 0;
  virtual void setVelocity(std::span<const float> velocity) = 0;

  // Sums over every completed step. Thread-safe.
  virtual StepStats totals() const = 0;
  // Records communication events (null: no tracing); set before the first step.
  virtual void setTrace(TraceRecorder* trace) = 0;
  // Whether parameter t's compressor applies momentum itself (its optimizer must not).
  virtual bool absorbsMomentum(size_t t) const = 0;
  // The global step the next step is (compression warm-up, delays); set when resuming.
  virtual void setStep(uint64_t step) = 0;
};

}  // namespace gradsync
