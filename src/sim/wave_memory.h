// Data-parallel Wavelet on one device (docs/simulator.md, "Wavelet"): K waves of the same model,
// each a batch of B, run tick-tock as in the Orion implementation of Wavelet: the waves' forward
// phases take turns (never two at once), so do their backward phases (backward plus the
// optimizer step), so one wave's forward overlaps another's backward; optionally, a forward
// phase also starts no earlier than a minimum offset after the previous one. The result is the
// device-memory timeline (static bytes plus each wave's activations, rising layer by layer in
// the forward and falling in the backward) and the throughput, against one wave at K·B.
//
// The device runs concurrent operations by processor sharing: an operation on b samples alone
// uses min(1, b / saturationBatch) of the device (all of it when saturationBatch is 0), so it
// takes the profile's time × max(b, saturationBatch) / profile batch; operations running
// together share the device in proportion to what each would use alone, up to all of it.
// Torch-free, pure functions: thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "sim/model_profile.h"

namespace gradsync::sim {

struct WaveMemoryOptions {
  int waves = 1;                // K ≥ 1
  int64_t batchPerWave = 0;     // B ≥ 1: samples per wave per iteration
  int optimizerSlots = 1;       // fp32 optimizer state per parameter: 1 momentum, 2 Adam, 0 SGD
  int64_t saturationBatch = 0;  // the batch that fills the device; 0: any batch does
  int64_t steps = 8;            // iterations per wave
  // The least time between consecutive forward phases' starts, as a fraction of one wave's
  // iteration alone on the device (0.5: half an iteration); 0: the gates alone set the offset.
  double minimumOffset = 0;
};

// One change of the device's memory: an activation kept (a forward starting) or freed (a
// backward ending).
struct MemoryEvent {
  double seconds = 0;
  double bytes = 0;  // in use after the change, static bytes included
  int wave = 0;
  int layer = 0;
  bool forward = true;  // kept at this layer's forward; false: freed at its backward
};

struct WaveMemoryResult {
  // Weights, one gradient buffer and the optimizer state, resident once: the waves share one
  // model, and since their backward phases never overlap one gradient buffer serves them all.
  double staticBytes = 0;
  double peakBytes = 0;  // static + the most activations held at any time
  // Steady state: the time per iteration of every wave (K·B samples), measured on wave 0's
  // iterations between the first and the last quarter of the run (the last wave's last
  // iteration runs alone); the whole run when there is one step.
  double secondsPerIteration = 0;
  double samplesPerSecond = 0;
  std::vector<MemoryEvent> timeline;  // in time order; at a tie, frees come before keeps
};

// Throws ConfigError for a profile without activation sizes, waves < 1, a batch < 1, slots < 0,
// a negative saturation batch, steps < 1 or a minimum offset outside [0, 1].
WaveMemoryResult simulateWaveMemory(const ModelProfile& profile, const WaveMemoryOptions& options);

// The largest batch per wave whose peak fits `capacityBytes` (options.batchPerWave ignored), by
// bisection over the peak, which grows with the batch; 0 when not even one sample fits.
int64_t largestFittingBatch(const ModelProfile& profile, WaveMemoryOptions options,
                            double capacityBytes);

}  // namespace gradsync::sim
