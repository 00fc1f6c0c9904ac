#include "schedule/schedule.h"

#include <gtest/gtest.h>

#include "gradsync/error.h"

namespace gradsync {

TEST(Schedule, ParsesEveryForm) {
  EXPECT_EQ(ScheduleSpec::parse("fifo").kind, ScheduleSpec::Kind::kFifo);
  EXPECT_EQ(ScheduleSpec::parse("wfbp").kind, ScheduleSpec::Kind::kWfbp);
  ScheduleSpec fusion = ScheduleSpec::parse("fusion:4");
  EXPECT_EQ(fusion.kind, ScheduleSpec::Kind::kFusion);
  EXPECT_EQ(fusion.fusionBytes, 4u << 20);
  EXPECT_EQ(fusion.toString(), "fusion:4");
  EXPECT_EQ(ScheduleSpec::parse("fusion").fusionBytes, 25u << 20);
  EXPECT_FALSE(ScheduleSpec::parse("fifo").overlapsBackward());
}

TEST(Schedule, RefusesUnknownFormsListingValidOnes) {
  try {
    ScheduleSpec::parse("p4");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("fifo, wfbp, fusion:MB"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("p3[:slice=N,window=W]"), std::string::npos);
  }
  EXPECT_THROW(ScheduleSpec::parse("fusion:x"), ConfigError);
  EXPECT_THROW(ScheduleSpec::parse("fusion:-1"), ConfigError);
  EXPECT_THROW(ScheduleSpec::parse("p3:slice=0"), ConfigError);
  EXPECT_THROW(ScheduleSpec::parse("p3:window=0"), ConfigError);
  EXPECT_THROW(ScheduleSpec::parse("p3:depth=3"), ConfigError);
  EXPECT_THROW(ScheduleSpec::parse("p3:slice"), ConfigError);
  EXPECT_THROW(ScheduleSpec::parse("p3:"), ConfigError);
}

TEST(Schedule, ParsesP3WithDefaultsAndOptions) {
  ScheduleSpec p3 = ScheduleSpec::parse("p3");
  EXPECT_EQ(p3.kind, ScheduleSpec::Kind::kP3);
  EXPECT_EQ(p3.sliceElements, 40000u);  // P3's default slice bound
  EXPECT_EQ(p3.window, 2u);
  EXPECT_TRUE(p3.prioritized());
  ScheduleSpec custom = ScheduleSpec::parse("p3:window=4,slice=1000");
  EXPECT_EQ(custom.sliceElements, 1000u);
  EXPECT_EQ(custom.window, 4u);
  EXPECT_EQ(ScheduleSpec::parse(custom.toString()).sliceElements, 1000u);
  EXPECT_EQ(ScheduleSpec::parse("p3:slice=7").window, 2u);
  // The window's slices in flight at once by default; concurrent=0 runs them one at a time.
  EXPECT_TRUE(p3.concurrent);
  ScheduleSpec serial = ScheduleSpec::parse("p3:concurrent=0,window=3");
  EXPECT_FALSE(serial.concurrent);
  EXPECT_EQ(serial.window, 3u);
  EXPECT_EQ(serial.toString(), "p3:slice=40000,window=3,concurrent=0");
  EXPECT_FALSE(ScheduleSpec::parse(serial.toString()).concurrent);
  EXPECT_EQ(p3.toString(), "p3:slice=40000,window=2");
  EXPECT_THROW(ScheduleSpec::parse("p3:concurrent=2"), ConfigError);
}

// p3's slice for a known link: the smallest whose ring all-reduce spends at most 2% of its time
// on message latency, recomputed here from the ring's cost; never below P3's 40,000.
TEST(Schedule, P3SliceForALinkKeepsLatencyUnderTwoPercent) {
  EXPECT_FALSE(ScheduleSpec::parse("p3").sliceGiven);
  EXPECT_TRUE(ScheduleSpec::parse("p3:slice=40000").sliceGiven);
  EXPECT_FALSE(ScheduleSpec::parse("p3:window=3").sliceGiven);
  const auto latencyShare = [](double slice, int p, double latency, double bandwidth) {
    const double messages = 2.0 * (p - 1) * latency;
    return messages / (messages + 2.0 * (p - 1) / p * 4 * slice / bandwidth);
  };
  for (int p : {2, 3, 16, 64}) {
    for (double latency : {5e-6, 25e-6, 100e-6}) {
      for (double bandwidth : {12.5e6, 1.25e9, 12.5e9}) {
        const size_t slice = p3SliceForLink(p, latency, bandwidth);
        ASSERT_GE(slice, 40000u);
        EXPECT_LE(latencyShare(static_cast<double>(slice), p, latency, bandwidth), 0.02 + 1e-12);
        if (slice > 40000) {  // the smallest such slice, up to rounding
          EXPECT_GT(latencyShare(0.999 * static_cast<double>(slice), p, latency, bandwidth), 0.02)
              << p << " ranks, " << latency << " s, " << bandwidth << " B/s";
        }
      }
    }
  }
  // 16 ranks, 5 us, 100 Gbit/s (the H200 profiles' check): 12.25 M elements, not 40,000.
  EXPECT_EQ(p3SliceForLink(16, 5e-6, 12.5e9), 12'250'000u);
  // One rank, or a link without a latency: P3's default.
  EXPECT_EQ(p3SliceForLink(1, 5e-6, 12.5e9), 40000u);
  EXPECT_EQ(p3SliceForLink(16, 0, 12.5e9), 40000u);
}

TEST(Schedule, P3SlicesWholeRowsWithForwardOrderPriority) {
  // Tensor 0: 10 rows of 30 (300 elements); tensor 1: 25 elements of one row each; tensor 2:
  // one row of 200, larger than the slice bound of 100.
  GradientLayout layout =
      planLayout({300, 25, 200}, ScheduleSpec::parse("p3:slice=100"), {}, {30, 1, 200});
  std::vector<std::pair<size_t, size_t>> spans;  // (offset, elements)
  std::vector<int> priorities;
  for (const CommUnit& unit : layout.units) {
    spans.emplace_back(unit.offset, unit.elements);
    priorities.push_back(unit.priority);
    EXPECT_EQ(unit.tensors.size(), 1u);
  }
  // Backward order: tensor 2 (one oversized row), tensor 1 (one slice), tensor 0 (3 rows = 90,
  // then 90, 90, 30).
  EXPECT_EQ(spans, (std::vector<std::pair<size_t, size_t>>{
                       {0, 200}, {200, 25}, {225, 90}, {315, 90}, {405, 90}, {495, 30}}));
  EXPECT_EQ(priorities, (std::vector<int>{2, 1, 0, 0, 0, 0}));
  EXPECT_EQ(layout.unitOf, (std::vector<int>{2, 1, 0}));
  EXPECT_EQ(layout.unitCount, (std::vector<int>{4, 1, 1}));
  EXPECT_EQ(layout.units[4].tensorOffset, 180u);
  EXPECT_EQ(layout.offsetOf[0], 225u);
}

TEST(Schedule, WfbpIsOneUnitPerTensorInBackwardOrder) {
  GradientLayout layout = planLayout({10, 20, 30}, ScheduleSpec::parse("wfbp"));
  ASSERT_EQ(layout.units.size(), 3u);
  EXPECT_EQ(layout.units[0].tensors, std::vector<int>{2});  // the last layer's gradient first
  EXPECT_EQ(layout.units[2].tensors, std::vector<int>{0});
  EXPECT_EQ(layout.offsetOf[2], 0u);
  EXPECT_EQ(layout.offsetOf[1], 30u);
  EXPECT_EQ(layout.offsetOf[0], 50u);
  EXPECT_EQ(layout.totalElements, 60u);
}

TEST(Schedule, FusionFillsBucketsUpToTheThreshold) {
  // 1 MiB threshold = 262144 floats: tensors of 200000 + 100000 close a bucket, 50 and 10 form
  // the last, partial one.
  GradientLayout layout = planLayout({10, 50, 100000, 200000}, ScheduleSpec::parse("fusion:1"));
  ASSERT_EQ(layout.units.size(), 2u);
  EXPECT_EQ(layout.units[0].tensors, (std::vector<int>{3, 2}));
  EXPECT_EQ(layout.units[0].elements, 300000u);
  EXPECT_EQ(layout.units[1].tensors, (std::vector<int>{1, 0}));
  EXPECT_EQ(layout.units[1].offset, 300000u);
  EXPECT_EQ(layout.unitOf[0], 1);
  EXPECT_EQ(layout.unitOf[3], 0);
}

TEST(Schedule, FusionNeverMixesGroupsButFusesEachAcrossTheOthers) {
  // Tensors 3, 2 and 0 are compressed alike, tensor 1 is not (a BatchNorm tensor between
  // weights): the compressed bucket goes on past it, and it gets a bucket of its own. Neither
  // fills 1 MiB, so both close at the end of backward, the one whose last tensor came first
  // first.
  GradientLayout layout =
      planLayout({10, 50, 100, 200}, ScheduleSpec::parse("fusion:1"), {0, 1, 0, 0});
  ASSERT_EQ(layout.units.size(), 2u);
  EXPECT_EQ(layout.units[0].tensors, (std::vector<int>{1}));
  EXPECT_EQ(layout.units[1].tensors, (std::vector<int>{3, 2, 0}));
  EXPECT_EQ(layout.units[1].elements, 310u);
  // A unit's tensors are consecutive in the buffer, in the unit's order.
  EXPECT_EQ(layout.offsetOf[1], 0u);
  EXPECT_EQ(layout.offsetOf[3], 50u);
  EXPECT_EQ(layout.offsetOf[2], 250u);
  EXPECT_EQ(layout.offsetOf[0], 350u);
  // A bucket that fills closes at once, before the other group's open one.
  layout = planLayout({300, 1, 300, 1, 300}, ScheduleSpec::parse("fusion:0.002"), {0, 1, 0, 1, 0});
  ASSERT_EQ(layout.units.size(), 3u);
  EXPECT_EQ(layout.units[0].tensors, (std::vector<int>{4, 2}));  // 600 floats >= 2 KiB
  EXPECT_EQ(layout.units[1].tensors, (std::vector<int>{3, 1}));
  EXPECT_EQ(layout.units[2].tensors, (std::vector<int>{0}));
}

TEST(Schedule, UnitsTileTheBufferExactly) {
  for (const char* spec : {"fifo", "wfbp", "fusion:0.001", "p3:slice=64"}) {
    GradientLayout layout = planLayout({7, 0, 300, 1, 4096}, ScheduleSpec::parse(spec));
    size_t offset = 0;
    for (const CommUnit& unit : layout.units) {
      EXPECT_EQ(unit.offset, offset) << spec;
      offset += unit.elements;
    }
    EXPECT_EQ(offset, layout.totalElements) << spec;
  }
}

}  // namespace gradsync
