// Resuming from a checkpoint repeats the uninterrupted run bitwise, for every strategy and every
// compressor with state (docs/checkpoints.md): the checkpoint holds every rank's
// synchronization state beside the model and the optimizer. And a checkpoint of another run is
// refused, naming what differs.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "gradsync/error.h"
#include "train_on_threads.h"

namespace gradsync::testing {
namespace {

struct Case {
  const char* schedule;
  const char* sync;
  const char* compress;
  bool ps = false;        // ssgd through co-located parameter servers
  int servers = 0;        // separate server ranks
  bool momentum = false;  // AdamW with --compress-momentum (1-bit Adam), its warm-up 2 steps
};

std::string caseName(const Case& c) {
  return testName(std::string(c.schedule) + "_" + c.sync + "_" + c.compress + (c.ps ? "_ps" : "") +
                  (c.servers > 0 ? "_servers" : "") + (c.momentum ? "_momentum" : ""));
}

// 2 workers, batch 6, 60 samples: 5 steps per epoch, so the checkpoint of step 8 is mid-epoch.
// Compression starts at once and on every tensor of the mlp; the delayed strategies' warm-up
// ends at step 2, so their local state is in use when the checkpoint is written.
TrainOptions optionsFor(const Case& c) {
  TrainOptions o = quickOptions();
  o.syntheticSamples = 60;
  o.batchSize = 6;
  o.steps = 12;
  o.schedule = c.schedule;
  o.sync = c.sync;
  o.compression.spec = c.compress;
  o.compression.minElements = 1;
  o.strategy.ps = c.ps;
  o.strategy.servers = c.servers;
  o.strategy.warmup = 2;
  if (c.momentum) {
    o.optimizer = "adamw";
    o.lr = 0.003;  // quickOptions' is SGD's
    o.compression.momentum = true;
    o.compression.warmupSteps = 2;
  }
  return o;
}

// Runs `o` for its first `steps` steps, checkpointing every 4 into a fresh directory named
// after `name`; returns the directory.
std::string checkpointedRun(TrainOptions o, const std::string& name, int64_t steps) {
  o.checkpointDir = scratchPath("resume", name);
  o.checkpointEvery = 4;
  o.steps = steps;
  train(2 + o.strategy.servers, o);
  return o.checkpointDir;
}

// `o`, resuming from the newest checkpoint in `dir`.
TrainOptions resumed(TrainOptions o, const std::string& dir) {
  o.checkpointDir = dir;
  o.resume = true;
  return o;
}

class Resume : public ::testing::TestWithParam<Case> {};

// Interrupted after the checkpoint at step 8, then resumed: the loss curve, the epoch means and
// the final parameters are exactly those of the uninterrupted run.
TEST_P(Resume, ResumedRunRepeatsTheUninterruptedOne) {
  const Case& c = GetParam();
  const int ranks = 2 + c.servers;
  TrainResult uninterrupted = train(ranks, optionsFor(c));
  const std::string dir = checkpointedRun(optionsFor(c), caseName(c), 8);
  TrainResult rest = train(ranks, resumed(optionsFor(c), dir));
  ASSERT_EQ(uninterrupted.losses.size(), 12u);
  EXPECT_EQ(rest.losses,
            std::vector<float>(uninterrupted.losses.begin() + 8, uninterrupted.losses.end()));
  EXPECT_EQ(rest.parameters, uninterrupted.parameters);
  ASSERT_EQ(rest.epochs.size(), uninterrupted.epochs.size());
  for (size_t e = 0; e < rest.epochs.size(); ++e) {
    EXPECT_EQ(rest.epochs[e].trainLoss, uninterrupted.epochs[e].trainLoss) << "epoch " << e;
  }
  std::filesystem::remove_all(dir);
}

// Every strategy dense; every compressor (those with state: error feedback's residual in the
// sparsifiers and quantizers, PowerSGD's Q, DGC's momentum and velocity, GradiVeQ's basis
// mid-phase) over the ring, with p3 and through servers; the delayed strategies with their
// local state (cdsgd's residual, ssdsgd's two last models); diloco with its outer state (the
// global model and the outer momentum), and Streaming DiLoCo with a fragment in flight at the
// checkpoint (launched at step 8, merged at 9; eager: launched at 8, merged at 12, with the local
// tensors at the launch), and diloco with top-k pseudo-gradients (their
// error feedback's residuals). asgd and ssp apply pushes in
// arrival order, which no checkpoint can repeat: not in the matrix.
INSTANTIATE_TEST_SUITE_P(
    Strategies, Resume,
    ::testing::Values(Case{"wfbp", "ssgd", "none"}, Case{"fusion:0.1", "ssgd", "none"},
                      Case{"p3", "ssgd", "none"}, Case{"wfbp", "sharded", "none"},
                      Case{"wfbp", "localsgd:3", "none"}, Case{"wfbp", "ssgd", "none", true},
                      Case{"p3", "ssgd", "none", true}, Case{"wfbp", "ssgd", "none", false, 2},
                      Case{"wfbp", "odsgd", "none"}, Case{"wfbp", "ssdsgd:3", "none"},
                      Case{"wfbp", "cdsgd:3", "none"}, Case{"wfbp", "diloco:3", "none"},
                      Case{"wfbp", "diloco:4,fragments=2,delay=1", "none"},
                      Case{"wfbp", "diloco:4,eager=on", "none"},
                      Case{"wfbp", "diloco:3", "topk:0.3"}),
    [](const auto& info) { return caseName(info.param); });

INSTANTIATE_TEST_SUITE_P(
    Compressors, Resume,
    ::testing::Values(Case{"wfbp", "ssgd", "topk:0.05"}, Case{"wfbp", "ssgd", "mstopk:0.05"},
                      Case{"wfbp", "ssgd", "gtopk:0.05"}, Case{"wfbp", "ssgd", "randomk:0.1"},
                      Case{"wfbp", "ssgd", "dgc:0.05"}, Case{"wfbp", "ssgd", "qsgd:4"},
                      Case{"wfbp", "ssgd", "terngrad"}, Case{"wfbp", "ssgd", "twobit:0.01"},
                      Case{"wfbp", "ssgd", "onebit"}, Case{"wfbp", "ssgd", "signsgd"},
                      Case{"wfbp", "ssgd", "fp16"}, Case{"wfbp", "ssgd", "powersgd:2"},
                      Case{"wfbp", "ssgd", "gradiveq:2,slice=16,train=3,refresh=5"},
                      Case{"p3", "ssgd", "topk:0.05"}, Case{"fusion:0.1", "ssgd", "qsgd:4"},
                      Case{"wfbp", "ssgd", "topk:0.05", true}, Case{"p3", "ssgd", "onebit", true},
                      Case{"wfbp", "odsgd", "topk:0.05"}, Case{"wfbp", "ssdsgd:3", "qsgd:4"},
                      Case{"wfbp", "ssgd", "onebit", false, 0, true},
                      Case{"p3", "ssgd", "onebit", false, 0, true}),
    [](const auto& info) { return caseName(info.param); });

// A resume of the checkpoint in `dir` with `changed` settings is refused with a ConfigError
// naming `named`.
void expectRefused(const TrainOptions& changed, const std::string& dir, const char* named) {
  try {
    train(2, resumed(changed, dir));
    ADD_FAILURE() << "a checkpoint of another run was resumed (" << named << ")";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(named), std::string::npos) << e.what();
  }
}

// The checkpoint records the data, the strategy and the compressors; a resume that differs in
// one of them is refused naming it (docs/checkpoints.md, "Resuming with other settings").
TEST(ResumeRules, ACheckpointOfAnotherRunIsRefusedNamingTheDifference) {
  const Case c{"wfbp", "ssgd", "topk:0.05"};
  const std::string dir = checkpointedRun(optionsFor(c), "rules", 4);
  TrainOptions other = optionsFor(c);
  other.batchSize = 3;
  expectRefused(other, dir, "batch_size");
  other = optionsFor(c);
  other.compression.spec = "qsgd:4";
  expectRefused(other, dir, "compress");
  other = optionsFor(c);
  other.sync = "sharded";
  expectRefused(other, dir, "sync");  // another number of workers maps: resume_world_test.cc
  std::filesystem::remove_all(dir);
}

// A dense run's engine holds no state that depends on its units: the schedule may change.
TEST(ResumeRules, ADenseRunMayChangeItsSchedule) {
  const Case c{"wfbp", "ssgd", "none"};
  TrainResult uninterrupted = train(2, optionsFor(c));
  const std::string dir = checkpointedRun(optionsFor(c), "schedule", 8);
  TrainOptions fusion = optionsFor(c);
  fusion.schedule = "fusion:0.1";
  TrainResult rest = train(2, resumed(fusion, dir));
  EXPECT_LT(maxRelativeDifference(rest.parameters, uninterrupted.parameters), 1e-4);
  std::filesystem::remove_all(dir);
}

// With a compressor, the units are the state's layout: another schedule is refused.
TEST(ResumeRules, ACompressedRunKeepsItsSchedule) {
  const Case c{"wfbp", "ssgd", "topk:0.05"};
  const std::string dir = checkpointedRun(optionsFor(c), "compressed-schedule", 4);
  TrainOptions fusion = optionsFor(c);
  fusion.schedule = "fusion:0.1";
  EXPECT_THROW(train(2, resumed(fusion, dir)), DataError);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gradsync::testing
