// Gradient synchronization through parameter servers (ps/): a worker pushes each unit's
// gradient to the server that holds the unit, and the server's reply carries the updated
// parameters (P3's fused push-pull). Units are the schedule's (wfbp: tensors; fusion: buckets;
// p3: slices sent by priority; its credit window counts pushes on the wire, not replies).
//
// Strategies (docs/algorithms.md, "Parameter server" and "Delayed SGD"):
//   ssgd, asgd, ssp:S  the server's consistency mode decides when it applies a push and when it
//                      answers; the worker writes each reply into its parameters, and the next
//                      forward waits, layer by layer, for them.
//   odsgd              OD-SGD: after `warmupSteps` ssgd steps, each unit's reply (the global
//                      weights W) is kept aside as the base of a local step with the worker's
//                      own gradient, and the next step starts at once while the global update
//                      is in flight. The local step is SGD with momentum whose velocity starts,
//                      at each pull, from the global models' last displacement per step (so the
//                      local model is the global optimizer's step with the local gradient).
//   ssdsgd:K           SSD-SGD: after the warm-up, pushes every step but pulls every K-th; in
//                      between, local steps add GLU's global direction glu·(W_prev - W), where
//                      W_prev and W are the last two pulled global weights. A pull's weights
//                      replace the local ones at the next step (one-step delay).
//   cdsgd:K            CD-SGD: odsgd's pipeline pushing 2-bit quantized gradients with error
//                      feedback, and a full-precision gradient every K-th step (k-step
//                      correction).
//
// Servers are co-located (server s is a thread of worker s, the default) or separate ranks
// (PsPlacement). Threading: one communication thread pushes, one thread per server receives
// replies; slot/markReady may be called from the thread running backward, the rest from the
// training thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "common/tensor_shape.h"
#include "compress/policy.h"
#include "compress/push_codec.h"
#include "gradsync/clock.h"
#include "gradsync/error.h"
#include "gradsync/transport.h"
#include "ps/parameter_server.h"
#include "ps/protocol.h"
#include "schedule/priority_scheduler.h"
#include "schedule/schedule.h"
#include "sync/sync_engine.h"

namespace gradsync {

struct PsOptions {
  enum class Delay { kNone, kOneStep, kSeveralSteps, kCompressed };  // -, odsgd, ssdsgd, cdsgd
  PsPlacement placement;
  ServerOptions server;  // consistency and momentum
  Delay delay = Delay::kNone;
  int delaySteps = 5;        // ssdsgd: pull every K steps; cdsgd: full precision every K steps
  int64_t warmupSteps = 0;   // plain ssgd steps before the delay starts
  double localLr = 0;        // the local step's learning rate
  double localMomentum = 0;  // the local step's momentum
  double glu = 0.5;          // ssdsgd: weight of the global direction
  float threshold = 0.5f;    // cdsgd: the 2-bit quantizer's threshold
  // Pushes encoded by a compressor after its warm-up (compress/push_codec.h; not with cdsgd,
  // which quantizes itself). The seed is the same on every worker.
  CompressionConfig compression;
  uint64_t seed = 0;
  // What the statistics and traces measure time with (must outlive the engine).
  const Clock* clock = &SteadyClock::instance();
};

class PsEngine final : public SyncEngine {
 public:
  // `transport` spans workers and (separate) servers; `parameters` by tensor (the model's
  // storage) receive the updates. With co-located servers, this worker runs its server.
  // Throws ConfigError for options it cannot run.
  PsEngine(Transport& transport, const std::vector<TensorShape>& tensors, ScheduleSpec schedule,
           double lr, PsOptions options, std::vector<std::span<float>> parameters);
  ~PsEngine() override;
  PsEngine(const PsEngine&) = delete;
  PsEngine& operator=(const PsEngine&) = delete;

  std::span<float> slot(int t) override;
  void markReady(int t) override;
  void finishStep() override;  // not supported: PsEngine always updates the parameters
  bool updatesParameters() const override { return true; }
  void endBackward() override;
  void waitParameters(int t) override;
  void drain() override;
  // From the servers, after drain(); velocity() also makes this worker's parameters the
  // servers' (the global model, which checkpoints save and evaluations test), leaving the
  // delayed strategies' own state alone. setVelocity only before the first step: rank 0 sends
  // it to the servers with the parameters before its first push.
  std::vector<float> velocity() override;
  void setVelocity(std::span<const float> velocity) override;
  StepStats totals() const override;
  void setTrace(TraceRecorder* trace) override { trace_ = trace; }
  bool absorbsMomentum(size_t) const override { return false; }
  void setStep(uint64_t step) override;

