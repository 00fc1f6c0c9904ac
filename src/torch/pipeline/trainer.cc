// The multi-rank pipeline (torch/pipeline/pipeline.h): each rank runs one stage's operations
// (pipeline/schedule.h) and exchanges tensors with its neighbours (torch/pipeline/wire.h).
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <span>

#include "common/check.h"
#include "common/tags.h"
#include "gradsync/collectives.h"
#include "gradsync/error.h"
#include "pipeline/device_pinning.h"
#include "torch/loop/epoch_loop.h"
#include "torch/loop/progress.h"
#include "torch/pipeline/pipeline.h"
#include "torch/pipeline/setup.h"
#include "torch/pipeline/stage.h"
#include "torch/pipeline/wire.h"
#include "transport/group_transport.h"

namespace gradsync {
namespace {

template <typename T>
std::span<const uint8_t> bytesOf(const std::vector<T>& values) {
  return {reinterpret_cast<const uint8_t*>(values.data()), values.size() * sizeof(T)};
}

template <typename T = float>
std::vector<T> valuesOf(const std::vector<uint8_t>& bytes) {
  std::vector<T> values(bytes.size() / sizeof(T));
  std::memcpy(values.data(), bytes.data(), values.size() * sizeof(T));
  return values;
}

class PipelineRank {
 public:
  PipelineRank(Transport& transport, const TrainOptions& options, PipelinePlan plan);
  TrainResult run();

 private:
  double segment(int64_t first, int64_t steps, std::vector<float>& losses);
  void forward(const StageOp& op, int64_t first, std::vector<double>& stepLoss);
  void backward(const StageOp& op);
  Quality evaluate();
  double globalMean(double sum, double count);
  // Replica 0's stages' parameters in stage order, and its last stage's losses, on every rank.
  void gatherResult(TrainResult& result);
  bool firstStage() const { return stage_ == 0; }
  bool lastStage() const { return stage_ == plan_.shape.stages - 1; }

