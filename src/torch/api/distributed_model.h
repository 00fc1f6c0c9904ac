// A module trained data-parallel: an autograd hook on every parameter that requires a gradient
// copies its gradient into the engine as soon as backward produces it, so communication
// overlaps the rest of backward (per the schedule). Any torch::nn::Module: gradsync's own models
// (Model) also give layer-by-layer waits in update mode; the public DistributedOptimizer
// (include/gradsync/torch/distributed_optimizer.h) wraps this class for users' modules.
//
// Two ways a step ends (Engine::updatesParameters, sync/engine.h):
//  - fifo, wfbp, fusion: synchronizeGradients() waits for the averages and writes them into
//    each parameter's .grad; the caller's optimizer then steps.
//  - p3, sharded, and every parameter-server strategy: endBackward() returns at once; the
//    engine (or the servers) apply the update as each unit's gradients arrive. The next forward
//    must wait for the parameters it reads: a Model's pre-forward hook waits layer by layer, only
//    for that layer's parameters; for other modules the caller waits with waitForModule(layer)
//    in its forward, or for everything with waitForParameters().
// With localsgd and diloco nothing is communicated per step: afterLocalStep() does the outer
// work due (the outer step every H steps, or a Streaming DiLoCo fragment every H/P).
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>

#include "gradsync/transport.h"
#include "sync/engine.h"
#include "torch/api/outer_optimizer.h"
#include "torch/models/models.h"

namespace gradsync {

// How a DistributedModel synchronizes; the trainer builds it from --sync and its companions.
struct SyncSetup {
  EngineOptions engine;              // schedule, compression, rule, parameter servers, ...
  Transport* psTransport = nullptr;  // workers and separate servers (null: the workers')
  bool local = false;                // localsgd: no communication per step
  // sharded: the fully-connected exchange (sync/fc_exchange.h) for which linear layers of a
  // gradsync Model, by the rule of fcUsesExchange over `fcRows` rows per rank and step.
  FcMode fc = FcMode::kReduce;
  size_t fcRows = 0;
  int backwardPasses = 1;  // SyncOptions::backwardPassesPerStep
};

class DistributedModel {
 public:
  // Registers the hooks. Every rank must construct it with the same module and options;
  // `transport` holds the workers only. Parameters are float32 on the CPU (ConfigError else).
  DistributedModel(std::shared_ptr<torch::nn::Module> module, Transport& transport,
                   SyncSetup setup);
  DistributedModel(std::shared_ptr<torch::nn::Module> module, Transport& transport,
                   EngineOptions options)
      : DistributedModel(std::move(module), transport, SyncSetup{.engine = std::move(options)}) {}
  // Removes the hooks: the model may outlive this object (it is shared), the engine may not.
  ~DistributedModel();
  DistributedModel(const DistributedModel&) = delete;
  DistributedModel& operator=(const DistributedModel&) = delete;

  torch::nn::Module& module() { return *module_; }
  // The synchronized parameters (those requiring a gradient), in registration order.
  std::vector<torch::Tensor> parameters() const { return parameters_; }

  // Makes every rank's parameters and buffers equal to rank 0's (call once before training).
  void broadcastState();
  // Whether the engine updates the parameters (p3, sharded): then the caller's optimizer must
  // not step, and the step ends with endBackward().
  bool updatesParameters() const { return updates_; }
  // Waits for this step's gradients to be averaged and writes them into each parameter's .grad.
  // A parameter no rank's backward reached counts as a zero gradient; one that has never had a
  // gradient on any rank keeps none (the optimizer skips it, as on one worker). Rethrows
  // communication errors. Not when updatesParameters().
  // `scale` multiplies the averages first (join: size / ranks that still have data).
  void synchronizeGradients(float scale = 1.0f);
  // A step of a rank without data (join): contributes zero gradients to the others' step, then
  // writes the averages (times `scale`) into .grad as synchronizeGradients does, so that its
  // optimizer can step with the others and its model stays theirs. Gradient mode only.
  void shadowStep(float scale);
  // Ends this step's backward without waiting (updatesParameters() only).
  void endBackward();
  // Waits until every parameter holds every ended step's update (after a forward this costs
  // nothing: its hooks waited already). Call before reading or saving parameters, and before
  // backward (parameters no layer used were not waited for).
  void waitForParameters();
  // Waits until `layer`'s parameters (a submodule of this module, recursively) hold every ended
  // step's update: for a forward that overlaps the previous step's communication, called before
  // each layer runs. No-op outside update mode and for modules that are not submodules.
  void waitForModule(const torch::nn::Module& layer);
  // Seconds the waits for parameters (and the FC exchange's waits in backward) took so far:
  // exposed communication.
  double waitSeconds() const;
  // Averages BatchNorm running statistics across ranks, so evaluation and checkpoints see one
  // model (each rank normalises with its own batch statistics while training, as DDP does
  // without SyncBatchNorm).
  void averageBuffers();
  // localsgd's and diloco's outer step now (torch/api/outer_optimizer.h) among the ranks of
  // `across` (this model's transport, or with diloco's group=host the whole job, of which this
  // model's transport is the host): the parameters become the new global model. Collective.
  void outerStep(OuterOptimizer& outer, Transport& across);
  // After local step `step`: the outer work due then (every H steps; Streaming DiLoCo's
  // fragments every H/P), among the ranks of `across`. Collective.
  void afterLocalStep(OuterOptimizer& outer, int64_t step, Transport& across);
  // With parameter servers each worker trains its own copy (asgd, ssp and the delayed
  // strategies let them differ): pullGlobalModel() makes the parameters the servers', and
  // keepLocalModel(fn) puts this worker's own back after fn, so that evaluating or saving the
  // global model leaves training undisturbed. Both no-ops without servers; every rank calls
  // them together.
  void pullGlobalModel();
  void keepLocalModel(const std::function<void()>& fn);

