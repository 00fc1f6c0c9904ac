#include "sim/convergence_costs.h"

#include <fmt/format.h>

#include <algorithm>

namespace gradsync::sim {
namespace {

// The sections of docs/performance.md the rows come from.
constexpr const char* kTta =
    "docs/performance.md 'Compression: time to accuracy under a 100 Mbit/s link (cnn, 4 "
    "workers)': scripts/bench_compress_tta.sh --model cnn --workers 4 --bandwidth 100mbit "
    "--steps 200 --eval 10 (2026-11-22); dense reached 85% at step 110";
constexpr const char* kSpread =
    "docs/performance.md 'Convergence across machines and seeds': "
    "scripts/convergence_spread.py, 6-11 runs over kernel families and seeds (2026-11-25)";
constexpr const char* kDefaults =
    "docs/performance.md 'Compression with no options': gradsync train --model cnn --workers 2 "
    "--steps 468 --compress METHOD, seeds 0-2 (2026-11-26)";
constexpr const char* kPsAccuracy =
    "docs/performance.md 'Parameter server and delayed SGD (vgg11, 4 workers)', 'Accuracy': "
    "convergence_test ConvergenceStrategies and gradsync train --workers 4 --epochs 1 "
    "(2026-11-22)";

// Dense ring SSGD reached 85% at step 110 in kTta; every factor below is relative to it.
constexpr double kDenseSteps = 110;

ConvergenceCost measured(std::string method, double steps, std::string why) {
  // A method is not taken to beat dense's exact sum: one run's fewer steps are noise (single
  // evaluations of 2,000 samples fluctuate by about a point).
  const double factor = std::max(1.0, steps / kDenseSteps);
  return {std::move(method), Convergence::kMeasured, factor,
          fmt::format("reached 85% at step {:g}: {:g}/{:g}{}{}", steps, steps, kDenseSteps,
                      steps < kDenseSteps ? ", clamped to 1" : "", why),
          kTta};
}

ConvergenceCost atLeast(std::string method, std::string why) {
  constexpr double kRunSteps = 200;
  return {std::move(method), Convergence::kAtLeast, kRunSteps / kDenseSteps,
          fmt::format("85% not reached in the {:g}-step run: >= {:g}/{:g}; {}", kRunSteps,
                      kRunSteps, kDenseSteps, why),
          std::string(kTta) + "; " + kSpread};
}

ConvergenceCost doesNotReach(std::string method, std::string why, const char* source) {
  return {std::move(method), Convergence::kDoesNotReach, 0, std::move(why), source};
}

ConvergenceCost sameUpdate(std::string method, std::string why) {
  return {std::move(method), Convergence::kMeasured, 1.0,
          "the same synchronous sum as ring ssgd (float order aside); " + std::move(why), kSpread};
}

std::vector<ConvergenceCost> buildTable() {
  return {
      {"none", Convergence::kMeasured, 1.0, "the reference: dense ring ssgd", kTta},
      measured("fp16", 110, ""),
      measured("qsgd:16", 110, ""),
      measured("terngrad", 90, ""),
      measured("mstopk:0.01", 170, " (error feedback delays gradients)"),
      measured("dgc:0.01", 160, ""),
      measured("powersgd:4", 140, ""),
      atLeast("topk:0.01", "ended at 84.24% (dense 86.37%); one-epoch mean gap 0.70 points"),
      atLeast("gtopk:0.01", "ended at 81.75%; one-epoch mean gap 0.68 points"),
      atLeast("gradiveq:4,train=20", "ended at 81.83%; one-epoch mean gap (gradiveq:4) 1.29"),
      // Measured at the sign methods' former default bucket of 512 elements.
      doesNotReach("onebit,bucket=512",
                   "ended 6.95 points below dense (79.42%); one-epoch mean gap 3.56", kTta),
      doesNotReach("signsgd,bucket=512",
                   "ended 8.95 points below dense (77.42%); one-epoch mean gap 3.56", kTta),
      {"onebit", Convergence::kNotMeasured, 0,
       "default bucket 16: one-epoch mean gap 0.19 points over 3 seeds but no steps-to-accuracy "
       "run",
       kDefaults},
      {"signsgd", Convergence::kNotMeasured, 0,
       "default bucket 32: one-epoch mean gap 1.09 points over 3 seeds but no steps-to-accuracy "
       "run",
       kDefaults},
      doesNotReach("randomk:0.1",
                   "ended 30.4 points below dense (55.97%); one-epoch mean gap 10.49", kTta),
      sameUpdate("sync:sharded", "wfbp/sharded's one-epoch gap to dense wfbp: mean -0.09 points"),
      sameUpdate("sync:ssgd/ps", "ssgd through servers' one-epoch gap: mean 0.01 points"),
      {"sync:localsgd:4", Convergence::kNotMeasured, 0,
       "one-epoch mean gap 0.80 points (within 1.5) but no steps-to-accuracy run", kSpread},
      {"sync:odsgd", Convergence::kNotMeasured, 0,
       "one-epoch mean gap 0.52 points but no steps-to-accuracy run", kSpread},
      doesNotReach("sync:ssdsgd:5", "one-epoch mean gap 4.10 points (2.51-4.92)", kSpread),
      doesNotReach("sync:cdsgd:5", "one-epoch mean gap 4.82 points (1.14-7.13)", kSpread),
      doesNotReach("sync:asgd", "one-epoch mean gap 3.39 points (1.41-4.44)", kPsAccuracy),
      doesNotReach("sync:ssp:2", "one-epoch mean gap 4.52 points; diverged once", kPsAccuracy),
  };
}

const ConvergenceCost* find(const std::string& method) {
  for (const ConvergenceCost& row : convergenceCosts()) {
    if (row.method == method) return &row;
  }
  return nullptr;
}

CandidateCost fromRow(const ConvergenceCost* row, const std::string& what) {
  if (row == nullptr) return {Convergence::kNotMeasured, 0, what + ": no convergence measurement"};
  if (row->status == Convergence::kDoesNotReach)
    return {row->status, 0, what + " does not reach dense's accuracy: " + row->derivation};
  if (row->status == Convergence::kNotMeasured)
    return {row->status, 0, what + ": " + row->derivation};
  return {row->status, row->factor, row->method};
}

}  // namespace

const char* toString(Convergence status) {
  switch (status) {
    case Convergence::kMeasured:
      return "measured";
    case Convergence::kAtLeast:
      return "at least";
    case Convergence::kDoesNotReach:
      return "does not reach";
    case Convergence::kNotMeasured:
      return "not measured";
  }
  return "?";
}

const std::vector<ConvergenceCost>& convergenceCosts() {
  static const std::vector<ConvergenceCost> table = buildTable();
  return table;
}

CandidateCost convergenceCostOf(const std::string& compress, const std::string& sync,
                                bool servers) {
  const CandidateCost method = fromRow(find(compress), compress);
  const bool ring = sync == "ssgd" && !servers;
  if (ring || method.status == Convergence::kDoesNotReach) return method;
  const std::string strategy = "sync:" + sync + (servers && sync == "ssgd" ? "/ps" : "");
  const CandidateCost cost = fromRow(find(strategy), strategy.substr(5));
  if (compress == "none" || cost.status == Convergence::kDoesNotReach) return cost;
  return {Convergence::kNotMeasured, 0,
          compress + " under " + strategy.substr(5) + ": measured under ring ssgd only"};
}

}  // namespace gradsync::sim
