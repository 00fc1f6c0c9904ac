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

#include <nlohmann/json.hpp>

#include "ckpt/checkpoint_dir.h"
#include "torch/loop/epoch_loop.h"
#include "torch/loop/options.h"

namespace gradsync {

// The settings a checkpoint must agree with to be resumed (the rest may change, e.g. --steps).
struct RunIdentity {
  std::string model;
  std::string dataset;
  int workers = 0;       // this run's: may differ from the checkpoint's (see batchWorkers)
  int batchWorkers = 0;  // local batches per global step: the workers of the job's first run,
                         // whose global batch a resume on another number of workers keeps
  size_t batchSize = 0;
  uint64_t seed = 0;
  std::string sync;      // the strategy, with its parameter (--sync)
  std::string compress;  // the compressors (--compress and its overrides)
  std::string schedule;  // recorded, not compared: the engine checks that its state fits
};

// The section of saved rank `rank`'s synchronization state.
std::string rankSyncSection(int rank);

// --compress with its overrides, as a checkpoint records it.
std::string compressSetting(const TrainOptions& options);

// The finished epochs as a checkpoint's run section lists them, and back (elastic runs' too).
nlohmann::json epochsJson(const std::vector<EpochRecord>& epochs);
std::vector<EpochRecord> epochsFromJson(const nlohmann::json& epochs);

// `lossSums` and `syncStates` hold every rank's epochLossSum and syncState() (rank order), so
// each rank resumes its own.
void saveCheckpoint(CheckpointDir& dir, torch::nn::Module& model,
                    torch::optim::Optimizer& optimizer, const RunIdentity& identity,
                    const RunPosition& position, const std::vector<double>& lossSums,
                    const std::vector<std::vector<uint8_t>>& syncStates);

// A checkpoint read for a resume: what every rank shares, and each saved rank's part.
struct ResumePoint {
  LoadedCheckpoint checkpoint;
  int workers = 0;       // of the run that wrote it
  int batchWorkers = 0;  // its global batch, in local batches: the resumed run keeps it
  int64_t step = 0;
  std::vector<double> lossSums;  // by saved rank
  std::vector<EpochRecord> epochs;
  // Written by an elastic run (--elastic; docs/checkpoints.md): no rank's own state (its
  // synchronization state, if any, is the job's, for adoptSyncState), and its data position,
  // which the resuming run checks against its own steps per epoch: `epochStep` steps of epoch
  // `epoch` done.
  bool fromElastic = false;
  int64_t epoch = 0;
  int64_t epochStep = 0;
};

// The newest checkpoint in `dir`, checked against this run: every setting of `identity` but the
// number of workers (and batchWorkers, which the checkpoint sets); nullopt if the directory
// holds none. An elastic run's checkpoint resumes too, its MAX as the global batch's workers
// (its sync and compress are compared where it recorded them). Throws DataError for a corrupt file
// (naming the previous intact one), ConfigError when the checkpoint belongs to a run with other
// settings (naming the setting).
std::optional<ResumePoint> readResumePoint(const CheckpointDir& dir, const RunIdentity& identity);

// Loads `point` into model and optimizer (every parameter keeps its storage) and returns rank
// `rank`'s position among `workers`: its own loss sum and synchronization state when the
// checkpoint has as many workers; on another number, the saved ranks' mean loss sum (so the
// epoch's mean stays theirs) and saved rank (rank % saved workers)'s synchronization state, for
// DistributedOptimizer::adoptSyncState. An elastic run's: the job's synchronization state (empty
// if it saved none), for adoptSyncState whatever the number of workers, once its data position
// is checked to be this run's step with `stepsPerEpoch` (both cut an epoch into as many steps of
// the global batch; DataError naming both if not, ConfigError where an elastic run of --steps
// ended its epoch early at its last step).
RunPosition loadResumePoint(const ResumePoint& point, torch::nn::Module& model,
                            torch::optim::Optimizer& optimizer, int rank, int workers,
                            int64_t stepsPerEpoch);

}  // namespace gradsync
