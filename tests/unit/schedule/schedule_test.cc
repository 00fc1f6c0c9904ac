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
    EXPECT_NE(std::string(e.what()).find("fifo, wfbp or fusion:MB"), std::string::npos);
  }
  EXPECT_THROW(ScheduleSpec::parse("fusion:x"), ConfigError);
  EXPECT_THROW(ScheduleSpec::parse("fusion:-1"), ConfigError);
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

TEST(Schedule, FusionNeverMixesGroups) {
  // Tensors 3, 2 and 0 are compressed alike, tensor 1 is not: the bucket closes around it.
  GradientLayout layout =
      planLayout({10, 50, 100, 200}, ScheduleSpec::parse("fusion:1"), {0, 1, 0, 0});
  ASSERT_EQ(layout.units.size(), 3u);
  EXPECT_EQ(layout.units[0].tensors, (std::vector<int>{3, 2}));
  EXPECT_EQ(layout.units[1].tensors, (std::vector<int>{1}));
  EXPECT_EQ(layout.units[2].tensors, (std::vector<int>{0}));
}

TEST(Schedule, UnitsTileTheBufferExactly) {
  for (const char* spec : {"fifo", "wfbp", "fusion:0.001"}) {
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
