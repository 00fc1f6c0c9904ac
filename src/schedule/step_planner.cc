#include "schedule/step_planner.h"

#include "common/check.h"

namespace gradsync {

const char* toString(PlannedOp::Kind kind) {
  switch (kind) {
    case PlannedOp::Kind::kAllreduce:
      return "allreduce";
    case PlannedOp::Kind::kReduceScatter:
      return "reduce_scatter";
    case PlannedOp::Kind::kAllgather:
      return "allgather";
    case PlannedOp::Kind::kPush:
      return "push";
  }
  return "?";
}

StepPlanner::StepPlanner(const GradientLayout& layout, const ScheduleSpec& schedule, Route route,
                         Role role, OnPick onPick)
    : units_(layout.units.size()),
      role_(schedule.prioritized() ? role : Role::kLeader),
      onPick_(std::move(onPick)),
      commitsAhead_(schedule.prioritized() && route != Route::kServers),
      order_(schedule.prioritized() ? std::vector<PlannedOp>{} : fixedOrder(route)),
      opsPerStep_(schedule.prioritized() ? units_ : order_.size()),
      readySteps_(units_, 0),
      reducedSteps_(units_, 0) {
  GS_CHECK(!(schedule.prioritized() && route == Route::kSharded));
  if (route == Route::kServers) p3Kind_ = PlannedOp::Kind::kPush;
  if (schedule.prioritized() && role_ == Role::kLeader) {
    scheduler_ = std::make_unique<PriorityScheduler>(prioritiesOf(layout), schedule.window);
  }
}

std::vector<PlannedOp> StepPlanner::fixedOrder(Route route) const {
  std::vector<PlannedOp> order;
  const PlannedOp::Kind kind = route == Route::kServers   ? PlannedOp::Kind::kPush
                               : route == Route::kSharded ? PlannedOp::Kind::kReduceScatter
                                                          : PlannedOp::Kind::kAllreduce;
  for (size_t u = 0; u < units_; ++u) order.push_back({.kind = kind, .unit = u});
  for (size_t u = units_; route == Route::kSharded && u-- > 0;) {
    order.push_back({.kind = PlannedOp::Kind::kAllgather, .unit = u});
  }
  return order;
}

void StepPlanner::unitReady(size_t unit) {
  GS_CHECK(unit < units_);
  if (++readySteps_[unit] != step_ + 1) return;  // a later step's: kept until its step
  ++readyThisStep_;
  if (scheduler_) scheduler_->ready(unit);
}

std::optional<PlannedOp> StepPlanner::next() {
  if (started_ == opsPerStep_) return std::nullopt;
  if (scheduler_ && !commitsAhead_) {  // through servers: one pick at a time
    std::optional<PriorityScheduler::Pick> pick = scheduler_->next();
    if (!pick) return std::nullopt;
    ++started_;
    return PlannedOp{
        .kind = p3Kind_, .unit = pick->unit, .step = step_, .overtook = pick->overtook};
  }
  if (scheduler_) {  // the ring's leader commits what its window allows, announcing each pick
    while (std::optional<PriorityScheduler::Pick> pick = scheduler_->next()) {
      committed_.push_back(
          {.kind = p3Kind_, .unit = pick->unit, .step = step_, .overtook = pick->overtook});
      if (onPick_) onPick_(committed_.back());
    }
  }
  if (commitsAhead_) {  // the leader's committed picks, or a follower's received ones
    if (committed_.empty() || !readyNow(committed_.front().unit)) return std::nullopt;
    PlannedOp op = committed_.front();
    committed_.pop_front();
    ++started_;
    return op;
  }
  PlannedOp op = order_[started_];
  if (op.kind != PlannedOp::Kind::kAllgather && !readyNow(op.unit)) return std::nullopt;
  if (op.kind == PlannedOp::Kind::kAllgather && reducedSteps_[op.unit] <= step_)
    return std::nullopt;
  op.step = step_;
  ++started_;
  return op;
}

// One pick at a time, as the leader sends them: a follower that read ahead would wait for a pick
// the leader makes only once the operation this follower has not started yet completes.
bool StepPlanner::awaitsPick() const {
  return role_ == Role::kFollower && committed_.empty() && followed_ < opsPerStep_ &&
         readyThisStep_ > 0;
}

void StepPlanner::follow(size_t unit, size_t overtook) {
  GS_CHECK(role_ == Role::kFollower && unit < units_ && followed_ < opsPerStep_);
  committed_.push_back({.kind = p3Kind_, .unit = unit, .step = step_, .overtook = overtook});
  ++followed_;
}

void StepPlanner::done(const PlannedOp& op) {
  GS_CHECK(op.step == step_ && done_ < started_);
  if (scheduler_) scheduler_->completed(op.unit);
  if (op.kind == PlannedOp::Kind::kReduceScatter) reducedSteps_[op.unit] = step_ + 1;
  if (++done_ < opsPerStep_) return;
  ++step_;
  started_ = followed_ = done_ = readyThisStep_ = 0;
  if (scheduler_) scheduler_->reset();
  for (size_t u = 0; u < units_; ++u) {
    if (!readyNow(u)) continue;
    ++readyThisStep_;
    if (scheduler_) scheduler_->ready(u);
  }
}

void StepPlanner::setStep(uint64_t step) {
  GS_CHECK(started_ == 0 && readyThisStep_ == 0);
  step_ = step;
  readySteps_.assign(units_, step);
  reducedSteps_.assign(units_, step);
}

}  // namespace gradsync
