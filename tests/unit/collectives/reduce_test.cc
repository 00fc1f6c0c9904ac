#include "collectives/reduce.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace gradsync {

// The vectorised kernels against a naive element-by-element reference, at sizes that exercise
// the vector body and the scalar tail.
TEST(Reduce, AddIntoMatchesNaive) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1, 1);
  for (size_t n : {0, 1, 3, 8, 17, 1000, 4099}) {
    std::vector<float> a(n), b(n);
    for (size_t i = 0; i < n; ++i) {
      a[i] = dist(rng);
      b[i] = dist(rng);
    }
    std::vector<float> expected(n);
    for (size_t i = 0; i < n; ++i) expected[i] = a[i] + b[i];
    addInto(a.data(), b.data(), n);
    EXPECT_EQ(a, expected);
  }
}

// Bitwise what addInto then scale give: the ring fuses the two into its last reducing step.
TEST(Reduce, AddIntoScaledMatchesAddThenScale) {
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> dist(-1, 1);
  for (size_t n : {0, 1, 3, 8, 17, 1000, 4099}) {
    std::vector<float> a(n), b(n);
    for (size_t i = 0; i < n; ++i) {
      a[i] = dist(rng);
      b[i] = dist(rng);
    }
    std::vector<float> expected = a;
    addInto(expected.data(), b.data(), n);
    scale(expected.data(), n, 1.0f / 3);
    addIntoScaled(a.data(), b.data(), n, 1.0f / 3);
    EXPECT_EQ(a, expected);
  }
}

TEST(Reduce, ScaleMatchesNaive) {
  std::vector<float> a(1001);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i);
  scale(a.data(), a.size(), 0.25f);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], static_cast<float>(i) * 0.25f);
}

}  // namespace gradsync
