// The model profiler's layers and times, against the model's own parameter list and against a
// training step timed as a whole by the trainer (the naive reference: one steady-clock interval
// around forward and backward, no per-layer hooks).
#include <gtest/gtest.h>

#include <algorithm>

#include "gradsync/error.h"
#include "sim/model_profile.h"
#include "support/profile_expect.h"
#include "torch/train/model_profiler.h"
#include "train_on_threads.h"

namespace gradsync::testing {
namespace {

ProfileOptions quickProfile(const std::string& model) {
  ProfileOptions options;
  options.model = model;
  options.batchSize = 8;
  options.warmupSteps = 1;
  options.steps = 2;
  return options;
}

// Forward + backward per step, as `gradsync train` measures it on one worker (its compute_ms):
// the mean over 8 steps, the first (slower: allocations) included.
double trainerComputeSeconds(const std::string& model, size_t batchSize) {
  TrainOptions options = quickOptions();
  options.model = model;
  options.batchSize = batchSize;
  options.schedule = "fifo";
  options.steps = 8;
  return train(1, options).perStep.computeMs / 1e3;
}

TEST(ModelProfiler, LayersHoldEveryParameterOnceInRegistrationOrder) {
  for (const char* model : {"cnn", "resnet20"}) {
    ModelProfile profile = profileModel(quickProfile(model));
    EXPECT_EQ(profile.name, model);
    EXPECT_EQ(profile.batchSize, 8);
    expectSameTensors(profile.tensors(), describeModel(model), model);
    for (const LayerProfile& layer : profile.layers) {
      EXPECT_GT(layer.forwardSeconds, 0.0) << model << " " << layer.name;
      // Parameterless layers hand their backward to the next parameter layer (model_profile.h).
      if (layer.tensors.empty()) {
        EXPECT_EQ(layer.backwardSeconds, 0.0) << model << " " << layer.name;
      } else {
        EXPECT_GT(layer.backwardSeconds, 0.0) << model << " " << layer.name;
      }
    }
    EXPECT_GT(profile.updateSeconds, 0.0) << model;
  }
}

// A residual block is one layer: resnet20's stem conv and BN, 9 blocks, the classifier.
TEST(ModelProfiler, ResidualBlocksAreSingleLayers) {
  ModelProfile profile = profileModel(quickProfile("resnet20"));
  std::vector<std::string> names;
  for (const LayerProfile& layer : profile.layers) names.push_back(layer.name);
  EXPECT_EQ(names, (std::vector<std::string>{"conv1", "bn1", "layer1.0", "layer1.1", "layer1.2",
                                             "layer2.0", "layer2.1", "layer2.2", "layer3.0",
                                             "layer3.1", "layer3.2", "fc"}));
}

// The per-layer times add up to what a whole step costs. Both sides are the best of up to 3
// rounds: on a 2-core host shared with other busy processes, a single measurement of either (at
// train's lowered priority) was seen 2x off. Rounds stop once the best pair so far is within
// the bounds (usually the first: 6 s instead of 17 for all three).
TEST(ModelProfiler, LayerTimesAddUpToAWholeStep) {
  for (const char* model : {"cnn", "resnet20"}) {
    ProfileOptions options = quickProfile(model);
    options.batchSize = 32;  // enough work per step to dominate the hooks and the clock
    options.steps = 5;
    double layered = 1e9;
    double whole = 1e9;
    for (int round = 0; round < 3; ++round) {
      ModelProfile profile = profileModel(options);
      layered = std::min(layered, profile.forwardSeconds() + profile.backwardSeconds());
      whole = std::min(whole, trainerComputeSeconds(model, options.batchSize));
      if (layered > 0.5 * whole && layered < 2.0 * whole) break;
    }
    EXPECT_GT(layered, 0.5 * whole) << model << ": " << layered << " s vs " << whole << " s";
    EXPECT_LT(layered, 2.0 * whole) << model << ": " << layered << " s vs " << whole << " s";
  }
}

TEST(ModelProfiler, JsonRoundTrips) {
  ModelProfile profile = profileModel(quickProfile("cnn"));
  EXPECT_EQ(profile.source, profileCommandLine(quickProfile("cnn")));
  expectSameProfile(profileFromJson(profileToJson(profile), "test"), profile);
}

// Concurrent workers measure in lockstep and agree on one profile: the median across ranks.
TEST(ModelProfiler, ConcurrentWorkersAgreeOnTheMedianProfile) {
  ProfileOptions options = quickProfile("mlp");
  options.workers = 2;
  std::vector<ModelProfile> profiles(2);
  runWithTransports(TransportKind::kLoopback, 2, [&](Transport& transport) {
    profiles[transport.rank()] = profileModel(transport, options);
  });
  EXPECT_NE(profiles[0].device.find("2 workers at once"), std::string::npos) << profiles[0].device;
  EXPECT_EQ(profileToJson(profiles[0]), profileToJson(profiles[1]));
  expectSameTensors(profiles[0].tensors(), describeModel("mlp"), "mlp");
}

TEST(ModelProfiler, RefusesBadOptionsNamingTheChoices) {
  ProfileOptions options = quickProfile("alexnet");
  try {
    profileModel(options);
    FAIL() << "alexnet was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("mlp, cnn, resnet20, vgg11"), std::string::npos)
        << e.what();
  }
  options = quickProfile("cnn");
  options.steps = 0;
  EXPECT_THROW(profileModel(options), ConfigError);
}

}  // namespace
}  // namespace gradsync::testing
