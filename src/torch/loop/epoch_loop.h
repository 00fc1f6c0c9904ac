// The skeleton of a fixed-membership run, shared by the data-parallel trainer (train/), Wavelet's
// waves (waves/), and the pipeline and its emulator (pipeline/): epochs of global steps, trained
// in segments; the checks after a segment (a stop, a checkpoint); the --eval-every evaluations and
// each epoch's record, loss and evaluation; the progress display; and the TrainResult's
// bookkeeping (losses, epochs, evaluations, times, throughput). A trainer brings only what is its
// own: how it trains a segment, evaluates, and averages over its ranks. Torch-free.
//
// Training time is wall time from an epoch's start less its evaluations, so the checks and the
// progress display count as training. Blocking; the hooks run on the calling thread, in the order
// the run needs them, and are collective wherever the trainer's ranks must take part together (the
// loop calls them at the same steps on every rank).
//
// Not run by the elastic trainer (a round's loop resumes a shared progress that outlives the round)
// or the recommendation trainer (CPR redoes steps after a failure): docs/architecture.md says why.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "torch/loop/options.h"

namespace gradsync {

// Where a run stands after `step` completed steps: where a resumed run starts, what a checkpoint
// saves.
struct RunPosition {
  int64_t step = 0;                 // steps completed
  double epochLossSum = 0;          // this rank's sum of this epoch's losses so far
  std::vector<EpochRecord> epochs;  // finished epochs
  std::vector<uint8_t> syncState;   // loaded: this rank's DistributedOptimizer::syncState()
};

struct LoopShape {
  int64_t stepsPerEpoch = 0;
  int64_t totalSteps = 0;  // the run's last step; an epoch may end early at it
  size_t globalBatch = 0;  // samples per global step, over all ranks
  int64_t evalEvery = 0;   // --eval-every: evaluate after every this many steps (0: epochs only)
  size_t evalSamples = SIZE_MAX;  // test samples per --eval-every evaluation (SIZE_MAX: all)
  // Steps per segment at most: 1 for a trainer that checks after every step, stepsPerEpoch for
  // segments up to the epoch's end or the next evaluation point (a segment never passes either;
  // a pipeline drains at a segment's end).
  int64_t segmentSteps = 1;
  bool show = false;  // this process prints the progress and the epochs' lines
};

struct LoopHooks {
  // Trains global steps [first, first + count) and returns the sum of their losses, appending each
  // step's loss to `losses` (where this rank computes losses: a pipeline's last stage).
  std::function<double(int64_t first, int64_t count, std::vector<float>& losses)> train;
  // Quality of the current weights on the first `samples` test samples (SIZE_MAX: all); collective.
  std::function<Quality(size_t samples)> evaluate;
  // The sum of every rank's `sum` over the sum of their `count`s; collective.
  std::function<double(double sum, double count)> globalMean;
  // The epoch's line (describeEpoch's, for a run of `epochs` epochs).
  std::function<std::string(const EpochRecord& record, int epochs)> describe;
  // Optional, all of them. After a segment that ended at `step` (`seconds` its wall time): true
  // when the run stops there; the same answer on every rank.
  std::function<bool(int64_t step, double seconds)> stopAfter;
  // Waits for the communication still in flight, before the clock is read for an epoch's end or
  // an evaluation.
  std::function<void()> settle;
  // The line a run that stopped early ends with, after `step`.
  std::function<std::string(int64_t step)> describeStop;
  // Completes an epoch's record with what the trainer measures itself (before its line).
  std::function<void(EpochRecord& record)> completeEpoch;
  // Saves `position` if due: after every segment that does not end an epoch, and after every
  // epoch's record; `last`: the run ends there.
  std::function<void(const RunPosition& position, bool last)> checkpoint;
};

// What the run did. `result` has losses, epochs, evaluations, seconds, steps, stopped,
// samplesPerSecond (over the steps run here), finalTestAccuracy, finalHeldOutLoss and
// perStep.stepMs; the trainer adds the rest.
struct LoopOutcome {
  TrainResult result;
  int64_t stepsRun = 0;  // by this process (a resumed run's earlier steps not counted)
};

// Runs from `start` (a resumed run's position; {} for a new run) to shape.totalSteps, or until
// hooks.stopAfter says stop. Throws what the hooks throw.
LoopOutcome runEpochLoop(const LoopShape& shape, RunPosition start, const LoopHooks& hooks);

}  // namespace gradsync
