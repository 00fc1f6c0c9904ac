// The optimizer of `gradsync train`: SGD with momentum, stepped through FusedSGD (Shi et al.'s
// parallel tensor operator, include/gradsync/torch/fused_sgd.h: one pass over each group's flat
// buffers, bitwise torch's SGD) unless --fused-update is off, with LARS's trust ratio when
// --lars > 0. It steps in gradient mode only; in update mode (p3, sharded, servers) the engine
// applies the rule and the optimizer never steps.
#pragma once

#include <memory>

#include "gradsync/torch/fused_sgd.h"
#include "torch/loop/options.h"
#include "torch/models/models.h"

namespace gradsync {

// Two groups: the optimizer's momentum, and none for the parameters whose compressor applies
// momentum itself (DGC's momentum correction). Construct it before anything keeps pointers to
// the model's parameter data: FusedSGD moves the parameters into flat buffers (their values
// stay).
std::unique_ptr<FusedSGD> makeTrainingOptimizer(const Model& net, const TrainOptions& options);

}  // namespace gradsync
