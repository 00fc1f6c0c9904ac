// `gradsync train --compute emulate:PROFILE` in the trainer: a step's compute is the profile's,
// the trained parameters are the profile's, and every strategy, schedule and compressor runs
// over it with real traffic (ranks as threads; real processes: tests/e2e/cli_test.cc).
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "compress/registry.h"
#include "gradsync/error.h"
#include "train_on_threads.h"

namespace gradsync::testing {
namespace {

// Five layers, one without parameters, 21.5 ms of forward and backward per step at scale 1.
ModelProfile smallProfile() {
  ModelProfile p;
  p.name = "small";
  p.device = "test";
  p.source = "emulation_test";
  p.batchSize = 8;
  p.updateSeconds = 0.001;
  auto conv = [](const std::string& name, int64_t in, int64_t out) {
    return std::vector<TensorShape>{tensorShape(name + ".weight", {out, in, 3, 3}),
                                    tensorShape(name + ".bias", {out})};
  };
  auto linear = [](const std::string& name, int64_t in, int64_t out) {
    return std::vector<TensorShape>{tensorShape(name + ".weight", {out, in}),
                                    tensorShape(name + ".bias", {out})};
  };
  p.layers = {{"features.0", conv("features.0", 1, 16), 0.002, 0.004},
              {"features.3", conv("features.3", 16, 32), 0.003, 0.006},
              {"act", {}, 0.001, 0.001},
              {"classifier.0", linear("classifier.0", 1568, 64), 0.001, 0.002},
              {"classifier.2", linear("classifier.2", 64, 10), 0.0005, 0.001}};
  return p;
}

// The options of a run on the small profile, written to a scratch file.
TrainOptions emulatedOptions(const std::string& name, double scale = 1) {
  ModelProfile profile = smallProfile();
  profile.name = name;  // its file's name: one per test
  TrainOptions o = quickOptions();
  o.compute = emulatedCompute(profile, "emulation");
  o.computeScale = scale;
  o.steps = 4;
  return o;
}

double profileComputeMs(double scale = 1) {
  const ModelProfile p = smallProfile();
  return 1e3 * scale * (p.forwardSeconds() + p.backwardSeconds());
}

TEST(Emulation, StepComputeIsTheProfilesAndParametersItsShapes) {
  TrainOptions o = emulatedOptions("one", 2);
  o.steps = 8;
  o.batchSize = 64;  // ignored: the profile's times are for its batch
  TrainResult result = train(1, o);
  EXPECT_EQ(result.steps, 8);
  // The device ran exactly the profile's forward, backward and update (1 ms x 2) each step.
  EXPECT_NEAR(result.perStep.deviceMs, profileComputeMs(2) + 2.0, 1e-9);
  // The host's view is never shorter (the device cannot be faster). Its excess is the host's
  // wake-ups and, on a loaded machine (CI runs two suites at once on two cores), scheduling
  // delays of any size, so it has no upper bound here: emulated_model_test.cc checks the times
  // per layer and step within timer resolution on the minimum of several steps.
  EXPECT_GE(result.perStep.computeMs, profileComputeMs(2) - 0.1);
  EXPECT_GE(result.perStep.optimizerMs, 2.0 - 0.05);  // update_s x 2, on the device
  EXPECT_EQ(result.parameters.size(), smallProfile().parameterCount());
  // Samples per second count the profile's batch of 8 (64 would make it 8x larger).
  EXPECT_LT(result.samplesPerSecond, 8 / (profileComputeMs(2) * 1e-3));
  EXPECT_TRUE(std::isnan(result.finalTestAccuracy));  // nothing is evaluated

  const std::vector<TensorShape> shapes = describeTrainingModel(o);
  ASSERT_EQ(shapes.size(), 8u);
  EXPECT_EQ(shapes[6].name, "classifier.2.weight");
  EXPECT_EQ(shapes[6].dims, (std::vector<int64_t>{10, 64}));
  EXPECT_EQ(resolveCompute(o, 2).batchSize, 8u);
  EXPECT_EQ(resolveCompute(o, 2).dataset, "synthetic");
}

// Every --sync strategy and schedule runs over emulated compute with real traffic; the compute
// of a step is never less than the profile's. (How close it comes is emulated_model_test's: a
// mean over a few steps here would also measure how late a loaded machine wakes a sleeper.)
TEST(Emulation, EveryStrategyAndScheduleRuns) {
  struct Case {
    const char* sync;
    const char* schedule;
    bool ps;
  };
  for (const Case& c :
       {Case{"ssgd", "fifo", false}, Case{"ssgd", "wfbp", false}, Case{"ssgd", "fusion:0.1", false},
        Case{"ssgd", "p3:slice=5000", false}, Case{"sharded", "wfbp", false},
        Case{"ssgd", "wfbp", true}, Case{"asgd", "wfbp", false}, Case{"ssp:1", "wfbp", false},
        Case{"odsgd", "p3:slice=20000", false}, Case{"ssdsgd:2", "wfbp", false},
        Case{"cdsgd:2", "wfbp", false}, Case{"localsgd:2", "wfbp", false}}) {
    TrainOptions o = emulatedOptions("strategies");
    o.sync = c.sync;
    o.schedule = c.schedule;
    o.strategy.ps = c.ps;
    o.strategy.warmup = 1;
    TrainResult result = train(3, o);
    const std::string what = std::string(c.sync) + " " + c.schedule + (c.ps ? " --ps" : "");
    EXPECT_EQ(result.steps, 4) << what;
    EXPECT_GT(result.perStep.bytesSent, 0.0) << what;
    EXPECT_GE(result.perStep.computeMs, profileComputeMs() - 0.1) << what;
  }
}

// Every compressor encodes the emulated gradients (real values from the seeded pool), so the
// bytes drop as they do in real training.
TEST(Emulation, EveryCompressorRuns) {
  for (const MethodInfo& method : compressionMethods()) {
    const std::string name = method.name;
    if (name == "none") continue;
    TrainOptions o = emulatedOptions("compressors");
    o.compression.spec = name == "twobit"     ? "twobit:0.001"        // emulated gradients' scale
                         : name == "gradiveq" ? "gradiveq:4,train=1"  // its basis after 1 step
                                              : name;
    o.compression.minElements = 100;
    TrainResult result = train(2, o);
    EXPECT_EQ(result.steps, 4) << name;
    EXPECT_GT(result.perStep.bytesSent, 0.0) << name;
    EXPECT_LT(result.perStep.bytesSent, result.perStep.denseBytes) << name;
    EXPECT_GT(result.perStep.encodeMs, 0.0) << name;
  }
}

TEST(Emulation, BadComputeIsRefused) {
  TrainOptions o = quickOptions();
  o.compute = "emulate:no-such-profile";
  EXPECT_THROW(train(1, o), ConfigError);
  o.compute = "tpu";
  EXPECT_THROW(train(1, o), ConfigError);
  o = emulatedOptions("bad");
  o.computeScale = -1;
  EXPECT_THROW(train(1, o), ConfigError);
}

}  // namespace
}  // namespace gradsync::testing
