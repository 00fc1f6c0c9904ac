#include "ckpt/cpr_planner.h"

#include <cmath>

#include <fmt/format.h>

#include "gradsync/error.h"

namespace gradsync {
namespace {

void validate(const CprCosts& costs, const CprKnobs& knobs) {
  if (!(costs.mtbf > 0) || !(costs.saveFull > 0)) {
    throw ConfigError(
        fmt::format("checkpoint planning needs a positive MTBF and save cost (got "
                    "MTBF {}, save {})",
                    costs.mtbf, costs.saveFull));
  }
  if (costs.loadFull < 0 || costs.restart < 0) {
    throw ConfigError("checkpoint planning: load and restart costs cannot be negative");
  }
  if (costs.shards < 1) throw ConfigError("checkpoint planning needs at least one shard");
  if (!(knobs.plsTarget > 0 && knobs.plsTarget < 1)) {
    throw ConfigError(fmt::format("PLS target {} is not in (0, 1)", knobs.plsTarget));
  }
  if (!(knobs.mfuFraction > 0 && knobs.mfuFraction <= 1)) {
    throw ConfigError(fmt::format("MFU fraction {} is not in (0, 1]", knobs.mfuFraction));
  }
  if (!(knobs.ssuRate > 0 && knobs.ssuRate <= 1)) {
    throw ConfigError(fmt::format("SSU rate {} is not in (0, 1]", knobs.ssuRate));
  }
  if (knobs.partialPerFull < 1) throw ConfigError("partial saves per full save must be >= 1");
}

}  // namespace

RecoveryMode parseRecoveryMode(std::string_view text, std::string_view what) {
  if (text == "full") return RecoveryMode::kFull;
  if (text == "partial") return RecoveryMode::kPartial;
  if (text == "cpr-mfu") return RecoveryMode::kCprMfu;
  if (text == "cpr-ssu") return RecoveryMode::kCprSsu;
  throw ConfigError(fmt::format("{}: unknown recovery mode '{}'", what, text),
                    {.hint = "choose full, partial, cpr-mfu or cpr-ssu"});
}

std::string_view recoveryModeName(RecoveryMode mode) {
  switch (mode) {
    case RecoveryMode::kFull:
      return "full";
    case RecoveryMode::kPartial:
      return "partial";
    case RecoveryMode::kCprMfu:
      return "cpr-mfu";
    case RecoveryMode::kCprSsu:
      return "cpr-ssu";
  }
  return "?";
}

double youngInterval(double saveCost, double mtbf) {
  return std::sqrt(2 * saveCost * mtbf);
}

double dalyInterval(double saveCost, double mtbf, double restart) {
  if (saveCost >= 2 * mtbf) return mtbf;
  return std::sqrt(2 * saveCost * (mtbf + restart)) - saveCost;
}

double fullRecoveryOverhead(const CprCosts& costs, double interval) {
  return costs.saveFull / interval + (interval / 2 + costs.loadFull + costs.restart) / costs.mtbf;
}

double partialRecoveryOverhead(const CprCosts& costs, double interval, double savePerInterval) {
  return savePerInterval / interval + (costs.loadFull / costs.shards + costs.restart) / costs.mtbf;
}

double plsLimitedInterval(const CprCosts& costs, double plsTarget) {
  return 2 * costs.shards * costs.mtbf * plsTarget;
}

double expectedPls(const CprCosts& costs, double interval) {
  return interval / (2 * costs.shards * costs.mtbf);
}

CprPlan planRecovery(RecoveryMode mode, const CprCosts& costs, const CprKnobs& knobs) {
  validate(costs, knobs);
  CprPlan plan;
  plan.mode = mode;
  const double full = dalyInterval(costs.saveFull, costs.mtbf, costs.restart);
  const double partial = plsLimitedInterval(costs, knobs.plsTarget);
  plan.fullOverhead = fullRecoveryOverhead(costs, full);
  plan.partialOverhead = partialRecoveryOverhead(costs, partial, costs.saveFull);
  switch (mode) {
    case RecoveryMode::kFull:
      plan.interval = full;
      plan.expectedOverhead = plan.fullOverhead;
      plan.reason = fmt::format("full recovery at Daly's interval {:.4g} (Young's {:.4g})", full,
                                youngInterval(costs.saveFull, costs.mtbf));
      return plan;
    case RecoveryMode::kPartial:
      plan.interval = partial;
      plan.expectedOverhead = plan.partialOverhead;
      plan.expectedPls = knobs.plsTarget;
      plan.reason = fmt::format("partial recovery at the PLS-limited interval {:.4g} (PLS {})",
                                partial, knobs.plsTarget);
      return plan;
    case RecoveryMode::kCprMfu:
    case RecoveryMode::kCprSsu:
      break;
  }
  // The same save budget per unit of time as plain partial recovery: k points cost
  // (k - 1)·r + 1 full saves, spread over k intervals instead of one.
  const int k = knobs.partialPerFull;
  const double r = knobs.mfuFraction;
  const double perPoint = ((k - 1) * r + 1) / k;
  plan.interval = partial * perPoint;
  plan.partialPerFull = k;
  plan.saveFraction = r;
  plan.expectedOverhead = partialRecoveryOverhead(costs, plan.interval, costs.saveFull * perPoint);
  // Uniform access: a row waits for its turn among the partial saves or for the full save; in
  // expectation about the full period's half (skewed access saves the hot rows far more often).
  plan.expectedPls = expectedPls(costs, plan.interval * k);
  plan.reason = fmt::format(
      "{}: a save point every {:.4g} ({:.3g} of the rows), every {}th saves all rows: the save "
      "budget of partial recovery at the PLS-limited interval {:.4g}",
      recoveryModeName(mode), plan.interval, r, k, partial);
  return plan;
}

CprPlan chooseRecovery(const CprCosts& costs, const CprKnobs& knobs) {
  CprPlan full = planRecovery(RecoveryMode::kFull, costs, knobs);
  if (full.partialOverhead >= full.fullOverhead) {
    full.reason +=
        fmt::format(": partial recovery would cost {:.3g} at PLS {}, not less than {:.3g}",
                    full.partialOverhead, knobs.plsTarget, full.fullOverhead);
    return full;
  }
  CprPlan partial = planRecovery(RecoveryMode::kPartial, costs, knobs);
  partial.reason += fmt::format(": overhead {:.3g} against full recovery's {:.3g}",
                                partial.partialOverhead, partial.fullOverhead);
  return partial;
}

}  // namespace gradsync