  // With updatesParameters(), the optimizer's state (SGD's velocity, Adam's and AdamW's moments)
  // lives in the engine: these move it into the optimizer's own state before a checkpoint is
  // saved or an elastic commit taken (a collective for sharded, which gathers it whole), and
  // back after one is loaded (engine_optimizer_state.h), so checkpoints have one format whatever
  // the schedule and the world size. Nothing without updatesParameters().
  void stateToOptimizer(torch::optim::Optimizer& optimizer);
  void stateFromOptimizer(torch::optim::Optimizer& optimizer);
  // The engine's state for checkpoints (Engine::saveState), empty without an engine, and back.
  std::vector<uint8_t> engineState();
  void loadEngineState(std::span<const uint8_t> state);
  // Whether engineState() bytes are of the older format that held Adam's moments in update mode
  // (this rank's), which maps onto no other membership.
  static bool engineStateKeepsMoments(std::span<const uint8_t> state) {
    return Engine::stateFormat(state) == 1;
  }

  // Sums over every completed step (none for a world of one), the FC exchange's traffic
  // included.
  StepStats totals() const;
  // The linear layers whose weights the FC exchange handles (sharded:fc=exchange|auto).
  size_t exchangedLayers() const { return exchanges_.size(); }
  void setTrace(TraceRecorder* trace);
  // The engine's compression guard decisions (Engine::guardEvents); none without an engine.
  void reportLoss(double loss) {
    if (engine_) engine_->reportLoss(loss);
  }
  std::vector<GuardEvent> guardEvents() const {
    return engine_ ? engine_->guardEvents() : std::vector<GuardEvent>{};
  }
  // Whether parameter i's compressor applies momentum itself (its optimizer group must not).
  bool absorbsMomentum(size_t i) const { return engine_ && engine_->absorbsMomentum(i); }
  // Why this run cannot switch its schedule between steps (reschedule), or "" if it can: a
  // dense ring run (no compression, servers, sharded or localsgd), whose update mode applies
  // SGD (the only rule whose state, the velocity, carries over).
  std::string whyNotReschedulable() const;
  // Between steps (--schedule auto): waits for the step in flight, then runs the next steps
  // with `schedule`, the engine's SGD velocity, step count and statistics carried over; with
  // two workers the parameters stay bitwise those of one schedule throughout. `schedule` must
  // keep the mode (p3 updates, fifo/wfbp/fusion return averages). Collective.
  void reschedule(const ScheduleSpec& schedule);
  // The global step the next synchronizeGradients completes (after a resume).
  void setStep(uint64_t step) {
    if (engine_) engine_->setStep(step);
  }
  // Whether gradients go through the engine (more than one worker, gradient or update mode).
  bool communicates() const { return engine_ != nullptr; }
  // Applied to this rank's gradient of each parameter (by index into parameters(), summed over
  // the step's backward passes) before the engine takes it, on the thread running backward; to
  // a parameter no pass used this step as a zero gradient. Null: none.
  using GradientTransform = std::function<void(size_t index, std::span<float> gradient)>;
  void setGradientTransform(GradientTransform transform) { transform_ = std::move(transform); }

 private:
  void checkParameter(const std::string& name, const torch::Tensor& parameter) const;
  // The autograd hook of parameter `index`: its gradient into the engine's slot (summed over a
  // step's backward passes), ready once the step's last pass produced it.
  void onGradient(int index, const torch::Tensor& grad);
  // Before a step ends: parameters a pass skipped are ready with what their passes summed.
  void endPasses();
  void hookLayers();
  // The layers the FC exchange takes (sharded:fc=...), as the engine's tensors; then, once the
  // engine exists, their exchanges handed to the model.
  std::vector<ExchangedTensor> planExchanges(const SyncSetup& setup);
  void attachExchanges(Transport& transport);

  std::shared_ptr<torch::nn::Module> module_;
  Transport& transport_;
  const Clock* clock_;
  std::vector<torch::Tensor> parameters_;
  GradientTransform transform_;
  std::unique_ptr<Engine> engine_;  // null for a world of one, and for localsgd
  EngineOptions engineOptions_;     // what engine_ was built with (reschedule builds anew)
  std::vector<TensorShape> tensors_;
  StepStats retired_;  // the totals of engines replaced by reschedule
  bool updates_ = false;
  bool servers_ = false;         // through parameter servers
  StepStats averaging_;          // localsgd, diloco: what outerStep() cost
  std::vector<unsigned> hooks_;  // by parameter, when engine_ is set
  int passes_ = 1;               // backward passes per step
  std::vector<int> passesSeen_;  // by parameter: this step's passes that reached it so far
  // By layer: its name and the parameters its pre-forward hook waits for (update mode).
  struct LayerWaits {
    std::string name;
    std::vector<int> parameters;
  };
  std::unordered_map<const torch::nn::Module*, LayerWaits> layers_;
  double waitSeconds_ = 0;
  TraceRecorder* trace_ = nullptr;
  struct PlannedExchange {
    LinearLayer layer;
    int weight = -1;  // the engine's tensor indices
    int bias = -1;
  };
  std::vector<PlannedExchange> planned_;                     // before the engine exists
  std::vector<std::shared_ptr<FcExchangeLayer>> exchanges_;  // handed to the model
};

}  // namespace gradsync
