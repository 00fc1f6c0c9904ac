// `gradsync train --pipeline S` and its companions (docs/cli.md): one Options struct, parsed by
// the CLI, checked and turned into a plan by the trainer (torch/pipeline/pipeline.h). Torch-free.
#pragma once

#include <cstddef>
#include <string>

namespace gradsync {

struct PipelineOptions {
  int stages = 0;                   // --pipeline S: the model in S stages (0: data parallel only)
  std::string mode = "pb";          // --pipeline-mode fill-drain | pb (pipeline/schedule.h)
  int microBatches = 1;             // --micro-batches M: fill-drain splits --batch-size in M
  bool weightStash = false;         // --weight-stash: a backward on its forward's weights
  std::string compensate = "none";  // --compensate none | sc | lwp | sc+lwp
  bool lwpBackward = false;         // --lwp-backward: LWP's backward on the predicted weights too
  std::string stageLayers;          // --stage-layers 3,4,2,2: layers per stage by hand
  std::string stageProfile;         // --stage-profile FILE: balance with `gradsync profile`'s times
  // --reference-batch B0 > 0: --lr and --momentum are a recipe for batch B0, scaled to
  // --batch-size (optim/delay_compensation.h, scaleRecipe).
  size_t referenceBatch = 0;
  bool emulate = false;  // --pipeline-emulate: every stage in this one process, on one thread
  // Model-parallel Wavelet (`--waves K` with --pipeline: K replicas, the waves, on S devices):
  // --wave-placement rotated | same (pipeline/wave_placement.h). Pinned runs place replica r as
  // wave r; --waves K ≥ 2 pins, --pin-devices pins one replica (naive model parallelism).
  std::string wavePlacement = "rotated";
  bool pinDevices = false;  // --pin-devices: each rank's training thread on its device's core

  bool enabled() const { return stages > 0; }
};

}  // namespace gradsync
