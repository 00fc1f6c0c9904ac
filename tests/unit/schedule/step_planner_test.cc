// The planner that the engine and the simulator share, against naive references: the fixed
// orders of the ring, sharded and the servers, readiness gating across steps, and p3's picks as
// leader, follower and through servers.
#include "schedule/step_planner.h"

#include <gtest/gtest.h>

#include <vector>

namespace gradsync {
namespace {

using Kind = PlannedOp::Kind;

// Four tensors of different sizes, one unit each under wfbp.
GradientLayout fourUnits(const std::string& schedule = "wfbp") {
  return planLayout(std::vector<size_t>{300, 10, 200, 5}, ScheduleSpec::parse(schedule));
}

// Marks every unit ready and starts and finishes operations one at a time until none can start.
std::vector<PlannedOp> runAllReady(StepPlanner& planner, size_t units) {
  for (size_t u = 0; u < units; ++u) planner.unitReady(u);
  std::vector<PlannedOp> ops;
  while (std::optional<PlannedOp> op = planner.next()) {
    ops.push_back(*op);
    planner.done(*op);
  }
  return ops;
}

std::vector<PlannedOp> naiveFixedOrder(StepPlanner::Route route, size_t units, uint64_t step) {
  std::vector<PlannedOp> ops;
  const Kind first = route == StepPlanner::Route::kServers   ? Kind::kPush
                     : route == StepPlanner::Route::kSharded ? Kind::kReduceScatter
                                                             : Kind::kAllreduce;
  for (size_t u = 0; u < units; ++u) ops.push_back({.kind = first, .unit = u, .step = step});
  if (route == StepPlanner::Route::kSharded) {
    for (size_t u = units; u-- > 0;) {
      ops.push_back({.kind = Kind::kAllgather, .unit = u, .step = step});
    }
  }
  return ops;
}

TEST(StepPlanner, FixedOrdersPerRoute) {
  const GradientLayout layout = fourUnits();
  for (auto route :
       {StepPlanner::Route::kRing, StepPlanner::Route::kSharded, StepPlanner::Route::kServers}) {
    StepPlanner planner(layout, ScheduleSpec::parse("wfbp"), route);
    for (uint64_t step = 0; step < 3; ++step) {
      EXPECT_EQ(runAllReady(planner, 4), naiveFixedOrder(route, 4, step))
          << "route " << static_cast<int>(route) << " step " << step;
      EXPECT_EQ(planner.step(), step + 1);
    }
  }
}

// An operation waits for its unit; units ready early (even for the next step) are kept.
TEST(StepPlanner, OperationsWaitForTheirUnitInOrder) {
  StepPlanner planner(fourUnits(), ScheduleSpec::parse("wfbp"), StepPlanner::Route::kRing);
  planner.unitReady(1);
  EXPECT_FALSE(planner.next()) << "unit 0 comes first";
  planner.unitReady(0);
  std::optional<PlannedOp> a = planner.next(), b = planner.next();
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->unit, 0u);
  EXPECT_EQ(b->unit, 1u);
  EXPECT_FALSE(planner.next());
  planner.unitReady(0);  // step 1's unit 0, while step 0 is still on
  planner.unitReady(2);
  planner.unitReady(3);
  std::optional<PlannedOp> c = planner.next(), d = planner.next();
  ASSERT_TRUE(c && d);
  EXPECT_EQ(c->unit, 2u);
  EXPECT_EQ(d->unit, 3u);
  EXPECT_FALSE(planner.next()) << "step 1 waits until step 0's operations are done";
  for (const auto& op : {*a, *b, *c, *d}) planner.done(op);
  std::optional<PlannedOp> e = planner.next();
  ASSERT_TRUE(e);
  EXPECT_EQ(*e, (PlannedOp{.kind = Kind::kAllreduce, .unit = 0, .step = 1}));
  EXPECT_FALSE(planner.next());
}

TEST(StepPlanner, SetStepStartsCountingThere) {
  StepPlanner planner(fourUnits(), ScheduleSpec::parse("fifo"), StepPlanner::Route::kServers);
  planner.setStep(7);
  EXPECT_EQ(runAllReady(planner, 4), naiveFixedOrder(StepPlanner::Route::kServers, 4, 7));
}

// p3 over the ring: the leader commits what the window allows, announcing each pick; the
// follower receives them one at a time and starts each once its unit is ready there too.
TEST(StepPlanner, RingP3LeaderAnnouncesAndFollowerFollows) {
  const GradientLayout layout = fourUnits("p3:slice=100,window=2");
  const size_t units = layout.units.size();
  std::vector<PlannedOp> announced;
  StepPlanner leader(layout, ScheduleSpec::parse("p3:slice=100,window=2"),
                     StepPlanner::Route::kRing, StepPlanner::Role::kLeader,
                     [&](const PlannedOp& pick) { announced.push_back(pick); });
  StepPlanner follower(layout, ScheduleSpec::parse("p3:slice=100,window=2"),
                       StepPlanner::Route::kRing, StepPlanner::Role::kFollower);
  for (size_t u = 0; u < units; ++u) leader.unitReady(u);
  std::vector<PlannedOp> led;
  std::optional<PlannedOp> op = leader.next();
  ASSERT_TRUE(op);
  EXPECT_EQ(announced.size(), 2u) << "window 2: two picks committed ahead";
  EXPECT_FALSE(follower.awaitsPick()) << "nothing is ready on the follower yet";
  follower.unitReady(announced[0].unit);
  while (op) {
    led.push_back(*op);
    leader.done(*op);
    op = leader.next();
  }
  EXPECT_EQ(announced, led);
  // The priorities: every slice of the input layer (tensor 0) before the others' slices.
  const std::vector<int> priorities = prioritiesOf(layout);
  for (size_t i = 1; i < led.size(); ++i) {
    EXPECT_LE(priorities[led[i - 1].unit], priorities[led[i].unit]);
  }
  // The follower: one pick at a time, each started once its unit is ready there.
  std::vector<bool> ready(units, false);
  ready[announced[0].unit] = true;
  for (const PlannedOp& pick : announced) {
    ASSERT_TRUE(follower.awaitsPick());
    follower.follow(pick.unit, pick.overtook);
    EXPECT_FALSE(follower.awaitsPick()) << "one pick at a time";
    if (!ready[pick.unit]) {
      EXPECT_FALSE(follower.next()) << "started before its unit was ready";
      follower.unitReady(pick.unit);
      ready[pick.unit] = true;
    }
    std::optional<PlannedOp> started = follower.next();
    ASSERT_TRUE(started);
    EXPECT_EQ(*started, pick);
    follower.done(*started);
  }
  EXPECT_EQ(follower.step(), 1u);
}

// Through servers every worker picks for itself when its one communication thread is free (no
// picks committed ahead): the order of a wire that carries one unit at a time with window 1
// (simulatePriorityOrder), whatever the window.
TEST(StepPlanner, ServersP3PicksWhenTheThreadIsFree) {
  const GradientLayout layout = fourUnits("p3:slice=100,window=3");
  StepPlanner planner(layout, ScheduleSpec::parse("p3:slice=100,window=3"),
                      StepPlanner::Route::kServers);
  const size_t units = layout.units.size();
  std::vector<double> readyAt(units), seconds(units, 1.0);
  for (size_t u = 0; u < units; ++u) readyAt[u] = static_cast<double>(u) * 0.25;
  std::vector<size_t> order;
  // Replays the same timeline: ready units are marked before each pick.
  double now = 0;
  size_t marked = 0;
  while (order.size() < units) {
    while (marked < units && readyAt[marked] <= now) planner.unitReady(marked++);
    std::optional<PlannedOp> op = planner.next();
    if (!op) {
      ASSERT_LT(marked, units) << "nothing ready and nothing left to mark";
      now = readyAt[marked];
      continue;
    }
    EXPECT_EQ(op->kind, Kind::kPush);
    order.push_back(op->unit);
    now += seconds[op->unit];
    planner.done(*op);
  }
  EXPECT_EQ(order, simulatePriorityOrder(prioritiesOf(layout), readyAt, seconds, 1));
}

}  // namespace
}  // namespace gradsync
