// Model-parallel Wavelet's stage placement (docs/algorithms.md, "Wavelet"): K waves of an
// S-stage pipeline on S devices. Wave w runs stage j on device (j + w) mod S (rotated: in every
// phase each device computes another wave's stage, so none idles) or on device j (same: a
// pipeline of K mini-batches without flushes, the control). A pipeline job's rank r is stage
// r mod S of wave (replica) r / S. On a CPU a device is a core: device d runs on the (d mod n)-th
// of the n CPUs the job may use. The simulator (sim/model_parallel_waves.h) places its waves
// with the same rule. Torch-free, pure functions: thread-safe.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace gradsync {

enum class WavePlacement { kSame, kRotated };

// "rotated" | "same"; throws ConfigError naming --wave-placement and the choices.
WavePlacement parseWavePlacement(std::string_view text);
const char* wavePlacementName(WavePlacement placement);

// The device (0 .. devices − 1) of wave `wave`'s stage `stage`. devices ≥ 1, wave and stage ≥ 0.
int waveDevice(WavePlacement placement, int devices, int wave, int stage);

// The CPU of device `device`: the (device mod n)-th of `cpus` (ascending, n ≥ 1 of them).
int deviceCore(int device, std::span<const int> cpus);

// Where one rank of a pipeline job computes.
struct RankPlacement {
  int rank = 0;
  int wave = 0;   // r / S
  int stage = 0;  // r mod S
  int device = 0;
  int core = 0;               // deviceCore(device, cpus)
  std::vector<int> affinity;  // the CPUs the rank's training thread was left on (read back)
  bool operator==(const RankPlacement&) const = default;
};

// Every rank of `stages` × `waves` ranks, in rank order (affinity left empty). Throws
// ConfigError for stages < 1, waves < 1 or no CPUs.
std::vector<RankPlacement> placeRanks(WavePlacement placement, int stages, int waves,
                                      std::span<const int> cpus);

// "rank:core" of every rank, e.g. "0:0 1:1 2:1 3:0", for the log.
std::string describeCores(const std::vector<RankPlacement>& ranks);

}  // namespace gradsync
