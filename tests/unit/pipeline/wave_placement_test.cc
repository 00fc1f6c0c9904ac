// Model-parallel Wavelet's placement rule (pipeline/wave_placement.h) against hand-written
// tables, and the pinning (pipeline/device_pinning.h) against what the kernel reports.
#include "pipeline/wave_placement.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <thread>

#include "gradsync/error.h"
#include "pipeline/device_pinning.h"

namespace gradsync {
namespace {

// devices[w][j]: wave w's stage j.
std::vector<std::vector<int>> table(WavePlacement placement, int stages, int waves) {
  std::vector<std::vector<int>> devices(static_cast<size_t>(waves));
  for (int w = 0; w < waves; ++w) {
    for (int j = 0; j < stages; ++j) devices[w].push_back(waveDevice(placement, stages, w, j));
  }
  return devices;
}

TEST(WavePlacement, RotatedShiftsEachWaveByOneDevice) {
  // Two devices: tick runs A on 0 and B on 1, tock A on 1 and B on 0 (seed004 §3.4).
  EXPECT_EQ(table(WavePlacement::kRotated, 2, 2), (std::vector<std::vector<int>>{{0, 1}, {1, 0}}));
  // K = S = 4: a Latin square, every device runs every stage once per phase.
  EXPECT_EQ(
      table(WavePlacement::kRotated, 4, 4),
      (std::vector<std::vector<int>>{{0, 1, 2, 3}, {1, 2, 3, 0}, {2, 3, 0, 1}, {3, 0, 1, 2}}));
  // Odd S = 3, K = 2 and K = 3.
  EXPECT_EQ(table(WavePlacement::kRotated, 3, 2),
            (std::vector<std::vector<int>>{{0, 1, 2}, {1, 2, 0}}));
  EXPECT_EQ(table(WavePlacement::kRotated, 3, 3),
            (std::vector<std::vector<int>>{{0, 1, 2}, {1, 2, 0}, {2, 0, 1}}));
}

TEST(WavePlacement, SameAndOneWavePutStageJOnDeviceJ) {
  EXPECT_EQ(table(WavePlacement::kSame, 3, 3),
            (std::vector<std::vector<int>>{{0, 1, 2}, {0, 1, 2}, {0, 1, 2}}));
  // One wave (naive model parallelism): both placements are the identity.
  EXPECT_EQ(table(WavePlacement::kRotated, 3, 1), (std::vector<std::vector<int>>{{0, 1, 2}}));
  EXPECT_EQ(table(WavePlacement::kSame, 3, 1), (std::vector<std::vector<int>>{{0, 1, 2}}));
  EXPECT_EQ(table(WavePlacement::kRotated, 1, 1), (std::vector<std::vector<int>>{{0}}));
}

TEST(WavePlacement, RanksAreStagesOfWavesAndDevicesWrapOverTheCpus) {
  const std::vector<int> cpus = {2, 5};  // a cpuset that does not start at 0
  const std::vector<RankPlacement> ranks = placeRanks(WavePlacement::kRotated, 3, 2, cpus);
  ASSERT_EQ(ranks.size(), 6u);
  // rank: (wave, stage) -> device -> the (device mod 2)-th CPU.
  const int expected[6][4] = {{0, 0, 0, 2}, {0, 1, 1, 5}, {0, 2, 2, 2},
                              {1, 0, 1, 5}, {1, 1, 2, 2}, {1, 2, 0, 2}};
  for (int r = 0; r < 6; ++r) {
    SCOPED_TRACE(r);
    EXPECT_EQ(ranks[r].rank, r);
    EXPECT_EQ(ranks[r].wave, expected[r][0]);
    EXPECT_EQ(ranks[r].stage, expected[r][1]);
    EXPECT_EQ(ranks[r].device, expected[r][2]);
    EXPECT_EQ(ranks[r].core, expected[r][3]);
    EXPECT_TRUE(ranks[r].affinity.empty());
  }
  EXPECT_EQ(describeCores(ranks), "0:2 1:5 2:2 3:5 4:2 5:2");
  EXPECT_EQ(deviceCore(7, std::vector<int>{0, 1, 2}), 1);
  EXPECT_THROW(placeRanks(WavePlacement::kSame, 0, 1, cpus), ConfigError);
  EXPECT_THROW(placeRanks(WavePlacement::kSame, 2, 0, cpus), ConfigError);
  EXPECT_THROW(placeRanks(WavePlacement::kSame, 2, 1, std::vector<int>{}), ConfigError);
}

TEST(WavePlacement, ParsesItsTwoNames) {
  EXPECT_EQ(parseWavePlacement("rotated"), WavePlacement::kRotated);
  EXPECT_EQ(parseWavePlacement("same"), WavePlacement::kSame);
  EXPECT_STREQ(wavePlacementName(WavePlacement::kSame), "same");
  try {
    parseWavePlacement("round-robin");
    FAIL() << "accepted round-robin";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--wave-placement must be rotated or same"),
              std::string::npos)
        << e.what();
  }
}

// On a thread of its own, so that a failure cannot leave the test runner's thread pinned.
TEST(DevicePinning, PinsTheCallingThreadAndGivesItsCpusBack) {
  std::thread([] {
    const std::vector<int> before = threadCpus();
    ASSERT_FALSE(before.empty());
    {
      ThreadPin pin(before.back(), 3);
      EXPECT_EQ(threadCpus(), std::vector<int>{before.back()});
      // Threads it starts inherit the pin (the rank's engine threads).
      std::vector<int> child;
      std::thread([&] { child = threadCpus(); }).join();
      EXPECT_EQ(child, std::vector<int>{before.back()});
    }
    EXPECT_EQ(threadCpus(), before);
  }).join();
}

TEST(DevicePinning, ACoreOutsideTheCpusetIsNamedWithItsRank) {
  std::thread([] {
    const std::vector<int> before = threadCpus();
    for (int cpu : {-1, 1023}) {  // no such CPU; one outside any machine's cpuset here
      if (std::find(before.begin(), before.end(), cpu) != before.end()) continue;
      try {
        ThreadPin pin(cpu, 5);
        ADD_FAILURE() << "pinned to CPU " << cpu;
      } catch (const ConfigError& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("rank 5 cannot pin itself to core " + std::to_string(cpu)),
                  std::string::npos)
            << what;
        EXPECT_EQ(e.context().rank, 5);
      }
      EXPECT_EQ(threadCpus(), before);
    }
  }).join();
}

}  // namespace
}  // namespace gradsync
