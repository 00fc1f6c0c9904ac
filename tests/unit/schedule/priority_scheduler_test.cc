// The priority and credit rules of P3's sender queue, table-driven on a simulated wire.
#include "schedule/priority_scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace gradsync {
namespace {

struct OrderCase {
  const char* name;
  std::vector<int> priorities;  // by unit; lower is more urgent
  std::vector<double> readyAt;  // by unit
  std::vector<double> seconds;  // by unit: time on the wire
  size_t window;
  std::vector<size_t> expected;
};

class PriorityOrder : public ::testing::TestWithParam<OrderCase> {};

TEST_P(PriorityOrder, FollowsThePriorityAndCreditRules) {
  const OrderCase& c = GetParam();
  EXPECT_EQ(simulatePriorityOrder(c.priorities, c.readyAt, c.seconds, c.window), c.expected);
}

// Units are numbered as backward produces them; priorities as P3 gives them (the input layer,
// produced last, is the most urgent).
INSTANTIATE_TEST_SUITE_P(
    Table, PriorityOrder,
    ::testing::Values(
        // All ready at once: strictly by priority, ties by unit index.
        OrderCase{"AllReady", {2, 0, 1, 0}, {0, 0, 0, 0}, {1, 1, 1, 1}, 1, {1, 3, 2, 0}},
        // Ready one after another while the wire is idle: nothing to reorder.
        OrderCase{"NoContention", {3, 2, 1, 0}, {0, 2, 4, 6}, {1, 1, 1, 1}, 1, {0, 1, 2, 3}},
        // Window 1: unit 0 goes at t=0; units 1 (ready t=1) and 2 (ready t=2, more urgent) wait
        // for the wire (free at t=10), and 2 overtakes 1.
        OrderCase{"LaterUrgentOvertakes", {2, 1, 0}, {0, 1, 2}, {10, 1, 1}, 1, {0, 2, 1}},
        // Window 2: unit 1 is committed at t=1 (a credit was free) and can no longer be
        // overtaken; unit 2 must wait for a credit.
        OrderCase{"CommittedCannotBeOvertaken", {2, 1, 0}, {0, 1, 2}, {10, 1, 1}, 2, {0, 1, 2}},
        // Four slices of a big late layer, then an urgent unit (ready at t=12): it goes next
        // when the wire frees at t=20, ahead of the slices still queued.
        OrderCase{"PreemptionAtSliceGranularity",
                  {5, 5, 5, 5, 0},
                  {0, 0, 0, 0, 12},
                  {10, 10, 10, 10, 1},
                  1,
                  {0, 1, 4, 2, 3}},
        // The same with window 2: slice 2 was committed at t=10, so the urgent unit overtakes
        // only slice 3.
        OrderCase{"PreemptionWithWindowTwo",
                  {5, 5, 5, 5, 0},
                  {0, 0, 0, 0, 12},
                  {10, 10, 10, 10, 1},
                  2,
                  {0, 1, 2, 4, 3}},
        // A window as large as the unit count degenerates to ready order (FIFO).
        OrderCase{
            "WideWindowIsFifo", {3, 2, 1, 0}, {0, 1, 2, 3}, {10, 10, 10, 10}, 4, {0, 1, 2, 3}},
        OrderCase{"Empty", {}, {}, {}, 1, {}}),
    [](const ::testing::TestParamInfo<OrderCase>& info) { return info.param.name; });

TEST(PriorityScheduler, CountsTheUnitsAPickOvertook) {
  PriorityScheduler scheduler({3, 2, 1, 0}, 1);
  scheduler.ready(0);
  ASSERT_EQ(scheduler.next()->unit, 0u);
  scheduler.ready(1);
  scheduler.ready(2);
  scheduler.ready(3);
  EXPECT_FALSE(scheduler.next().has_value());  // the only credit is taken
  scheduler.completed(0);
  PriorityScheduler::Pick pick = *scheduler.next();
  EXPECT_EQ(pick.unit, 3u);
  EXPECT_EQ(pick.overtook, 2u);  // units 1 and 2 were ready first
  scheduler.completed(3);
  pick = *scheduler.next();
  EXPECT_EQ(pick.unit, 2u);
  EXPECT_EQ(pick.overtook, 1u);
  scheduler.completed(2);
  EXPECT_EQ(scheduler.next()->overtook, 0u);
  EXPECT_FALSE(scheduler.next().has_value());  // nothing left
}

// A caller that never calls reset(): rounds follow one another, each unit ready once per round, and
// the overtaken counts stay those of a naive count over the queue (the numbering behind the fast
// count is renumbered as it runs out).
TEST(PriorityScheduler, CountsStayExactOverRoundsWithoutReset) {
  const std::vector<int> priorities{4, 0, 3, 1, 2, 5};
  PriorityScheduler scheduler(priorities, 1);
  std::vector<size_t> queued;  // the naive mirror: queued units in ready order
  size_t picks = 0;
  auto pickOne = [&] {
    auto pick = scheduler.next();
    ASSERT_TRUE(pick.has_value());
    auto it = std::find(queued.begin(), queued.end(), pick->unit);
    ASSERT_NE(it, queued.end());
    EXPECT_EQ(pick->overtook, static_cast<size_t>(it - queued.begin())) << "pick " << picks;
    queued.erase(it);
    scheduler.completed(pick->unit);
    ++picks;
  };
  for (int round = 0; round < 9; ++round) {
    for (size_t k = 0; k < priorities.size(); ++k) {
      const size_t unit = (k * 5 + round) % priorities.size();  // a different order each round
      // A unit is ready again only once its last round's copy is picked; units of the last
      // round are often still queued, so the renumbering runs with a non-empty queue.
      while (std::find(queued.begin(), queued.end(), unit) != queued.end()) pickOne();
      scheduler.ready(unit);
      queued.push_back(unit);
      if (k % 2 == 1) pickOne();
    }
  }
  while (!queued.empty()) pickOne();
  EXPECT_EQ(picks, 9 * priorities.size());
}

TEST(PriorityScheduler, ResetStartsANewRound) {
  PriorityScheduler scheduler({0, 1}, 1);
  scheduler.ready(1);
  ASSERT_TRUE(scheduler.next().has_value());
  scheduler.reset();
  EXPECT_EQ(scheduler.inFlight(), 0u);
  scheduler.ready(0);
  EXPECT_EQ(scheduler.next()->unit, 0u);
}

}  // namespace
}  // namespace gradsync
