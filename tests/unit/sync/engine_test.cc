// The engine over the ring against a naive average, for every schedule, over loopback and TCP
// ranks.
#include "sync/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <thread>

#include <nlohmann/json.hpp>

#include "gradsync/error.h"
#include "gradsync/trace.h"
#include "schedule/step_planner.h"
#include "support/transports.h"

namespace gradsync::testing {
namespace {

const std::vector<TensorShape> kEngineTensors = {
    tensorShape("fc1.weight", {70, 1000}), tensorShape("fc1.bias", {3}),
    tensorShape("fc2.weight", {5, 200}), tensorShape("fc2.bias", {5})};

float engineGradient(int rank, int tensor, size_t i, int step) {
  return static_cast<float>((i % 13) + 3 * tensor + 7 * rank + step);
}

class EngineSchedules : public ::testing::TestWithParam<std::tuple<std::string, TransportKind>> {
 protected:
  ScheduleSpec schedule() const { return ScheduleSpec::parse(std::get<0>(GetParam())); }
  TransportKind kind() const { return std::get<1>(GetParam()); }
};

TEST_P(EngineSchedules, AveragesEveryTensorOverSteps) {
  constexpr int kSize = 3;
  runWithTransports(kind(), kSize, [&](Transport& t) {
    Engine engine(t, kEngineTensors, {.schedule = schedule()});
    for (int step = 0; step < 3; ++step) {
      const uint64_t bytesBefore = engine.totals().bytesSent;
      // Backward produces gradients last layer first; rank 1 uses another order to show that
      // the communication order does not depend on it.
      std::vector<int> order = {3, 2, 1, 0};
      if (t.rank() == 1) order = {1, 3, 0, 2};
      for (int tensor : order) {
        std::span<float> slot = engine.slot(tensor);
        for (size_t i = 0; i < slot.size(); ++i)
          slot[i] = engineGradient(t.rank(), tensor, i, step);
        engine.markReady(tensor);
      }
      engine.finishStep();
      for (int tensor = 0; tensor < 4; ++tensor) {
        std::span<float> slot = engine.slot(tensor);
        for (size_t i = 0; i < slot.size(); ++i) {
          float expected = 0;
          for (int r = 0; r < kSize; ++r) expected += engineGradient(r, tensor, i, step);
          ASSERT_FLOAT_EQ(slot[i], expected / kSize) << "tensor " << tensor << " i " << i;
        }
      }
      EXPECT_GT(engine.totals().bytesSent, bytesBefore);
    }
  });
}

TEST_P(EngineSchedules, UnusedParametersCountAsZero) {
  runWithTransports(kind(), 2, [&](Transport& t) {
    Engine engine(t, kEngineTensors, {.schedule = schedule()});
    for (int tensor : {3, 2, 0}) {  // fc1.bias never gets a engineGradient
      std::span<float> slot = engine.slot(tensor);
      std::fill(slot.begin(), slot.end(), 1.0f + t.rank());
      engine.markReady(tensor);
    }
    engine.finishStep();
    for (float v : engine.slot(1)) EXPECT_EQ(v, 0.0f);
    for (float v : engine.slot(0)) EXPECT_EQ(v, 1.5f);
  });
}

INSTANTIATE_TEST_SUITE_P(
    Schedules, EngineSchedules,
    ::testing::Combine(::testing::Values("fifo", "wfbp", "fusion:0.1"),
                       ::testing::Values(TransportKind::kLoopback, TransportKind::kTcp)),
    [](const auto& info) {
      std::string name = std::get<0>(info.param) + "_" + kindName(std::get<1>(info.param));
      std::replace_if(
          name.begin(), name.end(), [](char c) { return !std::isalnum(c); }, '_');
      return name;
    });

// Fills every tensor with rank- and step-dependent values and completes the step.
void runStep(Engine& engine, int rank, int step) {
  for (int tensor = 3; tensor >= 0; --tensor) {
    std::span<float> slot = engine.slot(tensor);
    for (size_t i = 0; i < slot.size(); ++i) slot[i] = engineGradient(rank, tensor, i, step) / 64;
    engine.markReady(tensor);
  }
  engine.finishStep();
}

float average(int ranks, int tensor, size_t i, int step) {
  float sum = 0;
  for (int r = 0; r < ranks; ++r) sum += engineGradient(r, tensor, i, step) / 64;
  return sum / ranks;
}

// Every time the engine and its compressors measure comes from the Clock they are given: on a
// clock that never moves, a step's communication, encoding and decoding take exactly no time,
// while on the real clock they take some.
TEST(EngineClock, StatisticsReadOnlyTheInjectedClock) {
  ManualClock frozen(Nanos{1'000'000});
  for (const Clock* clock :
       {static_cast<const Clock*>(&frozen), static_cast<const Clock*>(&SteadyClock::instance())}) {
    EngineOptions options{.schedule = ScheduleSpec::parse("wfbp"),
                          .compression = {.spec = "topk:0.1", .minElements = 500},
                          .clock = clock};
    runWithTransports(TransportKind::kLoopback, 2, [&](Transport& t) {
      Engine engine(t, kEngineTensors, options);
      for (int step = 0; step < 2; ++step) runStep(engine, t.rank(), step);
      StepStats totals = engine.totals();
      if (clock == &frozen) {
        EXPECT_EQ(totals.commSeconds, 0.0);
        EXPECT_EQ(totals.encodeSeconds, 0.0);
        EXPECT_EQ(totals.decodeSeconds, 0.0);
      } else {
        EXPECT_GT(totals.commSeconds, 0.0);
        EXPECT_GT(totals.encodeSeconds + totals.decodeSeconds, 0.0);
      }
    });
  }
}

TEST(EngineCompression, CompressesLargeTensorsAfterTheWarmUp) {
  constexpr int kSize = 3;
  EngineOptions options{.schedule = ScheduleSpec::parse("fusion:1"),
                        .compression = {.spec = "fp16", .minElements = 500, .warmupSteps = 1}};
  runWithTransports(TransportKind::kLoopback, kSize, [&](Transport& t) {
    Engine engine(t, kEngineTensors, options);
    // fp16 weights and dense biases never share a fusion bucket: the weights fuse into one
    // across the biases between them, and the biases into another.
    ASSERT_EQ(engine.layout().units.size(), 2u);
    for (const CommUnit& unit : engine.layout().units) {
      EXPECT_EQ(unit.tensors.size(), 2u);
      EXPECT_EQ(unit.tensors[0] % 2, unit.tensors[1] % 2) << "a weight and a bias fused";
    }
    for (int step = 0; step < 2; ++step) {
      const StepStats before = engine.totals();
      runStep(engine, t.rank(), step);
      const StepStats after = engine.totals();
      const uint64_t bytesSent = after.bytesSent - before.bytesSent;
      const uint64_t denseBytes = after.denseBytes - before.denseBytes;
      for (int tensor = 0; tensor < 4; ++tensor) {
        bool compressed = step >= 1 && (tensor == 0 || tensor == 2);
        std::span<float> slot = engine.slot(tensor);
        for (size_t i = 0; i < slot.size(); ++i) {
          float expected = average(kSize, tensor, i, step);
          if (compressed) {
            ASSERT_NEAR(slot[i], expected, 2e-3f * std::fabs(expected)) << tensor << " " << i;
          } else {
            ASSERT_FLOAT_EQ(slot[i], expected) << "step " << step << " tensor " << tensor;
          }
        }
      }
      // Dense: what the ring sent is what a dense ring sends (2(P-1)/P of the floats, plus
      // per-block rounding); fp16 halves the weights' share.
      double ratio = static_cast<double>(bytesSent) / static_cast<double>(denseBytes);
      if (step == 0) {
        EXPECT_NEAR(ratio, 1.0, 0.01);
      } else {
        EXPECT_NEAR(ratio, 0.5, 0.01);
      }
    }
  });
}

// --compress-warmup-codec int8: the warm-up's steps send what is compressed after them through
// the int8 ring (bitwise allreduceInt8's average of the same gradients, at about a third of the
// float32 bytes on the weights), the dense tensors in float32; after the warm-up every bit is the
// run's without the codec (the compressor saw nothing of the warm-up either way).
TEST(EngineCompression, AWarmupCodecSendsTheWarmupInInt8) {
  constexpr int kSize = 3, kWarmup = 2;
  auto optionsFor = [](const std::string& codec) {
    EngineOptions o{
        .schedule = ScheduleSpec::parse("wfbp"),
        .compression = {.spec = "topk:0.1", .minElements = 500, .warmupSteps = kWarmup}};
    o.compression.warmupCodec = codec;
    return o;
  };
  runWithTransports(TransportKind::kLoopback, kSize, [&](Transport& t) {
    Engine plain(t, kEngineTensors, optionsFor("none"));
    Engine int8(t, kEngineTensors, optionsFor("int8"));
    for (int step = 0; step < kWarmup + 2; ++step) {
      const StepStats before = int8.totals();
      runStep(plain, t.rank(), step);
      runStep(int8, t.rank(), step);
      const StepStats after = int8.totals();
      for (int tensor = 0; tensor < 4; ++tensor) {
        std::span<const float> got = int8.slot(tensor), reference = plain.slot(tensor);
        if (step >= kWarmup || tensor % 2 == 1) {  // compressed alike, or dense biases
          ASSERT_TRUE(std::equal(got.begin(), got.end(), reference.begin())) << step << tensor;
          continue;
        }
        std::vector<float> expected(got.size());
        for (size_t i = 0; i < expected.size(); ++i)
          expected[i] = engineGradient(t.rank(), tensor, i, step) / 64;
        allreduceInt8(t, expected, ReduceOp::kSum, {.tag = 999});
        for (float& v : expected) v *= 1.0f / kSize;  // as the exchange scales
        for (size_t i = 0; i < got.size(); ++i) {
          ASSERT_EQ(got[i], expected[i]) << step << " " << tensor << " " << i;
        }
        EXPECT_FALSE(std::equal(got.begin(), got.end(), reference.begin()));
      }
      if (step < kWarmup) {
        const double ratio = static_cast<double>(after.bytesSent - before.bytesSent) /
                             static_cast<double>(after.denseBytes - before.denseBytes);
        EXPECT_NEAR(ratio, 0.26, 0.03) << step;  // (1 byte + a scale per chunk) / 4 bytes
      }
    }
  });
  EXPECT_THROW(
      runWithTransports(TransportKind::kLoopback, 1,
                        [&](Transport& t) { Engine(t, kEngineTensors, optionsFor("topk:0.5")); }),
      ConfigError);
}

// The engine carries out exactly the operations of its planner, in the planner's order (the
// simulator runs the same StepPlanner): read back from the engine's trace, every engineGradient
// ready at once, for the ring's fixed order and sharded's reduce-scatters then allgathers.
TEST(EngineOrder, RunsThePlannersOperationsInOrder) {
  for (const bool sharded : {false, true}) {
    EngineOptions options{.schedule = ScheduleSpec::parse("wfbp"),
                          .update = UpdateRule::sgd(0.1),
                          .sharded = sharded};
    const GradientLayout layout = planLayout(kEngineTensors, options.schedule);
    StepPlanner planner(layout, options.schedule,
                        sharded ? StepPlanner::Route::kSharded : StepPlanner::Route::kRing);
    for (size_t u = 0; u < layout.units.size(); ++u) planner.unitReady(u);
    std::vector<std::string> expected;
    while (std::optional<PlannedOp> op = planner.next()) {
      expected.push_back(std::string(toString(op->kind)) + " " +
                         kEngineTensors[layout.units[op->unit].tensors.front()].name);
      planner.done(*op);
    }
    runWithTransports(TransportKind::kLoopback, 2, [&](Transport& t) {
      std::vector<std::vector<float>> parameters;
      for (const TensorShape& shape : kEngineTensors) parameters.emplace_back(shape.elements, 0.5f);
      TraceRecorder trace(t.rank(), {.first = 0, .last = 0}, SteadyClock::instance());
      Engine engine(t, kEngineTensors, options, {parameters.begin(), parameters.end()});
      engine.setTrace(&trace);
      trace.setStep(0);
      runStep(engine, t.rank(), 0);
      trace.endStep();
      std::vector<std::string> ran;
      for (const auto& event : nlohmann::json::parse(trace.serialize())) {
        if (event.value("tid", -1) != kCommLane || event.value("ph", "") != "X" ||
            event.value("cat", "") == "queue")
          continue;
        ran.push_back(event["cat"].get<std::string>() + " " + event["name"].get<std::string>());
      }
      EXPECT_EQ(ran, expected) << (sharded ? "sharded" : "ring");
    });
  }
}

TEST(EngineCompression, BadSpecsFailAtConstruction) {
  runWithTransports(TransportKind::kLoopback, 1, [&](Transport& t) {
    EXPECT_THROW(Engine(t, kEngineTensors, {.compression = {.spec = "zip"}}), ConfigError);
    EXPECT_THROW(Engine(t, kEngineTensors, {.compression = {.overrides = {"fc1*"}}}), ConfigError);
  });
}

// p3 without slice= over a link the transport was told takes that link's slice (p3SliceForLink:
// 49 x 20 us x 1e8 B/s x 3 ranks / 4 = 73,500 elements, so fc1.weight's 70,000 in one slice);
// slice= and an untold link keep theirs (40,000: 40 rows of 1,000, two slices).
TEST(EngineP3, TakesTheSliceOfALinkItWasTold) {
  auto slicesOfFc1 = [](const Engine& engine) {
    return std::count_if(engine.layout().units.begin(), engine.layout().units.end(),
                         [](const CommUnit& unit) { return unit.tensors == std::vector<int>{0}; });
  };
  const TransportOptions told{.bandwidthBytesPerSec = 1e8,
                              .latency = std::chrono::microseconds(20)};
  for (const auto& [schedule, options, slices] :
       {std::tuple{"p3", told, 1}, std::tuple{"p3:slice=40000", told, 2},
        std::tuple{"p3", TransportOptions{}, 2}}) {
    runWithTransports(
        TransportKind::kLoopback, 3,
        [&](Transport& t) {
          std::vector<std::vector<float>> parameters;  // p3 updates them in the engine
          for (const TensorShape& shape : kEngineTensors) parameters.emplace_back(shape.elements);
          Engine engine(t, kEngineTensors, {.schedule = ScheduleSpec::parse(schedule)},
                        {parameters.begin(), parameters.end()});
          EXPECT_EQ(slicesOfFc1(engine), slices) << schedule;
        },
        options);
  }
}

TEST(EngineErrors, LostPeerIsRethrownOnTheTrainingThread) {
  TransportOptions options;
  options.timeout = std::chrono::milliseconds(5000);
  runWithTransports(
      TransportKind::kTcp, 2,
      [&](Transport& t) {
        if (t.rank() == 1) return;  // rank 1 leaves before the step
        Engine engine(t, kEngineTensors, {.schedule = ScheduleSpec::parse("wfbp")});
        for (int tensor = 3; tensor >= 0; --tensor) engine.markReady(tensor);
        try {
          engine.finishStep();
          FAIL() << "expected the lost peer to surface";
        } catch (const PeerLostError& e) {
          EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
        }
      },
      options);
}

}  // namespace
}  // namespace gradsync::testing