  Transport& transport_;
  const TrainOptions options_;
  const PipelinePlan plan_;
  const int stage_, replica_;
  std::shared_ptr<Model> model_;
  MicroBatches data_;
  std::unique_ptr<GroupTransport> replicas_;  // this stage in every pipeline
  std::unique_ptr<PipelineStage> pipelineStage_;
  StageLinks links_;
  double waited_ = 0;  // seconds blocked receiving from the neighbours
};

PipelineRank::PipelineRank(Transport& transport, const TrainOptions& options, PipelinePlan plan)
    : transport_(transport),
      options_(options),
      plan_(std::move(plan)),
      stage_(transport.rank() % plan_.shape.stages),
      replica_(transport.rank() / plan_.shape.stages),
      model_(makePipelineModel(options)),
      data_(options, plan_, replica_),
      links_(transport) {
  model_->train();
  std::vector<std::vector<PipelineLayer>> layers = stageLayers(*model_, plan_.split);
  pipelineStage_ =
      std::make_unique<PipelineStage>(model_, layers[stage_], firstStage(), lastStage(), plan_.rule,
                                      1.0 / plan_.shape.microBatches);
  if (plan_.replicas > 1) {
    std::vector<int> ranks;
    for (int r = 0; r < plan_.replicas; ++r) ranks.push_back(r * plan_.shape.stages + stage_);
    replicas_ = std::make_unique<GroupTransport>(transport, ranks);
    pipelineStage_->setReplicas(std::make_unique<ReplicaAverager>(
        pipelineStage_->parameters(), *replicas_, syncOptionsOf(options)));
  }
}

void PipelineRank::forward(const StageOp& op, int64_t first, std::vector<double>& stepLoss) {
  const int64_t delay = plan_.shape.delay(stage_, op.micro);
  const int previous = transport_.rank() - 1;
  torch::Tensor in;
  torch::Tensor labels;
  if (firstStage() || lastStage()) std::tie(in, labels) = data_.batch(first, op.micro);
  if (!firstStage()) in = links_.receive(previous, tags::kPipelineActivations, op.micro, waited_);
  if (lastStage()) {
    const int m = plan_.shape.microBatches;
    stepLoss[op.micro / m] += pipelineStage_->forwardLoss(op.micro, in, labels, delay) / m;
    return;
  }
  links_.send(transport_.rank() + 1, tags::kPipelineActivations, op.micro,
              pipelineStage_->forward(op.micro, in, delay));
}

void PipelineRank::backward(const StageOp& op) {
  torch::Tensor out;
  if (!lastStage()) {
    out = links_.receive(transport_.rank() + 1, tags::kPipelineGradients, op.micro, waited_);
  }
  torch::Tensor in = pipelineStage_->backward(op.micro, out);
  if (!firstStage()) links_.send(transport_.rank() - 1, tags::kPipelineGradients, op.micro, in);
}

double PipelineRank::segment(int64_t first, int64_t steps, std::vector<float>& losses) {
  std::vector<double> stepLoss(static_cast<size_t>(steps), 0.0);
  for (const StageOp& op : plan_.shape.stageOps(stage_, steps)) {
    switch (op.kind) {
      case StageOp::Kind::kForward:
        forward(op, first, stepLoss);
        break;
      case StageOp::Kind::kBackward:
        backward(op);
        break;
      case StageOp::Kind::kUpdate:
        pipelineStage_->update(op.micro);
        break;
    }
  }
  links_.flush();
  if (!lastStage()) return 0;
  double sum = 0;
  for (double loss : stepLoss) {
    losses.push_back(static_cast<float>(loss));
    sum += loss;
  }
  return sum;
}

// Each pipeline evaluates the test samples of its replica index through its stages; the last
// stages' hits are summed over the job.
Quality PipelineRank::evaluate() {
  const double trainingWaits = waited_;
  model_->eval();
  size_t hits = 0;
  size_t seen = 0;
  int64_t batchIndex = 0;
  for (const std::vector<size_t>& batch :
       testBatches(data_.data().testSize(), replica_, plan_.replicas)) {
    torch::Tensor x;
    torch::Tensor y;
    if (firstStage() || lastStage()) std::tie(x, y) = gatherSamples(data_.data(), false, batch);
    if (!firstStage()) {
      x = links_.receive(transport_.rank() - 1, tags::kPipelineEval, batchIndex, waited_);
    }
    x = pipelineStage_->infer(x);
    if (lastStage()) {
      hits += static_cast<size_t>(x.argmax(1).eq(y).sum().item<int64_t>());
      seen += batch.size();
    } else {
      links_.send(transport_.rank() + 1, tags::kPipelineEval, batchIndex, x);
    }
    ++batchIndex;
  }
  links_.flush();
  model_->train();
  waited_ = trainingWaits;  // the training's exposed communication only
  // Counts up to 2^24 are exact in float.
  std::vector<float> counts = {static_cast<float>(hits), static_cast<float>(seen)};
  allreduce(transport_, counts, ReduceOp::kSum, {.tag = tags::kTrainer});
  return {counts[1] > 0 ? static_cast<double>(counts[0]) / counts[1] : 0.0, std::nan("")};
}

double PipelineRank::globalMean(double sum, double count) {
  std::vector<float> values = {static_cast<float>(sum),
                               lastStage() ? static_cast<float>(count) : 0.0f};
  allreduce(transport_, values, ReduceOp::kSum, {.tag = tags::kTrainer});
  return values[1] > 0 ? static_cast<double>(values[0]) / values[1] : 0.0;
}

void PipelineRank::gatherResult(TrainResult& result) {
  const auto parameters = allgatherBytes(transport_, bytesOf(pipelineStage_->flatParameters()),
                                         {.tag = tags::kTrainer});
  const auto losses = allgatherBytes(transport_, bytesOf(result.losses), {.tag = tags::kTrainer});
  result.parameters.clear();
  for (int s = 0; s < plan_.shape.stages; ++s) {
    std::vector<float> stage = valuesOf(parameters[s]);
    result.parameters.insert(result.parameters.end(), stage.begin(), stage.end());
  }
  result.losses = valuesOf(losses[plan_.shape.stages - 1]);
  if (plan_.placement.empty()) return;
  // The CPUs each rank's training thread is on now, at the end of training: the pin held.
  const auto cpus = allgatherBytes(transport_, bytesOf(threadCpus()), {.tag = tags::kTrainer});
  result.placement = plan_.placement;
  for (RankPlacement& p : result.placement) p.affinity = valuesOf<int>(cpus[p.rank]);
}

TrainResult PipelineRank::run() {
  const LoopHooks hooks{
      .train = [this](int64_t first, int64_t steps,
                      std::vector<float>& losses) { return segment(first, steps, losses); },
      .evaluate = [this](size_t) { return evaluate(); },  // the whole test set
      .globalMean = [this](double sum, double count) { return globalMean(sum, count); },
      .describe = [](const EpochRecord& record,
                     int epochs) { return describeEpoch(record, epochs, 0); }};
  const LoopShape shape = pipelineLoopShape(options_, data_, transport_.rank() == 0);
  TrainResult result = runEpochLoop(shape, {}, hooks).result;
  const double steps = static_cast<double>(std::max<int64_t>(result.steps, 1));
  result.perStep.exposedCommMs = waited_ * 1e3 / steps;
  result.perStep.computeMs = result.perStep.stepMs - result.perStep.exposedCommMs;
  gatherResult(result);
  return result;
}

}  // namespace

TrainResult runPipelineTraining(Transport& transport, const TrainOptions& options) {
  validateTrainOptions(options);
  PipelinePlan plan = planPipeline(options, transport.size());
  limitComputeThreads(options.threads);
  // Before the rank's threads (its replica engine's) start: they inherit the pin.
  std::optional<ThreadPin> pin;
  if (!plan.placement.empty()) pin.emplace(plan.placement[transport.rank()].core, transport.rank());
  PipelineRank rank(transport, options, std::move(plan));
  yieldToCommunication();
  return rank.run();
}

}  // namespace gradsync
