// The compression guard: its decision on hand-made signals, its norm against a naive one, its
// agreement over real rank threads (odd world size), and inside the engine: a unit it made dense
// exchanges exactly the dense average from the decided step on every rank, and a guard that
// does not act leaves every bit of the exchanges as they are without it.
#include "compress/guard.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <mutex>

#include "common/tags.h"
#include "gradsync/error.h"
#include "support/transports.h"
#include "sync/engine.h"

namespace gradsync::testing {
namespace {

// Thresholds of the tests' own, so that tuning the defaults leaves them meaningful.
constexpr GuardOptions kOptions{
    .residualRatio = 30, .sentRatio = 6, .misalignment = 0.95, .windowsToConfirm = 2};

TEST(GuardDetector, TripsAfterConsecutiveWindowsPastAThresholdOnce) {
  GuardDetector detector(3, kOptions);
  const std::vector<GuardSignals> calm = {{5, 1.5}, {-1, 1.2}, {29, 5.9}};
  const std::vector<GuardSignals> harm = {{31, 1.5}, {-1, 1.2}, {29, 5.9}};
  EXPECT_TRUE(detector.observe(calm).empty());
  EXPECT_TRUE(detector.observe(harm).empty());  // one window is not persistent
  EXPECT_TRUE(detector.observe(calm).empty());  // and the count starts again
  EXPECT_TRUE(detector.observe(harm).empty());
  std::vector<GuardTrip> trips = detector.observe(harm);
  ASSERT_EQ(trips.size(), 1u);
  EXPECT_EQ(trips[0].unit, 0u);
  EXPECT_EQ(trips[0].signal, "residual");
  EXPECT_DOUBLE_EQ(trips[0].ratio, 31);
  EXPECT_DOUBLE_EQ(trips[0].threshold, 30);
  EXPECT_TRUE(detector.observe(harm).empty());  // dense for good: never returned again
}

TEST(GuardDetector, SentBurstsAndNonFiniteRatiosTripUnmeasuredUnitsNever) {
  GuardOptions once = kOptions;
  once.windowsToConfirm = 1;
  GuardDetector detector(4, once);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<GuardTrip> trips = detector.observe(
      std::vector<GuardSignals>{{-1, 7, 0.5}, {nan, 1, 0.5}, {-1, -1, -1}, {2, 1, 0.97}});
  ASSERT_EQ(trips.size(), 3u);
  EXPECT_EQ(trips[0].unit, 0u);
  EXPECT_EQ(trips[0].signal, "sent");
  EXPECT_EQ(trips[1].unit, 1u);
  EXPECT_EQ(trips[1].signal, "residual");
  EXPECT_EQ(trips[2].unit, 3u);
  EXPECT_EQ(trips[2].signal, "alignment");
  EXPECT_NEAR(trips[2].ratio, 0.03, 1e-12);  // reported as the cosine
  EXPECT_NEAR(trips[2].threshold, 0.05, 1e-12);
  GuardDetector other(1, once);
  EXPECT_EQ(other.observe(std::vector<GuardSignals>{{1, inf, 0}}).size(), 1u);
}

TEST(GuardNorm, MatchesANaiveDoubleSumAtEverySize) {
  for (size_t n : std::vector<size_t>{0, 1, 15, 16, 17, 4095, 4096, 4097, 100003}) {
    std::vector<float> x(n);
    double naive = 0;
    for (size_t i = 0; i < n; ++i) {
      x[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i)) * (1 + i % 7));
      naive += static_cast<double>(x[i]) * x[i];
    }
    EXPECT_NEAR(l2Norm(x), std::sqrt(naive), 1e-5 * std::sqrt(naive) + 1e-30) << n;
  }
}

std::vector<GuardedUnit> twoUnits() {
  return {{.compressed = true, .tensors = {0}, .names = {"fc.weight"}, .method = "randomk:0.01"},
          {.compressed = true, .tensors = {1}, .names = {"out.weight"}, .method = "topk:0.01"}};
}

