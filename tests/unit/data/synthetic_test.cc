#include "data/synthetic.h"

#include <gtest/gtest.h>

#include <cmath>

#include "gradsync/error.h"

namespace gradsync {
namespace {

TEST(SyntheticDataset, DeterministicPerSample) {
  const SyntheticDataset a({3, 8, 5, 7}, 99), b({3, 8, 5, 7}, 99), other({3, 8, 5, 7}, 100);
  ASSERT_EQ(a.sampleElements(), 120u);
  std::vector<float> x(120), y(120), z(120);
  a.sample(17, x);
  b.sample(17, y);
  other.sample(17, z);
  EXPECT_EQ(x, y);
  EXPECT_NE(x, z);
  a.sample(18, y);
  EXPECT_NE(x, y);
  EXPECT_EQ(a.label(5), b.label(5));
}

TEST(SyntheticDataset, BatchEqualsSamplesInAnyOrder) {
  const SyntheticDataset data({1, 3, 3, 4}, 7);
  const std::vector<size_t> indices = {9, 2, 9, 40};
  std::vector<float> inputs(indices.size() * 9);
  std::vector<int64_t> labels(indices.size());
  data.batch(indices, inputs, labels);
  std::vector<float> one(9);
  for (size_t i = 0; i < indices.size(); ++i) {
    data.sample(indices[i], one);
    EXPECT_TRUE(std::equal(one.begin(), one.end(), inputs.begin() + i * 9));
    EXPECT_EQ(labels[i], data.label(indices[i]));
  }
}

TEST(SyntheticDataset, RangesAndMoments) {
  const SyntheticDataset data({1, 28, 28, 10}, 1);
  std::vector<float> x(784);
  double sum = 0, sumSquares = 0;
  std::vector<int> histogram(10, 0);
  const int samples = 2000;
  for (int s = 0; s < samples; ++s) {
    data.sample(s, x);
    for (float v : x) {
      ASSERT_GE(v, -1.0f);
      ASSERT_LT(v, 1.0f);
      sum += v;
      sumSquares += double(v) * v;
    }
    const int64_t label = data.label(s);
    ASSERT_GE(label, 0);
    ASSERT_LT(label, 10);
    ++histogram[label];
  }
  const double n = samples * 784.0;
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(sumSquares / n, 1.0 / 3.0, 0.01);  // variance of U(-1, 1)
  for (int c = 0; c < 10; ++c) EXPECT_NEAR(histogram[c], samples / 10.0, 70) << c;
}

TEST(SyntheticDataset, OddElementCount) {
  const SyntheticDataset data({1, 1, 3, 2}, 5);
  std::vector<float> x(3);
  data.sample(0, x);
  EXPECT_NE(x[2], x[1]);
}

TEST(SyntheticDataset, ToImageSet) {
  const SyntheticDataset data({2, 4, 5, 3}, 11);
  const ImageSet set = data.toImageSet(50);
  EXPECT_EQ(set.count, 50);
  EXPECT_EQ(set.rows, 8);
  EXPECT_EQ(set.cols, 5);
  EXPECT_EQ(set.pixels.size(), 50u * 40);
  ASSERT_EQ(set.labels.size(), 50u);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(set.labels[i], data.label(i));
  EXPECT_EQ(set.pixels, data.toImageSet(50).pixels);
  EXPECT_THROW(SyntheticDataset({1, 1, 1, 300}, 0).toImageSet(1), ConfigError);
}

TEST(SyntheticDataset, ShapeErrors) {
  EXPECT_THROW(SyntheticDataset({0, 28, 28, 10}, 0), ConfigError);
  EXPECT_THROW(SyntheticDataset({1, 28, 28, 0}, 0), ConfigError);
  EXPECT_THROW(SyntheticDataset({1 << 20, 1 << 10, 2, 10}, 0), ConfigError);
}

}  // namespace
}  // namespace gradsync
