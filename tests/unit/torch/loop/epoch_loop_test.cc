// The shared epoch loop (torch/loop/epoch_loop.h) on hooks that record what it asks: the
// segments, evaluations, checkpoints, stops and records every trainer's run relies on.
#include "torch/loop/epoch_loop.h"

#include <gtest/gtest.h>

#include <cmath>
#include <utility>
#include <vector>

namespace gradsync {
namespace {

// Each step's loss is its index; the hooks log the loop's calls.
struct Recorder {
  std::vector<std::pair<int64_t, int64_t>> segments;  // (first, count)
  std::vector<size_t> evaluatedSamples;
  std::vector<std::pair<int64_t, bool>> checkpoints;  // (step, last)
  int64_t stopAt = -1;
  int64_t stoppedAt = -1;

  LoopHooks hooks() {
    return {.train =
                [this](int64_t first, int64_t count, std::vector<float>& losses) {
                  segments.emplace_back(first, count);
                  double sum = 0;
                  for (int64_t s = first; s < first + count; ++s) {
                    losses.push_back(static_cast<float>(s));
                    sum += static_cast<double>(s);
                  }
                  return sum;
                },
            .evaluate =
                [this](size_t samples) {
                  evaluatedSamples.push_back(samples);
                  return Quality{0.5, std::nan("")};
                },
            .globalMean = [](double sum, double count) { return sum / count; },
            .describe = [](const EpochRecord&, int) { return std::string(); },
            .stopAfter = [this](int64_t step, double) { return step == stopAt; },
            .describeStop =
                [this](int64_t step) {
                  stoppedAt = step;
                  return std::string();
                },
            .checkpoint = [this](const RunPosition& position,
                                 bool last) { checkpoints.emplace_back(position.step, last); }};
  }
};

std::vector<int64_t> stepsOf(const std::vector<Evaluation>& evaluations) {
  std::vector<int64_t> steps;
  for (const Evaluation& e : evaluations) steps.push_back(e.step);
  return steps;
}

TEST(EpochLoop, SegmentsEndAtEpochEndsAndEvaluationPoints) {
  Recorder recorder;
  const LoopShape shape{.stepsPerEpoch = 10,
                        .totalSteps = 25,
                        .globalBatch = 8,
                        .evalEvery = 4,
                        .evalSamples = 100,
                        .segmentSteps = 10};
  const LoopOutcome outcome = runEpochLoop(shape, {}, recorder.hooks());
  const std::vector<std::pair<int64_t, int64_t>> segments = {{0, 4},  {4, 4},  {8, 2},  {10, 2},
                                                             {12, 4}, {16, 4}, {20, 4}, {24, 1}};
  EXPECT_EQ(recorder.segments, segments);
  // --eval-every points inside an epoch on 100 samples, each epoch's end (the last one partial)
  // on all of them.
  EXPECT_EQ(stepsOf(outcome.result.evaluations),
            (std::vector<int64_t>{4, 8, 10, 12, 16, 20, 24, 25}));
  const std::vector<size_t> samples = {100, 100, SIZE_MAX, 100, 100, SIZE_MAX, 100, SIZE_MAX};
  EXPECT_EQ(recorder.evaluatedSamples, samples);
  ASSERT_EQ(outcome.result.epochs.size(), 3u);
  EXPECT_DOUBLE_EQ(outcome.result.epochs[0].trainLoss, 4.5);   // the mean of 0..9
  EXPECT_DOUBLE_EQ(outcome.result.epochs[1].trainLoss, 14.5);  // 10..19
  EXPECT_DOUBLE_EQ(outcome.result.epochs[2].trainLoss, 22.0);  // 20..24
  EXPECT_EQ(outcome.result.losses.size(), 25u);
  EXPECT_EQ(outcome.result.steps, 25);
  EXPECT_EQ(outcome.stepsRun, 25);
  EXPECT_FALSE(outcome.result.stopped);
  EXPECT_DOUBLE_EQ(outcome.result.finalTestAccuracy, 0.5);
  EXPECT_GE(outcome.result.seconds, 0.0);
  EXPECT_EQ(recorder.stoppedAt, -1);
}

TEST(EpochLoop, StepwiseRunsCheckpointAsDueAndStopWithoutAPartialRecord) {
  Recorder recorder;
  recorder.stopAt = 6;
  const LoopShape shape{.stepsPerEpoch = 4, .totalSteps = 10, .globalBatch = 8};
  const LoopOutcome outcome = runEpochLoop(shape, {}, recorder.hooks());
  EXPECT_EQ(recorder.segments.size(), 6u);
  for (size_t i = 0; i < recorder.segments.size(); ++i) {
    EXPECT_EQ(recorder.segments[i], std::make_pair(static_cast<int64_t>(i), int64_t{1}));
  }
  // After each step within an epoch; after the record at an epoch's end; the stop's is the last.
  const std::vector<std::pair<int64_t, bool>> checkpoints = {{1, false}, {2, false}, {3, false},
                                                             {4, false}, {5, false}, {6, true}};
  EXPECT_EQ(recorder.checkpoints, checkpoints);
  EXPECT_TRUE(outcome.result.stopped);
  EXPECT_EQ(outcome.result.steps, 6);
  EXPECT_EQ(outcome.result.epochs.size(), 1u);  // the stopped epoch has no record
  EXPECT_EQ(recorder.stoppedAt, 6);
}

TEST(EpochLoop, AResumedRunContinuesItsEpochAndCountsOnlyItsOwnSteps) {
  Recorder recorder;
  RunPosition start;
  start.step = 5;
  start.epochLossSum = 4;  // step 4's loss, before the stop
  start.epochs.push_back({.epoch = 1, .trainLoss = 1.5});
  const LoopShape shape{.stepsPerEpoch = 4, .totalSteps = 8, .globalBatch = 8};
  const LoopOutcome outcome = runEpochLoop(shape, start, recorder.hooks());
  EXPECT_EQ(recorder.segments.front(), std::make_pair(int64_t{5}, int64_t{1}));
  EXPECT_EQ(outcome.stepsRun, 3);
  EXPECT_EQ(outcome.result.losses.size(), 3u);
  ASSERT_EQ(outcome.result.epochs.size(), 2u);
  EXPECT_DOUBLE_EQ(outcome.result.epochs[0].trainLoss, 1.5);
  EXPECT_DOUBLE_EQ(outcome.result.epochs[1].trainLoss, 5.5);  // the mean of 4..7
  EXPECT_EQ(recorder.checkpoints.back(), std::make_pair(int64_t{8}, true));
}

}  // namespace
}  // namespace gradsync