// Only rank 2 sees unit 0's residual past the threshold; every rank takes the decision (the
// largest over the ranks), at the same window, from the same step.
TEST(CompressionGuard, EveryRankMakesTheUnitDenseFromTheSameStep) {
  constexpr int kRanks = 3;
  std::mutex mutex;
  std::vector<std::vector<GuardEvent>> seen(kRanks);
  runWithTransports(TransportKind::kTcp, kRanks, [&](Transport& t) {
    CompressionGuard guard(kOptions, /*warmupSteps=*/5, twoUnits());
    EXPECT_FALSE(guard.samples(4));
    EXPECT_TRUE(guard.samples(5));
    EXPECT_FALSE(guard.samples(6));
    for (uint64_t step = 0; step < 60; ++step) {
      if (guard.samples(step)) {
        const bool harmful = t.rank() == 2 && step >= 15;
        guard.record(0, step, 1.0, 2.0, harmful ? 40.0 : 3.0, 1.5);
        guard.record(1, step, 2.0, 2.0, 8.0, 3.0);
      }
      if (!guard.checksAt(step + 1)) continue;
      EXPECT_EQ(guard.sampledStep(step + 1), step + 1 - 10);
      for (const GuardEvent& e : guard.check(t, tags::kGuard, step + 1)) {
        std::lock_guard lock(mutex);
        seen[static_cast<size_t>(t.rank())].push_back(e);
      }
    }
    // Windows measured at 15 and 25 are past 30x: checked at 25 and 35, dense from step 35.
    EXPECT_FALSE(guard.dense(0, 34));
    EXPECT_TRUE(guard.dense(0, 35));
    EXPECT_FALSE(guard.dense(1, 59));
  });
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_EQ(seen[r].size(), 1u) << "rank " << r;
    const GuardEvent& e = seen[r][0];
    EXPECT_EQ(e.step, 35);
    EXPECT_EQ(e.unit, 0u);
    EXPECT_EQ(e.signal, "residual");
    EXPECT_DOUBLE_EQ(e.ratio, 40);
    EXPECT_EQ(e.tensors, std::vector<std::string>{"fc.weight"});
    EXPECT_NE(e.reason.find("guard: unit 0 (tensors fc.weight) -> dense at step 35"),
              std::string::npos)
        << e.reason;
  }
}

// Pushes to parameter servers: each rank decides from its own signals alone (no collective),
// so only the rank whose pushes do harm goes dense, and its events name it; a checkpoint
// between its windows keeps the count.
TEST(CompressionGuard, CheckAloneDecidesForThisRanksPushesOnly) {
  constexpr int kRanks = 3;
  for (int rank = 0; rank < kRanks; ++rank) {
    auto guard = std::make_unique<CompressionGuard>(kOptions, /*warmupSteps=*/5, twoUnits());
    std::vector<GuardEvent> events;
    for (uint64_t step = 0; step < 60; ++step) {
      if (guard->samples(step)) {
        guard->record(0, step, 1.0, 2.0, rank == 2 && step >= 15 ? 40.0 : 3.0, 1.5);
        guard->record(1, step, 2.0, 2.0, 8.0, 3.0);
      }
      if (step + 1 == 30) {  // resume from a checkpoint after the first window past 30x
        StateWriter saved;
        guard->saveState(saved);
        const std::vector<uint8_t> bytes = saved.take();
        guard = std::make_unique<CompressionGuard>(kOptions, 5, twoUnits());
        StateReader in(bytes, "guard state");
        guard->loadState(in);
        in.expectEnd();
      }
      if (!guard->checksAt(step + 1)) continue;
      for (const GuardEvent& e : guard->checkAlone(rank, step + 1)) events.push_back(e);
    }
    if (rank != 2) {
      EXPECT_TRUE(events.empty()) << "rank " << rank;
      EXPECT_FALSE(guard->dense(0, 59));
      continue;
    }
    ASSERT_EQ(events.size(), 1u);
    EXPECT_EQ(events[0].step, 35);
    EXPECT_EQ(events[0].rank, 2);
    EXPECT_EQ(events[0].signal, "residual");
    EXPECT_NE(events[0].reason.find("-> dense at step 35 in rank 2's pushes: "), std::string::npos)
        << events[0].reason;
    EXPECT_FALSE(guard->dense(0, 34));
    EXPECT_TRUE(guard->dense(0, 35));
    EXPECT_FALSE(guard->dense(1, 59));
  }
}

