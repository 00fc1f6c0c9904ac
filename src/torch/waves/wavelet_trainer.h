// `gradsync train --waves K` (K >= 2): Wavelet's tick-tock waves in data-parallel training
// (Wang et al., MLSys 2021; docs/algorithms.md "Wavelet"). Every worker runs K waves, each a
// thread with its own model replica and its own DistributedOptimizer (the run's schedule and
// compressor) whose streams are kept apart on the one transport (tags shifted per wave,
// tags::kWaveShift). The waves pass tick-tock gates (torch/waves/gates.h), so one wave's forward
// and communication run beside another's backward; they take turns through the rank's sampler
// sequence (wave w: batches w, w + K, ...), and train one set of weights per worker
// (torch/waves/master.h: --wave-consistency shared | accumulate). Torch-free header.
#pragma once

#include "gradsync/transport.h"
#include "torch/loop/options.h"

namespace gradsync {

// Throws ConfigError naming the reason for what --waves does not support (update-mode schedules,
// other strategies than ring ssgd, parameter servers, --elastic, --data-url, emulated compute,
// checkpoints, traces, --eval-every, a compressor applying momentum itself, --steps not a
// multiple of the waves), before any work starts. No-op for --waves 1 beyond the names. With
// --pipeline only --waves ≥ 1 is checked here: the waves are the pipeline's replicas
// (model-parallel Wavelet, torch/pipeline/pipeline.h), which planPipeline checks.
void validateWaveOptions(const TrainOptions& options);

// Trains with options.waves waves on this worker; every rank of `workers` (the workers only)
// calls it with the same validated options. TrainResult::steps counts wave steps (one batch of
// batchSize per worker each); losses are in batch order (wave 0's first, wave 1's first, ...);
// parameters are the master's. Blocking; rethrows the first wave's failure after stopping the
// others (a lost peer: PeerLostError naming it).
TrainResult runWaveletTraining(Transport& workers, const TrainOptions& options);

}  // namespace gradsync
