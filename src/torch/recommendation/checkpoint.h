// The workers' part of a recommendation run's full checkpoint (docs/checkpoints.md, "Partial
// recovery"): DLRM's MLPs (and its tables when they are local), the optimizers' state and the
// run's position (the step: the data order is a pure function of it), as sections of a ckpt/
// file in CHECKPOINT_DIR/dense/. The embedding servers save their shards beside it
// (CHECKPOINT_DIR/shard-<s>/); a full checkpoint of step S is the dense file and every shard's
// full save of S.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "ckpt/checkpoint_dir.h"
#include "torch/recommendation/dlrm.h"
#include "torch/recommendation/recommendation.h"

namespace gradsync {

// What must match for a checkpoint to be resumed; the rest (steps, evaluation, metrics) may change.
std::string recommendationIdentity(const RecommendationOptions& options, int workers);

// Writes the checkpoint of `step` (rank 0 only).
void saveRecommendationCheckpoint(CheckpointDir& dir, int64_t step, const std::string& identity,
                                  DlrmModel& model, torch::optim::Optimizer& mlp,
                                  torch::optim::Optimizer* tables);
// Loads the checkpoint of exactly `step` into the model (keeping every parameter's storage) and
// the optimizers. Throws DataError for a missing or corrupt file (naming it) and ConfigError for
// a checkpoint of another run (naming what differs).
void loadRecommendationCheckpoint(const CheckpointDir& dir, int64_t step,
                                  const std::string& identity, DlrmModel& model,
                                  torch::optim::Optimizer& mlp, torch::optim::Optimizer* tables);

}  // namespace gradsync
