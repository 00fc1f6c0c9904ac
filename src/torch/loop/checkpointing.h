// Checkpoints of a training run: the model, the optimizer (momentum buffers), every rank's
// synchronization state (DistributedOptimizer::syncState: compressors, Adam's moments in update
// mode, the delayed strategies' local state) and where the run stands, as sections of a ckpt/
// file (docs/checkpoints.md lists them). All other randomness of a run is a pure function of
// (seed, epoch, step) (data order, synthetic data, initialisation, stochastic compressors), so
// the position is the whole random state: a resumed run repeats the uninterrupted one exactly.
#pragma once

#include <torch/torch.h>

#include <optional>
#include <string>

#include "ckpt/checkpoint_dir.h"
#include "torch/loop/epoch_loop.h"
#include "torch/loop/options.h"

namespace gradsync {

// The settings a checkpoint must agree with to be resumed (the rest may change, e.g. --steps).
struct RunIdentity {
  std::string model;
  std::string dataset;
  int workers = 0;
  size_t batchSize = 0;
  uint64_t seed = 0;
  std::string sync;      // the strategy, with its parameter (--sync)
  std::string compress;  // the compressors (--compress and its overrides)
  std::string schedule;  // recorded, not compared: the engine checks that its state fits
};

// `lossSums` and `syncStates` hold every rank's epochLossSum and syncState() (rank order), so
// each rank resumes its own.
void saveCheckpoint(CheckpointDir& dir, torch::nn::Module& model,
                    torch::optim::Optimizer& optimizer, const RunIdentity& identity,
                    const RunPosition& position, const std::vector<double>& lossSums,
                    const std::vector<std::vector<uint8_t>>& syncStates);

// Loads the newest checkpoint into model and optimizer; nullopt if the directory holds none.
// Every parameter keeps its storage (its values are overwritten in place).
// Throws DataError for a corrupt file (naming the previous intact one), ConfigError when the
// checkpoint belongs to a run with other settings (naming the setting).
std::optional<RunPosition> loadCheckpoint(const CheckpointDir& dir, torch::nn::Module& model,
                                          torch::optim::Optimizer& optimizer,
                                          const RunIdentity& identity, int rank);

}  // namespace gradsync
