// --schedule auto in the trainer (DistributedOptimizer and torch/api/schedule_tuning.h): every
// switch between candidates carries the engine's velocity and step over, so with two workers (whose
// sums do not depend on the order) the run gives wfbp's parameters bit for bit, however many
// schedules it went through; runs that cannot switch are refused before training.
#include <gtest/gtest.h>

#include "gradsync/error.h"
#include "train_on_threads.h"

namespace gradsync::testing {
namespace {

TrainOptions autoOptions(const char* model) {
  TrainOptions o = quickOptions();
  o.model = model;
  o.batchSize = 4;
  o.steps = 24;  // one counted step per candidate: every candidate of both searches fits
  o.freezeBatchNorm = true;
  return o;
}

TEST(ScheduleAuto, SwitchingSchedulesGivesTheBitsOfOneWithTwoWorkers) {
  for (const char* model : {"mlp", "cnn"}) {
    TrainOptions o = autoOptions(model);
    const TrainResult wfbp = train(2, o);
    for (const char* schedule : {"auto:steps=1", "auto:tune=fusion,steps=1"}) {
      o.schedule = schedule;
      const TrainResult result = train(2, o);
      EXPECT_EQ(maxRelativeDifference(wfbp.parameters, result.parameters), 0)
          << model << ", " << schedule << " ended on " << result.schedule;
      const bool p3 = o.schedule == std::string("auto:steps=1");
      EXPECT_TRUE(result.schedule.starts_with(p3 ? "p3:slice=" : "fusion:")) << result.schedule;
      // Each knob's search moves at least twice from its start (up, then on or down), each a
      // switch: at least 3 slices and 2 more windows, or 3 buckets.
      const std::string& tried = result.scheduleTuning;
      size_t trials = 0;
      for (size_t at = tried.find(" ms"); at != std::string::npos; at = tried.find(" ms", at + 1))
        ++trials;
      EXPECT_GE(trials, p3 ? 5u : 3u) << tried;
      EXPECT_NE(tried.find("-> chose " + result.schedule), std::string::npos) << tried;
    }
  }
}

TEST(ScheduleAuto, RunsThatCannotSwitchAreRefusedNamingWhy) {
  const std::vector<std::pair<std::string, std::string>> refused = {{"compress", "compression"},
                                                                    {"sharded", "sharded"},
                                                                    {"localsgd", "localsgd"},
                                                                    {"ps", "parameter servers"}};
  for (const auto& [what, why] : refused) {
    TrainOptions o = autoOptions("mlp");
    o.schedule = "auto";
    if (what == "compress") o.compression.spec = "topk:0.01";
    if (what == "sharded") o.sync = "sharded";
    if (what == "localsgd") o.sync = "localsgd:4";
    if (what == "ps") o.strategy.ps = true;
    try {
      validateTrainOptions(o);
      ADD_FAILURE() << what << " accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("--schedule auto"), std::string::npos) << e.what();
    }
  }
  TrainOptions o = autoOptions("mlp");
  o.schedule = "auto:tune=wfbp";
  EXPECT_THROW(validateTrainOptions(o), ConfigError);
}

}  // namespace
}  // namespace gradsync::testing
