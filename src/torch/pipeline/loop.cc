#include "torch/pipeline/loop.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "common/elapsed.h"
#include "torch/loop/progress.h"

namespace gradsync {

TrainResult runPipelineLoop(const TrainOptions& options, size_t stepsPerEpoch, size_t globalBatch,
                            bool show, const PipelineLoopHooks& hooks) {
  const auto perEpoch = static_cast<int64_t>(stepsPerEpoch);
  const int64_t total = options.steps > 0 ? options.steps : perEpoch * options.epochs;
  const int epochs = static_cast<int>((total + perEpoch - 1) / perEpoch);
  Progress progress(show && !options.quiet, total, epochs);
  TrainResult result;
  int64_t step = 0;
  while (step < total) {
    const int epoch = static_cast<int>(step / perEpoch);
    const int64_t epochEnd = std::min(total, (epoch + 1) * perEpoch);
    const int64_t epochFirst = step;
    double lossSum = 0;
    double trained = 0;
    while (step < epochEnd) {
      int64_t end = epochEnd;
      if (options.evalEvery > 0)
        end = std::min(end, (step / options.evalEvery + 1) * options.evalEvery);
      const auto start = std::chrono::steady_clock::now();
      lossSum += hooks.segment(step, end - step, result.losses);
      trained += secondsSince(start);
      step = end;
      const double rate = static_cast<double>(globalBatch * (step - epochFirst)) / trained;
      const float last = result.losses.empty() ? 0.0f : result.losses.back();
      progress.step(step, epoch + 1, step - epoch * perEpoch, perEpoch, last, rate);
      if (step < epochEnd) {  // an --eval-every point inside the epoch
        result.evaluations.push_back({step, result.seconds + trained, hooks.evaluate()});
      }
    }
    result.seconds += trained;
    EpochRecord record;
    record.epoch = epoch + 1;
    record.seconds = trained;
    record.samplesPerSecond = static_cast<double>(globalBatch * (step - epochFirst)) / trained;
    record.trainLoss = hooks.globalMean(lossSum, static_cast<double>(step - epochFirst));
    record.testAccuracy = hooks.evaluate();
    progress.line(
        fmt::format("epoch {}/{}: train loss {:.4f}, test accuracy {:.2f}%, {:.0f} "
                    "samples/s",
                    record.epoch, epochs, record.trainLoss, 100 * record.testAccuracy,
                    record.samplesPerSecond));
    result.epochs.push_back(record);
    result.evaluations.push_back({step, result.seconds, record.testAccuracy});
  }
  result.steps = step;
  result.samplesPerSecond =
      result.seconds > 0 ? static_cast<double>(globalBatch * step) / result.seconds : 0;
  result.finalTestAccuracy = result.epochs.empty() ? 0 : result.epochs.back().testAccuracy;
  result.perStep.stepMs = step > 0 ? result.seconds * 1e3 / static_cast<double>(step) : 0;
  return result;
}

}  // namespace gradsync