 private:
  struct Expected {  // a reply a receiver thread waits for
    size_t unit;
    uint64_t step;
    bool toParameters;  // else into global_
    Nanos sentAt;
  };

  struct Push {  // what a unit's push of one step does
    uint64_t step = 0;
    bool delayed = false;    // after a delayed strategy's warm-up: a local step, no waiting
    bool quantized = false;  // cdsgd's 2-bit codes
    bool wantReply = false;  // a pull (every step but ssdsgd's between its pulls)
  };

  void communicate();
  Push planPush(uint64_t step) const;
  bool waitForPull(size_t unit);
  void pushUnit(size_t unit, uint64_t step);
  void recordPush(size_t unit, const Push& push, int server, Nanos start);
  // The delayed strategies' local step; `freshPull`: a pull arrived since the last one.
  void localUpdate(size_t unit, bool freshPull);
  void receive(int server);
  void arrived(const Expected& expected, int server);
  void publishState();
  // Sends a request (and its payload) and waits until both are on the wire.
  void sendRequest(int server, PsHeader header, const void* payload);
  // Rethrows a transport failure as one that names the parameter server.
  [[noreturn]] void rethrowNamingServer(int server, const Error& error) const;
  // Calls fn(parameter segment, flat offset) for each tensor segment of the unit.
  template <typename Fn>
  void forEachSegment(size_t unit, Fn&& fn) const;
  void copyToParameters(size_t unit, const std::vector<float>& flat);
  void copyFromParameters(size_t unit, std::vector<float>& flat) const;
  void markTensorReady(int t);      // with the lock held
  void markUnitReady(size_t unit);  // with the lock held
  bool delayed(uint64_t step) const;
  void busy(int delta);                                                 // with the lock held
  void traceUnit(size_t unit, uint64_t step, int server, Nanos start);  // with the lock held
  void fail(std::exception_ptr error);
  void rethrowIfFailed();  // with the lock held
  std::chrono::milliseconds waitBound() const;
  std::string serverName(int server) const;

  Transport& transport_;
  const std::vector<TensorShape> tensors_;
  const ScheduleSpec schedule_;
  const PsOptions options_;
  const CompressionPlan plan_;
  const GradientLayout layout_;
  std::vector<std::unique_ptr<PushCodec>> codecs_;  // by unit; null: pushed dense
  const std::vector<std::span<float>> parameters_;
  std::unique_ptr<ParameterServer> server_;  // co-located

  std::vector<float> gradients_;      // flat, by layout: the slots
  std::vector<float> staged_;         // flat: what a push sends (dense)
  std::vector<float> global_;         // flat: the last pulled global weights (delayed modes)
  std::vector<float> previous_;       // flat: the pulled weights before those (ssdsgd's GLU)
  std::vector<float> replies_;        // flat: replies land here
  std::vector<float> residual_;       // flat: cdsgd's error feedback
  std::vector<float> localVelocity_;  // flat: the delayed strategies' local momentum
  std::vector<int> span_;             // by unit: steps between previous_ and global_
  std::vector<float> velocity_;       // by tensor, set by setVelocity, sent with the first push

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  double lr_;
  uint64_t step_ = 0;                             // the step whose gradients backward produces now
  std::vector<size_t> waitingIn_;                 // by unit: tensors not ready yet this step
  std::vector<bool> ready_;                       // by tensor
  std::deque<size_t> queue_;                      // ready units, FIFO (not p3)
  std::unique_ptr<PriorityScheduler> scheduler_;  // p3
  std::vector<uint64_t> stepOf_;       // by unit: the step its queued gradient belongs to
  std::vector<uint64_t> applied_;      // by unit: steps whose update the parameters hold
  std::vector<uint64_t> pendingPull_;  // by unit: steps with a reply still to come (into global_)
  std::vector<bool> freshPull_;        // by unit: a reply arrived since the last local step
  std::vector<std::deque<Expected>> expected_;  // by server
  size_t pending_ = 0;                          // units queued or being sent
  size_t awaiting_ = 0;                         // replies outstanding
  std::atomic<bool> published_ = false;         // rank 0 sent the servers their state
  bool stop_ = false;
  std::exception_ptr error_;
  StepStats totals_;
  int active_ = 0;  // pushes being sent and replies outstanding
  Nanos busySince_{0};
  uint64_t bytesAtStart_ = 0;

  std::mutex sendMutex_;  // one request's header and payload go out together
  TraceRecorder* trace_ = nullptr;
  std::thread thread_;
  std::vector<std::thread> receivers_;
};

}  // namespace gradsync
