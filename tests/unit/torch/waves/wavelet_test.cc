// `gradsync train --waves`: Wavelet's tick-tock waves (torch/waves/wavelet_trainer.h) on rank
// threads over loopback and TCP.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <mutex>

#include <fmt/format.h>

#include "gradsync/error.h"
#include "train_on_threads.h"

namespace gradsync::testing {
namespace {

// Every rank's result, by rank.
std::vector<TrainResult> trainAll(int workers, const TrainOptions& options, TransportKind kind) {
  std::vector<TrainResult> results(static_cast<size_t>(workers));
  std::mutex mutex;
  runWithTransports(kind, workers, [&](Transport& t) {
    TrainResult result = runTraining(t, options);
    std::lock_guard<std::mutex> lock(mutex);
    results[static_cast<size_t>(t.rank())] = std::move(result);
  });
  return results;
}

// The mean over ranks of each group of `group` consecutive losses: the loss of one global
// batch of the reference, whatever the waves (the sampler deals the same samples out).
std::vector<double> globalLosses(const std::vector<TrainResult>& ranks, int group) {
  std::vector<double> means(ranks[0].losses.size() / static_cast<size_t>(group), 0.0);
  for (const TrainResult& r : ranks) {
    for (size_t i = 0; i < r.losses.size(); ++i) {
      means[i / static_cast<size_t>(group)] += r.losses[i] / (group * ranks.size());
    }
  }
  return means;
}

// accumulate: the waves' averaged gradients of a round make one update, and their batches
// together are the reference's batch at waves x B (data/sampler.h: global batch t at B is
// permutation[t*W*B, (t+1)*W*B), so K consecutive ones are batch t/K at K*B). So K waves at B
// must train what one wave at K*B trains, up to the float rounding of the sums' order (the
// bound is Trainer.MultiWorkerAverageEqualsSingleWorkerLargeBatch's, with BatchNorm frozen for
// the reasons given at kSameMath in trainer_test.cc).
TEST(Wavelet, AccumulateEqualsOneWaveAtWavesTimesTheBatch) {
  struct Case {
    const char* model;
    int workers;
    int waves;
    TransportKind kind;
  };
  for (const Case& c :
       {Case{"mlp", 2, 2, TransportKind::kLoopback}, Case{"cnn", 2, 2, TransportKind::kTcp},
        Case{"cnn", 3, 2, TransportKind::kTcp}, Case{"mlp", 3, 3, TransportKind::kLoopback}}) {
    TrainOptions one = quickOptions();
    one.model = c.model;
    one.freezeBatchNorm = true;
    one.batchSize = 4 * static_cast<size_t>(c.waves);
    one.steps = 4;
    TrainOptions waves = one;
    waves.batchSize = 4;
    waves.steps = 4 * c.waves;
    waves.waves = c.waves;
    waves.waveConsistency = "accumulate";
    const std::vector<TrainResult> reference = trainAll(c.workers, one, c.kind);
    const std::vector<TrainResult> waved = trainAll(c.workers, waves, c.kind);
    ASSERT_EQ(waved[0].steps, 4 * c.waves);
    ASSERT_EQ(waved[0].losses.size(), static_cast<size_t>(4 * c.waves));
    const std::string what = fmt::format("{} on {} workers, {} waves", c.model, c.workers, c.waves);
    for (int r = 0; r < c.workers; ++r) {
      EXPECT_LT(maxRelativeDifference(reference[r].parameters, waved[r].parameters), 1e-4)
          << what << ", rank " << r;
    }
    std::vector<double> ref = globalLosses(reference, 1);
    std::vector<double> got = globalLosses(waved, c.waves);
    ASSERT_EQ(ref.size(), got.size());
    for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(ref[i], got[i], 1e-5 * ref[i]) << what;
  }
}

// The gates (Orion's Tick-Tock): no two forwards overlap, no two backwards overlap, the waves
// take turns at each from wave 0, and the half-iteration offset shows: a forward runs beside
// the other wave's backward.
void expectTickTock(const std::vector<WaveInterval>& passes, int waves, int64_t steps) {
  for (WavePhase phase : {WavePhase::kForward, WavePhase::kBackward}) {
    std::vector<WaveInterval> these;
    for (const WaveInterval& p : passes) {
      if (p.phase == phase) these.push_back(p);
    }
    ASSERT_EQ(these.size(), static_cast<size_t>(steps));
    std::sort(these.begin(), these.end(),
              [](const WaveInterval& a, const WaveInterval& b) { return a.start < b.start; });
    for (size_t i = 0; i < these.size(); ++i) {
      EXPECT_EQ(these[i].wave, static_cast<int>(i % waves)) << "pass " << i;
      EXPECT_EQ(these[i].step, static_cast<int64_t>(i / waves)) << "pass " << i;
      if (i > 0) {
        EXPECT_GE(these[i].start, these[i - 1].end) << "passes " << i - 1 << ", " << i;
      }
    }
  }
  int besideBackward = 0;
  for (const WaveInterval& f : passes) {
    for (const WaveInterval& b : passes) {
      besideBackward += f.phase == WavePhase::kForward && b.phase == WavePhase::kBackward &&
                        f.wave != b.wave && f.start < b.end && b.start < f.end;
    }
  }
  EXPECT_GT(besideBackward, 0) << "no forward ran beside the other wave's backward";
}

// shared, on Fashion-MNIST: both waves' steps run and count, the loss falls, every worker holds
// the same weights (the updates are applied in the waves' order), the gates hold. The waves
// take batches 0, 2, ... and 1, 3, ...: the samples and the number of updates of one wave at
// the same batch, whose accuracy shared must keep up with when the staleness of one update
// costs little. It does without momentum (measured: 64.88% against 67.17% after 60 steps); with
// momentum 0.9 the staleness acts as extra momentum and costs 19 points this early
// (docs/algorithms.md "Wavelet"), which is why accumulate is the default.
TEST(Wavelet, SharedTrainsAndKeepsTheTickTockGates) {
  TrainOptions o = quickOptions();
  o.dataset = "fashion-mnist";
  o.batchSize = 32;
  o.steps = 60;
  o.momentum = 0;
  const TrainResult reference = train(2, o, TransportKind::kTcp);
  o.waves = 2;
  o.waveConsistency = "shared";
  const std::vector<TrainResult> ranks = trainAll(2, o, TransportKind::kTcp);
  const TrainResult& r = ranks[0];
  EXPECT_EQ(r.steps, 60);
  ASSERT_EQ(r.losses.size(), 60u);
  double first = 0, last = 0;
  for (int i = 0; i < 10; ++i) {
    first += r.losses[static_cast<size_t>(i)] / 10;
    last += r.losses[static_cast<size_t>(50 + i)] / 10;
  }
  EXPECT_LT(last, first) << "the loss did not fall";
  EXPECT_GT(r.finalTestAccuracy, reference.finalTestAccuracy - 0.03);
  EXPECT_EQ(ranks[0].parameters, ranks[1].parameters);
  for (const TrainResult& rank : ranks) expectTickTock(rank.waveIntervals, 2, 60);
  // Every forward is exactly one update stale, whatever the timing: a second run repeats.
  EXPECT_EQ(trainAll(2, o, TransportKind::kTcp)[0].parameters, r.parameters);
}

// What --waves cannot run with is refused before any work starts, naming why. (With --pipeline
// the waves are model-parallel: pipeline_test.cc, RefusesWavesItCannotPlace.)
TEST(Wavelet, UnsupportedCombinationsAreRefusedUpFront) {
  const std::vector<std::pair<std::function<void(TrainOptions&)>, std::string>> refused = {
      {[](TrainOptions& o) { o.schedule = "p3"; }, "--schedule p3"},
      {[](TrainOptions& o) { o.schedule = "auto"; }, "--schedule auto"},
      {[](TrainOptions& o) { o.sync = "sharded"; }, "--sync sharded"},
      {[](TrainOptions& o) { o.sync = "asgd"; }, "--sync asgd"},
      {[](TrainOptions& o) { o.sync = "localsgd:4"; }, "--sync localsgd:4"},
      {[](TrainOptions& o) { o.strategy.ps = true; }, "--ps"},
      {[](TrainOptions& o) { o.elastic = "2:4"; }, "--elastic"},
      {[](TrainOptions& o) { o.dataUrl = "http://127.0.0.1:1/x"; }, "--data-url"},
      {[](TrainOptions& o) { o.checkpointDir = "/tmp/x"; }, "--checkpoint-dir"},
      {[](TrainOptions& o) { o.tracePath = "/tmp/x.json"; }, "--trace"},
      {[](TrainOptions& o) { o.evalEvery = 5; }, "--eval-every"},
      {[](TrainOptions& o) { o.compression.spec = "dgc:0.01"; }, "--compress dgc"},
      {[](TrainOptions& o) { o.steps = 7; }, "--steps 7 is not a multiple of --waves 2"},
      {[](TrainOptions& o) { o.waveConsistency = "average"; }, "--wave-consistency 'average'"},
      {[](TrainOptions& o) { o.waves = 5; }, "--waves must be 1 to 4"},
  };
  for (const auto& [change, reason] : refused) {
    TrainOptions o = quickOptions();
    o.waves = 2;
    change(o);
    try {
      validateTrainOptions(o);
      ADD_FAILURE() << "not refused: " << reason;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(reason), std::string::npos) << e.what();
    }
  }
  TrainOptions fine = quickOptions();
  fine.waves = 2;
  fine.compression.spec = "topk:0.1";
  EXPECT_NO_THROW(validateTrainOptions(fine));
}

}  // namespace
}  // namespace gradsync::testing
