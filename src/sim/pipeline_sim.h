// The pipeline's timeline (docs/simulator.md, "Pipelines"): when each stage runs each of its
// forward, backward and update operations, given their durations, for the very operation lists
// the emulator and the real pipeline run (pipeline/schedule.h). Each stage runs its list in
// order, an operation starting as soon as its stage is free and its input exists (a forward at
// stage s > 0 after stage s − 1's forward of that micro-batch plus one hop, a backward at
// s < S − 1 after stage s + 1's backward plus one hop): the real pipeline's blocking receives,
// without its noise. What it shows: fill-drain's bubble (utilisation M / (M + S − 1) with equal
// stages) against pb's steady state (every stage busy, a step every slowest stage's F + B + U).
// Torch-free, a pure function: thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "pipeline/schedule.h"

namespace gradsync::sim {

struct PipelineStageCosts {
  double forwardSeconds = 0;   // one micro-batch's forward through the stage
  double backwardSeconds = 0;  // its backward
  double updateSeconds = 0;    // one update of the stage's weights
};

struct PipelineSimOptions {
  PipelineShape shape;
  std::vector<PipelineStageCosts> stages;  // shape.stages entries
  double hopSeconds = 0;                   // an activation, or its gradient, to the next stage
  int64_t steps = 1;  // one segment: the pipeline is empty at its start and its end
};

struct PipelineSimResult {
  double makespanSeconds = 0;         // from the first operation's start to the last's end
  double secondsPerStep = 0;          // makespan / steps
  std::vector<double> busySeconds;    // per stage: the summed durations of its operations
  double utilisation = 0;             // summed busy / (stages × makespan)
  std::vector<double> finishSeconds;  // per stage: when its last operation ends
  // Per stage: the most micro-batches whose forward had ended and whose backward had not, at
  // any time: the activations the stage must keep (in micro-batches' worth). Fill-drain: M;
  // pb: 2(S − 1 − s) + 1, the first stage holding the most (with --weight-stash, as many
  // versions of the stage's weights less one).
  std::vector<int64_t> peakActivations;
};

// Throws ConfigError for a cost list of the wrong size, a negative cost or hop, steps < 1.
PipelineSimResult simulatePipeline(const PipelineSimOptions& options);

}  // namespace gradsync::sim
