// From the public SyncOptions and the user's optimizer to the engine's setup
// (DistributedOptimizer, and so `gradsync train`): which rule the engine or the servers apply,
// checked against what they can compute exactly; and a separate parameter server's life.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/tensor_shape.h"
#include "gradsync/sync_options.h"
#include "gradsync/transport.h"
#include "torch/api/distributed_model.h"

namespace gradsync {

// Throws the ConfigError of a distributed optimizer that cannot run: `message` says why, `hint`
// what to do instead.
[[noreturn]] void refuseSyncSetup(const std::string& message, const std::string& hint);

// The setup of DistributedModel for `sync` on `workers` training ranks: through servers, by
// local SGD, or over the ring (gradient mode, or p3/sharded applying the optimizer's rule).
// `absorbs` by optimizer parameter (as in its groups): whether that parameter's compressor
// applies momentum itself (dgc), so its group may differ from the others in momentum only.
// Throws ConfigError for a combination that cannot run, with the reason.
SyncSetup setupFor(const torch::optim::Optimizer& optimizer, const SyncOptions& sync, int workers,
                   const std::function<bool(const torch::Tensor&)>& absorbs);
// diloco's group=host: this rank's host (the transport's topology) as a transport of its own
// (referring to `transport`). ConfigError without a topology, or where the hosts have different
// numbers of ranks.
std::unique_ptr<Transport> hostGroupOf(Transport& transport);
// What a host's ranks do every step under group=host: `options` as dense ssgd.
SyncOptions innerOptionsOf(SyncOptions options);
// The checks of setupFor and of the engine that need no optimizer and no transport (`gradsync
// train` runs them before starting its ranks): specs, combinations, what can push to servers.
void validateSync(const SyncOptions& sync, const std::vector<TensorShape>& tensors);
// Whether the engine (or the servers) apply the optimizer's rule under `sync` (update mode: p3,
// sharded, servers), so that the optimizer itself never steps.
bool updatesInEngine(const SyncOptions& sync);
// Which of `tensors` a compressor applies momentum to itself (dgc under `sync`).
std::vector<bool> absorbsMomentum(const SyncOptions& sync, const std::vector<TensorShape>& tensors);
// A separate parameter server's life (SyncOptions::servers: the last ranks of `transport`):
// serves the units of `tensors`, applying `optimizer`'s SGD learning rate and momentum, until
// every worker stopped; rethrows a failure.
void serveParameters(Transport& transport, const std::vector<TensorShape>& tensors,
                     const SyncOptions& sync, const torch::optim::Optimizer& optimizer);

}  // namespace gradsync
