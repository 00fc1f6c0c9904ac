// An elastic run's checkpoint resumed by the data-parallel trainer, without --elastic
// (docs/checkpoints.md, "Between fixed and elastic runs"): in-process, on rank threads.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "gradsync/error.h"
#include "torch/elastic/checkpoint.h"
#include "torch/loop/checkpointing.h"
#include "torch/models/models.h"
#include "train_on_threads.h"

namespace gradsync::testing {
namespace {

// A run without --elastic counts its epochs by steps: an elastic checkpoint whose data position
// is another step of the epoch is refused, naming both, and one written where an elastic run of
// --steps ended its epoch early says so; one at the same position resumes.
TEST(ElasticCheckpoint, AFixedRunResumesOnlyTheElasticPositionOfItsStep) {
  TrainOptions o = quickOptions();  // mlp on 60 synthetic samples, batch 6, 2 workers:
  o.syntheticSamples = 60;          // 5 steps per epoch of 12 samples
  o.batchSize = 6;
  o.steps = 6;
  const ElasticIdentity identity{o.model, o.dataset, o.batchSize,        2,
                                 o.seed,  o.sync,    compressSetting(o), 60};
  std::shared_ptr<Model> net = makeModel(o.model);
  initializeParameters(*net, o.seed);
  torch::optim::SGD optimizer(net->parameters(), torch::optim::SGDOptions(o.lr).momentum(0.9));
  auto resumeAt = [&](const std::string& name, EpochPosition data) {
    o.checkpointDir = scratchPath("elastic-to-fixed", name);
    o.resume = true;
    CheckpointDir dir(o.checkpointDir);
    ElasticProgress progress;
    progress.step = 3;
    progress.data = data;
    saveElasticCheckpoint(dir, *net, optimizer, identity, progress);
    struct Removed {
      std::string path;
      ~Removed() { std::filesystem::remove_all(path); }
    } removed{o.checkpointDir};
    train(2, o);
  };
  EXPECT_NO_THROW(resumeAt("same", {0, 3 * 12}));
  try {
    resumeAt("other", {0, 2 * 12});
    ADD_FAILURE() << "another data position was resumed";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("step 3 is step 2 of epoch 0, where this run has step 3 "
                                         "of epoch 0 (5 steps per epoch)"),
              std::string::npos)
        << e.what();
  }
  try {
    resumeAt("ended", {1, 0});
    ADD_FAILURE() << "an elastic run's early end of its epoch was resumed";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("ended its epoch there"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gradsync::testing
