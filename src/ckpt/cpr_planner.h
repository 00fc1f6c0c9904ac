// Checkpoint planning for recommendation training with embedding tables on parameter servers:
// when a server fails, recover everything from the last checkpoint (full recovery) or only the
// failed shard (partial recovery, CPR: Maeng et al., MLSys 2021), and how often to save.
// docs/algorithms.md, "Partial recovery (CPR)", derives every formula here; tests check them
// against hand-computed values. Pure functions; thread-safe.
//
// Costs and times share one unit (seconds, or training steps): the planner never mixes clocks.
// The overhead model is first-order (saves and failures rare against the interval and the MTBF):
//   full recovery:    O_save/T + (T/2 + O_load + O_restart)/T_fail
//   partial recovery: O_save_per_interval/T + (O_load/N + O_restart)/T_fail
// (a partial recovery loads one of N shards and repeats no work; its cost is lost updates,
// measured as the portion of lost samples, PLS = T/(2·N·T_fail) in expectation).
#pragma once

#include <string>
#include <string_view>

namespace gradsync {

enum class RecoveryMode {
  kFull,     // every node reloads the last full checkpoint; the work since is redone
  kPartial,  // only the failed shard reloads its last save; the others go on (CPR)
  kCprMfu,   // partial, the most used rows saved every interval, all rows every k-th
  kCprSsu,   // partial, a sub-sample of the updated rows saved every interval, all every k-th
};

// "full", "partial", "cpr-mfu", "cpr-ssu"; ConfigError naming `what` otherwise.
RecoveryMode parseRecoveryMode(std::string_view text, std::string_view what = "--recovery");
std::string_view recoveryModeName(RecoveryMode mode);
inline bool isPartial(RecoveryMode mode) {
  return mode != RecoveryMode::kFull;
}

struct CprCosts {
  double mtbf = 0;      // T_fail: mean time between failures of the job (any server)
  double saveFull = 0;  // O_save: one checkpoint of every shard (training waits for it)
  double loadFull = 0;  // O_load: loading every shard (a partial recovery loads 1/shards of it)
  double restart = 0;   // O_restart: replacing the failed process and reconnecting
  int shards = 1;       // N: embedding servers, each holding 1/N of the rows
};

struct CprKnobs {
  double plsTarget = 0.02;     // the portion of lost samples the run may lose (partial modes)
  double mfuFraction = 0.125;  // CPR-MFU: the share of rows saved at each save point
  double ssuRate = 0.01;       // CPR-SSU: probability that an access puts its row in the sample
  int partialPerFull = 8;      // CPR-MFU/SSU: every k-th save point saves every row
};

struct CprPlan {
  RecoveryMode mode = RecoveryMode::kFull;
  double interval = 0;          // between save points
  int partialPerFull = 1;       // every k-th save point is a full save (1: every one)
  double saveFraction = 1;      // the rows a partial save point writes, as planned (MFU's r)
  double expectedOverhead = 0;  // fraction of the run's time (this model)
  double expectedPls = 0;       // with access spread uniformly over rows (skew lowers MFU/SSU's)
  double fullOverhead = 0;      // full recovery at its optimal interval (the benefit estimate)
  double partialOverhead = 0;   // plain partial recovery at its PLS-limited interval
  std::string reason;           // one line: why this mode and interval
};

// Young's optimum for full recovery: sqrt(2·O_save·T_fail).
double youngInterval(double saveCost, double mtbf);
// Daly's second-order optimum: sqrt(2·O_save·(T_fail + O_restart)) − O_save, or T_fail when
// O_save >= 2·T_fail (J. T. Daly, "A higher order estimate of the optimum checkpoint interval for
// restart dumps", FGCS 2006).
double dalyInterval(double saveCost, double mtbf, double restart);
// The overhead fractions of the model above at interval T.
double fullRecoveryOverhead(const CprCosts& costs, double interval);
double partialRecoveryOverhead(const CprCosts& costs, double interval, double savePerInterval);
// The largest interval whose expected PLS, T/(2·N·T_fail), stays within the target.
double plsLimitedInterval(const CprCosts& costs, double plsTarget);
double expectedPls(const CprCosts& costs, double interval);

// The plan for `mode`: full recovery at Daly's interval; partial at the PLS-limited interval;
// CPR-MFU/SSU with the same save budget per unit of time as plain partial, spent as a partial
// save (saveFraction of the rows) at every point and a full save every partialPerFull-th point:
// interval = T_partial·((k − 1)·r + 1)/k. Throws ConfigError for non-positive MTBF or save
// cost, negative costs, fewer than 1 shard, a PLS target outside (0, 1), r outside (0, 1] or
// k < 1.
CprPlan planRecovery(RecoveryMode mode, const CprCosts& costs, const CprKnobs& knobs);
// The benefit estimate: partial recovery when its expected overhead is below full recovery's,
// else full; the plan of the chosen mode.
CprPlan chooseRecovery(const CprCosts& costs, const CprKnobs& knobs);

}  // namespace gradsync
