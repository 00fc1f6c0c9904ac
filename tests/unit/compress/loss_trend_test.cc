// The guard's loss signal: LossTrend's windows and ratio on hand-made losses, the detector's
// confirmation, and the decision over real rank threads (odd world size): losses that rise past
// the threshold on the ranks' mean make every compressed unit dense from the same step on every
// rank, while one rank's high loss that the mean does not carry past it, or no warm-up, does not.
#include "compress/loss_trend.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <mutex>

#include "common/tags.h"
#include "compress/guard.h"
#include "support/transports.h"

namespace gradsync::testing {
namespace {

TEST(LossTrend, ComparesEachWindowWithTheWarmUpsLastWindow) {
  LossTrend trend(/*warmupSteps=*/6, /*windowSteps=*/4);
  for (uint64_t step = 0; step < 6; ++step) trend.observe(step, step < 2 ? 100.0 : 2.0);
  for (uint64_t step = 6; step < 10; ++step) trend.observe(step, 3.0);
  // The reference is steps 2-5 (the first two, outside it, would have raised it).
  const LossTrend::Contribution first = trend.takeWindow();
  EXPECT_EQ(first, (LossTrend::Contribution{12.0, 4.0, 8.0, 4.0}));
  EXPECT_DOUBLE_EQ(LossTrend::ratio(std::vector{first}), 1.5);
  trend.observe(10, 1.0);  // the next window starts empty
  EXPECT_EQ(trend.takeWindow(), (LossTrend::Contribution{1.0, 1.0, 8.0, 4.0}));
  // Over ranks: the mean of every rank's losses, not the mean of the ranks' ratios.
  // (Means per rank 4 and 6 over references of 1 and 2: pooled 16 / 3 over 12 / 8.)
  const std::vector<LossTrend::Contribution> ranks = {{4, 1, 4, 4}, {12, 2, 8, 4}};
  EXPECT_DOUBLE_EQ(LossTrend::ratio(ranks), (16.0 / 3) / 1.5);
}

TEST(LossTrend, NoWarmUpNoLossOrANonFiniteLoss) {
  LossTrend none(0, 10);
  none.observe(0, 1.0);
  EXPECT_EQ(LossTrend::ratio(std::vector{none.takeWindow()}), -1);  // no reference
  LossTrend quiet(5, 10);
  for (uint64_t step = 0; step < 5; ++step) quiet.observe(step, 1.0);
  EXPECT_EQ(LossTrend::ratio(std::vector{quiet.takeWindow()}), -1);  // nothing reported since
  quiet.observe(5, std::numeric_limits<double>::quiet_NaN());
  EXPECT_TRUE(std::isnan(LossTrend::ratio(std::vector{quiet.takeWindow()})));
  quiet.observe(6, std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isinf(LossTrend::ratio(std::vector{quiet.takeWindow()})));
}

TEST(LossTrend, StateRoundTrip) {
  LossTrend trend(4, 2);
  for (uint64_t step = 0; step < 6; ++step) trend.observe(step, 1.0 + static_cast<double>(step));
  StateWriter out;
  trend.saveState(out);
  const std::vector<uint8_t> bytes = out.take();
  LossTrend resumed(4, 2);
  StateReader in(bytes, "loss trend");
  resumed.loadState(in);
  in.expectEnd();
  EXPECT_EQ(resumed.takeWindow(), trend.takeWindow());
}

TEST(GuardDetector, LossPastTheThresholdInConsecutiveWindowsTripsOnce) {
  GuardDetector detector(1, GuardOptions{.lossRatio = 1.5, .windowsToConfirm = 2});
  EXPECT_FALSE(detector.observeLoss(1.6));
  EXPECT_FALSE(detector.observeLoss(1.4));  // the count starts again
  EXPECT_FALSE(detector.observeLoss(-1));   // not measured: not past
  EXPECT_FALSE(detector.observeLoss(1.6));
  EXPECT_TRUE(detector.observeLoss(std::numeric_limits<double>::quiet_NaN()));
  EXPECT_FALSE(detector.observeLoss(9));  // once
}

std::vector<GuardedUnit> units() {
  return {{.compressed = true, .tensors = {0}, .names = {"fc.weight"}, .method = "topk:0.01"},
          {.compressed = false, .tensors = {1}, .names = {"fc.bias"}, .method = ""},
          {.compressed = true, .tensors = {2}, .names = {"out.weight"}, .method = "topk:0.01"}};
}

// Steps 0-9 dense (loss 1.0); from step 10 each rank reports its loss of `lossAfter(rank, step)`.
std::vector<std::vector<GuardEvent>> runGuard(int64_t warmup,
                                              double (*lossAfter)(int rank, uint64_t step)) {
  constexpr int kRanks = 3;
  std::mutex mutex;
  std::vector<std::vector<GuardEvent>> seen(kRanks);
  runWithTransports(TransportKind::kTcp, kRanks, [&](Transport& t) {
    CompressionGuard guard(GuardOptions{.lossRatio = 1.5, .windowsToConfirm = 3}, warmup, units());
    for (uint64_t step = 0; step < 100; ++step) {
      guard.observeLoss(step, step < 10 ? 1.0 : lossAfter(t.rank(), step));
      if (!guard.checksAt(step + 1)) continue;
      for (const GuardEvent& e : guard.check(t, tags::kGuard, step + 1)) {
        std::lock_guard lock(mutex);
        seen[static_cast<size_t>(t.rank())].push_back(e);
      }
    }
  });
  return seen;
}

TEST(CompressionGuard, ARisingLossMakesEveryCompressedUnitDenseFromTheSameStep) {
  // The mean over ranks passes 1.5x in the window of steps 40-49 (rank 2 alone earlier).
  std::vector<std::vector<GuardEvent>> seen = runGuard(
      10, [](int rank, uint64_t step) { return rank == 2 ? 3.0 : (step >= 40 ? 1.6 : 0.7); });
  for (const std::vector<GuardEvent>& events : seen) {
    ASSERT_EQ(events.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(events[i].unit, i == 0 ? 0u : 2u);
      EXPECT_EQ(events[i].signal, "loss");
      EXPECT_EQ(events[i].step, 70);  // windows ending at 50, 60 and 70
      EXPECT_NEAR(events[i].ratio, (3.0 + 2 * 1.6) / 3, 1e-12);
      EXPECT_NE(events[i].reason.find("the training loss is 2.07x the dense warm-up's "
                                      "(threshold 1.50x, 3 windows of 10 steps)"),
                std::string::npos)
          << events[i].reason;
    }
  }
}

TEST(CompressionGuard, TheLossSignalNeedsTheMeanPastItAndAWarmUp) {
  for (const std::vector<GuardEvent>&events :
       runGuard(10, [](int rank, uint64_t) { return rank == 2 ? 3.0 : 0.7; })) {
    EXPECT_TRUE(events.empty());  // mean 1.47x: below
  }
  for (const std::vector<GuardEvent>& events : runGuard(0, [](int, uint64_t) { return 1e6; })) {
    EXPECT_TRUE(events.empty());  // no reference
  }
}

}  // namespace
}  // namespace gradsync::testing
