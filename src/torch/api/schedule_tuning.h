// `--schedule auto` inside DistributedOptimizer (docs/algorithms.md, "Online schedule tuning"):
// times each step from the end of the previous one, agrees on the workers' mean (one allreduce
// of a float per step, only while tuning), feeds ScheduleTuner and switches the
// engine (DistributedModel::reschedule) when it moves to another candidate. Once tuned it costs
// nothing. Not thread-safe: the training thread calls it.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "gradsync/transport.h"
#include "schedule/schedule_tuner.h"

namespace gradsync {

class DistributedModel;

class ScheduleTuning {
 public:
  // `schedule` is an auto form (isAutoSchedule); `largestTensorElements` bounds p3's slices.
  // Throws ConfigError for a malformed form.
  ScheduleTuning(const std::string& schedule, size_t largestTensorElements, Transport& workers);

  // The schedule the engine starts with.
  std::string firstSchedule() const { return tuner_.current().toString(); }
  // Throws ConfigError saying that --schedule auto cannot run with `why` (what keeps the run from
  // switching schedules between steps, e.g. DistributedModel::whyNotReschedulable()); nothing
  // when `why` is empty.
  static void checkRunCanSwitch(const std::string& why);
  // At the end of every step, on every worker (a collective while tuning). Blocking: a switch
  // waits for the step's communication first.
  void afterStep(DistributedModel& model);
  // The schedule in use: the candidate on trial, or the choice once tuned.
  std::string current() const { return tuner_.current().toString(); }
  bool done() const { return tuner_.done(); }
  std::string summary() const { return tuner_.summary(); }

 private:
  ScheduleTuner tuner_;
  Transport& workers_;
  std::optional<std::chrono::steady_clock::time_point> lastStep_;
  int64_t steps_ = 0;
};

}  // namespace gradsync
