#include "pipeline/wave_placement.h"

#include <fmt/format.h>

#include "common/check.h"
#include "gradsync/error.h"

namespace gradsync {

WavePlacement parseWavePlacement(std::string_view text) {
  if (text == "rotated") return WavePlacement::kRotated;
  if (text == "same") return WavePlacement::kSame;
  throw ConfigError(fmt::format("--wave-placement must be rotated or same, not '{}'", text),
                    {.hint = "rotated: wave w's stage j on device (j + w) mod S (Wavelet); "
                             "same: every wave's stage j on device j"});
}

const char* wavePlacementName(WavePlacement placement) {
  return placement == WavePlacement::kRotated ? "rotated" : "same";
}

int waveDevice(WavePlacement placement, int devices, int wave, int stage) {
  GS_CHECK(devices >= 1 && wave >= 0 && stage >= 0);
  return placement == WavePlacement::kRotated ? (stage + wave) % devices : stage % devices;
}

int deviceCore(int device, std::span<const int> cpus) {
  GS_CHECK(!cpus.empty() && device >= 0);
  return cpus[static_cast<size_t>(device) % cpus.size()];
}

std::vector<RankPlacement> placeRanks(WavePlacement placement, int stages, int waves,
                                      std::span<const int> cpus) {
  if (stages < 1 || waves < 1) {
    throw ConfigError(
        fmt::format("cannot place {} waves of {} stages: both must be at least 1", waves, stages));
  }
  if (cpus.empty()) throw ConfigError("cannot place pipeline stages: no CPU to run on");
  std::vector<RankPlacement> ranks;
  for (int r = 0; r < stages * waves; ++r) {
    RankPlacement& p = ranks.emplace_back();
    p.rank = r;
    p.wave = r / stages;
    p.stage = r % stages;
    p.device = waveDevice(placement, stages, p.wave, p.stage);
    p.core = deviceCore(p.device, cpus);
  }
  return ranks;
}

std::string describeCores(const std::vector<RankPlacement>& ranks) {
  std::string text;
  for (const RankPlacement& p : ranks) {
    text += fmt::format("{}{}:{}", text.empty() ? "" : " ", p.rank, p.core);
  }
  return text;
}

}  // namespace gradsync
