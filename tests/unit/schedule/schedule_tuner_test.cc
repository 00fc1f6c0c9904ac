// --schedule auto's search (schedule/schedule_tuner.h) on synthetic step-time functions, no
// sockets: it must end at the best value a full sweep of the same grid finds.
#include "schedule/schedule_tuner.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "gradsync/error.h"

namespace gradsync {
namespace {

using Cost = std::function<double(const ScheduleSpec&)>;

// Drives the tuner as a training loop would; returns the steps it took.
int tune(ScheduleTuner& tuner, const Cost& cost, double spikeEvery = 0) {
  int steps = 0, switches = 0;
  while (!tuner.done() && steps < 1000) {
    double seconds = cost(tuner.current());
    if (spikeEvery > 0 && ++steps % static_cast<int>(spikeEvery) == 0) seconds *= 10;
    if (spikeEvery <= 0) ++steps;
    if (tuner.observe(seconds)) ++switches;
  }
  return steps;
}

// A valley on a log scale: latency per slice below `best`, lost overlap above it.
double valley(double value, double best) {
  return 1.0 + std::pow(std::log(value / best), 2);
}

const std::vector<size_t> kSlices = {10'000, 40'000, 160'000, 640'000, 2'560'000, 10'240'000};

TEST(ScheduleTuner, EndsAtTheBestSliceAndWindowOfAFullSweep) {
  for (size_t bestSlice : kSlices) {
    for (size_t bestWindow : {1, 2, 4, 8}) {
      Cost cost = [&](const ScheduleSpec& s) {
        return valley(static_cast<double>(s.sliceElements), static_cast<double>(bestSlice)) *
               valley(static_cast<double>(s.window), static_cast<double>(bestWindow));
      };
      ScheduleTuner tuner({}, 50'000'000);
      tune(tuner, cost);
      ASSERT_TRUE(tuner.done());
      // The sweep: every slice at window 2, then every window at the best slice.
      size_t sweptSlice = kSlices[0];
      for (size_t s : kSlices)
        if (cost({.kind = ScheduleSpec::Kind::kP3, .sliceElements = s}) <
            cost({.kind = ScheduleSpec::Kind::kP3, .sliceElements = sweptSlice}))
          sweptSlice = s;
      EXPECT_EQ(tuner.current().sliceElements, sweptSlice) << tuner.summary();
      EXPECT_EQ(tuner.current().window, bestWindow) << tuner.summary();
      // A descent, not a sweep: never more candidates than the grids hold.
      EXPECT_LE(tuner.trials().size(), kSlices.size() + 3) << tuner.summary();
    }
  }
}

TEST(ScheduleTuner, TheDefaultStaysWhenNothingBeatsItByTheMargin) {
  Cost flat = [](const ScheduleSpec& s) { return 1.0 + 1e-4 * static_cast<double>(s.window); };
  ScheduleTuner tuner({}, 50'000'000);
  tune(tuner, flat);
  EXPECT_EQ(tuner.current().toString(), "p3:slice=40000,window=2") << tuner.summary();
  // 40000, 160000, 10000; then windows 4 and 1.
  EXPECT_EQ(tuner.trials().size(), 5u) << tuner.summary();
}

TEST(ScheduleTuner, SlicesStopAtTheFirstThatHoldsTheLargestTensor) {
  Cost larger = [](const ScheduleSpec& s) { return 1e7 / static_cast<double>(s.sliceElements); };
  ScheduleTuner tuner({}, 100'000);  // 160,000 holds every tensor: nothing larger is tried
  tune(tuner, larger);
  EXPECT_EQ(tuner.current().sliceElements, 160'000u) << tuner.summary();
  for (const auto& trial : tuner.trials()) EXPECT_LE(trial.spec.sliceElements, 160'000u);
}

// The first step after each switch (which drains the previous engine) and a step in five
// stretched tenfold (a pause) do not move the choice: the median of the trial decides.
TEST(ScheduleTuner, SettlingStepsAndPausesDoNotDecide) {
  Cost cost = [](const ScheduleSpec& s) {
    return valley(static_cast<double>(s.sliceElements), 640'000);
  };
  ScheduleTunerOptions options;
  options.trialSteps = 5;
  ScheduleTuner tuner(options, 50'000'000);
  tune(tuner, cost, 5);
  EXPECT_EQ(tuner.current().sliceElements, 640'000u) << tuner.summary();
  for (const auto& trial : tuner.trials())
    EXPECT_DOUBLE_EQ(trial.seconds, cost(trial.spec)) << trial.spec.toString();
}

TEST(ScheduleTuner, FusionBucketsAreTunedToo) {
  for (double bestMb : {1.5625, 6.25, 25.0, 100.0, 400.0}) {
    Cost cost = [&](const ScheduleSpec& s) {
      return valley(static_cast<double>(s.fusionBytes), bestMb * 1024 * 1024);
    };
    ScheduleTuner tuner({.kind = ScheduleSpec::Kind::kFusion}, 1000);
    tune(tuner, cost);
    EXPECT_EQ(tuner.current().kind, ScheduleSpec::Kind::kFusion);
    EXPECT_NEAR(static_cast<double>(tuner.current().fusionBytes), bestMb * 1024 * 1024, 1)
        << tuner.summary();
  }
}

TEST(ScheduleTuner, AutoFormsParseAndBadOnesNameThePart) {
  EXPECT_TRUE(isAutoSchedule("auto"));
  EXPECT_TRUE(isAutoSchedule("auto:steps=3"));
  EXPECT_FALSE(isAutoSchedule("p3"));
  EXPECT_EQ(parseAutoSchedule("auto").kind, ScheduleSpec::Kind::kP3);
  EXPECT_EQ(parseAutoSchedule("auto").trialSteps, 4);
  ScheduleTunerOptions o = parseAutoSchedule("auto:tune=fusion,steps=6");
  EXPECT_EQ(o.kind, ScheduleSpec::Kind::kFusion);
  EXPECT_EQ(o.trialSteps, 6);
  for (const char* bad : {"auto:", "auto:tune=wfbp", "auto:steps=0", "auto:window=2"}) {
    try {
      parseAutoSchedule(bad);
      ADD_FAILURE() << bad << " accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("auto"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace gradsync
