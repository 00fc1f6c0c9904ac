// `gradsync simulate --pipeline S`: a model profile cut into S stages, its pipeline's timeline
// (sim/pipeline_sim.h) for fill-drain or pb (docs/cli.md, docs/simulator.md "Pipelines").
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "sim/model_profile.h"
#include "sim/pipeline_sim.h"

namespace gradsync {

struct PipelineSimFlags {
  int stages = 0;           // --pipeline S (0: the data-parallel simulator)
  std::string mode = "pb";  // --pipeline-mode fill-drain | pb
  int microBatches = 1;     // --micro-batches M (fill-drain)
  int64_t steps = 100;      // --pipeline-steps: one segment of N steps
  std::string hop = "0";    // --hop: an activation's or its gradient's transfer, e.g. 50us
};

// The profile's layers per stage, balanced by forward + backward time (pipeline/balance.h).
// Throws ConfigError for fewer layers than stages.
std::vector<int> balancedSplit(const ModelProfile& profile, int stages);
// Each stage's summed forward and backward times (one micro-batch: the profile's batch) under
// `split`, and its share of the update by parameter count.
std::vector<sim::PipelineStageCosts> stageCosts(const ModelProfile& profile,
                                                const std::vector<int>& split);

void addPipelineSimFlags(CLI::App* simulate, PipelineSimFlags& flags);

// The profile's layers balanced over the stages by forward + backward time (each layer's times
// are one micro-batch's: the profile's batch size); the update's time shared by parameter count.
// Prints one line; writes `json` when not empty. Throws ConfigError for bad flags.
void runPipelineSimulation(const ModelProfile& profile, const PipelineSimFlags& flags,
                           const std::string& json);

}  // namespace gradsync
