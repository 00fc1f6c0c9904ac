// A worker's side of the parameter servers: carries out the engine's pushes (sync/engine.h;
// one per unit and step, planned by schedule/step_planner.h) and receives the servers' replies,
// which carry the updated parameters (P3's fused push-pull). Units are the schedule's (wfbp:
// tensors; fusion: buckets; p3: slices by priority, whose credit window counts pushes on the
// wire, not replies).
//
// Strategies (docs/algorithms.md, "Parameter server" and "Delayed SGD"):
//   ssgd, asgd, ssp:S  the server's consistency mode decides when it applies a push and when it
//                      answers; the reply goes into the worker's parameters, and the next
//                      forward waits, layer by layer, for them. With predictWeights (asgd,
//                      ssp: `--compensate lwp`), the parameters get the weights predicted over
//                      the unit's staleness instead (ps/weight_prediction.h); forward and
//                      backward run on them, and the reply itself is kept aside.
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
// Pushes carry a compressor's encoding after its warm-up (compress/push_codec.h), not with cdsgd.
//
// Servers are co-located (server s is a thread of worker s, run by this client) or separate
// ranks (PsPlacement). Threading: run() on the engine's communication thread; one receiver
// thread per server; optimizerState(), setOptimizerState() and pullGlobalModel() on the training
// thread between steps.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
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
#include "ps/push_plan.h"
#include "ps/weight_prediction.h"
#include "schedule/executor.h"
#include "schedule/schedule.h"

namespace gradsync {

class CompressionGuard;

struct WorkerSetup {
  const std::vector<TensorShape>& tensors;
  const GradientLayout& layout;
  const CompressionPlan& plan;               // planPushes' (ps/served_units.h)
  std::span<const float> gradients;          // the engine's slots, flat by layout
  std::vector<std::span<float>> parameters;  // by tensor (the model's storage): get the updates
  double lr = 0;                             // what the servers apply
  uint64_t seed = 0;                         // compressors draw from it (the same on every worker)
  const Clock* clock = &SteadyClock::instance();
  // The compression guard (compress/guard.h), owned by the engine; null: none. This worker measures
  // its encoded pushes on the guard's sampled steps, and pushes a unit the guard made dense
  // without its encoding (no kEncoded) and without its error-feedback residual.
  CompressionGuard* guard = nullptr;
};

class PsWorkerClient final : public Executor {
 public:
  // `transport` spans workers and (separate) servers. With co-located servers, this worker
  // runs its server. Keeps references to setup's tensors, layout and plan and to `events`.
  // Throws ConfigError for options it cannot run.
  PsWorkerClient(Transport& transport, WorkerSetup setup, PsOptions options, EngineEvents& events);
  // Tells every server that this worker is done (even after a failure, so that none waits for
  // it), then waits for the co-located server to serve the others to their end.
  ~PsWorkerClient() override;
  PsWorkerClient(const PsWorkerClient&) = delete;
  PsWorkerClient& operator=(const PsWorkerClient&) = delete;

  // A push (the only operation through servers): returns once it is on the wire; done at once
  // for the delayed strategies (their local step updated the parameters), else when the reply
  // arrives (EngineEvents::unitDone).
  OpOutcome run(const PlannedOp& op) override;
  // From the servers; also makes this worker's parameters the servers' (the global model, which
  // checkpoints save and evaluations test, never a weight prediction), leaving the delayed
  // strategies' own state alone.
  std::vector<float> optimizerState() override;
  // Only before the first push: rank 0 sends it to the servers with the parameters.
  void setOptimizerState(std::span<const float> velocity) override;
  void pullGlobalModel() override { optimizerState(); }
  // The compressors' residuals, the delayed strategies' local state (the last two pulled
  // models, local velocity, CD-SGD's residual) and, where workers train their own copies (asgd,
  // ssp, the delayed strategies), this worker's parameters (with predictWeights, each unit's last
  // reply as it came, not the prediction trained on: a resumed run starts predicting afresh).
  // loadState makes the parameters the worker's own and keeps the model they held (the
  // checkpoint's: the servers') for the servers.
  void saveState(StateWriter& out) const override;
  void loadState(StateReader& in, uint64_t format) override;

