// Adam's moments in update mode (p3, sharded) as Engine::optimizerState: whole on every rank,
// against a naive Adam; carried into a fresh engine, they continue a run bit for bit; they map
// onto another number of ranks; and the older state format that kept them per rank still loads.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>

#include "common/state_bytes.h"
#include "schedule/schedule.h"
#include "support/transports.h"
#include "sync/engine.h"

namespace gradsync::testing {
namespace {

// Sizes 0, 1, a non-divisible matrix and a larger tensor.
const std::vector<TensorShape> kTensors = {
    tensorShape("conv.weight", {7, 3, 3, 3}), tensorShape("conv.bias", {1}),
    tensorShape("empty", {0}), tensorShape("fc.weight", {10, 1001}), tensorShape("fc.bias", {10})};
const UpdateRule kAdamW{.kind = UpdateRule::Kind::kAdamW, .lr = 0.01, .weightDecay = 0.01};

float gradientOf(int rank, size_t tensor, size_t i, int step) {
  return std::sin(static_cast<float>(i + 31 * tensor + 7 * rank + 13 * step)) / 4;
}

using Tensors = std::vector<std::vector<float>>;

Tensors initialParameters() {
  Tensors parameters;
  for (size_t t = 0; t < kTensors.size(); ++t) {
    parameters.emplace_back(kTensors[t].elements);
    for (size_t i = 0; i < kTensors[t].elements; ++i) {
      parameters[t][i] = std::cos(static_cast<float>(i + 3 * t));
    }
  }
  return parameters;
}

size_t totalElements() {
  size_t n = 0;
  for (const TensorShape& t : kTensors) n += t.elements;
  return n;
}

EngineOptions adamOptions(const std::string& schedule) {
  return {.schedule = ScheduleSpec::parse(schedule == "sharded" ? "wfbp" : schedule),
          .update = kAdamW,
          .sharded = schedule == "sharded"};
}

// Steps [first, first + steps) of one rank: every tensor's gradient (that of step - shift), then
// the step's end.
void train(Engine& engine, int rank, int first, int steps, int shift = 0) {
  for (int step = first; step < first + steps; ++step) {
    for (size_t t = 0; t < kTensors.size(); ++t) engine.waitFor(static_cast<int>(t));
    for (int t = static_cast<int>(kTensors.size()) - 1; t >= 0; --t) {
      std::span<float> slot = engine.slot(t);
      for (size_t i = 0; i < slot.size(); ++i) slot[i] = gradientOf(rank, t, i, step - shift);
      engine.markReady(t);
    }
    engine.endBackward();
  }
  engine.drain();
}

// AdamW on the exact average, in doubles: the moments after `steps` steps, first then second.
std::vector<float> naiveMoments(int ranks, int steps) {
  std::vector<float> first, second;
  for (size_t t = 0; t < kTensors.size(); ++t) {
    for (size_t i = 0; i < kTensors[t].elements; ++i) {
      double m = 0, v = 0;
      for (int step = 0; step < steps; ++step) {
        double g = 0;
        for (int r = 0; r < ranks; ++r) g += gradientOf(r, t, i, step);
        g /= ranks;
        m = kAdamW.beta1 * m + (1 - kAdamW.beta1) * g;
        v = kAdamW.beta2 * v + (1 - kAdamW.beta2) * g * g;
      }
      first.push_back(static_cast<float>(m));
      second.push_back(static_cast<float>(v));
    }
  }
  first.insert(first.end(), second.begin(), second.end());
  return first;
}

struct RunEnd {
  Tensors parameters;        // rank 0's
  std::vector<float> state;  // rank 0's optimizerState()
  uint64_t stateSteps = 0;   // rank 0's optimizerSteps()
};

// How a run starts from a state that counts its own steps (Engine::setOptimizerState).
struct Counted {
  std::optional<uint64_t> stateSteps;  // none: the job's count
  bool loadFirst = false;  // the state before setStep (the trainer's resume), or after it
};

// `steps` steps on `ranks` ranks from `from` (its parameters and, unless empty, its state, at
// step `at`, of the job's count of steps or `counted`'s); every rank's state must be rank 0's.
// With `counted`, the gradients are those of the steps from its count on (from 0 if it has none):
// the run the state began.
// The rule's lr is scaled by `lrScale`.
RunEnd run(const std::string& schedule, int ranks, const RunEnd& from, int at, int steps,
           std::optional<Counted> counted = std::nullopt, double lrScale = 1.0) {
  std::vector<RunEnd> ends(static_cast<size_t>(ranks));
  runWithTransports(TransportKind::kLoopback, ranks, [&](Transport& transport) {
    Tensors parameters = from.parameters;
    std::vector<std::span<float>> spans(parameters.begin(), parameters.end());
    EngineOptions options = adamOptions(schedule);
    options.update.lr *= lrScale;
    Engine engine(transport, kTensors, options, spans);
    const std::optional<uint64_t> count = counted ? counted->stateSteps : std::nullopt;
    if (counted && counted->loadFirst) engine.setOptimizerState(from.state, count);
    engine.setStep(static_cast<uint64_t>(at));
    if (!from.state.empty() && !(counted && counted->loadFirst)) {
      engine.setOptimizerState(from.state, count);
    }
    const int shift = counted ? at - static_cast<int>(count.value_or(0)) : 0;
    train(engine, transport.rank(), at, steps, shift);
    ends[static_cast<size_t>(transport.rank())] = {parameters, engine.optimizerState(),
                                                   engine.optimizerSteps()};
  });
  for (int r = 1; r < ranks; ++r) {
    EXPECT_EQ(ends[static_cast<size_t>(r)].state, ends[0].state) << "rank " << r;
  }
  return ends[0];
}

void expectClose(const std::vector<float>& actual, const std::vector<float>& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    ASSERT_NEAR(actual[i], expected[i], 1e-6 + 1e-4 * std::fabs(expected[i])) << i;
  }
}

class EngineOptimizerState : public ::testing::TestWithParam<std::string> {};

TEST_P(EngineOptimizerState, IsTheWholeMomentsOnEveryRank) {
  const RunEnd end = run(GetParam(), 3, {initialParameters(), {}}, 0, 3);
  EXPECT_EQ(end.state.size(), 2 * totalElements());
  expectClose(end.state, naiveMoments(3, 3));
}

TEST_P(EngineOptimizerState, CarriedIntoAFreshEngineContinuesTheRunBitForBit) {
  const RunEnd whole = run(GetParam(), 3, {initialParameters(), {}}, 0, 4);
  const RunEnd half = run(GetParam(), 3, {initialParameters(), {}}, 0, 2);
  const RunEnd resumed = run(GetParam(), 3, half, 2, 2);
  EXPECT_EQ(resumed.parameters, whole.parameters);
  EXPECT_EQ(resumed.state, whole.state);
  // Without the moments the run is another one: the test can fail.
  const RunEnd forgotten = run(GetParam(), 3, {half.parameters, {}}, 2, 2);
  EXPECT_NE(forgotten.parameters, whole.parameters);
}

// Moments of fewer steps than the job's (sharded's, which restart at zero in each new elastic
// round) with their own count: the engine at step 100 goes on as the run they began did, whether
// setStep comes first or last: from zero as a fresh Adam whose lr ramps up over its first 10
// steps (UpdateRule::restartRamp), from 12 steps as that run's steps 13 and 14.
TEST_P(EngineOptimizerState, AStateWithItsOwnCountOfStepsGoesOnAsTheRunItBegan) {
  EXPECT_EQ(kAdamW.restartRamp(1), 0.1);
  EXPECT_EQ(kAdamW.restartRamp(10), 1.0);
  RunEnd ramped{initialParameters(), {}};  // one engine per step, at the job's count
  for (uint64_t k = 1; k <= 2; ++k) {
    ramped = run(GetParam(), 3, ramped, static_cast<int>(k - 1), 1, Counted{k - 1},
                 kAdamW.restartRamp(k));
  }
  const RunEnd whole = run(GetParam(), 3, {initialParameters(), {}}, 0, 14);
  const RunEnd twelve = run(GetParam(), 3, {initialParameters(), {}}, 0, 12);
  const RunEnd zeros{initialParameters(), std::vector<float>(2 * totalElements(), 0.0f)};
  for (bool loadFirst : {false, true}) {
    const RunEnd late = run(GetParam(), 3, zeros, 100, 2, Counted{0, loadFirst});
    EXPECT_EQ(late.parameters, ramped.parameters) << "loadFirst " << loadFirst;
    EXPECT_EQ(late.state, ramped.state);
    EXPECT_EQ(late.stateSteps, 2u);
    const RunEnd onward = run(GetParam(), 3, twelve, 100, 2, Counted{12, loadFirst});
    EXPECT_EQ(onward.parameters, whole.parameters) << "loadFirst " << loadFirst;
    EXPECT_EQ(onward.stateSteps, 14u);
  }
  // Without a count, zero moments at step 100 are of the job's 100 steps: a bias correction of
  // 1 - 0.999^101 where a fresh Adam has 1 - 0.999, so steps about 3x as long, and no ramp.
  const RunEnd jobs = run(GetParam(), 3, zeros, 100, 2, Counted{});
  EXPECT_NE(jobs.parameters, ramped.parameters);
  EXPECT_EQ(jobs.stateSteps, 102u);
}

// 3 ranks' moments onto 2 and 4 (sharded: other blocks per rank): the same whole state, and the
// next steps follow the new ranks' average from it exactly as one engine of them would.
TEST_P(EngineOptimizerState, MapsOntoAnotherNumberOfRanks) {
  const RunEnd three = run(GetParam(), 3, {initialParameters(), {}}, 0, 2);
  for (int ranks : {2, 4}) {
    const RunEnd same = run(GetParam(), ranks, three, 2, 0);
    EXPECT_EQ(same.state, three.state) << ranks << " ranks";
    const RunEnd onward = run(GetParam(), ranks, three, 2, 1);
    const RunEnd p3 = run("p3", ranks, three, 2, 1);
    expectClose(onward.state, p3.state);
  }
}

INSTANTIATE_TEST_SUITE_P(Schedules, EngineOptimizerState, ::testing::Values("p3", "sharded"));

// The state as gradsync wrote it before format 2 (p3): the moments, in layout order, in the
// engine's own bytes. A run resumed from them continues as before.
TEST(EngineOptimizerStateFormat, TheOlderFormatWithTheMomentsStillLoads) {
  const RunEnd whole = run("p3", 2, {initialParameters(), {}}, 0, 4);
  const RunEnd half = run("p3", 2, {initialParameters(), {}}, 0, 2);
  runWithTransports(TransportKind::kLoopback, 2, [&](Transport& transport) {
    Tensors parameters = half.parameters;
    std::vector<std::span<float>> spans(parameters.begin(), parameters.end());
    Engine engine(transport, kTensors, adamOptions("p3"), spans);
    const size_t n = totalElements();
    const std::span<const float> state(half.state);
    StateWriter legacy;
    legacy.write(uint64_t{1});
    legacy.write(uint64_t{engine.layout().units.size()});
    legacy.write(tensorsToLayout(engine.layout(), kTensors, state.first(n)));
    legacy.write(tensorsToLayout(engine.layout(), kTensors, state.subspan(n)));
    const std::vector<uint8_t> bytes = legacy.take();
    EXPECT_EQ(Engine::stateFormat(bytes), 1u);
    EXPECT_EQ(Engine::stateFormat(engine.saveState()), 2u);
    EXPECT_EQ(Engine::stateFormat({}), 0u);
    engine.setStep(2);
    engine.loadState(bytes);
    train(engine, transport.rank(), 2, 2);
    EXPECT_EQ(parameters, whole.parameters) << "rank " << transport.rank();
  });
}

}  // namespace
}  // namespace gradsync::testing
