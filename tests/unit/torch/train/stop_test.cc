// A graceful stop (TrainOptions::stopOnSignal, common/stop_request.h): a stop asked for on any
// rank ends the run on every rank after the same step, with a checkpoint there, and the resumed
// run ends exactly where the uninterrupted one does. Ranks are threads here, so the request (a
// process-wide flag, as a signal's) is made before the run: every rank sees it after its first
// step. tests/e2e/preemption_test.cc sends real signals to real processes.
#include <gtest/gtest.h>
#include <filesystem>
#include <string>

#include "common/stop_request.h"
#include "train_on_threads.h"

namespace gradsync::testing {
namespace {

TrainOptions stoppable() {
  TrainOptions o = quickOptions();
  o.syntheticSamples = 60;  // 5 steps per epoch: the stop lands mid-epoch
  o.batchSize = 6;
  o.steps = 7;
  o.stopOnSignal = true;
  return o;
}

TEST(Stop, EveryRankStopsAfterTheSameStepWithACheckpointAndTheResumeEndsAlike) {
  for (const char* schedule : {"wfbp", "p3"}) {
    clearStopRequest();
    TrainOptions whole = stoppable();
    whole.schedule = schedule;
    const TrainResult uninterrupted = train(2, whole);
    ASSERT_FALSE(uninterrupted.stopped);
    TrainOptions first = whole;
    first.checkpointDir = scratchPath("stop", schedule);
    requestStop(SIGTERM);
    const TrainResult stopped = train(2, first);
    clearStopRequest();
    EXPECT_TRUE(stopped.stopped) << schedule;
    EXPECT_EQ(stopped.steps, 1) << "the ranks agree after the first step";
    EXPECT_TRUE(std::filesystem::exists(std::filesystem::path(first.checkpointDir) /
                                        "step-000000000001.gsckpt"));
    TrainOptions rest = whole;
    rest.checkpointDir = first.checkpointDir;
    rest.resume = true;
    const TrainResult resumed = train(2, rest);
    EXPECT_FALSE(resumed.stopped);
    EXPECT_EQ(resumed.parameters, uninterrupted.parameters) << schedule;
    ASSERT_EQ(resumed.epochs.size(), uninterrupted.epochs.size());
    EXPECT_EQ(resumed.epochs.back().trainLoss, uninterrupted.epochs.back().trainLoss);
  }
}

// Without stopOnSignal nothing is polled: the run ends as asked, whatever the flag says.
TEST(Stop, IgnoredUnlessAskedFor) {
  TrainOptions o = stoppable();
  o.stopOnSignal = false;
  requestStop(SIGTERM);
  const TrainResult result = train(2, o);
  clearStopRequest();
  EXPECT_FALSE(result.stopped);
  EXPECT_EQ(result.steps, 7);
}

}  // namespace
}  // namespace gradsync::testing
