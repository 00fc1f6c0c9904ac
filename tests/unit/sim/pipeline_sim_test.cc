// The pipeline's timeline (sim/pipeline_sim.h) against closed forms: fill-drain's bubble, pb's
// steady state, the hops, the slowest stage.
#include "sim/pipeline_sim.h"

#include <gtest/gtest.h>

#include "gradsync/error.h"

namespace gradsync::sim {
namespace {

PipelineSimOptions equalStages(PipelineMode mode, int stages, int micro, int64_t steps,
                               PipelineStageCosts costs) {
  PipelineSimOptions o;
  o.shape = {.mode = mode, .stages = stages, .microBatches = micro};
  o.stages.assign(stages, costs);
  o.steps = steps;
  return o;
}

// GPipe's bubble: a step is (M + S − 1)(F + B) plus the update, busy M(F + B) + U per stage.
TEST(PipelineSim, FillDrainHasTheGpipeBubble) {
  for (int stages : {1, 2, 4, 7}) {
    for (int micro : {1, 3, 8}) {
      const PipelineStageCosts c{.forwardSeconds = 1, .backwardSeconds = 2, .updateSeconds = 0};
      const auto r = simulatePipeline(equalStages(PipelineMode::kFillDrain, stages, micro, 1, c));
      EXPECT_DOUBLE_EQ(r.makespanSeconds, (micro + stages - 1) * 3.0) << stages << "x" << micro;
      EXPECT_DOUBLE_EQ(r.utilisation, static_cast<double>(micro) / (micro + stages - 1));
    }
  }
}

// Each step drains: N steps take N times one step, updates included.
TEST(PipelineSim, FillDrainStepsAddUp) {
  const PipelineStageCosts c{.forwardSeconds = 1, .backwardSeconds = 2, .updateSeconds = 0.5};
  const auto one = simulatePipeline(equalStages(PipelineMode::kFillDrain, 4, 4, 1, c));
  const auto five = simulatePipeline(equalStages(PipelineMode::kFillDrain, 4, 4, 5, c));
  EXPECT_DOUBLE_EQ(one.makespanSeconds, 7 * 3.0 + 0.5);
  EXPECT_DOUBLE_EQ(five.makespanSeconds, 5 * one.makespanSeconds);
}

// One stage: no pipeline, F + B + U per step.
TEST(PipelineSim, OneStagePbIsSequential) {
  const PipelineStageCosts c{.forwardSeconds = 1, .backwardSeconds = 2, .updateSeconds = 0.25};
  const auto r = simulatePipeline(equalStages(PipelineMode::kPipelined, 1, 1, 10, c));
  EXPECT_DOUBLE_EQ(r.makespanSeconds, 10 * 3.25);
  EXPECT_DOUBLE_EQ(r.utilisation, 1.0);
}

// pb's steady state: each further step costs one stage's F + B + U, whatever S, so the
// utilisation tends to 1; fill and drain cost a constant.
TEST(PipelineSim, PbSteadyStateKeepsEveryStageBusy) {
  const PipelineStageCosts c{.forwardSeconds = 1, .backwardSeconds = 2, .updateSeconds = 0.5};
  for (int stages : {2, 4, 8}) {
    const auto a = simulatePipeline(equalStages(PipelineMode::kPipelined, stages, 1, 100, c));
    const auto b = simulatePipeline(equalStages(PipelineMode::kPipelined, stages, 1, 200, c));
    EXPECT_NEAR(b.makespanSeconds - a.makespanSeconds, 100 * 3.5, 1e-9) << stages;
    EXPECT_GT(b.utilisation, a.utilisation);
    // Fill and drain: at most 2(S − 1) slots beyond the steady state.
    EXPECT_LE(a.makespanSeconds, (100 + 2 * (stages - 1)) * 3.5 + 1e-9);
    EXPECT_GT(b.utilisation, 200.0 / (200 + 2 * (stages - 1)) - 1e-12);
  }
}

// The slowest stage sets pb's pace; the others wait for it.
TEST(PipelineSim, PbRunsAtTheSlowestStagesPace) {
  PipelineSimOptions o = equalStages(PipelineMode::kPipelined, 4, 1, 100, {1, 1, 0});
  o.stages[2] = {.forwardSeconds = 2, .backwardSeconds = 3, .updateSeconds = 1};
  const auto a = simulatePipeline(o);
  o.steps = 200;
  const auto b = simulatePipeline(o);
  EXPECT_NEAR(b.makespanSeconds - a.makespanSeconds, 100 * 6.0, 1e-9);
  EXPECT_NEAR(b.busySeconds[0], 200 * 2.0, 1e-9);
  EXPECT_NEAR(b.busySeconds[2], 200 * 6.0, 1e-9);
}

// Fill-drain's forwards and backwards each cross S − 1 hops on the critical path.
TEST(PipelineSim, HopsLengthenTheCriticalPath) {
  PipelineSimOptions o = equalStages(PipelineMode::kFillDrain, 4, 2, 1, {1, 2, 0});
  o.hopSeconds = 0.5;
  EXPECT_DOUBLE_EQ(simulatePipeline(o).makespanSeconds, (2 + 3) * 3.0 + 2 * 3 * 0.5);
}

// The activations a stage keeps: fill-drain holds a step's M micro-batches at every stage; pb's
// stage s holds the 2(S − 1 − s) + 1 micro-batches between a forward and its backward there.
TEST(PipelineSim, ActivationsKeptPerStage) {
  const PipelineStageCosts c{.forwardSeconds = 1, .backwardSeconds = 2, .updateSeconds = 0.5};
  for (int stages : {1, 2, 4, 8}) {
    const auto fill = simulatePipeline(equalStages(PipelineMode::kFillDrain, stages, 6, 3, c));
    const auto pb = simulatePipeline(equalStages(PipelineMode::kPipelined, stages, 1, 50, c));
    for (int s = 0; s < stages; ++s) {
      EXPECT_EQ(fill.peakActivations[s], 6) << stages << " stages, stage " << s;
      EXPECT_EQ(pb.peakActivations[s], 2 * (stages - 1 - s) + 1)
          << stages << " stages, stage " << s;
    }
  }
  // Fewer steps than the pipeline is deep: never more in flight than there are micro-batches.
  const auto shallow = simulatePipeline(equalStages(PipelineMode::kPipelined, 8, 1, 3, c));
  EXPECT_EQ(shallow.peakActivations[0], 3);
}

TEST(PipelineSim, RefusesInconsistentInput) {
  PipelineSimOptions o = equalStages(PipelineMode::kPipelined, 3, 1, 4, {1, 1, 0});
  o.stages.pop_back();
  EXPECT_THROW(simulatePipeline(o), ConfigError);
  o = equalStages(PipelineMode::kPipelined, 3, 1, 0, {1, 1, 0});
  EXPECT_THROW(simulatePipeline(o), ConfigError);
  o = equalStages(PipelineMode::kPipelined, 3, 1, 4, {-1, 1, 0});
  EXPECT_THROW(simulatePipeline(o), ConfigError);
}

}  // namespace
}  // namespace gradsync::sim
