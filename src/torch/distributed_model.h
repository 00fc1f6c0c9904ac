// A model trained data-parallel: an autograd hook on every parameter copies its gradient into
// the GradientEngine as soon as backward produces it, so communication overlaps the rest of
// backward (per the schedule); synchronizeGradients() then writes the averages into .grad.
#pragma once

#include <torch/torch.h>

#include <memory>

#include "gradsync/transport.h"
#include "sync/gradient_engine.h"
#include "torch/models.h"

namespace gradsync {

class DistributedModel {
 public:
  // Registers the hooks. Every rank must construct it with the same model and options.
  DistributedModel(std::shared_ptr<Model> model, Transport& transport, EngineOptions options);
  // Removes the hooks: the model may outlive this object (it is shared), the engine may not.
  ~DistributedModel();
  DistributedModel(const DistributedModel&) = delete;
  DistributedModel& operator=(const DistributedModel&) = delete;

  Model& model() { return *model_; }
  std::vector<torch::Tensor> parameters() const { return parameters_; }

  // Makes every rank's parameters and buffers equal to rank 0's (call once before training).
  void broadcastState();
  // Waits for this step's gradients to be averaged and writes them into each parameter's .grad.
  // Rethrows communication errors.
  void synchronizeGradients();
  // Averages BatchNorm running statistics across ranks, so evaluation and checkpoints see one
  // model (each rank normalises with its own batch statistics while training, as DDP does
  // without SyncBatchNorm).
  void averageBuffers();

  const StepStats& lastStep() const { return engine_ ? engine_->lastStep() : kAlone_; }
  void setTrace(TraceRecorder* trace) {
    if (engine_) engine_->setTrace(trace);
  }
  // Whether parameter i's compressor applies momentum itself (its optimizer group must not).
  bool absorbsMomentum(size_t i) const {
    return engine_ && engine_->compression().absorbsMomentum(i);
  }
  // The global step the next synchronizeGradients completes (after a resume).
  void setStep(uint64_t step) {
    if (engine_) engine_->setStep(step);
  }

 private:
  std::shared_ptr<Model> model_;
  Transport& transport_;
  std::vector<torch::Tensor> parameters_;
  std::unique_ptr<GradientEngine> engine_;  // null for a world of one
  std::vector<unsigned> hooks_;             // by parameter, when engine_ is set
  static inline const StepStats kAlone_{};
};

}  // namespace gradsync
