// What a stage's forward and backward see, and what its updates do (pipeline/stage_optimizer.h),
// on a toy stage whose "forward" and "backward" just record the weights in the storage.
#include "pipeline/stage_optimizer.h"

#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "optim/update_rule.h"
#include "pipeline/schedule.h"

namespace gradsync {
namespace {

struct ToyStage {
  std::vector<float> weights = {1.0f, -2.0f};
  StageOptimizer optimizer;
  std::map<int64_t, std::vector<float>> forwardSaw, backwardSaw;

  explicit ToyStage(StageRule rule) : optimizer({std::span(weights)}, rule) {}
  void forward(int64_t micro, int64_t delay) {
    optimizer.beginForward(micro, delay);
    forwardSaw[micro] = weights;
    optimizer.endForward(micro);
  }
  void backward(int64_t micro) {
    optimizer.beginBackward(micro);
    backwardSaw[micro] = weights;
    optimizer.endBackward(micro);
  }
  void update(int64_t micro, std::vector<float> gradient) {
    optimizer.update({std::span<const float>(gradient)}, micro);
  }
};

const StageRule kPlain{.lr = 0.5, .momentum = 0.5};

TEST(StageOptimizer, WithoutStashTheBackwardSeesTheCurrentWeights) {
  ToyStage stage(kPlain);
  stage.forward(0, 1);
  stage.forward(1, 1);
  stage.backward(0);
  stage.update(0, {1.0f, 1.0f});  // w = (0.5, -2.5), v = (1, 1)
  stage.backward(1);
  EXPECT_EQ(stage.forwardSaw[1], (std::vector<float>{1.0f, -2.0f}));
  EXPECT_EQ(stage.backwardSaw[1], (std::vector<float>{0.5f, -2.5f}));  // inconsistent
  EXPECT_EQ(stage.weights, (std::vector<float>{0.5f, -2.5f}));
}

TEST(StageOptimizer, AStashGivesTheBackwardItsForwardsWeights) {
  StageRule rule = kPlain;
  rule.weightStash = true;
  ToyStage stage(rule);
  stage.forward(0, 1);
  stage.forward(1, 1);
  stage.backward(0);
  stage.update(0, {1.0f, 1.0f});
  stage.backward(1);
  EXPECT_EQ(stage.backwardSaw[1], (std::vector<float>{1.0f, -2.0f}));
  EXPECT_EQ(stage.weights, (std::vector<float>{0.5f, -2.5f}));  // the current weights are back
  stage.update(1, {0.0f, 0.0f});
  EXPECT_EQ(stage.optimizer.lastDelay(), 1);
  EXPECT_EQ(stage.optimizer.inFlight(), 0u);
}

TEST(StageOptimizer, LwpForwardsOnThePredictedWeights) {
  StageRule rule = kPlain;
  rule.compensation.predict = true;
  ToyStage stage(rule);
  stage.forward(0, 0);
  stage.backward(0);
  stage.update(0, {1.0f, 2.0f});  // v = (1, 2), w = (0.5, -3)
  stage.forward(1, 3);            // ŵ = w − 0.5·3·v = (−1, −6)
  EXPECT_EQ(stage.forwardSaw[1], (std::vector<float>{-1.0f, -6.0f}));
  EXPECT_EQ(stage.weights, (std::vector<float>{0.5f, -3.0f}));
  stage.backward(1);  // by default on the current weights
  EXPECT_EQ(stage.backwardSaw[1], (std::vector<float>{0.5f, -3.0f}));

  rule.compensation.predictBackward = true;
  ToyStage kept(rule);
  kept.forward(0, 0);
  kept.backward(0);
  kept.update(0, {1.0f, 2.0f});
  kept.forward(1, 3);
  kept.backward(1);
  EXPECT_EQ(kept.backwardSaw[1], (std::vector<float>{-1.0f, -6.0f}));
  EXPECT_EQ(kept.weights, (std::vector<float>{0.5f, -3.0f}));
}

// Along pb's schedule, SC's delay is the measured one, and the updates without compensation are
// plain momentum SGD's, bitwise.
TEST(StageOptimizer, MeasuresPipelineDelaysAndIsPlainSgdWithoutCompensation) {
  const PipelineShape shape{.mode = PipelineMode::kPipelined, .stages = 4};
  for (int s = 0; s < shape.stages; ++s) {
    ToyStage stage(kPlain);
    std::vector<float> reference = stage.weights;
    std::vector<float> velocity(2, 0.0f);
    uint64_t step = 0;
    for (const StageOp& op : shape.stageOps(s, 12)) {
      if (op.kind == StageOp::Kind::kForward) stage.forward(op.micro, shape.delay(s, op.micro));
      if (op.kind == StageOp::Kind::kBackward) stage.backward(op.micro);
      if (op.kind != StageOp::Kind::kUpdate) continue;
      const std::vector<float> g = {0.25f * static_cast<float>(op.micro), -1.0f};
      stage.update(op.micro, g);
      EXPECT_EQ(stage.optimizer.lastDelay(), shape.delay(s, op.micro));
      applyUpdate(UpdateRule::sgd(kPlain.lr, kPlain.momentum), reference, g, {velocity, {}},
                  ++step);
      EXPECT_EQ(stage.weights, reference);
    }
  }
}

TEST(StageOptimizer, FillDrainUpdatesOnceForTheStepsMicroBatches) {
  StageRule rule = kPlain;
  rule.compensation.spike = true;
  ToyStage stage(rule);
  for (int64_t m = 0; m < 3; ++m) stage.forward(m, 0);
  for (int64_t m = 0; m < 3; ++m) stage.backward(m);
  stage.update(2, {1.0f, 1.0f});
  EXPECT_EQ(stage.optimizer.lastDelay(), 0);
  EXPECT_EQ(stage.optimizer.inFlight(), 0u);
  EXPECT_EQ(stage.weights, (std::vector<float>{0.5f, -2.5f}));  // SC at D = 0 is plain SGD
}

TEST(StageOptimizer, AStageWithoutParametersDoesNothing) {
  StageOptimizer empty({}, kPlain);
  empty.beginForward(0, 2);
  empty.endForward(0);
  empty.beginBackward(0);
  empty.endBackward(0);
  empty.update({}, 0);
  EXPECT_EQ(empty.updates(), 1u);
}

}  // namespace
}  // namespace gradsync
