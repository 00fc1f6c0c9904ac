// Every compression method trains the cnn on the real Fashion-MNIST for one epoch (2 workers as
// threads over loopback; identical data and initialisation) and ends close to dense SSGD. All
// runs, dense included, start with the same 10% of dense warm-up steps, as the papers do.
//
// The target is 1.5 accuracy points (p3 and sharded, which do not change the math: 0.5). Three
// methods miss it (measured gaps in docs/performance.md, "Convergence"): for them the bound only
// guards against regressions.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "train_on_threads.h"

namespace gradsync::testing {
namespace {

// GRADSYNC_TEST_SEED (default 0) reseeds every run, initialisation and data order alike:
// scripts/convergence_spread.py measures the cases' spread over seeds and OpenBLAS kernel
// families with it. The bounds below hold for seed 0 on any kernel family.
uint64_t testSeed() {
  const char* seed = std::getenv("GRADSYNC_TEST_SEED");
  return seed ? std::stoull(seed) : 0;
}

// One machine-readable line per run, which scripts/convergence_spread.py collects.
void report(const std::string& name, double accuracy, double reference) {
  std::printf("CONVERGENCE case=%s accuracy=%.4f reference=%.4f seed=%llu\n", name.c_str(),
              accuracy, reference, static_cast<unsigned long long>(testSeed()));
  std::fflush(stdout);
}

constexpr int64_t kSteps = 468;  // one epoch at global batch 128
constexpr int64_t kWarmup = 47;
constexpr double kTarget = 0.015;

struct Case {
  const char* spec;
  double allowedGap;  // kTarget, or the measured gap of a method that misses it, plus margin
};

TrainOptions options(const std::string& compress) {
  TrainOptions o;
  o.model = "cnn";
  o.steps = kSteps;
  o.quiet = true;
  o.compression.spec = compress;
  o.compression.warmupSteps = kWarmup;
  o.seed = testSeed();
  return o;
}

double denseAccuracy() {
  static const double accuracy = [] {
    double dense = train(2, options("none")).finalTestAccuracy;
    report("none", dense, dense);
    return dense;
  }();
  return accuracy;
}

class Convergence : public ::testing::TestWithParam<Case> {};

TEST_P(Convergence, EndsCloseToDense) {
  const Case& c = GetParam();
  TrainResult result = train(2, options(c.spec));
  double dense = denseAccuracy();
  std::printf("%-12s accuracy %.2f%% (dense %.2f%%, gap %.2f), %.3f MB/step (%.1fx less)\n", c.spec,
              100 * result.finalTestAccuracy, 100 * dense, 100 * (dense - result.finalTestAccuracy),
              result.perStep.bytesSent / 1e6, result.perStep.denseBytes / result.perStep.bytesSent);
  report(c.spec, result.finalTestAccuracy, dense);
  EXPECT_GE(result.finalTestAccuracy, dense - c.allowedGap);
}

INSTANTIATE_TEST_SUITE_P(Methods, Convergence,
                         ::testing::Values(Case{"fp16", kTarget}, Case{"topk:0.01", kTarget},
                                           Case{"mstopk:0.01", kTarget},
                                           Case{"gtopk:0.01", kTarget}, Case{"dgc:0.01", kTarget},
                                           Case{"qsgd:16", kTarget}, Case{"terngrad", kTarget},
                                           Case{"powersgd:4", kTarget}, Case{"gradiveq:4", kTarget},
                                           // Below target: measured gaps 4.2, 5.0 and 10.8 points.
                                           Case{"onebit", 0.05}, Case{"signsgd", 0.06},
                                           Case{"randomk:0.1", 0.12}),
                         [](const auto& info) {
                           std::string name = info.param.spec;
                           for (char& c : name) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });

// p3 and sharded change when and in what order the averages travel and who applies the update,
// not the math: the same epoch ends where dense wfbp does, up to the drift float rounding causes
// over 468 steps (well under half a point).
TEST(ConvergenceSchedules, P3AndShardedEndWhereWfbpEnds) {
  for (const auto& [schedule, sync] : {std::pair{"p3", "ssgd"}, std::pair{"wfbp", "sharded"}}) {
    TrainOptions o = options("none");
    o.schedule = schedule;
    o.sync = sync;
    TrainResult result = train(2, o);
    double dense = denseAccuracy();
    std::printf("%s %s accuracy %.2f%% (wfbp %.2f%%)\n", schedule, sync,
                100 * result.finalTestAccuracy, 100 * dense);
    report(std::string(schedule) + "/" + sync, result.finalTestAccuracy, dense);
    EXPECT_NEAR(result.finalTestAccuracy, dense, 0.005) << schedule << " " << sync;
  }
}

// The --sync strategies train the cnn for one epoch on 4 workers (threads over loopback; the
// same data, seed and steps) and is compared with ring ssgd. The delayed strategies start with
// 50 ssgd steps (the papers' 200-1000 would cover the whole epoch). The target is 1.5 points;
// the strategies that miss it have their measured gap plus a margin as a regression guard
// (docs/performance.md, "Parameter server and delayed SGD", has the figures).
struct StrategyCase {
  const char* sync;
  bool ps;
  double allowedGap;         // kTarget, or the measured gap of a strategy that misses it + margin
  double cdThreshold = 0.5;  // cdsgd's 2-bit threshold
};

class ConvergenceStrategies : public ::testing::TestWithParam<StrategyCase> {
 protected:
  static TrainOptions options(const char* sync, bool ps, double cdThreshold = 0.5) {
    TrainOptions o;
    o.model = "cnn";
    o.steps = 234;  // one epoch at global batch 256
    o.quiet = true;
    o.sync = sync;
    o.strategy.ps = ps;
    o.strategy.warmup = 50;
    o.strategy.threshold = cdThreshold;
    o.seed = testSeed();
    return o;
  }
  static double ringAccuracy() {
    static const double accuracy = [] {
      double ring = train(4, options("ssgd", false)).finalTestAccuracy;
      report("ssgd", ring, ring);
      return ring;
    }();
    return accuracy;
  }
};

TEST_P(ConvergenceStrategies, EndsCloseToRingSsgd) {
  const StrategyCase& c = GetParam();
  TrainResult result = train(4, options(c.sync, c.ps, c.cdThreshold));
  double ring = ringAccuracy();
  std::printf("%-10s%s accuracy %.2f%% (ring ssgd %.2f%%, gap %.2f)\n", c.sync, c.ps ? " (PS)" : "",
              100 * result.finalTestAccuracy, 100 * ring, 100 * (ring - result.finalTestAccuracy));
  report(std::string(c.sync) + (c.ps ? "/ps" : ""), result.finalTestAccuracy, ring);
  EXPECT_GE(result.finalTestAccuracy, ring - c.allowedGap);
}

INSTANTIATE_TEST_SUITE_P(
    Strategies, ConvergenceStrategies,
    ::testing::Values(StrategyCase{"ssgd", true, kTarget}, StrategyCase{"odsgd", false, kTarget},
                      StrategyCase{"localsgd:4", false, kTarget},
                      // Below target. Measured gaps over three or four runs (processes,
                      // threads, CI): ssdsgd:5 5.5, 4.2, 4.1, 4.9; cdsgd:5 2.5, 3.8, 6.0, 6.9
                      // points (the servers sum pushes in arrival order, and rounding
                      // differences grow over the epoch). asgd and ssp:2 are not here: as
                      // threads they diverged in 2 of 5 runs (docs/performance.md).
                      StrategyCase{"ssdsgd:5", false, 0.08},
                      StrategyCase{"cdsgd:5", false, 0.09, 0.005}),
    [](const auto& info) {
      std::string name = std::string(info.param.sync) + (info.param.ps ? "_ps" : "");
      for (char& c : name) {
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
      }
      return name;
    });

}  // namespace
}  // namespace gradsync::testing
