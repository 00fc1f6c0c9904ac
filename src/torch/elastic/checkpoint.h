// Checkpoints of an elastic run (`--elastic` with `--checkpoint-dir`; docs/checkpoints.md): rank 0
// of the round writes the state every member shares (model, optimizer, progress:
// torch/elastic/state.h) after a complete step, so that a job that fell below MIN, or was stopped,
// goes on with --resume on any number of workers within its range. The state holds no world size:
// the global batch is MAX x B whatever the number of workers, and the data position is a count of
// the epoch's samples (data/elastic_sampler.h). The compressors' state is not saved: every round
// starts them afresh (torch/elastic/round.cc), a resumed run's first round too.
//
// Blocking (disk I/O); not thread-safe: one writer per directory (rank 0).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/checkpoint_dir.h"
#include "torch/elastic/state.h"

namespace gradsync {

// The settings an elastic checkpoint must agree with to be resumed: those that fix the data order
// and the global batch. The number of workers is not one of them. The rest is recorded for, and
// compared with, the checkpoints of runs without --elastic (either way: docs/checkpoints.md).
struct ElasticIdentity {
  std::string model;
  std::string dataset;
  size_t batchSize = 0;
  int maxWorkers = 0;
  uint64_t seed = 0;
  std::string sync;        // --sync
  std::string compress;    // --compress with its overrides (compressSetting)
  size_t datasetSize = 0;  // the training set's samples: an epoch's steps at the global batch
};

// `sync`: localsgd's and diloco's committed synchronization state (the outer optimizer's;
// torch/elastic/round.h), saved as a section of its own when not empty.
void saveElasticCheckpoint(CheckpointDir& dir, torch::nn::Module& model,
                           torch::optim::Optimizer& optimizer, const ElasticIdentity& identity,
                           const ElasticProgress& progress, const std::vector<uint8_t>& sync = {});

// Loads the newest checkpoint into model (in place), optimizer and `sync` (empty if the checkpoint
// has none) and returns its progress; nullopt if the directory holds none. A run's without
// --elastic too, when its global batch is MAX x B: its step is the elastic data position at that
// step (at MAX workers an elastic step is DistributedSampler's), `sync` its rank 0's
// synchronization state (the elastic round uses it with localsgd and diloco only). Throws
// DataError for a corrupt file (CheckpointDir says which older one is intact), ConfigError for a
// checkpoint with other settings (naming the setting).
std::optional<ElasticProgress> loadElasticCheckpoint(const CheckpointDir& dir,
                                                     torch::nn::Module& model,
                                                     torch::optim::Optimizer& optimizer,
                                                     const ElasticIdentity& identity,
                                                     std::vector<uint8_t>& sync);

}  // namespace gradsync
