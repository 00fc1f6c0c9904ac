// Straggler detection against hand-made compute times, then over real rank threads and TCP.
#include "sync/straggler.h"

#include <gtest/gtest.h>

#include <mutex>

#include "common/tags.h"
#include "gradsync/error.h"
#include "support/transports.h"

namespace gradsync {
namespace {

TEST(StragglerDetector, NamesAPersistentlySlowRankAfterTheConfirmingWindow) {
  StragglerDetector detector(4, StragglerOptions{});
  const std::vector<double> balanced = {10, 11, 10.5, 9.8};
  const std::vector<double> slow = {10, 11, 17, 9.8};  // rank 2 at 1.6x the others' median 10
  EXPECT_TRUE(detector.observe(0, 10, balanced).empty());
  EXPECT_TRUE(detector.observe(10, 20, slow).empty());  // one window is not persistent
  std::vector<StragglerReport> named = detector.observe(20, 30, slow);
  ASSERT_EQ(named.size(), 1u);
  EXPECT_EQ(named[0].rank, 2);
  EXPECT_DOUBLE_EQ(named[0].othersMs, 10);
  EXPECT_DOUBLE_EQ(named[0].slower, 1.7);
  EXPECT_EQ(named[0].sinceStep, 10);
  EXPECT_EQ(named[0].namedAfter, 30);
  EXPECT_TRUE(detector.observe(30, 40, slow).empty());  // named once per slow run
  EXPECT_TRUE(detector.observe(40, 50, balanced).empty());
  EXPECT_TRUE(detector.observe(50, 60, slow).empty());
  EXPECT_EQ(detector.observe(60, 70, slow).at(0).sinceStep, 50);  // slow again: named again
}

TEST(StragglerDetector, NoiseAndSmallExcessesAreNotNamed) {
  StragglerDetector detector(3, StragglerOptions{});
  for (int w = 0; w < 10; ++w) {
    // 1.4x: below the ratio; 0.6 ms against 0.3 ms: twice, but below the absolute floor.
    EXPECT_TRUE(detector.observe(w * 10, w * 10 + 10, std::vector<double>{10, 14, 10}).empty());
  }
  StragglerDetector tiny(2, StragglerOptions{});
  for (int w = 0; w < 10; ++w)
    EXPECT_TRUE(tiny.observe(w * 10, w * 10 + 10, std::vector<double>{0.3, 0.6}).empty());
}

TEST(StragglerDetector, TwoRanksCompareWithEachOtherAndOneRankWithNobody) {
  StragglerDetector two(2, StragglerOptions{.windowsToConfirm = 1});
  std::vector<StragglerReport> named = two.observe(0, 10, std::vector<double>{5, 10});
  ASSERT_EQ(named.size(), 1u);
  EXPECT_EQ(named[0].rank, 1);
  EXPECT_DOUBLE_EQ(named[0].slower, 2);
  StragglerDetector one(1, StragglerOptions{.windowsToConfirm = 1});
  EXPECT_TRUE(one.observe(0, 10, std::vector<double>{50}).empty());
}

// Every rank reaches the same verdict at the same step, over real sockets, at an odd world size.
TEST(StragglerWatch, EveryRankNamesTheSlowRankAtTheSameStep) {
  constexpr int kRanks = 3, kSteps = 45;
  std::mutex mutex;
  std::vector<std::vector<std::pair<int64_t, StragglerReport>>> seen(kRanks);
  testing::runWithTransports(testing::TransportKind::kTcp, kRanks, [&](Transport& transport) {
    StragglerWatch watch(transport, StragglerOptions{}, tags::kTrainer);
    for (int64_t step = 1; step <= kSteps; ++step) {
      // Rank 1 slows down from step 10 (counting from 0) on.
      const double ms = transport.rank() == 1 && step > 10 ? 8.0 : 4.0 + 0.1 * transport.rank();
      for (const StragglerReport& report : watch.afterStep(step, ms)) {
        std::lock_guard lock(mutex);
        seen[static_cast<size_t>(transport.rank())].emplace_back(step, report);
      }
    }
    EXPECT_EQ(watch.reports().size(), 1u);
  });
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_EQ(seen[static_cast<size_t>(r)].size(), 1u) << "rank " << r;
    const auto& [step, report] = seen[static_cast<size_t>(r)][0];
    EXPECT_EQ(step, 30);  // the second slow window ends at step 30: within 20 steps of step 10
    EXPECT_EQ(report.rank, 1);
    EXPECT_EQ(report.sinceStep, 10);
    EXPECT_NEAR(report.slower, 8.0 / 4.1, 1e-12);
  }
}

// A window's median step, not its mean: a rank paused in a few steps of each window (a thread
// preempted on a loaded host) is not named, one slow in most of its steps is.
TEST(StragglerWatch, PausesInAFewStepsNameNobodyPersistentSlownessDoes) {
  constexpr int kRanks = 3, kSteps = 40;
  std::vector<size_t> named(kRanks);
  testing::runWithTransports(testing::TransportKind::kTcp, kRanks, [&](Transport& transport) {
    StragglerWatch watch(transport, StragglerOptions{}, tags::kTrainer);
    for (int64_t step = 1; step <= kSteps; ++step) {
      double ms = 5.0;
      if (transport.rank() == 1 && step % 10 < 3) ms = 50.0;  // 3 of 10 steps: mean 18.5 ms
      if (transport.rank() == 2 && step % 10 < 6) ms = 9.0;   // 6 of 10 steps: median 9 ms
      watch.afterStep(step, ms);
    }
    named[static_cast<size_t>(transport.rank())] = watch.reports().size();
    ASSERT_EQ(watch.reports().size(), 1u);
    EXPECT_EQ(watch.reports()[0].rank, 2);
    EXPECT_DOUBLE_EQ(watch.reports()[0].computeMs, 9.0);
  });
  EXPECT_EQ(named, std::vector<size_t>(kRanks, 1));
}

TEST(StragglerWatch, OneRankExchangesNothing) {
  testing::runWithTransports(testing::TransportKind::kLoopback, 1, [&](Transport& transport) {
    StragglerWatch watch(transport, StragglerOptions{.windowSteps = 1}, tags::kTrainer);
    for (int64_t step = 1; step <= 5; ++step) EXPECT_TRUE(watch.afterStep(step, 100).empty());
  });
}

}  // namespace
}  // namespace gradsync
