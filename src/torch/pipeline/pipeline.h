// Pipeline-parallel training (`gradsync train --pipeline S`, docs/trainer.md "Pipelines" and
// docs/algorithms.md "Pipelined backpropagation"): the model's chain (Model::pipelineLayers) cut
// into S stages, each with its own weights and optimizer state, run in the order of
// pipeline/schedule.h. Torch-free header for the CLI.
#pragma once

#include <string>

#include "gradsync/transport.h"
#include "torch/train/trainer.h"

namespace gradsync {

// The real pipeline: rank r is stage r mod S of pipeline (replica) r / S; activations travel
// forward and their gradients backward over `transport` (tensors with their shapes), and each
// stage's replicas average their gradients through DistributedOptimizer over a transport of their
// own. Every rank calls it with the same options; every rank returns the whole model's final
// parameters and the first pipeline's step losses. A lost rank makes every other fail naming it
// (the transport's failure), never hang. Throws ConfigError for options it cannot run.
// Model-parallel Wavelet (--waves K, or --pin-devices): the K = size / S replicas are waves on S
// devices, and each rank pins its calling thread to its device's core for the run
// (pipeline/wave_placement.h; the thread's CPUs are restored on return); TrainResult::placement
// then holds every rank's device, core and the CPUs its thread was on at the end.
TrainResult runPipelineTraining(Transport& transport, const TrainOptions& options);

// The emulator: every stage in this process, on the calling thread, exactly the same arithmetic
// in the same order per stage as runPipelineTraining with one pipeline (tested to give its
// parameters bitwise). For convergence studies at S = 4-32 on two cores.
TrainResult emulatePipeline(const TrainOptions& options);

// The plan every rank agrees on, one line (mode, stages, layers per stage, scaled lr/momentum),
// for the log. Throws ConfigError as the training would. `ranks`: 0 for the emulator.
std::string describePipeline(const TrainOptions& options, int ranks);

}  // namespace gradsync
