// One pipeline stage: a run of a model's chain layers (Model::pipelineLayers) with its own
// optimizer state (pipeline/stage_optimizer.h), the autograd graphs of the micro-batches in
// flight, and, with replicas, the averaging of its gradients over the same stage of the other
// pipelines. The emulator (all stages in one process) and the real pipeline (a stage per rank)
// both drive stages through these calls, in the order of pipeline/schedule.h, so that they
// compute the same bits. Includes torch headers: internal to src/torch. Not thread-safe.
#pragma once

#include <torch/torch.h>

#include <map>
#include <memory>
#include <vector>

#include "gradsync/sync_options.h"
#include "gradsync/transport.h"
#include "pipeline/stage_optimizer.h"
#include "torch/models/models.h"

namespace gradsync {

class DistributedOptimizer;

// Averages a stage's gradients over its replicas with DistributedOptimizer in gradient mode
// (any fifo/wfbp/fusion schedule and compressor). A stage's gradient is only complete after all
// of a step's micro-batches, so it is handed over at once: a carrier module with parameters of
// the stage's shapes gets it through one synthetic backward, d/dp Σ(p·g) = g exactly, whose
// hooks feed the engine; the averages come back from the carrier's .grad.
class ReplicaAverager {
 public:
  // `replicas`: the ranks of this stage in every pipeline (collective over them).
  ReplicaAverager(const std::vector<torch::Tensor>& like, Transport& replicas,
                  const SyncOptions& options);
  ~ReplicaAverager();
  // Replaces each gradient by its average over the replicas. Collective; throws what the
  // transport throws (a lost replica, named).
  void average(std::vector<torch::Tensor>& gradients);

 private:
  std::shared_ptr<torch::nn::Module> carrier_;
  std::vector<torch::Tensor> parameters_;
  std::unique_ptr<torch::optim::SGD> optimizer_;  // required by the API; never steps
  std::unique_ptr<DistributedOptimizer> distributed_;
};

class PipelineStage {
 public:
  // Keeps `model` alive (the layers share its parameters). `first`: takes the model's input (no
  // input gradient); `last`: ends with the loss. `lossScale` multiplies each micro-batch's loss
  // (1/M for fill-drain's M micro-batches: their summed gradients are the batch mean's).
  PipelineStage(std::shared_ptr<Model> model, std::vector<PipelineLayer> layers, bool first,
                bool last, StageRule rule, double lossScale);
  ~PipelineStage();

  // Micro-batch `micro`'s forward on `input` (which `delay` updates will separate from its own
  // update); returns the output for the next stage (contiguous, without history). Not last.
  torch::Tensor forward(int64_t micro, const torch::Tensor& input, int64_t delay);
  // The last stage's forward: keeps the scaled loss for the backward; returns the unscaled loss.
  float forwardLoss(int64_t micro, const torch::Tensor& input, const torch::Tensor& labels,
                    int64_t delay);
  // Micro-batch `micro`'s backward from the next stage's `outputGradient` (undefined for the
  // last stage); returns the gradient of its input for the previous stage (undefined for the
  // first). Gradients accumulate until update().
  torch::Tensor backward(int64_t micro, const torch::Tensor& outputGradient);
  // Applies the accumulated gradients (averaged over the replicas, if any) for the micro-batches
  // up to `micro`, then clears them.
  void update(int64_t micro);
  // No-grad forward on the current weights (evaluation).
  torch::Tensor infer(const torch::Tensor& input);

  void setReplicas(std::unique_ptr<ReplicaAverager> replicas) { replicas_ = std::move(replicas); }
  const std::vector<torch::Tensor>& parameters() const { return parameters_; }
  const StageOptimizer& optimizer() const { return *optimizer_; }
  std::vector<float> flatParameters() const;

 private:
  struct Graph {
    torch::Tensor input;
    torch::Tensor output;  // the last stage: the scaled loss
  };
  torch::Tensor run(const torch::Tensor& input);

  std::shared_ptr<Model> model_;
  std::vector<PipelineLayer> layers_;
  const bool first_, last_;
  const double lossScale_;
  std::vector<torch::Tensor> parameters_;
  std::unique_ptr<StageOptimizer> optimizer_;
  std::unique_ptr<ReplicaAverager> replicas_;
  std::map<int64_t, Graph> graphs_;  // micro-batches between forward and backward
};

}  // namespace gradsync
