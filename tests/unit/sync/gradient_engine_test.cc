// The engine against a naive average, for every schedule, over loopback and TCP ranks.
#include "sync/gradient_engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <thread>

#include "gradsync/error.h"
#include "support/transports.h"

namespace gradsync::testing {
namespace {

const std::vector<TensorInfo> kTensors = {
    {"fc1.weight", 70000}, {"fc1.bias", 3}, {"fc2.weight", 1000}, {"fc2.bias", 5}};

float gradient(int rank, int tensor, size_t i, int step) {
  return static_cast<float>((i % 13) + 3 * tensor + 7 * rank + step);
}

class Engine : public ::testing::TestWithParam<std::tuple<std::string, TransportKind>> {
 protected:
  ScheduleSpec schedule() const { return ScheduleSpec::parse(std::get<0>(GetParam())); }
  TransportKind kind() const { return std::get<1>(GetParam()); }
};

TEST_P(Engine, AveragesEveryTensorOverSteps) {
  constexpr int kSize = 3;
  runWithTransports(kind(), kSize, [&](Transport& t) {
    GradientEngine engine(t, kTensors, schedule());
    for (int step = 0; step < 3; ++step) {
      // Backward produces gradients last layer first; rank 1 uses another order to show that
      // the communication order does not depend on it.
      std::vector<int> order = {3, 2, 1, 0};
      if (t.rank() == 1) order = {1, 3, 0, 2};
      for (int tensor : order) {
        std::span<float> slot = engine.slot(tensor);
        for (size_t i = 0; i < slot.size(); ++i) slot[i] = gradient(t.rank(), tensor, i, step);
        engine.markReady(tensor);
      }
      engine.finishStep();
      for (int tensor = 0; tensor < 4; ++tensor) {
        std::span<float> slot = engine.slot(tensor);
        for (size_t i = 0; i < slot.size(); ++i) {
          float expected = 0;
          for (int r = 0; r < kSize; ++r) expected += gradient(r, tensor, i, step);
          ASSERT_FLOAT_EQ(slot[i], expected / kSize) << "tensor " << tensor << " i " << i;
        }
      }
      EXPECT_GT(engine.lastStep().bytesSent, 0u);
    }
  });
}

TEST_P(Engine, UnusedParametersCountAsZero) {
  runWithTransports(kind(), 2, [&](Transport& t) {
    GradientEngine engine(t, kTensors, schedule());
    for (int tensor : {3, 2, 0}) {  // fc1.bias never gets a gradient
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
    Schedules, Engine,
    ::testing::Combine(::testing::Values("fifo", "wfbp", "fusion:0.1"),
                       ::testing::Values(TransportKind::kLoopback, TransportKind::kTcp)),
    [](const auto& info) {
      std::string name = std::get<0>(info.param) + "_" + kindName(std::get<1>(info.param));
      std::replace_if(
          name.begin(), name.end(), [](char c) { return !std::isalnum(c); }, '_');
      return name;
    });

TEST(EngineErrors, LostPeerIsRethrownOnTheTrainingThread) {
  TransportOptions options;
  options.timeout = std::chrono::milliseconds(5000);
  runWithTransports(
      TransportKind::kTcp, 2,
      [&](Transport& t) {
        if (t.rank() == 1) return;  // rank 1 leaves before the step
        GradientEngine engine(t, kTensors, ScheduleSpec::parse("wfbp"));
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
