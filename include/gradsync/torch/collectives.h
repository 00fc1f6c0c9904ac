// Collectives over LibTorch tensors and modules: tensor allreduce/broadcast/allgather, and the
// broadcasts that make every rank start alike (parameters, optimizer state). Requires the
// library gradsync::torch; the float-span collectives they use are gradsync/collectives.h.
#pragma once

#include <torch/torch.h>

#include "gradsync/collectives.h"
#include "gradsync/transport.h"

namespace gradsync {

// Makes every rank's parameters and floating-point buffers equal to `root`'s. Collective.
void broadcastParameters(torch::nn::Module& module, Transport& transport, int root = 0);
// Makes every rank's per-parameter optimizer state (SGD's momentum buffers, Adam's moments and
// step counts) equal to `root`'s, e.g. after a resume that loaded a checkpoint on rank 0 only.
// The optimizers must be of one type over the same parameters, in the same groups; the groups'
// options (learning rate ...) are the caller's, as torch's Optimizer::load leaves them.
// Collective.
void broadcastOptimizerState(torch::optim::Optimizer& optimizer, Transport& transport,
                             int root = 0);

// Tensor collectives over the ranks of `transport`, in place on contiguous CPU float32 tensors
// (ConfigError otherwise), blocking, with the semantics of gradsync/collectives.h.
void allreduce(Transport& transport, torch::Tensor& tensor, ReduceOp op = ReduceOp::kAverage,
               const CollectiveOptions& options = {});
void broadcast(Transport& transport, torch::Tensor& tensor, int root,
               const CollectiveOptions& options = {});
// Every rank contributes a tensor of the same shape; returns them stacked along a new first
// dimension, indexed by rank.
torch::Tensor allgather(Transport& transport, const torch::Tensor& tensor,
                        const CollectiveOptions& options = {});

}  // namespace gradsync
