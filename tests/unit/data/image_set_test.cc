#include "data/image_set.h"

#include <gtest/gtest.h>

#include "gradsync/error.h"

namespace gradsync {
namespace {

ImageSet tinySet() {
  ImageSet set;
  set.count = 3;
  set.rows = 1;
  set.cols = 2;
  set.pixels = {0, 255, 51, 102, 204, 153};
  set.labels = {7, 0, 2};
  return set;
}

TEST(ImageSet, NormalizeInto) {
  std::vector<float> out;
  normalizeInto(tinySet(), 0.5f, 0.25f, out);
  ASSERT_EQ(out.size(), 6u);
  EXPECT_FLOAT_EQ(out[0], -2.0f);
  EXPECT_FLOAT_EQ(out[1], 2.0f);
  EXPECT_FLOAT_EQ(out[2], (0.2f - 0.5f) / 0.25f);
  EXPECT_FLOAT_EQ(out[4], (0.8f - 0.5f) / 0.25f);
  EXPECT_THROW(normalizeInto(tinySet(), 0.5f, 0.0f, out), ConfigError);
}

TEST(ImageSet, GatherBatchFollowsIndexOrder) {
  const ImageSet set = tinySet();
  std::vector<float> all;
  normalizeInto(set, 0.1f, 0.3f, all);
  const std::vector<size_t> indices = {2, 0, 2};
  std::vector<float> pixels(indices.size() * 2);
  std::vector<int64_t> labels(indices.size());
  gatherBatch(set, indices, {0.1f, 0.3f}, pixels, labels);
  EXPECT_EQ(labels, (std::vector<int64_t>{2, 7, 2}));
  for (size_t i = 0; i < indices.size(); ++i) {
    for (size_t p = 0; p < 2; ++p) EXPECT_EQ(pixels[i * 2 + p], all[indices[i] * 2 + p]);
  }
}

TEST(ImageSet, GatherBatchChecksSizesAndIndices) {
  const ImageSet set = tinySet();
  std::vector<float> pixels(2);
  std::vector<int64_t> labels(1);
  const std::vector<size_t> bad = {3};
  EXPECT_THROW(gatherBatch(set, bad, {}, pixels, labels), InternalError);
  const std::vector<size_t> two = {0, 1};
  EXPECT_THROW(gatherBatch(set, two, {}, pixels, labels), InternalError);
}

}  // namespace
}  // namespace gradsync
