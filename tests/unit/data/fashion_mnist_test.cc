// Checks against the real dataset when Debian's dataset-fashion-mnist is installed.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>

#include "data/idx.h"
#include "data/image_set.h"

namespace gradsync {
namespace {

bool datasetPresent() {
  return std::filesystem::exists(fashionMnistPath(kFashionMnistDir, true, true)) &&
         std::filesystem::exists(fashionMnistPath(kFashionMnistDir, false, true));
}

#define SKIP_WITHOUT_DATASET()                                          \
  if (!datasetPresent())                                                \
  GTEST_SKIP() << "Fashion-MNIST not installed at " << kFashionMnistDir \
               << " (apt-get install dataset-fashion-mnist)"

// Loaded once: the training split takes ~0.2 s to inflate.
const ImageSet& trainSet() {
  static const ImageSet set = [] {
    const auto start = std::chrono::steady_clock::now();
    ImageSet s = loadFashionMnist(kFashionMnistDir, true);
    const auto ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start);
    std::printf("[ info ] loaded the Fashion-MNIST training set in %.1f ms\n", ms.count());
    return s;
  }();
  return set;
}

void expectBalanced(const ImageSet& set, int64_t perClass) {
  std::vector<int64_t> histogram(kFashionMnistClasses, 0);
  for (uint8_t label : set.labels) ++histogram[label];
  for (int c = 0; c < kFashionMnistClasses; ++c) EXPECT_EQ(histogram[c], perClass) << "class " << c;
}

TEST(FashionMnist, TrainingSplit) {
  SKIP_WITHOUT_DATASET();
  const ImageSet& set = trainSet();
  EXPECT_EQ(set.count, 60000);
  EXPECT_EQ(set.rows, 28);
  EXPECT_EQ(set.cols, 28);
  EXPECT_EQ(set.pixels.size(), 60000u * 28 * 28);
  expectBalanced(set, 6000);
}

TEST(FashionMnist, TestSplit) {
  SKIP_WITHOUT_DATASET();
  const ImageSet set = loadFashionMnist(kFashionMnistDir, false);
  EXPECT_EQ(set.count, 10000);
  EXPECT_EQ(set.rows, 28);
  EXPECT_EQ(set.cols, 28);
  expectBalanced(set, 1000);
}

// How kFashionMnistMean/Std were obtained: population statistics of x / 255 over every pixel of
// the training split, in double precision (from a histogram of the 256 values: exact sums).
TEST(FashionMnist, NormalizationConstantsMatchTrainingSet) {
  SKIP_WITHOUT_DATASET();
  std::vector<int64_t> histogram(256, 0);
  for (uint8_t p : trainSet().pixels) ++histogram[p];
  double n = 0, sum = 0, sumSquares = 0;
  for (int v = 0; v < 256; ++v) {
    const double x = v / 255.0, count = static_cast<double>(histogram[v]);
    n += count;
    sum += count * x;
    sumSquares += count * x * x;
  }
  const double mean = sum / n;
  const double stddev = std::sqrt(sumSquares / n - mean * mean);
  std::printf("[ info ] mean %.10f std %.10f\n", mean, stddev);
  EXPECT_NEAR(kFashionMnistMean, mean, 1e-7);
  EXPECT_NEAR(kFashionMnistStd, stddev, 1e-7);
}

// The test split has nearly the training statistics: normalised, it is close to mean 0, std 1.
TEST(FashionMnist, NormalizedTestSplitIsStandardised) {
  SKIP_WITHOUT_DATASET();
  const ImageSet set = loadFashionMnist(kFashionMnistDir, false);
  std::vector<float> normalized;
  normalizeInto(set, kFashionMnistMean, kFashionMnistStd, normalized);
  ASSERT_EQ(normalized.size(), set.pixels.size());
  double sum = 0, sumSquares = 0;
  for (float v : normalized) {
    sum += v;
    sumSquares += double(v) * v;
  }
  const double n = static_cast<double>(normalized.size());
  EXPECT_NEAR(sum / n, 0.0, 0.02);
  EXPECT_NEAR(std::sqrt(sumSquares / n - (sum / n) * (sum / n)), 1.0, 0.02);
}

}  // namespace
}  // namespace gradsync
