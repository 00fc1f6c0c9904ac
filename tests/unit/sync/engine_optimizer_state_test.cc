// Adam's moments in update mode (p3, sharded) as Engine::optimizerState: whole on every rank,
// against a naive Adam; carried into a fresh engine, they continue a run bit for bit; they map
// onto another number of ranks; and the older state format that kept them per rank still loads.
#include <gtest/gtest.h>

#include <cmath>

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

// Steps [first, first + steps) of one rank: every tensor's gradient, then the step's end.
void train(Engine& engine, int rank, int first, int steps) {
  for (int step = first; step < first + steps; ++step) {
    for (size_t t = 0; t < kTensors.size(); ++t) engine.waitFor(static_cast<int>(t));
    for (int t = static_cast<int>(kTensors.size()) - 1; t >= 0; --t) {
      std::span<float> slot = engine.slot(t);
      for (size_t i = 0; i < slot.size(); ++i) slot[i] = gradientOf(rank, t, i, step);
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
};

// `steps` steps on `ranks` ranks from `from` (its parameters and, unless empty, its state, at
// step `at`); every rank's state must be rank 0's.
RunEnd run(const std::string& schedule, int ranks, const RunEnd& from, int at, int steps) {
  std::vector<RunEnd> ends(static_cast<size_t>(ranks));
  runWithTransports(TransportKind::kLoopback, ranks, [&](Transport& transport) {
    Tensors parameters = from.parameters;
    std::vector<std::span<float>> spans(parameters.begin(), parameters.end());
    Engine engine(transport, kTensors, adamOptions(schedule), spans);
    engine.setStep(static_cast<uint64_t>(at));
    if (!from.state.empty()) engine.setOptimizerState(from.state);
    train(engine, transport.rank(), at, steps);
    ends[static_cast<size_t>(transport.rank())] = {parameters, engine.optimizerState()};
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
