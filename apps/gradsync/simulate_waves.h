// `gradsync simulate --waves K`: Wavelet in the simulator (docs/cli.md, docs/simulator.md
// "Wavelet"). Without --pipeline: K tick-tock waves of a batch B on one device against one wave
// of K·B (the device-memory timeline, sim/wave_memory.h), and on a device of --device-memory the
// largest batch each fits and its throughput. With --pipeline S: the profile cut into S
// balanced partitions on S devices, naive model parallelism against K waves in the same and in
// rotated placement (sim/model_parallel_waves.h).
#pragma once

#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

#include "sim/model_profile.h"
#include "simulate_pipeline.h"

namespace gradsync {

struct WaveSimFlags {
  int waves = 0;                // --waves K (0: not asked for)
  int64_t batch = 0;            // --batch B per wave (0: the profile's batch)
  std::string deviceMemory;     // --device-memory, e.g. 16GiB (empty: no capacity question)
  int64_t saturationBatch = 0;  // --saturation-batch: the batch that fills the device (0: any)
  int optimizerSlots = 1;       // --optimizer-slots: fp32 state per parameter (momentum: 1)
  double waveOffset = 0;        // --wave-offset: least offset between forwards, of an iteration
  bool sharedLink = false;      // --shared-link: the pipeline's hops share one link
};

void addWaveSimFlags(CLI::App* simulate, WaveSimFlags& flags);

// Refuses --waves below 1, the wave flags without --waves, and --waves with a flag that it does
// not use (the data-parallel cluster and strategy flags, --sweep, the pipeline's own schedule,
// --plot with --pipeline).
// `simulate` is the parsed command. Throws ConfigError naming the flags.
void checkWaveFlags(const CLI::App& simulate, const WaveSimFlags& flags, int pipelineStages);

// Runs the comparison, prints one table and writes `json` when not empty. `steps` are the
// data-parallel waves' iterations (--steps); the model-parallel ones run `pipeline.steps`.
// `plot` (data parallel only): an SVG of device memory against time, one wave beside the waves.
void runWaveSimulation(const ModelProfile& profile, const WaveSimFlags& flags,
                       const PipelineSimFlags& pipeline, int64_t steps, const std::string& json,
                       const std::string& plot);

}  // namespace gradsync
