// Data-parallel training of one of our models: the engine behind `gradsync train` (the
// data-parallel trainer, or Wavelet's waves with --waves K; the pipeline, recommendation and
// elastic trainers have entry points of their own, which the CLI calls). Torch-free header: the
// CLI includes it without paying for torch headers.
#pragma once

#include "gradsync/transport.h"
#include "torch/loop/options.h"

namespace gradsync {

// Throws ConfigError (with the valid choices) for an invalid option, before any work starts.
void validateTrainOptions(const TrainOptions& options);

// Trains on this rank; every rank of `transport` must call it with the same options. Rank 0
// shows progress (unless quiet) and writes the metrics file. With --servers K the last K ranks
// are parameter servers: they serve until the workers stop and return an empty result.
// Throws on any failure.
TrainResult runTraining(Transport& transport, const TrainOptions& options);

}  // namespace gradsync
