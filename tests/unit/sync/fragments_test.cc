// Streaming DiLoCo's fragments (sync/fragments.h) against a naive reference: the fragments'
// sizes, the rule's ties, and which fragment each local step syncs.
#include "sync/fragments.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

namespace gradsync {
namespace {

TEST(Fragments, LargestFirstToTheLightestFragment) {
  // 100 -> 0, 60 -> 1, 50 -> 2; then 40 -> 2 (loads 100, 60, 50) and 10 -> 1 (100, 60, 90).
  const std::vector<int64_t> elements{10, 100, 40, 60, 50};
  EXPECT_EQ(assignFragments(elements, 3), (std::vector<int>{1, 0, 2, 1, 2}));
  // Ties keep model order: equal tensors go round the fragments in turn.
  const std::vector<int64_t> equal(6, 7);
  EXPECT_EQ(assignFragments(equal, 3), (std::vector<int>{0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(assignFragments(elements, 1), std::vector<int>(5, 0));
  EXPECT_TRUE(assignFragments({}, 4).empty());
}

// Greedy largest-first keeps every fragment within the largest tensor of an equal share.
TEST(Fragments, FragmentsAreNearlyEqual) {
  std::vector<int64_t> elements;
  for (int64_t i = 1; i <= 41; ++i) elements.push_back((i * 7919) % 1000 + 1);
  const int64_t total = std::accumulate(elements.begin(), elements.end(), int64_t{0});
  const int64_t largest = *std::max_element(elements.begin(), elements.end());
  for (int p : {2, 3, 5, 8}) {
    const std::vector<int> of = assignFragments(elements, p);
    std::vector<int64_t> load(static_cast<size_t>(p), 0);
    for (size_t i = 0; i < of.size(); ++i) load[static_cast<size_t>(of[i])] += elements[i];
    for (int64_t l : load) EXPECT_LE(std::abs(l - total / p), largest) << p;
  }
}

TEST(Fragments, OneFragmentEveryHOverPSteps) {
  // H = 12, P = 3: fragment p at steps (p + 1) * 4 + 12k.
  for (int64_t step = 1; step <= 36; ++step) {
    const int expected = step % 4 == 0 ? static_cast<int>((step / 4 - 1) % 3) : -1;
    EXPECT_EQ(fragmentSyncedAfter(step, 12, 3), expected) << step;
  }
  // Without fragments: the whole model every H steps.
  EXPECT_EQ(fragmentSyncedAfter(5, 5, 1), 0);
  EXPECT_EQ(fragmentSyncedAfter(4, 5, 1), -1);
  EXPECT_EQ(fragmentSyncedAfter(0, 5, 1), -1);
}

// Against a naive run of the outer optimizer's timeline: launches at each fragment's sync step,
// each merged `delay` steps later (eager: at the next launch); the state settles after a step
// with a merge and nothing in flight.
TEST(Fragments, TheOuterStateSettlesAfterEachMergeWithNothingInFlight) {
  struct Case {
    int period, fragments, delay;
    bool eager;
  };
  for (const Case c : {Case{12, 1, 0, false}, Case{12, 3, 0, false}, Case{12, 3, 2, false},
                       Case{12, 1, 5, false}, Case{12, 4, 2, false}, Case{12, 3, 0, true}}) {
    const int stride = c.period / c.fragments;
    int64_t mergeAt = -1;  // -1: nothing in flight
    for (int64_t step = 1; step <= 60; ++step) {
      bool merged = false;
      if (mergeAt >= 0 && (c.eager ? step % stride == 0 : step >= mergeAt)) {
        merged = true;
        mergeAt = -1;
      }
      if (step % stride == 0) mergeAt = step + (c.eager ? stride : c.delay);
      if (mergeAt == step) {  // delay 0: merged at once
        merged = true;
        mergeAt = -1;
      }
      EXPECT_EQ(outerStateSettlesAfter(step, c.period, c.fragments, c.delay, c.eager),
                merged && mergeAt < 0)
          << c.period << "/" << c.fragments << " delay " << c.delay << " step " << step;
    }
  }
}

// The int8 ring's layout: each tensor from a chunk boundary (a tensor of 0 elements, one that
// travels otherwise, takes no room), the buffer a whole number of chunks per rank.
TEST(Fragments, FusedLayoutAlignsTensorsAndRanksBlocksToChunks) {
  const std::vector<int64_t> elements{1000, 0, 1025, 5};
  const FusedLayout int8 = fusedLayout(elements, 1024, 3);
  EXPECT_EQ(int8.offsets, (std::vector<int64_t>{0, 1024, 1024, 3072}));
  EXPECT_EQ(int8.elements, 6144);  // 4096 rounded up to 2 chunks for each of 3 ranks
  const FusedLayout packed = fusedLayout(elements, 1, 3);
  EXPECT_EQ(packed.offsets, (std::vector<int64_t>{0, 1000, 1000, 2025}));
  EXPECT_EQ(packed.elements, 2030);
  EXPECT_EQ(fusedLayout({}, 1024, 4).elements, 0);
}

}  // namespace
}  // namespace gradsync
