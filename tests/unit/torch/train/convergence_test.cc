// Every compression method trains the cnn on the real Fashion-MNIST for one epoch (2 workers as
// threads over loopback; identical data and initialisation) and ends close to dense SSGD; every
// --sync strategy ends close to ring SSGD. All compression runs, dense included, start with the
// same 10% of dense warm-up steps, as the papers do.
//
// The target is 1.5 accuracy points. The bounds rest on the spread measured over seeds and
// OpenBLAS kernel families (Bound, convergence_support.h), so they hold on any machine of this
// kind. 2 hosts x 2 ranks (hitopk): convergence_hosts_test.cc.
// make test runs the dense reference and the guard's case; make test-long the Long/ rest (every
// compressor, the strategies).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "convergence_support.h"
#include "train_on_threads.h"

namespace gradsync::testing {
namespace {

struct Case {
  const char* spec;
  Bound bound;
  // The compression guard (on by default, compress/guard.h) must leave the good methods alone;
  // the methods that miss the target are not held to it (docs/algorithms.md says which it
  // takes over and why).
  bool guardMayAct = false;
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

// Dense SSGD, the compressors' reference; computed once.
double denseAccuracy() {
  static const double accuracy = [] {
    double dense = train(2, options("none")).finalTestAccuracy;
    report("none", dense, dense);
    return dense;
  }();
  return accuracy;
}

constexpr double kDenseFloor = 0.859;

TEST(ConvergenceReference, DenseReachesItsFloor) {
  EXPECT_GE(denseAccuracy(), kDenseFloor);
}

class Convergence : public ::testing::TestWithParam<Case> {};

TEST_P(Convergence, EndsCloseToDense) {
  const Case& c = GetParam();
  TrainResult result = train(2, options(c.spec));
  expectConverged(c.spec, result.finalTestAccuracy, denseAccuracy(), c.bound);
  std::printf("%-14s %.3f MB/step (%.1fx less), guard made %zu units dense\n", c.spec,
              result.perStep.bytesSent / 1e6, result.perStep.denseBytes / result.perStep.bytesSent,
              result.guard.size());
  for (const GuardEvent& e : result.guard) std::printf("  %s\n", e.reason.c_str());
  if (!c.guardMayAct) {
    EXPECT_TRUE(result.guard.empty()) << c.spec << ": the guard acted";
  }
}

// Every compressor's epoch is in make test-long (Long/): CI's time (docs/testing.md); make test
// keeps the guard's compressed epoch below, and compress_test checks every codec against a naive
// reference on every run.
INSTANTIATE_TEST_SUITE_P(
    Long, Convergence,
    ::testing::Values(Case{"topk:0.01", {0.036, 0.847}}, Case{"powersgd:4", {0.025, 0.854}},
                      Case{"qsgd:16", {0.018, 0.860}}, Case{"onebit", {0.025, 0.852}, true},
                      Case{"fp16", {0.018, 0.860}}, Case{"mstopk:0.01", {0.026, 0.848}},
                      Case{"gtopk:0.01", {0.026, 0.852}}, Case{"dgc:0.01", {0.032, 0.846}},
                      Case{"terngrad", {0.025, 0.853}}, Case{"gradiveq:4", {0.032, 0.846}},
                      Case{"signsgd", {0.048, 0.834}, true},
                      Case{"randomk:0.1", {0.179, 0.691}, true}),
    [](const auto& info) { return testName(info.param.spec); });

// randomk:0.01 with error feedback diverges without the guard (docs/performance.md: every element
// waits ~100 steps in the residual, then arrives as one stale burst); the guard sees what it
// sends turn orthogonal to the gradient a few windows after the warm-up, makes the weights dense,
// and the run ends within the target of 1.5 points of dense. The last unit goes dense at
// step 87-127 over the measured spread (seeds 0-4, ATen's default and OpenBLAS's Sandybridge
// kernels: mean 99.5, sd 15.8; docs/performance.md, "The compression guardrail"), so every unit
// must by kWarmup + 100 (mean + 3 sd), long before the residual explodes (the guard's first
// version acted at step 277: too late).
constexpr int64_t kGuardActsBy = kWarmup + 100;

TEST(ConvergenceGuard, RandomKAtOnePercentEndsNearDenseWithTheGuard) {
  TrainResult result = train(2, options("randomk:0.01"));
  for (const GuardEvent& e : result.guard) std::printf("  %s\n", e.reason.c_str());
  ASSERT_FALSE(result.guard.empty()) << "the guard never acted";
  for (const GuardEvent& e : result.guard) EXPECT_LE(e.step, kGuardActsBy) << e.reason;
  expectConverged("randomk:0.01+guard", result.finalTestAccuracy, denseAccuracy(),
                  Bound{0.015, kDenseFloor - 0.015});
}

// The same run with --guard off: today's divergence, unchanged (test-long).
TEST(ConvergenceGuardOff, RandomKAtOnePercentStillDivergesWithoutTheGuard) {
  TrainOptions o = options("randomk:0.01");
  o.compression.guard = false;
  TrainResult result = train(2, o);
  report("randomk:0.01,guard=off", result.finalTestAccuracy, denseAccuracy());
  EXPECT_TRUE(result.guard.empty());
  EXPECT_LT(result.finalTestAccuracy, 0.5) << "randomk:0.01 without the guard no longer diverges: "
                                              "the guard test no longer shows what it guards";
}

// p3 and sharded change when and in what order the averages travel and who applies the update,
// not the math (Trainer.P3AndShardedGiveWfbpParameters checks that to 1e-4 after 4 steps). Over
// an epoch, float rounding drifts them apart from wfbp in either direction, as far as a new seed
// would (-0.83 to +0.87 points over the measured spread), so the check is two-sided: within the
// bound of wfbp, below or above.
constexpr Bound kSameMathDrift = Bound{0.020, 0.859};

TEST(ConvergenceSchedules, P3AndShardedEndWhereWfbpEnds) {
  for (const auto& [schedule, sync] : {std::pair{"p3", "ssgd"}, std::pair{"wfbp", "sharded"}}) {
    TrainOptions o = options("none");
    o.schedule = schedule;
    o.sync = sync;
    TrainResult result = train(2, o);
    double dense = denseAccuracy();
    expectConverged(std::string(schedule) + "/" + sync, result.finalTestAccuracy, dense,
                    kSameMathDrift);
    EXPECT_LE(result.finalTestAccuracy, dense + kSameMathDrift.maxGap) << schedule << " " << sync;
  }
}

// The --sync strategies train the cnn for one epoch on 4 workers (threads over loopback; the
// same data, seed and steps) and are compared with ring ssgd. The delayed strategies start with
// 50 ssgd steps (the papers' 200-1000 would cover the whole epoch). asgd and ssp:2 (which
// diverged in 2 of 5 runs before the servers trusted stale pushes less) miss the target: their
// bounds are their measured spread over 3 seeds (docs/performance.md), and the floor fails a
// run that diverges.
struct StrategyCase {
  const char* sync;
  bool ps;
  Bound bound;
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

