// What a training program needs besides step(), through the public API only (what `gradsync
// train` uses too): checkpoints of the state the engine or the servers keep, separate
// parameter-server ranks, statistics, the trace, and the global model of the servers.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <sstream>
#include <string>
#include <vector>

#include "api_fixture.h"
#include "common/state_bytes.h"
#include "gradsync/collectives.h"
#include "gradsync/trace.h"

namespace gradsync::testing {
namespace {

// One step of the fixture's task on this rank's share of the global batch, as trained(..., 0)
// runs it (the auxiliary head on even steps).
void trainStep(SequenceClassifier& model, DistributedOptimizer& distributed, int rank, int size,
               int64_t step) {
  const int64_t share = kGlobalBatch / size;
  auto [tokens, labels] = example::taskBatch(3, step, kGlobalBatch);
  distributed.zeroGrad();
  torch::Tensor logits = model->forward(tokens.narrow(0, rank * share, share), step % 2 == 0);
  torch::nn::functional::cross_entropy(logits, labels.narrow(0, rank * share, share)).backward();
  distributed.step();
}

// The optimizer's state as a checkpoint saves it (torch's archive), and back.
std::string savedState(torch::optim::Optimizer& optimizer) {
  torch::serialize::OutputArchive archive;
  optimizer.save(archive);
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

void restore(torch::optim::Optimizer& optimizer, const std::string& saved) {
  std::istringstream in(saved);
  torch::serialize::InputArchive archive;
  archive.load_from(in);
  optimizer.load(archive);
}

// A run of 6 steps, and the same run stopped after 3 (parameters, the optimizer state saved
// through withOptimizerState and each rank's syncState) and resumed in fresh objects: the same
// parameters, bitwise. SGD's velocity and Adam's moments in update mode travel in the optimizer's
// state, the compressors' residuals in syncState.
TEST(DistributedState, CheckpointsResumeBitwiseInEveryMode) {
  constexpr int kWorkers = 2;
  constexpr int64_t kStop = 3, kTotal = 6;
  for (const auto& [kind, sync] :
       {std::pair{"sgd", SyncOptions{.schedule = "p3:slice=50"}},
        std::pair{"sgd", SyncOptions{.sync = "sharded"}},
        std::pair{"sgd", SyncOptions{.schedule = "wfbp", .parameterServers = true}},
        std::pair{"sgd", SyncOptions{}}, std::pair{"adamw", SyncOptions{.schedule = "p3:slice=50"}},
        std::pair{"adamw", SyncOptions{.sync = "sharded"}},
        std::pair{"sgd", SyncOptions{.compress = "topk:0.1", .compressMinElements = 1}},
        // Stopped mid-round: the local models, the optimizer and the outer state travel.
        std::pair{"sgd", SyncOptions{.sync = "diloco:2"}}}) {
    std::vector<SequenceClassifier> uninterrupted = trained(kWorkers, kind, sync, kTotal, 0);
    std::vector<SequenceClassifier> resumed;
    for (int r = 0; r < kWorkers; ++r) resumed.push_back(freshModel());
    std::vector<std::string> saved(kWorkers);
    std::vector<std::vector<uint8_t>> syncStates(kWorkers);
    runWithTransports(TransportKind::kLoopback, kWorkers, [&](Transport& t) {
      SequenceClassifier& model = resumed[static_cast<size_t>(t.rank())];
      auto optimizer = makeOptimizer(kind, model);
      DistributedOptimizer distributed(*optimizer, model.ptr(), t, sync);
      for (int64_t s = 0; s < kStop; ++s) trainStep(model, distributed, t.rank(), kWorkers, s);
      distributed.waitForParameters();
      syncStates[static_cast<size_t>(t.rank())] = distributed.syncState();
      distributed.withOptimizerState(
          [&] { saved[static_cast<size_t>(t.rank())] = savedState(*optimizer); });
    });
    runWithTransports(TransportKind::kLoopback, kWorkers, [&](Transport& t) {
      SequenceClassifier& model = resumed[static_cast<size_t>(t.rank())];
      auto optimizer = makeOptimizer(kind, model);
      restore(*optimizer, saved[static_cast<size_t>(t.rank())]);
      DistributedOptimizer distributed(*optimizer, model.ptr(), t, sync);
      distributed.loadOptimizerState();
      distributed.loadSyncState(syncStates[static_cast<size_t>(t.rank())]);
      distributed.setStep(kStop);
      for (int64_t s = kStop; s < kTotal; ++s) trainStep(model, distributed, t.rank(), kWorkers, s);
      distributed.waitForParameters();
    });
    for (int r = 0; r < kWorkers; ++r) {
      EXPECT_EQ(maxRelativeDifference(uninterrupted[r], resumed[r]), 0.0)
          << kind << " " << sync.schedule << " " << sync.sync << " " << sync.compress
          << (sync.parameterServers ? " servers" : "") << ", rank " << r;
    }
  }
}

// A resume on another number of workers adopts a rank's synchronization state: Adam's moments in
// update mode travel in the optimizer's state, so the engine's is left behind; one of the format
// gradsync wrote before 2026-12-01, which held this rank's moments, is refused with the reason.
TEST(DistributedState, AdoptRefusesOnlyTheOlderFormatThatKeptAdamsMoments) {
  runWithTransports(TransportKind::kLoopback, 2, [&](Transport& t) {
    SequenceClassifier model = freshModel();
    auto optimizer = makeOptimizer("adamw", model);
    DistributedOptimizer distributed(*optimizer, model.ptr(), t, {.schedule = "p3:slice=50"});
    for (int64_t s = 0; s < 2; ++s) trainStep(model, distributed, t.rank(), 2, s);
    distributed.waitForParameters();
    EXPECT_NO_THROW(distributed.adoptSyncState(distributed.syncState(), 2));
    StateWriter engine;  // format 1's header: the format, then the units (whose state follows)
    engine.write(uint64_t{1});
    engine.write(uint64_t{1});
    StateWriter legacy;
    legacy.write(engine.take());
    try {
      distributed.adoptSyncState(legacy.take(), 2);
      ADD_FAILURE() << "rank " << t.rank() << ": the older format was adopted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("before 2026-12-01"), std::string::npos) << e.what();
    }
  });
}

// Two workers and a separate server rank (SyncOptions::servers) give one worker's parameters,
// as co-located servers do (DistributedStrategies.ParameterServersGiveOneWorkersParameters).
TEST(DistributedState, SeparateServerRanksThroughThePublicApi) {
  std::vector<SequenceClassifier> one = trained(1, "sgd", {}, kSteps, 0);
  const SyncOptions sync{.servers = 1};
  std::vector<SequenceClassifier> models;
  for (int r = 0; r < 3; ++r) models.push_back(freshModel());
  runWithTransports(TransportKind::kLoopback, 3, [&](Transport& t) {
    SequenceClassifier& model = models[static_cast<size_t>(t.rank())];
    auto optimizer = makeOptimizer("sgd", model);
    if (DistributedOptimizer::isServer(t.rank(), t.size(), sync)) {
      DistributedOptimizer::serve(*optimizer, *model, t, sync);
      return;
    }
    DistributedOptimizer distributed(*optimizer, model.ptr(), t, sync);
    EXPECT_EQ(distributed.workers().size(), 2);
    for (int64_t s = 0; s < kSteps; ++s) trainStep(model, distributed, t.rank(), 2, s);
    distributed.waitForParameters();
  });
  for (int r = 0; r < 2; ++r) EXPECT_LT(maxRelativeDifference(one[0], models[r]), 1e-5) << r;
  // A server rank that builds a DistributedOptimizer is told what to call instead.
  runWithTransports(TransportKind::kLoopback, 1, [&](Transport& t) {
    SequenceClassifier model = freshModel();
    auto optimizer = makeOptimizer("sgd", model);
    EXPECT_THROW(DistributedOptimizer(*optimizer, model.ptr(), t, sync), ConfigError);
  });
}

// Statistics and the trace come through the public API: compressed p3 sends less than dense
// and the trace holds the engine's operations on its communication lane.
TEST(DistributedState, StatisticsAndTrace) {
  constexpr int kWorkers = 2;
  std::vector<SequenceClassifier> models;
  for (int r = 0; r < kWorkers; ++r) models.push_back(freshModel());
  runWithTransports(TransportKind::kLoopback, kWorkers, [&](Transport& t) {
    SequenceClassifier& model = models[static_cast<size_t>(t.rank())];
    auto optimizer = makeOptimizer("sgd-plain", model);
    TraceRecorder trace(t.rank(), {.first = 0, .last = 1}, SteadyClock::instance());
    DistributedOptimizer distributed(
        *optimizer, model.ptr(), t,
        {.schedule = "p3:slice=200", .compress = "topk:0.1", .compressMinElements = 100});
    distributed.setTrace(&trace);
    for (int64_t s = 0; s < 3; ++s) {
      trace.setStep(s);
      trainStep(model, distributed, t.rank(), kWorkers, s);
    }
    distributed.waitForParameters();
    trace.endStep();
    const SyncStats stats = distributed.stats();
    EXPECT_GT(stats.bytesSent, 0u);
    EXPECT_LT(stats.bytesSent, stats.denseBytes);
    EXPECT_GT(stats.commSeconds, 0.0);
    EXPECT_GT(stats.encodeSeconds, 0.0);
    EXPECT_GE(stats.waitSeconds, 0.0);
    int compressed = 0;
    for (const auto& event : nlohmann::json::parse(trace.serialize())) {
      if (event.value("tid", -1) == kCommLane && event.value("cat", "") == "compressed") {
        ++compressed;
      }
    }
    EXPECT_GT(compressed, 0) << "no compressed operation in the trace";
  });
}

// With OD-SGD every worker trains its own copy; withGlobalModel shows each the servers' one
// model and gives it its own back afterwards.
TEST(DistributedState, WithGlobalModelShowsTheServersModelThenTheWorkersOwn) {
  constexpr int kWorkers = 2;
  std::vector<SequenceClassifier> models;
  for (int r = 0; r < kWorkers; ++r) models.push_back(freshModel());
  std::vector<double> apartInside(kWorkers), apartAfter(kWorkers);
  runWithTransports(TransportKind::kLoopback, kWorkers, [&](Transport& t) {
    const auto rank = static_cast<size_t>(t.rank());
    SequenceClassifier& model = models[rank];
    auto optimizer = makeOptimizer("sgd", model);
    DistributedOptimizer distributed(*optimizer, model.ptr(), t,
                                     {.sync = "odsgd", .delayWarmup = 1});
    for (int64_t s = 0; s < 4; ++s) trainStep(model, distributed, t.rank(), kWorkers, s);
    distributed.waitForParameters();
    distributed.withGlobalModel([&] {
      barrier(t);
      apartInside[rank] = maxRelativeDifference(models[0], models[1]);
      barrier(t);
    });
    barrier(t);
    apartAfter[rank] = maxRelativeDifference(models[0], models[1]);
  });
  EXPECT_EQ(apartInside[0], 0.0) << "inside, every worker holds the servers' model";
  EXPECT_GT(apartAfter[0], 1e-4) << "afterwards, each worker trains its own copy again";
}

}  // namespace
}  // namespace gradsync::testing
