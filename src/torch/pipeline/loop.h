// The outer loop of pipeline training, shared by the emulator and the multi-rank pipeline: the
// run cut into segments (an epoch, or up to an --eval-every point; the pipeline is empty at
// their ends), evaluations, progress and the TrainResult. Torch-free.
#pragma once

#include <cstdint>
#include <functional>

#include "torch/loop/options.h"

namespace gradsync {

struct PipelineLoopHooks {
  // Trains global steps [first, first + steps) and returns the sum of their losses (each step's
  // the mean over its micro-batches), appending each step's loss to `losses`, on the rank that
  // computes the loss (0 and nothing elsewhere).
  std::function<double(int64_t first, int64_t steps, std::vector<float>& losses)> segment;
  // Test accuracy of the current weights (collective in the real pipeline).
  std::function<double()> evaluate;
  // The global mean of per-rank sums (collective in the real pipeline; identity in the emulator).
  std::function<double(double sum, double count)> globalMean;
};

// Runs options' epochs (or --steps) of `stepsPerEpoch` steps of `globalBatch` samples. `show`:
// this process prints progress and epoch lines (unless options.quiet).
TrainResult runPipelineLoop(const TrainOptions& options, size_t stepsPerEpoch, size_t globalBatch,
                            bool show, const PipelineLoopHooks& hooks);

}  // namespace gradsync