// A unit that accumulates a momentum μ (DGC's velocity, or error feedback with ef_decay=μ: DeMo)
// has its residual and sent norms read in units of 1 / (1 - μ) gradients and its alignment
// unwatched: the same numbers trip a plain unit and not it, until they pass the scaled threshold.
TEST(CompressionGuard, AMomentumUnitsNormsAreReadInItsAccumulatedGradients) {
  std::vector<GuardedUnit> units = twoUnits();
  units[0].momentumScale = 100;  // μ = 0.99
  units[0].watchAlignment = false;
  CompressionGuard guard(kOptions, /*warmupSteps=*/0, units);
  std::vector<GuardEvent> events;
  for (uint64_t step = 0; step < 60; ++step) {
    if (guard.samples(step)) {
      // 50x residual, 10x sent, orthogonal to the gradient: each past a plain unit's threshold.
      const double residual = step >= 30 ? 5000.0 : 50.0;
      for (size_t unit : {size_t{0}, size_t{1}}) guard.record(unit, step, 1.0, 10.0, residual, 0.0);
    }
    if (!guard.checksAt(step + 1)) continue;
    for (const GuardEvent& e : guard.checkAlone(0, step + 1)) events.push_back(e);
  }
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].step, 20);  // the plain unit: three windows past, sampled at 0, 10 and 20
  EXPECT_NE(events[0].reason.find("out.weight"), std::string::npos) << events[0].reason;
  EXPECT_EQ(events[1].step, 50);  // the momentum unit: its residual 50 of its 100x from step 30
  EXPECT_EQ(events[1].signal, "residual");
  EXPECT_NE(events[1].reason.find("fc.weight"), std::string::npos) << events[1].reason;
}

// The optimizer rule's unit is dense from the warm-up's end, decided at construction; the
// notice counts it; the other unit is left to the signals.
TEST(CompressionGuard, TheOptimizerRuleDecidesAtTheStart) {
  std::vector<GuardedUnit> units = twoUnits();
  units[1].failsUnderOptimizer = true;
  CompressionGuard guard(kOptions, /*warmupSteps=*/7, units);
  EXPECT_FALSE(guard.dense(1, 6));
  EXPECT_TRUE(guard.dense(1, 7));
  EXPECT_FALSE(guard.dense(0, 100));
  ASSERT_EQ(guard.events().size(), 1u);
  EXPECT_EQ(guard.events()[0].unit, 1u);
  EXPECT_NE(guard.startNotice().find("1 of 2 units -> dense at step 7: topk:0.01 under Adam"),
            std::string::npos)
      << guard.startNotice();
  EXPECT_EQ(CompressionGuard(kOptions, 7, twoUnits()).startNotice(), "");
}

// The loss signal over servers: this rank's own losses against its own warm-up's.
TEST(CompressionGuard, CheckAloneWatchesThisRanksLossAgainstItsWarmup) {
  CompressionGuard guard(kOptions, /*warmupSteps=*/10, twoUnits());
  std::vector<GuardEvent> events;
  for (uint64_t step = 0; step < 60; ++step) {
    guard.observeLoss(step, step < 10 ? 1.0 : step < 30 ? 1.5 : 2.5);  // 2.5x from step 30
    if (guard.checksAt(step + 1)) {
      for (const GuardEvent& e : guard.checkAlone(1, step + 1)) events.push_back(e);
    }
  }
  // Windows [30, 40) and [40, 50) past 2x: both units dense from step 50.
  ASSERT_EQ(events.size(), 2u);
  for (const GuardEvent& e : events) {
    EXPECT_EQ(e.signal, "loss");
    EXPECT_EQ(e.step, 50);
    EXPECT_EQ(e.rank, 1);
    EXPECT_DOUBLE_EQ(e.ratio, 2.5);
  }
}

