// The public LibTorch API through parameter servers and local SGD (api_fixture.h's model, ranks
// as threads): what `gradsync train --sync` offers, reached by a user's own training loop.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "api_fixture.h"
#include "gradsync/collectives.h"

namespace gradsync::testing {
namespace {

// Synchronous SGD through the servers is SGD on the average, as over the ring: W workers give
// one worker's parameters (the servers sum in worker order; 1e-5 as for the ring, see
// WorldSizesGiveOneWorkersParameters), whole tensors or p3's slices, 1 server per worker.
TEST(DistributedStrategies, ParameterServersGiveOneWorkersParameters) {
  // Update mode: the auxiliary head is used from the first step (api_fixture.h).
  std::vector<SequenceClassifier> one = trained(1, "sgd", {}, kSteps, 0);
  for (const char* schedule : {"wfbp", "p3"}) {
    for (int workers : {2, 3}) {
      SyncOptions sync{.schedule = schedule, .parameterServers = true};
      std::vector<SequenceClassifier> many = trained(workers, "sgd", sync, kSteps, 0);
      for (int r = 0; r < workers; ++r) {
        double difference = maxRelativeDifference(one[0], many[static_cast<size_t>(r)]);
        if (r == 0) std::printf("servers, %s, %d workers: %.3g\n", schedule, workers, difference);
        EXPECT_LT(difference, 1e-5) << schedule << " on " << workers << " workers, rank " << r;
      }
    }
  }
}

// Local SGD averaging every step is SGD on the average (without momentum, whose buffers stay
// local): one worker's parameters, as above.
TEST(DistributedStrategies, LocalSgdAveragingEveryStepIsSgd) {
  std::vector<SequenceClassifier> one = trained(1, "sgd-plain", {});
  std::vector<SequenceClassifier> many = trained(3, "sgd-plain", {.sync = "localsgd:1"});
  for (size_t r = 0; r < many.size(); ++r) {
    EXPECT_LT(maxRelativeDifference(one[0], many[r]), 1e-5) << "rank " << r;
  }
  // Averaging every second step is not: the models drift apart in between.
  std::vector<SequenceClassifier> two = trained(3, "sgd-plain", {.sync = "localsgd:2"}, 3);
  EXPECT_GT(maxRelativeDifference(two[0], two[1]), 1e-3);
}

// OD-SGD with compressed pushes: after the warm-up each worker steps on its own gradient while
// the servers' update is in flight, so the workers' models differ; synchronizeModel() gives
// every rank the servers' one model.
TEST(DistributedStrategies, DelayedSgdWithCompressionAndTheGlobalModel) {
  constexpr int kWorkers = 2;
  std::vector<SequenceClassifier> models;
  for (int r = 0; r < kWorkers; ++r) models.push_back(freshModel());
  std::vector<double> apartBefore(kWorkers), apartAfter(kWorkers);
  runWithTransports(TransportKind::kLoopback, kWorkers, [&](Transport& transport) {
    const auto rank = static_cast<size_t>(transport.rank());
    SequenceClassifier& model = models[rank];
    auto optimizer = makeOptimizer("sgd", model);
    SyncOptions sync{
        .compress = "topk:0.1", .compressMinElements = 16, .sync = "odsgd", .delayWarmup = 2};
    DistributedOptimizer distributed(*optimizer, model.ptr(), transport, sync);
    const int64_t share = kGlobalBatch / kWorkers;
    for (int64_t step = 0; step < 6; ++step) {
      auto [tokens, labels] = example::taskBatch(3, step, kGlobalBatch);
      distributed.zeroGrad();
      torch::Tensor logits =
          model->forward(tokens.narrow(0, transport.rank() * share, share), true);
      torch::nn::functional::cross_entropy(logits,
                                           labels.narrow(0, transport.rank() * share, share))
          .backward();
      distributed.step();
    }
    distributed.waitForParameters();
    barrier(transport);
    apartBefore[rank] = maxRelativeDifference(models[0], models[1]);
    barrier(transport);
    distributed.synchronizeModel();
    barrier(transport);
    apartAfter[rank] = maxRelativeDifference(models[0], models[1]);
    EXPECT_LT(distributed.bytesSent(), distributed.denseBytes());
  });
  EXPECT_GT(apartBefore[0], 1e-4) << "the local steps left the workers' models equal";
  EXPECT_EQ(apartAfter[0], 0) << "synchronizeModel() left the models apart";
}

TEST(DistributedStrategies, RefusesWhatTheServersCannotRun) {
  expectRefused("adamw", {.parameterServers = true}, "parameter servers apply SGD with momentum");
  expectRefused("sgd", {.compress = "powersgd:2", .sync = "asgd"},
                "does not apply through parameter servers");
  expectRefused("sgd", {.compress = "topk:0.01", .sync = "cdsgd:4"}, "cdsgd");
  expectRefused("sgd", {.sync = "ssp:1", .join = true}, "join works with ring ssgd only");
  expectRefused("sgd", {.sync = "sharded", .parameterServers = true}, "--ps and --servers");
}

}  // namespace
}  // namespace gradsync::testing
