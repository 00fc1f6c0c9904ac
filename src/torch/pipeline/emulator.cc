// The single-process pipeline emulator (torch/pipeline/pipeline.h).
#include <cmath>
#include <map>

#include "common/check.h"
#include "torch/loop/epoch_loop.h"
#include "torch/loop/progress.h"
#include "torch/pipeline/pipeline.h"
#include "torch/pipeline/setup.h"
#include "torch/pipeline/stage.h"

namespace gradsync {
namespace {

class Emulator {
 public:
  Emulator(const TrainOptions& options, PipelinePlan plan)
      : options_(options),
        plan_(std::move(plan)),
        model_(makePipelineModel(options)),
        data_(options, plan_, 0) {
    model_->train();
    std::vector<std::vector<PipelineLayer>> layers = stageLayers(*model_, plan_.split);
    const int last = plan_.shape.stages - 1;
    for (int s = 0; s <= last; ++s) {
      stages_.push_back(std::make_unique<PipelineStage>(
          model_, layers[s], s == 0, s == last, plan_.rule, 1.0 / plan_.shape.microBatches));
    }
  }

  TrainResult run() {
    const LoopHooks hooks{
        .train = [this](int64_t first, int64_t steps,
                        std::vector<float>& losses) { return segment(first, steps, losses); },
        .evaluate =
            [this](size_t) {
              return Quality{evaluate(), std::nan("")};
            },
        // Rounded through float as the real pipeline's allreduce does, so both report the same.
        .globalMean =
            [](double sum, double count) {
              const float s = static_cast<float>(sum), n = static_cast<float>(count);
              return n > 0 ? static_cast<double>(s) / n : 0.0;
            },
        .describe = [](const EpochRecord& record,
                       int epochs) { return describeEpoch(record, epochs, 0); }};
    TrainResult result = runEpochLoop(pipelineLoopShape(options_, data_, true), {}, hooks).result;
    result.perStep.computeMs = result.perStep.stepMs;  // one thread: nothing waits
    for (const auto& stage : stages_) {
      std::vector<float> flat = stage->flatParameters();
      result.parameters.insert(result.parameters.end(), flat.begin(), flat.end());
    }
    return result;
  }

 private:
  double segment(int64_t first, int64_t steps, std::vector<float>& losses);
  double evaluate();

  const TrainOptions options_;
  const PipelinePlan plan_;
  std::shared_ptr<Model> model_;
  MicroBatches data_;
  std::vector<std::unique_ptr<PipelineStage>> stages_;
};

// Runs every stage's operations interleaved (pipeline/schedule.h): a forward's output and a
// backward's input gradient wait in a map until the neighbour's operation takes them, as they
// would wait on the wire.
double Emulator::segment(int64_t first, int64_t steps, std::vector<float>& losses) {
  const PipelineShape& shape = plan_.shape;
  const int last = shape.stages - 1;
  std::vector<std::map<int64_t, torch::Tensor>> activations(shape.stages);  // outputs of stage s
  std::vector<std::map<int64_t, torch::Tensor>> gradients(shape.stages);    // input grads of s
  std::vector<double> stepLoss(static_cast<size_t>(steps), 0.0);
  auto take = [](std::map<int64_t, torch::Tensor>& from, int64_t micro) {
    auto found = from.find(micro);
    GS_CHECK(found != from.end());
    torch::Tensor t = std::move(found->second);
    from.erase(found);
    return t;
  };
  runInterleaved(shape, steps, [&](int s, const StageOp& op) {
    PipelineStage& stage = *stages_[s];
    const int64_t delay = shape.delay(s, op.micro);
    switch (op.kind) {
      case StageOp::Kind::kForward: {
        auto [inputs, labels] = data_.batch(first, op.micro);
        torch::Tensor in = s == 0 ? inputs : take(activations[s - 1], op.micro);
        if (s == last) {
          stepLoss[op.micro / shape.microBatches] +=
              stage.forwardLoss(op.micro, in, labels, delay) / shape.microBatches;
        } else {
          activations[s][op.micro] = stage.forward(op.micro, in, delay);
        }
        break;
      }
      case StageOp::Kind::kBackward: {
        torch::Tensor out = s == last ? torch::Tensor() : take(gradients[s + 1], op.micro);
        torch::Tensor in = stage.backward(op.micro, out);
        if (s > 0) gradients[s][op.micro] = in;
        break;
      }
      case StageOp::Kind::kUpdate:
        stage.update(op.micro);
        break;
    }
  });
  double sum = 0;
  for (double loss : stepLoss) {
    losses.push_back(static_cast<float>(loss));
    sum += loss;
  }
  return sum;
}

double Emulator::evaluate() {
  model_->eval();
  size_t hits = 0;
  size_t seen = 0;
  for (const std::vector<size_t>& batch : testBatches(data_.data().testSize(), 0, 1)) {
    auto [x, y] = gatherSamples(data_.data(), false, batch);
    for (auto& stage : stages_) x = stage->infer(x);
    hits += static_cast<size_t>(x.argmax(1).eq(y).sum().item<int64_t>());
    seen += batch.size();
  }
  model_->train();
  return seen > 0 ? static_cast<double>(hits) / static_cast<double>(seen) : 0.0;
}

}  // namespace

TrainResult emulatePipeline(const TrainOptions& options) {
  validateTrainOptions(options);
  Emulator emulator(options, planPipeline(options, 0));
  return emulator.run();
}

std::string describePipeline(const TrainOptions& options, int ranks) {
  return planPipeline(options, ranks).describe();
}

}  // namespace gradsync
