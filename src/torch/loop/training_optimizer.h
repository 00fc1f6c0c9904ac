// The optimizer of `gradsync train` (--optimizer): SGD with momentum, stepped through FusedSGD
// (Shi et al.'s parallel tensor operator, include/gradsync/torch/fused_sgd.h: one pass over each
// group's flat buffers, bitwise torch's SGD) unless --fused-update is off, with LARS's trust
// ratio when --lars > 0; or torch's AdamW (--weight-decay), the language models' optimizer; or
// SignDescent (DeMo's sign update, include/gradsync/torch/sign_descent.h). And
// what the trainer does before each step: the learning-rate schedule (--warmup-steps,
// --lr-schedule) and gradient clipping (--clip-grad-norm). It steps in gradient mode only; in
// update mode (p3, sharded, servers) the engine applies the rule and the optimizer never steps.
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
std::unique_ptr<FusedSGD> makeFusedSgd(const Model& net, const TrainOptions& options);
// --optimizer's: makeFusedSgd's for sgd, torch's AdamW (betas 0.9 and 0.999, eps 1e-8: torch's
// defaults; --weight-decay, decoupled) for adamw, SignDescent (DeMo's update, --weight-decay
// decoupled) for sign.
std::unique_ptr<torch::optim::Optimizer> makeTrainingOptimizer(const Model& net,
                                                               const TrainOptions& options);

// Before the optimizer's step `step` of `total`: every group's learning rate set to
// scheduledLearningRate's (torch/loop/options.h; when a schedule is set), and with --clip-grad-norm
// the gradients scaled so that their global L2 norm is at most that (torch's clip_grad_norm_). On
// every rank the same (the gradients are the averaged ones), except under localsgd, where each
// worker clips its own.
void prepareOptimizerStep(torch::optim::Optimizer& optimizer, const TrainOptions& options,
                          int64_t step, int64_t total);

}  // namespace gradsync
