// Each training step's communication operations and the order in which they start: the one
// planner that the engine (sync/engine.h) runs on real time and the simulator (sim/) on
// simulated time, so that both follow the same order by construction. A pure policy: no
// threads, no I/O, no clock.
//
//   ring (fifo, wfbp, fusion)  one allreduce per unit, in unit order, each once it is ready
//   sharded (Lee et al.)       a reduce-scatter per unit in unit order, then an allgather per
//                              unit in reverse (forward's order: the next forward needs the
//                              input layer first); a unit's allgather only once its
//                              reduce-scatter is done (they may overlap other units' operations
//                              when the engine runs several at once)
//   servers                    one push per unit, in unit order
//   p3                         units in the order PriorityScheduler picks among the ready ones.
//                              Over the ring, rank 0 commits as many picks as the window allows
//                              ahead of completion (each announced to the other ranks, which
//                              follow it: collectives must match); through servers every worker
//                              picks for itself, one unit at a time
//
// A unit becomes ready once per step (unitReady). Steps follow one another: every operation of
// a step is done before the next step's first starts; readiness that comes early is kept.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "schedule/priority_scheduler.h"
#include "schedule/schedule.h"

namespace gradsync {

struct PlannedOp {
  enum class Kind { kAllreduce, kReduceScatter, kAllgather, kPush };
  Kind kind = Kind::kAllreduce;
  size_t unit = 0;
  uint64_t step = 0;    // the global step whose gradients (or parameters) it moves
  size_t overtook = 0;  // p3: ready units this one overtook

  bool operator==(const PlannedOp&) const = default;
};

const char* toString(PlannedOp::Kind kind);

class StepPlanner {
 public:
  enum class Route { kRing, kSharded, kServers };
  // p3 over the ring: rank 0 leads (picks), the others follow its picks.
  enum class Role { kLeader, kFollower };
  // Called with each pick the leader commits, as it commits it (to announce it).
  using OnPick = std::function<void(const PlannedOp&)>;

  StepPlanner(const GradientLayout& layout, const ScheduleSpec& schedule, Route route,
              Role role = Role::kLeader, OnPick onPick = {});

  // One more step's gradient of `unit` is ready.
  void unitReady(size_t unit);
  // The next operation that may start now (taken), or none.
  std::optional<PlannedOp> next();
  // A follower: whether it needs the leader's next pick now: it has started every pick it
  // received, more are to come this step, and the step has begun here (so the pick will come).
  bool awaitsPick() const;
  // A follower: the leader's next pick (unit and units it overtook).
  void follow(size_t unit, size_t overtook);
  // A started operation has finished: frees its p3 credit; the step's last one ends the step.
  void done(const PlannedOp& op);

  // Starts counting at global step `step` (a resumed run); only between steps.
  void setStep(uint64_t step);
  uint64_t step() const { return step_; }  // the step whose operations are planned now
  size_t opsPerStep() const { return opsPerStep_; }
  bool follows() const { return role_ == Role::kFollower; }

 private:
  bool readyNow(size_t unit) const { return readySteps_[unit] > step_; }
  std::vector<PlannedOp> fixedOrder(Route route) const;

  const size_t units_;
  const Role role_;
  const OnPick onPick_;
  const bool commitsAhead_;             // p3 over the ring
  const std::vector<PlannedOp> order_;  // every step's operations (not p3)
  const size_t opsPerStep_;
  std::unique_ptr<PriorityScheduler> scheduler_;  // p3, on the leader
  PlannedOp::Kind p3Kind_ = PlannedOp::Kind::kAllreduce;
  std::deque<PlannedOp> committed_;     // p3 over the ring: picked (or followed), not yet started
  std::vector<uint64_t> readySteps_;    // by unit: steps whose gradient is ready (absolute)
  std::vector<uint64_t> reducedSteps_;  // sharded, by unit: steps whose reduce-scatter is done
  uint64_t step_ = 0;
  size_t readyThisStep_ = 0;  // units ready for the current step
  size_t started_ = 0;        // operations of the current step started (fixed order: its index)
  size_t followed_ = 0;       // a follower: picks of the current step received
  size_t done_ = 0;           // operations of the current step finished
};

}  // namespace gradsync