 public:
  // Ring ssgd, the strategies' reference; computed once.
  static double ringAccuracy() {
    static const double accuracy = [] {
      double ring = train(4, options("ssgd", false)).finalTestAccuracy;
      report("ssgd", ring, ring);
      return ring;
    }();
    return accuracy;
  }
};

constexpr double kRingFloor = 0.850;

TEST(ConvergenceReference, RingSsgdReachesItsFloor) {
  EXPECT_GE(ConvergenceStrategies::ringAccuracy(), kRingFloor);
}

TEST_P(ConvergenceStrategies, EndsCloseToRingSsgd) {
  const StrategyCase& c = GetParam();
  TrainResult result = train(4, options(c.sync, c.ps, c.cdThreshold));
  expectConverged(std::string(c.sync) + (c.ps ? "/ps" : ""), result.finalTestAccuracy,
                  ringAccuracy(), c.bound);
}

std::string strategyName(const ::testing::TestParamInfo<StrategyCase>& info) {
  return testName(std::string(info.param.sync) + (info.param.ps ? "_ps" : ""));
}

// All in make test-long (Long/, with their ring reference: CI's time, docs/testing.md): the server
// path is ring ssgd's math, which torch_test's
// Strategies.ParameterServerSsgdGivesRingSsgdParameters checks to 1e-4 on every run, and the
// delayed strategies' rules (cdsgd's compressed pushes among them) are checked against a naive
// replay by ps_test's DelayedSgd on every run.
INSTANTIATE_TEST_SUITE_P(Long, ConvergenceStrategies,
                         ::testing::Values(StrategyCase{"cdsgd:5", false, {0.107, 0.772}, 0.005},
                                           StrategyCase{"ssgd", true, {0.020, 0.850}},
                                           StrategyCase{"odsgd", false, {0.025, 0.845}},
                                           StrategyCase{"localsgd:4", false, {0.028, 0.842}},
                                           StrategyCase{"ssdsgd:5", false, {0.065, 0.807}},
                                           StrategyCase{"asgd", false, {0.086, 0.792}},
                                           StrategyCase{"ssp:2", false, {0.129, 0.722}}),
                         strategyName);

}  // namespace
}  // namespace gradsync::testing
