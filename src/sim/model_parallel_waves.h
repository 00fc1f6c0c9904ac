// Model-parallel Wavelet (docs/simulator.md, "Wavelet"): a model cut into k partitions on k
// devices, and W waves (mini-batches) trained at once. Naive model parallelism is one wave:
// its mini-batch goes forward through the partitions and back, one device busy at a time.
// With W waves, wave j runs partition i on device (i + j) mod k (rotated placement) or on
// device i (the same placement: a pipeline of W mini-batches without flushes).
//
// Per wave and iteration: forward of partitions 0 .. k−1, backward of k−1 .. 0, and each
// partition's update on its device right after its backward; a partition's next forward waits
// for its update. Between partitions on different devices an activation (forward) or its
// gradient (backward) crosses one hop. Each device runs one operation at a time, and so does
// each link: one per ordered pair of devices, or a single one shared by every transfer. A
// device (or link) takes its ready operations in the order they became ready, ties by wave.
// Torch-free, a pure function: thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "pipeline/wave_placement.h"
#include "sim/pipeline_sim.h"

namespace gradsync::sim {

using WavePlacement = gradsync::WavePlacement;  // the real pipeline's rule

struct ModelParallelWaveOptions {
  std::vector<PipelineStageCosts> partitions;  // k ≥ 1: one mini-batch's costs per partition
  int waves = 1;                               // 1 ≤ W
  WavePlacement placement = WavePlacement::kRotated;
  double hopSeconds = 0;    // one activation or gradient between two devices
  bool sharedLink = false;  // every hop through one link (a shared bus) instead of per pair
  int64_t steps = 20;       // iterations per wave
};

struct WaveOperation {
  enum class Kind { kForward, kBackward, kUpdate, kHop };
  Kind kind = Kind::kForward;
  int resource = 0;  // a device (0 .. k−1) or, for a hop, a link (k and above)
  int wave = 0;
  int64_t iteration = 0;
  int partition = 0;  // a hop's: the partition it leaves
  double start = 0;
  double end = 0;
};

struct ModelParallelWaveResult {
  // Steady state: the time for every wave to run one iteration (W mini-batches), measured on
  // wave 0's iterations between the first and the last quarter of the run; the whole run when
  // there is one.
  double secondsPerIteration = 0;
  double secondsPerMiniBatch = 0;   // secondsPerIteration / W
  std::vector<double> busySeconds;  // per device, over the whole run
  double utilisation = 0;           // summed busy / (k × makespan)
  double makespanSeconds = 0;
  std::vector<WaveOperation> operations;  // in the order they were scheduled
};

// The device of wave `wave`'s partition `partition` among `devices` (gradsync::waveDevice).
int deviceOf(WavePlacement placement, int devices, int wave, int partition);

// Throws ConfigError for no partitions, waves < 1, a negative cost or hop, steps < 1.
ModelParallelWaveResult simulateModelParallelWaves(const ModelParallelWaveOptions& options);

}  // namespace gradsync::sim
