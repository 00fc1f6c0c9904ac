// The pipeline's operation lists (pipeline/schedule.h) and stage boundaries (pipeline/balance.h)
// against hand-written lists and brute force.
#include "pipeline/schedule.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

#include "gradsync/error.h"
#include "pipeline/balance.h"

namespace gradsync {
namespace {

using Kind = StageOp::Kind;
const StageOp F(int64_t i) {
  return {Kind::kForward, i};
}
const StageOp B(int64_t i) {
  return {Kind::kBackward, i};
}
const StageOp U(int64_t i) {
  return {Kind::kUpdate, i};
}

TEST(PipelineSchedule, PipelinedBackpropOfThreeStages) {
  const PipelineShape shape{.mode = PipelineMode::kPipelined, .stages = 3};
  EXPECT_EQ(shape.slots(2), 6);
  // Stage 0: forwards at ticks 0 and 1, backwards at ticks 4 and 5 (2(S - 1) later).
  EXPECT_EQ(shape.opsAt(0, 0, 2), (std::vector<StageOp>{F(0)}));
  EXPECT_EQ(shape.opsAt(0, 2, 2), (std::vector<StageOp>{}));
  EXPECT_EQ(shape.stageOps(0, 2), (std::vector<StageOp>{F(0), F(1), B(0), U(0), B(1), U(1)}));
  EXPECT_EQ(shape.stageOps(1, 2), (std::vector<StageOp>{F(0), F(1), B(0), U(0), B(1), U(1)}));
  // The last stage's forward and backward of a micro-batch share a tick.
  EXPECT_EQ(shape.opsAt(2, 2, 2), (std::vector<StageOp>{F(0), B(0), U(0)}));
  EXPECT_EQ(shape.opsAt(1, 3, 4), (std::vector<StageOp>{F(2), B(0), U(0)}));
  EXPECT_EQ(shape.nominalDelay(0), 4);
  EXPECT_EQ(shape.nominalDelay(2), 0);
}

TEST(PipelineSchedule, FillDrainRunsTheStepsMicroBatchesThenUpdates) {
  const PipelineShape shape{.mode = PipelineMode::kFillDrain, .stages = 4, .microBatches = 3};
  EXPECT_EQ(shape.slots(5), 5);
  EXPECT_EQ(shape.opsAt(2, 1, 5), (std::vector<StageOp>{F(3), F(4), F(5), B(3), B(4), B(5), U(5)}));
  EXPECT_EQ(shape.opsAt(2, 5, 5), (std::vector<StageOp>{}));
  EXPECT_EQ(shape.delay(0, 7), 0);
}

// Counting updates between each micro-batch's forward and its update along the stage's own list
// gives delay(); in the steady state 2(S - 1 - s).
TEST(PipelineSchedule, DelaysAreTwiceTheStagesAfter) {
  const PipelineShape shape{.mode = PipelineMode::kPipelined, .stages = 5};
  const int64_t steps = 30;
  for (int s = 0; s < shape.stages; ++s) {
    std::map<int64_t, int64_t> versionAt;
    int64_t updates = 0;
    for (const StageOp& op : shape.stageOps(s, steps)) {
      if (op.kind == Kind::kForward) versionAt[op.micro] = updates;
      if (op.kind != Kind::kUpdate) continue;
      EXPECT_EQ(updates - versionAt.at(op.micro), shape.delay(s, op.micro))
          << "stage " << s << " micro-batch " << op.micro;
      ++updates;
    }
    EXPECT_EQ(updates, steps);
    EXPECT_EQ(shape.delay(s, 20), 2 * (shape.stages - 1 - s));
  }
}

// Every operation once, each stage's in its own order, and no operation before its input exists.
TEST(PipelineSchedule, InterleavingRespectsEveryDependency) {
  for (const PipelineShape& shape :
       {PipelineShape{.mode = PipelineMode::kPipelined, .stages = 4},
        PipelineShape{.mode = PipelineMode::kFillDrain, .stages = 3, .microBatches = 4},
        PipelineShape{.mode = PipelineMode::kPipelined, .stages = 1}}) {
    const int64_t steps = 7;
    std::vector<std::vector<StageOp>> seen(shape.stages);
    std::map<std::tuple<int, Kind, int64_t>, size_t> when;
    size_t clock = 0;
    runInterleaved(shape, steps, [&](int stage, const StageOp& op) {
      seen[stage].push_back(op);
      when[{stage, op.kind, op.micro}] = clock++;
    });
    for (int s = 0; s < shape.stages; ++s) {
      EXPECT_EQ(seen[s], shape.stageOps(s, steps)) << shape.describe() << ", stage " << s;
      for (const StageOp& op : seen[s]) {
        const size_t at = when.at({s, op.kind, op.micro});
        if (op.kind == Kind::kForward && s > 0) {
          EXPECT_LT(when.at({s - 1, Kind::kForward, op.micro}), at);
        }
        if (op.kind == Kind::kBackward && s + 1 < shape.stages) {
          EXPECT_LT(when.at({s + 1, Kind::kBackward, op.micro}), at);
        }
      }
    }
  }
}

TEST(PipelineSchedule, ParsesModes) {
  EXPECT_EQ(parsePipelineMode("pb"), PipelineMode::kPipelined);
  EXPECT_EQ(parsePipelineMode("fill-drain"), PipelineMode::kFillDrain);
  EXPECT_THROW(parsePipelineMode("gpipe"), ConfigError);
}

// The slowest stage of every contiguous split, by enumeration.
double bruteForceBest(const std::vector<double>& costs, int stages) {
  const int layers = static_cast<int>(costs.size());
  double best = 1e300;
  // Cut positions as a bit mask over the layers - 1 gaps.
  for (unsigned mask = 0; mask < (1u << (layers - 1)); ++mask) {
    if (__builtin_popcount(mask) != stages - 1) continue;
    std::vector<int> split;
    int count = 1;
    for (int gap = 0; gap < layers - 1; ++gap) {
      if (mask & (1u << gap)) {
        split.push_back(count);
        count = 1;
      } else {
        ++count;
      }
    }
    split.push_back(count);
    best = std::min(best, slowestStage(costs, split));
  }
  return best;
}

TEST(StageBalance, MatchesBruteForceOnRandomCosts) {
  std::mt19937 random(7);
  std::uniform_real_distribution<double> cost(0.0, 10.0);
  for (int trial = 0; trial < 200; ++trial) {
    const int layers = 1 + static_cast<int>(random() % 10);
    const int stages = 1 + static_cast<int>(random() % layers);
    std::vector<double> costs(layers);
    for (double& c : costs) c = trial % 5 == 0 ? 1.0 : cost(random);  // ties too
    const std::vector<int> split = balanceStages(costs, stages);
    ASSERT_EQ(static_cast<int>(split.size()), stages);
    int sum = 0;
    for (int count : split) {
      EXPECT_GE(count, 1);
      sum += count;
    }
    EXPECT_EQ(sum, layers);
    EXPECT_DOUBLE_EQ(slowestStage(costs, split), bruteForceBest(costs, stages))
        << layers << " layers, " << stages << " stages";
  }
}

TEST(StageBalance, HandCasesAndRefusals) {
  const std::vector<double> costs = {1, 1, 1, 6, 1, 1, 1};
  EXPECT_EQ(balanceStages(costs, 3), (std::vector<int>{3, 1, 3}));
  EXPECT_EQ(balanceStages(costs, 1), (std::vector<int>{7}));
  EXPECT_THROW(balanceStages(costs, 8), ConfigError);
  const std::vector<double> negative = {1, -1};
  EXPECT_THROW(balanceStages(negative, 2), ConfigError);
}

TEST(StageBalance, ParsesHandGivenSplits) {
  EXPECT_EQ(parseStageLayers("3,4,2,2", 11, 4), (std::vector<int>{3, 4, 2, 2}));
  EXPECT_EQ(parseStageLayers("5", 5, 1), (std::vector<int>{5}));
  for (const char* bad : {"3,4,2", "3,4,2,3", "3,0,4,4", "3,x,4,4", "3,,4,4", ""}) {
    EXPECT_THROW(parseStageLayers(bad, 11, 4), ConfigError) << bad;
  }
}

}  // namespace
}  // namespace gradsync
