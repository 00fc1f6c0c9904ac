// What every pipeline rank (and the emulator) agrees on before training: the stage split, the
// stages' rule, the micro-batches; and the pieces both executors share (the split chain, the
// micro-batches' data). Includes torch headers: internal to src/torch.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "data/sampler.h"
#include "pipeline/schedule.h"
#include "pipeline/stage_optimizer.h"
#include "pipeline/wave_placement.h"
#include "torch/loop/data_source.h"
#include "torch/loop/epoch_loop.h"
#include "torch/loop/options.h"
#include "torch/models/models.h"

namespace gradsync {

struct PipelinePlan {
  PipelineShape shape;
  std::vector<int> split;  // layers per stage
  std::vector<std::string> layerNames;
  StageRule rule;         // the stages' SGD (scaled with --reference-batch) and compensation
  size_t microBatch = 1;  // samples per micro-batch
  int replicas = 1;       // data-parallel copies of the pipeline
  // Pinned runs (--waves K >= 2 or --pin-devices): every rank's device and core, replica r being
  // wave r (pipeline/wave_placement.h); empty when the ranks are not pinned.
  WavePlacement wavePlacement = WavePlacement::kRotated;
  std::vector<RankPlacement> placement;
  std::string balance;           // how the split was chosen, for the log
  std::string describe() const;  // one line: mode, stages, split, rule
};

// Checks --pipeline's options against the model and a job of `ranks` ranks (0: the emulator,
// one pipeline in one process) and plans the run; a pinned run's cores are chosen among the
// calling thread's CPUs (pipeline/device_pinning.h). Throws ConfigError naming the option.
PipelinePlan planPipeline(const TrainOptions& options, int ranks);

// The seeded model of --model, as every rank builds it (the trainer's initialisation).
std::shared_ptr<Model> makePipelineModel(const TrainOptions& options);

// The chain's layers of each stage, in order.
std::vector<std::vector<PipelineLayer>> stageLayers(Model& model, const std::vector<int>& split);

// Forward multiply-accumulates of each chain layer for one sample (elementwise layers: their
// output's elements), from the shapes a forward of a zero sample gives: the default balance.
std::vector<double> estimatedLayerCosts(Model& model);

// The data of a replica's micro-batches: micro-batch i of a segment that starts at global step
// `first` is step first + i / M's samples [(i mod M)·b, (i mod M + 1)·b) of this replica's batch.
class MicroBatches {
 public:
  MicroBatches(const TrainOptions& options, const PipelinePlan& plan, int replica);
  size_t stepsPerEpoch() const { return sampler_.stepsPerEpoch(); }
  size_t globalBatch() const { return sampler_.globalBatch(); }
  // Inputs (b x 1 x 28 x 28) and labels (b) of one micro-batch; fresh tensors.
  std::pair<torch::Tensor, torch::Tensor> batch(int64_t first, int64_t micro) const;
  const DataSource& data() const { return *data_; }

 private:
  std::vector<size_t> indices(int64_t first, int64_t micro) const;

  std::unique_ptr<DataSource> data_;
  DistributedSampler sampler_;
  size_t microBatch_;
  int microBatches_;
};

// The shared epoch loop's shape for a pipeline (segments up to an epoch's end or an --eval-every
// point: the pipeline drains at their ends); `show`: this process prints the progress.
LoopShape pipelineLoopShape(const TrainOptions& options, const MicroBatches& data, bool show);

// The test samples replica `replica` of `replicas` evaluates (i ≡ replica mod replicas), in
// batches of at most 500.
std::vector<std::vector<size_t>> testBatches(size_t testSize, int replica, int replicas);
// Inputs (n x 1 x 28 x 28) and labels (n) of samples of the training or test set.
std::pair<torch::Tensor, torch::Tensor> gatherSamples(const DataSource& data, bool train,
                                                      const std::vector<size_t>& indices);

}  // namespace gradsync
