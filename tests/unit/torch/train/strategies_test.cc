// The --sync strategies in the trainer: parameter servers (co-located and as ranks of their
// own), the delayed strategies and local SGD, on ranks as threads.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include <unistd.h>

#include "gradsync/error.h"
#include "train_on_threads.h"

namespace gradsync::testing {
namespace {

// PS ssgd: the servers average and apply torch's SGD per unit, so after N steps the workers hold
// ring ssgd's parameters (up to float rounding), with 1, 2 and 3 separate servers or co-located
// ones, whole tensors or p3 slices, on the mlp and the cnn.
// Four steps of batch 4 per worker.
TrainOptions smallSteps() {
  TrainOptions o = quickOptions();
  o.steps = 4;
  o.batchSize = 4;
  return o;
}

TEST(Strategies, ParameterServerSsgdGivesRingSsgdParameters) {
  for (const char* model : {"mlp", "cnn"}) {
    TrainOptions o = smallSteps();
    o.model = model;
    TrainResult ring = train(3, o);
    struct Case {
      int servers;
      bool ps;
      const char* schedule;
    };
    for (Case c : {Case{0, true, "wfbp"}, Case{1, false, "wfbp"}, Case{2, false, "p3"},
                   Case{3, false, "fusion:0.5"}}) {
      TrainOptions ps = o;
      ps.strategy.ps = c.ps;
      ps.strategy.servers = c.servers;
      ps.schedule = c.schedule;
      TrainResult result = train(3 + c.servers, ps);
      EXPECT_LT(maxRelativeDifference(ring.parameters, result.parameters), 1e-4)
          << model << " with " << c.servers << " servers, " << c.schedule;
      EXPECT_EQ(result.losses.size(), 4u);
    }
  }
}

// Local SGD averaging every step, without momentum, is synchronous SGD: the mean of the
// workers' local steps from one model is one step along the mean gradient.
TEST(Strategies, LocalSgdAveragingEveryStepIsSsgd) {
  TrainOptions o = smallSteps();
  o.momentum = 0;
  TrainResult ssgd = train(2, o);
  o.sync = "localsgd:1";
  TrainResult local = train(2, o);
  EXPECT_LT(maxRelativeDifference(ssgd.parameters, local.parameters), 1e-4);
  EXPECT_EQ(local.perStep.bytesSent, ssgd.perStep.bytesSent);  // same allreduce, other place
  o.sync = "localsgd:3";
  TrainResult sparse = train(2, o);
  EXPECT_GT(maxRelativeDifference(ssgd.parameters, sparse.parameters), 1e-3);
  EXPECT_LT(sparse.perStep.bytesSent, ssgd.perStep.bytesSent / 2);
}

// Every strategy trains (finite losses, every step run), co-located and with separate servers;
// a delayed strategy with a warm-up longer than the run is exactly PS ssgd.
TEST(Strategies, EveryStrategyTrains) {
  TrainOptions o = smallSteps();
  o.steps = 6;
  o.strategy.warmup = 2;
  for (const char* sync : {"asgd", "ssp:1", "odsgd", "ssdsgd:2", "cdsgd:2", "localsgd:2"}) {
    for (int servers : {0, 2}) {
      if (servers > 0 && std::string(sync).starts_with("localsgd")) continue;
      TrainOptions s = o;
      s.sync = sync;
      s.strategy.servers = servers;
      TrainResult result = train(2 + servers, s);
      ASSERT_EQ(result.losses.size(), 6u) << sync;
      for (float loss : result.losses) EXPECT_TRUE(std::isfinite(loss)) << sync;
    }
  }
  TrainOptions ps = o;
  ps.strategy.ps = true;
  TrainResult plain = train(2, ps);
  ps.sync = "odsgd";
  ps.strategy.warmup = 100;
  EXPECT_EQ(train(2, ps).parameters, plain.parameters);
}

TEST(Strategies, InvalidCombinationsAreRefusedUpFront) {
  TrainOptions o = smallSteps();
  for (const char* sync : {"ssp", "asgd:2", "ssdsgd:0", "localsgd", "gossip"}) {
    o.sync = sync;
    EXPECT_THROW(validateTrainOptions(o), ConfigError) << sync;
  }
  o.sync = "sharded";
  o.strategy.ps = true;
  EXPECT_THROW(validateTrainOptions(o), ConfigError);
  // Through servers a compressor works where one rank can encode alone (topk, qsgd, ...), not
  // beside cdsgd's own 2-bit codes, nor for methods that exchange in rounds (powersgd).
  for (const auto& [sync, compress] :
       {std::pair{"cdsgd:4", "topk:0.01"}, {"odsgd", "powersgd:2"}}) {
    o = smallSteps();
    o.sync = sync;
    o.compression.spec = compress;
    EXPECT_THROW(validateTrainOptions(o), ConfigError) << sync << " with " << compress;
  }
  o = smallSteps();
  o.strategy.servers = 2;
  EXPECT_THROW(train(2, o), ConfigError);  // no rank left to train
}

}  // namespace
}  // namespace gradsync::testing