 private:
  struct Expected {  // a reply a receiver thread waits for
    size_t unit;
    uint64_t step;
    bool toParameters;  // else into global_
    Nanos sentAt;
  };

  bool waitForPull(size_t unit);
  std::optional<std::vector<uint8_t>> encode(const PlannedOp& op, const PushPlan& push,
                                             OpOutcome& outcome);
  // The guard's signals of a push `codec` encoded as `codes` from `gradient` with `seed`.
  void measure(const PlannedOp& op, PushCodec& codec, std::span<const float> gradient,
               std::span<const uint8_t> codes, uint64_t seed) const;
  // The delayed strategies' local step; `freshPull`: a pull arrived since the last one.
  void localUpdate(size_t unit, bool freshPull);
  void expectReply(const PlannedOp& op, const PushPlan& push, int server, Nanos sentAt);
  void receive(int server);
  // `staleness`: the push's, from an asynchronous server; none from a synchronous one.
  void arrived(const Expected& expected, int server, std::optional<PsStaleness> staleness);
  // The reply in replies_ goes into the parameters: as it is, or as predicted.
  void replyToParameters(size_t unit, std::optional<PsStaleness> staleness);
  void publishState();
  // Whether this worker's parameters may differ from the servers' between steps.
  bool trainsOwnCopy() const;
  // Sends a request (and its payload) and waits until both are on the wire.
  void sendRequest(int server, PsHeader header, const void* payload);
  // Rethrows a transport failure as one that names the parameter server.
  [[noreturn]] void rethrowNamingServer(int server, const Error& error) const;
  // Calls fn(parameter segment, flat offset) for each tensor segment of the unit.
  template <typename Fn>
  void forEachSegment(size_t unit, Fn&& fn) const;
  void copyToParameters(size_t unit, const std::vector<float>& flat);
  void copyFromParameters(size_t unit, std::vector<float>& flat) const;
  std::chrono::milliseconds waitBound() const;
  std::string serverName(int server) const;

  Transport& transport_;
  const WorkerSetup s_;
  const PsOptions options_;
  EngineEvents& events_;
  std::vector<std::unique_ptr<PushCodec>> codecs_;  // by unit; null: pushed dense
  std::unique_ptr<ParameterServer> server_;         // co-located
  std::unique_ptr<WeightPredictor> predictor_;      // with predictWeights

  std::vector<float> staged_;         // flat: what a dense push sends
  std::vector<float> global_;         // flat: the last pulled global weights (delayed modes)
  std::vector<float> previous_;       // flat: the pulled weights before those (ssdsgd's GLU)
  std::vector<float> replies_;        // flat: replies land here
  std::vector<float> predicted_;      // flat, with predictWeights: the weights trained on
  std::vector<float> residual_;       // flat: cdsgd's error feedback
  std::vector<float> localVelocity_;  // flat: the delayed strategies' local momentum
  std::vector<int> span_;             // by unit: steps between previous_ and global_
  std::vector<float> velocity_;     // by tensor, set by setOptimizerState, sent with the first push
  std::vector<float> serverModel_;  // flat, after loadState: the servers' model to publish
  bool restoredDelayed_ = false;    // loadState restored global_ and previous_
  uint64_t bytesReported_ = 0;      // the transport's bytes counted in outcomes so far

  std::mutex mutex_;  // guards what follows
  std::condition_variable cv_;
  std::vector<uint64_t> pendingPull_;           // by unit: replies still to come into global_
  std::vector<bool> freshPull_;                 // by unit: a reply arrived since the local step
  std::vector<std::deque<Expected>> expected_;  // by server
  std::atomic<bool> published_ = false;         // rank 0 sent the servers their state
  bool stopping_ = false;
  bool failed_ = false;

  std::mutex sendMutex_;  // one request's header and payload go out together
  std::vector<std::thread> receivers_;
};

}  // namespace gradsync
