// How `gradsync train` synchronizes, from its options: the engine and parameter-server setup of
// the workers' DistributedModel, and the life of a separate parameter-server rank.
#pragma once

#include "gradsync/transport.h"
#include "torch/distributed_model.h"
#include "torch/trainer.h"

namespace gradsync {

// `workers` are the training ranks; `all` adds the separate parameter servers, if any.
SyncSetup syncSetup(const TrainOptions& options, Transport& workers, Transport& all);
// Throws ConfigError for --sync, its companions and --compress/--schedule combinations that
// cannot run.
void validateSyncOptions(const TrainOptions& options);
// A separate parameter server's life (--servers K, the last K ranks): serves the model's units
// until every worker stopped; rethrows a failure.
void serveParameters(Transport& transport, const TrainOptions& options);

}  // namespace gradsync
