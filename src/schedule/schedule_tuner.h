// Online tuning of a schedule's knobs (`--schedule auto`, docs/algorithms.md "Online schedule
// tuning"): p3's slice size and then its window, or (auto:tune=fusion) fusion's bucket size,
// chosen from measured step times during a run's first steps, then fixed. A pure policy: the
// caller measures steps, switches the engine to current() when told, and makes sure every rank
// feeds the same times (DistributedOptimizer takes the slowest rank's).
//
// Each candidate runs `settleSteps` steps that are not counted (the first step after a switch
// also drains the previous engine) and then `trialSteps` counted ones; its cost is their median,
// so a step stretched by a pause does not decide. The search is a descent on a log-spaced grid
// from the default: it tries the next larger value, keeps going in the direction that improves
// by more than `minGain` and stops at the first value that does not, or at the grid's end.
// This finds the best value of a unimodal cost (one valley: small slices pay per-message
// latency, large ones lose overlap and priority) in about as few trials as its distance from
// the default, not a trial per grid value.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "schedule/schedule.h"

namespace gradsync {

struct ScheduleTunerOptions {
  ScheduleSpec::Kind kind = ScheduleSpec::Kind::kP3;  // kP3 or kFusion
  int settleSteps = 1;
  int trialSteps = 4;
  double minGain = 0.01;  // a move must be this much faster (relative) to count as better
};

// "auto" or "auto:tune=p3|fusion,steps=N" (trialSteps): whether `text` asks for tuning.
bool isAutoSchedule(const std::string& text);
// Throws ConfigError naming the bad part.
ScheduleTunerOptions parseAutoSchedule(const std::string& text);

// The schedule a tuning with `options` starts from (P3's default slice and window, or fusion's
// 25 MiB): what checks of the options before training look at.
ScheduleSpec firstCandidate(const ScheduleTunerOptions& options);

// Not thread-safe (the training thread drives it).
class ScheduleTuner {
 public:
  // `largestTensorElements` bounds p3's slice grid: a slice larger than every tensor cuts
  // nothing, so larger values would be the same schedule. Throws ConfigError for a kind other
  // than kP3 and kFusion.
  ScheduleTuner(ScheduleTunerOptions options, size_t largestTensorElements);

  // The schedule to run now: the candidate on trial, or the choice once done().
  const ScheduleSpec& current() const { return current_; }
  bool done() const { return done_; }
  // After each step while !done(): the step's time. Returns true when current() changed (a new
  // candidate, or the final choice if it is not the last candidate tried): the caller switches
  // before the next step.
  bool observe(double stepSeconds);

  struct Trial {
    ScheduleSpec spec;
    double seconds = 0;  // median step
  };
  // Every candidate measured, in order.
  const std::vector<Trial>& trials() const { return trials_; }
  // "p3:slice=40000,window=2 31.2 ms, p3:slice=160000,window=2 24.1 ms, ... -> chose ...".
  std::string summary() const;

 private:
  // One knob's grid and the descent over it.
  struct Search {
    std::vector<size_t> grid;
    std::vector<double> cost;  // by grid index; < 0: not measured
    size_t start = 0;          // the default's index
    size_t at = 0;             // the index on trial
    size_t best = 0;           // the best index so far
    int direction = +1;
    bool turned = false;  // going downwards, after the first move up did not improve
  };
  void startSearch(std::vector<size_t> grid, size_t start);
  ScheduleSpec withValue(size_t value) const;
  // The next index to try, or the search's best index with `finished` set.
  size_t nextIndex(bool& finished);
  void finishTrial(double seconds);

  ScheduleTunerOptions options_;
  size_t largest_;
  ScheduleSpec current_;
  Search search_;
  int phase_ = 0;  // p3: 0 slice, 1 window; fusion: 0 bucket size
  std::vector<double> steps_;
  int settled_ = 0;
  bool done_ = false;
  std::vector<Trial> trials_;
};

}  // namespace gradsync