// A checkpoint between two windows keeps the count and the dense units: the resumed guard trips
// at the window the uninterrupted one does, and stays dense.
TEST(CompressionGuard, StateRestoredFromACheckpointDecidesAsTheUninterruptedGuard) {
  runWithTransports(TransportKind::kLoopback, 1, [&](Transport& t) {
    CompressionGuard first(kOptions, 0, twoUnits());
    first.record(0, 0, 1.0, 1.0, 50.0, 0.9);
    EXPECT_TRUE(first.check(t, tags::kGuard, 10).empty());  // one window past 30x
    StateWriter saved;
    first.saveState(saved);
    const std::vector<uint8_t> bytes = saved.take();
    CompressionGuard resumed(kOptions, 0, twoUnits());
    StateReader in(bytes, "guard state");
    resumed.loadState(in);
    in.expectEnd();
    resumed.record(0, 10, 1.0, 1.0, 50.0, 0.9);
    ASSERT_EQ(resumed.check(t, tags::kGuard, 20).size(), 1u);  // the second window trips
    EXPECT_TRUE(resumed.dense(0, 20));
    StateWriter again;
    resumed.saveState(again);
    const std::vector<uint8_t> afterTrip = again.take();
    CompressionGuard later(kOptions, 0, twoUnits());
    StateReader in2(afterTrip, "guard state");
    later.loadState(in2);
    EXPECT_FALSE(later.dense(0, 19));
    EXPECT_TRUE(later.dense(0, 20));
    EXPECT_FALSE(later.dense(1, 100));
    CompressionGuard other(kOptions, 0, {twoUnits()[0]});  // another layout
    StateReader in3(afterTrip, "guard state");
    EXPECT_THROW(other.loadState(in3), DataError);
  });
}

const std::vector<TensorShape> kTensors = {tensorShape("fc.weight", {50, 100}),
                                           tensorShape("fc.bias", {50})};

// A gradient with a steady direction (as a model's early steps have): randomk:0.01's residual
// then holds ~t steps of it for 99% of the elements.
float gradient(int rank, int tensor, size_t i, int step) {
  return 0.5f + 0.01f * static_cast<float>((i * 7 + static_cast<size_t>(tensor)) % 11) +
         0.05f * static_cast<float>(rank) + 0.001f * static_cast<float>(step % 3);
}

// The engine's slots after every step of `steps`, for one rank.
std::vector<std::vector<float>> runSteps(Engine& engine, int rank, int steps) {
  std::vector<std::vector<float>> results;
  for (int step = 0; step < steps; ++step) {
    for (int tensor : {1, 0}) {
      std::span<float> slot = engine.slot(tensor);
      for (size_t i = 0; i < slot.size(); ++i) slot[i] = gradient(rank, tensor, i, step);
      engine.markReady(tensor);
    }
    engine.finishStep();
    std::span<float> w = engine.slot(0);
    results.emplace_back(w.begin(), w.end());
  }
  return results;
}

EngineOptions randomkOptions(bool guard) {
  return {.schedule = ScheduleSpec::parse("wfbp"),
          .compression = {.spec = "randomk:0.01", .minElements = 1000, .guard = guard}};
}

TEST(EngineGuard, ADenseUnitExchangesExactlyTheDenseAverageOnEveryRank) {
  constexpr int kRanks = 3, kSteps = 100;
  std::mutex mutex;
  std::vector<int64_t> tripSteps;
  runWithTransports(TransportKind::kLoopback, kRanks, [&](Transport& t) {
    std::vector<std::vector<float>> results;
    std::vector<GuardEvent> events;
    {
      Engine engine(t, kTensors, randomkOptions(true));
      results = runSteps(engine, t.rank(), kSteps);
      events = engine.guardEvents();
    }
    EngineOptions none = randomkOptions(true);
    none.compression.spec = "none";
    Engine denseEngine(t, kTensors, none);
    const std::vector<std::vector<float>> dense = runSteps(denseEngine, t.rank(), kSteps);
    ASSERT_EQ(events.size(), 1u);
    const int64_t from = events[0].step;
    {
      std::lock_guard lock(mutex);
      tripSteps.push_back(from);
    }
    EXPECT_EQ(events[0].tensors, std::vector<std::string>{"fc.weight"});
    EXPECT_EQ(events[0].method, "randomk:0.01");
    ASSERT_GT(from, 0);
    ASSERT_LT(from, kSteps);
    for (int step = 0; step < kSteps; ++step) {
      size_t exact = 0;
      for (size_t i = 0; i < results[step].size(); ++i) exact += results[step][i] == dense[step][i];
      if (step >= from) {
        // Bitwise a dense run's exchange: the residual is dropped, not flushed into it.
        EXPECT_EQ(exact, results[step].size()) << "step " << step;
      } else {
        EXPECT_LT(exact, results[step].size() / 2) << "step " << step;
      }
    }
  });
  ASSERT_EQ(tripSteps.size(), static_cast<size_t>(kRanks));
  for (int64_t s : tripSteps) EXPECT_EQ(s, tripSteps[0]);
}

