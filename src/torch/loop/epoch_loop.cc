#include "torch/loop/epoch_loop.h"

#include <algorithm>
#include <chrono>

#include "common/elapsed.h"
#include "torch/loop/progress.h"

namespace gradsync {
namespace {

using MonotonicClock = std::chrono::steady_clock;

// The step the segment starting at `step` ends before: at most shape.segmentSteps on, and never
// past the epoch's end or the next --eval-every point.
int64_t segmentEnd(const LoopShape& shape, int64_t step, int64_t epochEnd) {
  int64_t end = std::min(epochEnd, step + shape.segmentSteps);
  if (shape.evalEvery > 0) end = std::min(end, (step / shape.evalEvery + 1) * shape.evalEvery);
  return end;
}

class EpochLoop {
 public:
  EpochLoop(const LoopShape& shape, RunPosition start, const LoopHooks& hooks)
      : shape_(shape),
        hooks_(hooks),
        position_(std::move(start)),
        firstStep_(position_.step),
        epochs_(
            static_cast<int>((shape.totalSteps + shape.stepsPerEpoch - 1) / shape.stepsPerEpoch)),
        progress_(shape.show, shape.totalSteps, epochs_) {}

  LoopOutcome run();

 private:
  // Trains the epoch containing the current step up to its end (or a stop): returns its training
  // seconds.
  double trainEpoch(int epoch);
  void evaluateBetweenSteps(double trainedSeconds);
  void recordEpoch(int epoch, int64_t epochFirst, double seconds);
  void settle() const {
    if (hooks_.settle) hooks_.settle();
  }
  bool last() const { return position_.step == shape_.totalSteps || result_.stopped; }

  const LoopShape& shape_;
  const LoopHooks& hooks_;
  RunPosition position_;
  const int64_t firstStep_;  // where this process started (a resumed run's position)
  const int epochs_;
  Progress progress_;
  TrainResult result_;
};

double EpochLoop::trainEpoch(int epoch) {
  const int64_t perEpoch = shape_.stepsPerEpoch;
  const int64_t epochEnd = std::min(shape_.totalSteps, (epoch + 1) * perEpoch);
  const int64_t epochFirst = position_.step;
  const auto epochStart = MonotonicClock::now();
  double evalSeconds = 0;  // spent in --eval-every evaluations this epoch
  while (position_.step < epochEnd) {
    const int64_t end = segmentEnd(shape_, position_.step, epochEnd);
    const auto segmentStart = MonotonicClock::now();
    position_.epochLossSum += hooks_.train(position_.step, end - position_.step, result_.losses);
    const double seconds = secondsSince(segmentStart);
    position_.step = end;
    if (hooks_.stopAfter) result_.stopped = hooks_.stopAfter(position_.step, seconds);
    // When the epoch is complete the checkpoint waits for its record (recordEpoch); a run stopping
    // mid-epoch (--steps, or asked to stop) saves the partial epoch, so a resume continues it.
    if (hooks_.checkpoint && position_.step % perEpoch != 0) hooks_.checkpoint(position_, last());
    const double trained = secondsSince(epochStart) - evalSeconds;
    const double rate = static_cast<double>(shape_.globalBatch * (position_.step - epochFirst)) /
                        std::max(trained, 1e-9);
    const float loss = result_.losses.empty() ? 0.0f : result_.losses.back();
    progress_.step(position_.step, epoch + 1, position_.step - epoch * perEpoch, perEpoch, loss,
                   rate);
    if (result_.stopped) break;
    if (shape_.evalEvery > 0 && position_.step % shape_.evalEvery == 0 &&
        position_.step < epochEnd) {
      settle();
      const auto evalStart = MonotonicClock::now();
      evaluateBetweenSteps(result_.seconds + secondsSince(epochStart) - evalSeconds);
      evalSeconds += secondsSince(evalStart);
    }
  }
  settle();
  return secondsSince(epochStart) - evalSeconds;
}

void EpochLoop::evaluateBetweenSteps(double trainedSeconds) {
  const Quality quality = hooks_.evaluate(shape_.evalSamples);
  result_.evaluations.push_back(
      {position_.step, trainedSeconds, quality.testAccuracy, quality.heldOutLoss});
}

void EpochLoop::recordEpoch(int epoch, int64_t epochFirst, double seconds) {
  EpochRecord record;
  record.epoch = epoch + 1;
  record.seconds = seconds;
  // The throughput counts only the steps this process ran; the loss, the whole epoch's.
  record.samplesPerSecond =
      static_cast<double>(shape_.globalBatch * (position_.step - epochFirst)) / seconds;
  record.trainLoss = hooks_.globalMean(
      position_.epochLossSum, static_cast<double>(position_.step - epoch * shape_.stepsPerEpoch));
  const Quality quality = hooks_.evaluate(SIZE_MAX);
  record.testAccuracy = quality.testAccuracy;
  record.heldOutLoss = quality.heldOutLoss;
  if (hooks_.completeEpoch) hooks_.completeEpoch(record);
  progress_.line(hooks_.describe(record, epochs_));
  position_.epochs.push_back(record);
  result_.evaluations.push_back(
      {position_.step, result_.seconds, record.testAccuracy, record.heldOutLoss});
  position_.epochLossSum = 0;
  if (hooks_.checkpoint && position_.step % shape_.stepsPerEpoch == 0) {
    hooks_.checkpoint(position_, last());
  }
}

LoopOutcome EpochLoop::run() {
  while (position_.step < shape_.totalSteps && !result_.stopped) {
    const int epoch = static_cast<int>(position_.step / shape_.stepsPerEpoch);
    const int64_t epochFirst = position_.step;
    const double seconds = trainEpoch(epoch);
    result_.seconds += seconds;
    // A stop mid-epoch: no record of a partial epoch.
    if (result_.stopped && position_.step % shape_.stepsPerEpoch != 0) break;
    recordEpoch(epoch, epochFirst, seconds);
  }
  if (result_.stopped && hooks_.describeStop) progress_.line(hooks_.describeStop(position_.step));
  LoopOutcome outcome;
  outcome.stepsRun = position_.step - firstStep_;
  TrainResult& r = result_;
  r.epochs = position_.epochs;
  r.steps = position_.step;
  const auto run = static_cast<double>(outcome.stepsRun);
  r.samplesPerSecond =
      r.seconds > 0 ? static_cast<double>(shape_.globalBatch) * run / r.seconds : 0;
  r.perStep.stepMs = outcome.stepsRun > 0 ? r.seconds * 1e3 / run : 0;
  r.finalTestAccuracy = r.epochs.empty() ? 0 : r.epochs.back().testAccuracy;
  r.finalHeldOutLoss = r.epochs.empty() ? 0 : r.epochs.back().heldOutLoss;
  outcome.result = std::move(result_);
  return outcome;
}

}  // namespace

LoopOutcome runEpochLoop(const LoopShape& shape, RunPosition start, const LoopHooks& hooks) {
  return EpochLoop(shape, std::move(start), hooks).run();
}

}  // namespace gradsync
