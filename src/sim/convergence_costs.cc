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
constexpr const char* kLanguage =
    "docs/performance.md 'Language model: convergence per H' and 'Language model: compressors' "
    "steps to dense's loss': gradsync train --model gpt --workers 4 --batch-size 16 --steps "
    "1200 --eval-every 50 --sync SYNC | --compress METHOD (2026-11-30); ssgd (AdamW) ends its "
    "600 steps at 1.9939 nats/token";
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
  return {std::move(method),
          Convergence::kMeasured,
          1.0,
          "the same synchronous sum as ring ssgd (float order aside); " + std::move(why),
          kSpread,
          Workload::kAny};
}

// The language model: the target is data-parallel AdamW's final held-out loss after 600 steps,
// 1.9939; every run lasts 1,200 steps (its cosine schedule over them), and dense's own 1,200-step
// run reaches the target at step 480. `steps` is where the method's held-out loss first reaches
// it, interpolated linearly between its evaluations every 50 steps (0: not within 1,200).
constexpr double kLanguageDenseSteps = 480;
ConvergenceCost language(std::string method, double steps, std::string why) {
  if (steps == 0) {
    return {std::move(method),
            Convergence::kAtLeast,
            1200 / kLanguageDenseSteps,
            "1.9939 not reached in the 1,200-step run: >= 1200/480; " + std::move(why),
            kLanguage,
            Workload::kLanguage};
  }
  return {std::move(method),
          Convergence::kMeasured,
          std::max(1.0, steps / kLanguageDenseSteps),
          fmt::format("reached 1.9939 at step {:g}: {:g}/480; {}", steps, steps, why),
          kLanguage,
          Workload::kLanguage};
}

std::vector<ConvergenceCost> buildTable() {
  return {
      {"none", Convergence::kMeasured, 1.0, "the reference: dense ring ssgd", kTta, Workload::kAny},
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
      language("sync:diloco:10", 0, "2.0565 at 1,200"),
      language("sync:diloco:50", 1191, "1.9988 at 1,150, 1.9928 at 1,200"),
      language("sync:diloco:200", 1017, "1.9991 at 1,000, 1.9835 at 1,050"),
      language("sync:diloco:50,quantize=int8", 1189, "1.9988 at 1,150, 1.9925 at 1,200"),
      language("sync:diloco:50,fragments=5,delay=1", 767, "2.0027 at 750, 1.9766 at 800"),
      language("sync:diloco:50,fragments=5,delay=9", 801, "1.9942 at 800, 1.9771 at 850"),
      language("sync:localsgd:50", 781, "2.0038 at 750, 1.9877 at 800"),
      language("fp16", 480, "2.0155 at 450, 1.9798 at 500"),
      language("int8", 481, "2.0165 at 450, 1.9802 at 500"),
      language("qsgd:16", 500, "1.9941 at 500, 1.9739 at 550"),
      language("onebit", 556, "1.9992 at 550, 1.9847 at 566"),
      language("terngrad", 563, "2.0030 at 550, 1.9916 at 566"),
      language("powersgd:4", 756, "1.9968 at 750, 1.9739 at 800"),
      language("dgc:0.01", 845, "2.0110 at 800, 1.9918 at 850"),
      language("topk:0.01", 886, "1.9990 at 850, 1.9920 at 900"),
  };
}

const ConvergenceCost* find(const std::string& method, Workload workload) {
  for (const ConvergenceCost& row : convergenceCosts()) {
    if (row.method == method && (row.workload == Workload::kAny || row.workload == workload))
      return &row;
  }
  return nullptr;
}

// The row's cost on `workload`; a row of another workload only is not a measurement of this one.
CandidateCost fromRow(const std::string& method, Workload workload, const std::string& what) {
  const ConvergenceCost* row = find(method, workload);
  if (row == nullptr) {
    for (Workload other : {Workload::kVision, Workload::kLanguage}) {
      const ConvergenceCost* elsewhere = find(method, other);
      if (elsewhere != nullptr && elsewhere->status != Convergence::kNotMeasured) {
        return {Convergence::kNotMeasured, 0,
                fmt::format("{}: measured on the {} workload only", what, toString(other))};
      }
    }
    return {Convergence::kNotMeasured, 0, what + ": no convergence measurement"};
  }
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

const char* toString(Workload workload) {
  switch (workload) {
    case Workload::kAny:
      return "any";
    case Workload::kVision:
      return "vision (cnn)";
    case Workload::kLanguage:
      return "language-model (gpt)";
  }
  return "?";
}

Workload workloadOf(const std::string& profileName) {
  const bool language = profileName.starts_with("gpt") || profileName.starts_with("llama");
  return language ? Workload::kLanguage : Workload::kVision;
}

const std::vector<ConvergenceCost>& convergenceCosts() {
  static const std::vector<ConvergenceCost> table = buildTable();
  return table;
}

CandidateCost convergenceCostOf(const std::string& compress, const std::string& sync, bool servers,
                                Workload workload) {
  const CandidateCost method = fromRow(compress, workload, compress);
  const bool ring = sync == "ssgd" && !servers;
  if (ring || method.status == Convergence::kDoesNotReach) return method;
  const std::string strategy = "sync:" + sync + (servers && sync == "ssgd" ? "/ps" : "");
  const CandidateCost cost = fromRow(strategy, workload, strategy.substr(5));
  if (compress == "none" || cost.status == Convergence::kDoesNotReach) return cost;
  return {Convergence::kNotMeasured, 0,
          compress + " under " + strategy.substr(5) + ": measured under ring ssgd only"};
}

}  // namespace gradsync::sim