// Measuring touches no data: a guard that never acts gives bitwise the exchanges of no guard.
TEST(EngineGuard, AGuardThatDoesNotActChangesNoBit) {
  runWithTransports(TransportKind::kLoopback, 3, [&](Transport& t) {
    EngineOptions on = randomkOptions(true);
    on.compression.spec = "topk:0.1";
    EngineOptions off = on;
    off.compression.guard = false;
    std::vector<std::vector<float>> guarded;
    {
      Engine engine(t, kTensors, on);
      guarded = runSteps(engine, t.rank(), 40);
      EXPECT_TRUE(engine.guardEvents().empty());
    }
    Engine engine(t, kTensors, off);
    EXPECT_EQ(runSteps(engine, t.rank(), 40), guarded);
    // And without the guard randomk:0.01 stays compressed.
    Engine unguarded(t, kTensors, randomkOptions(false));
    runSteps(unguarded, t.rank(), 100);
    EXPECT_TRUE(unguarded.guardEvents().empty());
  });
}

// The optimizer rule: under Adam-family optimizers the sparsifiers and low-rank methods are
// dense from the end of the warm-up, on every rank, said at the start; under SGD, and for a
// quantizer under Adam, nothing changes.
TEST(EngineGuard, UnderAdamASparsifierIsDenseFromTheWarmupsEnd) {
  constexpr int kSteps = 30, kWarmup = 5;
  runWithTransports(TransportKind::kLoopback, 3, [&](Transport& t) {
    auto optionsFor = [](const std::string& spec, bool adam) {
      EngineOptions o{.schedule = ScheduleSpec::parse("wfbp"),
                      .compression = {.spec = spec, .minElements = 1000, .warmupSteps = kWarmup}};
      o.compression.adamFamily = adam;
      return o;
    };
    std::vector<std::vector<float>> underAdam, dense;
    {
      Engine engine(t, kTensors, optionsFor("topk:0.01", true));
      const std::vector<GuardEvent> atStart = engine.guardEvents();
      ASSERT_EQ(atStart.size(), 1u);
      EXPECT_EQ(atStart[0].signal, "optimizer");
      EXPECT_EQ(atStart[0].step, kWarmup);
      EXPECT_EQ(atStart[0].tensors, std::vector<std::string>{"fc.weight"});
      EXPECT_NE(atStart[0].reason.find("--compress-momentum"), std::string::npos);
      underAdam = runSteps(engine, t.rank(), kSteps);
      EXPECT_EQ(engine.guardEvents().size(), 1u);
    }
    {
      Engine engine(t, kTensors, optionsFor("none", true));
      dense = runSteps(engine, t.rank(), kSteps);
    }
    EXPECT_EQ(underAdam, dense);  // bitwise the dense exchange, warm-up included
    for (const auto& [spec, adam] : {std::pair{"topk:0.01", false}, {"onebit", true}}) {
      Engine engine(t, kTensors, optionsFor(spec, adam));
      EXPECT_NE(runSteps(engine, t.rank(), kSteps), dense) << spec;
      for (const GuardEvent& e : engine.guardEvents()) EXPECT_NE(e.signal, "optimizer") << spec;
    }
  });
}

}  // namespace
}  // namespace gradsync::testing
