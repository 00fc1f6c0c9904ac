// A model trained data-parallel: an autograd hook on every parameter copies its gradient into
// the GradientEngine as soon as backward produces it, so communication overlaps the rest of
// backward (per the schedule).
//
// Two ways a step ends, by engine (SyncEngine::updatesParameters):
//  - fifo, wfbp, fusion: synchronizeGradients() waits for the averages and writes them into
//    each parameter's .grad; the caller's optimizer then steps.
//  - p3, sharded, and every parameter-server strategy: endBackward() returns at once; the
//    engine (or the servers) apply the update as each unit's gradients arrive, and the model's
//    pre-forward hook makes the next forward wait, layer by layer, only for that layer's
//    parameters.
// With localsgd nothing is communicated per step: averageParameters() every H steps.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <optional>
#include <unordered_map>

#include "gradsync/transport.h"
#include "sync/gradient_engine.h"
#include "sync/ps_engine.h"
#include "torch/models.h"

namespace gradsync {

// How a DistributedModel synchronizes; the trainer builds it from --sync and its companions.
struct SyncSetup {
  EngineOptions engine;              // collectives among the workers (schedule, compression, ...)
  std::optional<PsOptions> ps;       // through parameter servers instead
  Transport* psTransport = nullptr;  // workers and separate servers (null: the workers')
  bool local = false;                // localsgd: no communication per step
};

class DistributedModel {
 public:
  // Registers the hooks. Every rank must construct it with the same model and options;
  // `transport` holds the workers only.
  DistributedModel(std::shared_ptr<Model> model, Transport& transport, SyncSetup setup);
  DistributedModel(std::shared_ptr<Model> model, Transport& transport, EngineOptions options)
      : DistributedModel(std::move(model), transport, SyncSetup{.engine = std::move(options)}) {}
  // Removes the hooks: the model may outlive this object (it is shared), the engine may not.
  ~DistributedModel();
  DistributedModel(const DistributedModel&) = delete;
  DistributedModel& operator=(const DistributedModel&) = delete;

  Model& model() { return *model_; }
  std::vector<torch::Tensor> parameters() const { return parameters_; }

  // Makes every rank's parameters and buffers equal to rank 0's (call once before training).
  void broadcastState();
  // Whether the engine updates the parameters (p3, sharded): then the caller's optimizer must
  // not step, and the step ends with endBackward().
  bool updatesParameters() const { return updates_; }
  // Waits for this step's gradients to be averaged and writes them into each parameter's .grad.
  // Rethrows communication errors. Not when updatesParameters().
  void synchronizeGradients();
  // Ends this step's backward without waiting (updatesParameters() only).
  void endBackward();
  // Waits until every parameter holds every ended step's update (after a forward this costs
  // nothing: its hooks waited already). Call before reading or saving parameters, and before
  // backward (parameters no layer used were not waited for).
  void waitForParameters();
  // Seconds the pre-forward hooks spent waiting since the last call (exposed communication).
  double takeWaitSeconds();
  // Averages BatchNorm running statistics across ranks, so evaluation and checkpoints see one
  // model (each rank normalises with its own batch statistics while training, as DDP does
  // without SyncBatchNorm).
  void averageBuffers();
  // Averages the parameters across ranks (localsgd's periodic model averaging).
  void averageParameters();
  // With parameter servers each worker trains its own copy (asgd, ssp and the delayed
  // strategies let them differ): pullGlobalModel() makes the parameters the servers', and
  // keepLocalModel(fn) puts this worker's own back after fn, so that evaluating or saving the
  // global model leaves training undisturbed. Both no-ops without servers; every rank calls
  // them together.
  void pullGlobalModel();
  void keepLocalModel(const std::function<void()>& fn);

  // With updatesParameters(), the SGD velocity lives in the engine: these move it into the
  // optimizer's momentum buffers before a checkpoint is saved (a collective for sharded), and
  // back after one is loaded, so checkpoints have one format whatever the schedule.
  void velocityToOptimizer(torch::optim::SGD& optimizer);
  void velocityFromOptimizer(torch::optim::SGD& optimizer);

  // Sums over every completed step (none for a world of one).
  StepStats totals() const { return engine_ ? engine_->totals() : averaging_; }
  void setTrace(TraceRecorder* trace);
  // Whether parameter i's compressor applies momentum itself (its optimizer group must not).
  bool absorbsMomentum(size_t i) const { return engine_ && engine_->absorbsMomentum(i); }
  // The global step the next synchronizeGradients completes (after a resume).
  void setStep(uint64_t step) {
    if (engine_) engine_->setStep(step);
  }

 private:
  void waitForLayer(const torch::nn::Module& layer);

  std::shared_ptr<Model> model_;
  Transport& transport_;
  std::vector<torch::Tensor> parameters_;
  std::unique_ptr<SyncEngine> engine_;  // null for a world of one, and for localsgd
  bool updates_ = false;
  bool servers_ = false;         // engine_ is a PsEngine
  StepStats averaging_;          // localsgd: what averageParameters() cost
  std::vector<unsigned> hooks_;  // by parameter, when engine_ is set
  // By layer: its name and the parameters its pre-forward hook waits for (update mode).
  struct LayerWaits {
    std::string name;
    std::vector<int> parameters;
  };
  std::unordered_map<const torch::nn::Module*, LayerWaits> layers_;
  double waitSeconds_ = 0;
  TraceRecorder* trace_ = nullptr;
};

}  // namespace gradsync
