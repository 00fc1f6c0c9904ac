// Measures a model profile (sim/model_profile.h) of one of our models on this machine: the
// engine behind `gradsync profile` (docs/cli.md). Torch-free header, like trainer.h.
//
// What is timed, per step, on synthetic input (the trainer's `--dataset synthetic`), in train
// mode, exactly as one `gradsync train` step computes:
//  - forward of a layer (a module Model::run hands to the pre-forward hook: a Linear, a conv, a
//    BatchNorm, a ReLU of a Sequential, a whole residual block): from its hook to the next
//    layer's hook; the first layer also holds what precedes it (flattening the input), the last
//    one the loss. Work between hooks (a functional ReLU, a pool) lands in the layer before it.
//  - backward of a layer with parameters: from the previous gradient-ready event (or the start
//    of backward) until its last parameter's gradient hook fires, which is when the gradient
//    engine of `gradsync train` sees it. Parameterless layers get 0: their backward runs before
//    the next parameter layer in backward order, which absorbs it. Accumulating the very last
//    gradient into .grad (microseconds) after its hook is in no layer.
//  - update: torch::optim::SGD with momentum (train's defaults) over every parameter.
// Each time is the median over the measured steps (robust to a step interrupted by another
// process on a shared machine). The steps run at the lowered priority of train's training
// thread (trainer.h, yieldToCommunication), so that beside other busy processes they take what
// train's steps take.
//
// Concurrent workers (`--workers W`): `gradsync train --workers W` on one host runs W processes
// whose compute competes for the cores, so each worker computes slower than one alone. To
// measure what a worker of such a run sees, W processes (started as train starts its ranks)
// each profile their own model, in lockstep: an untimed barrier before every step, as fifo's
// per-step allreduce keeps train's workers in step. Processes, not threads, because threads of
// one process would share torch's thread pool and allocator, which train's ranks do not. Each
// layer's time is then the median across the ranks of their per-step medians.
#pragma once

#include <cstdint>
#include <string>

#include "gradsync/transport.h"
#include "sim/model_profile.h"
#include "torch/train/trainer.h"

namespace gradsync {

struct ProfileOptions {
  std::string model = "cnn";                    // mlp | cnn | resnet20 | vgg11
  size_t batchSize = TrainOptions{}.batchSize;  // samples per step (train's default per worker)
  int threads = TrainOptions{}.threads;         // torch threads (what train gives each rank)
  int warmupSteps = 3;                          // untimed steps first (allocator, caches)
  int steps = 10;                               // measured steps
  uint64_t seed = 0;                            // initialisation and synthetic data
  int workers = 1;  // processes measuring at once (recorded in device and source)
};

// Throws ConfigError (unknown model, naming the valid ones; a count out of range).
void validateProfileOptions(const ProfileOptions& options);

// Measures alone, on a thread of its own (the caller blocks for warm-up + steps training steps
// and keeps its priority). Sets OpenBLAS's thread count for the process to options.threads, as
// train does for each rank. Throws ConfigError for invalid options.
ModelProfile profileModel(const ProfileOptions& options);

// One of transport.size() ranks measuring at once (every rank calls it with the same options):
// steps in lockstep, and every rank returns the per-layer median across ranks. Throws what the
// collectives throw (peer lost, timeout) as well.
ModelProfile profileModel(Transport& transport, const ProfileOptions& options);

// "gradsync profile --model M --batch-size B ..." with every option spelled out: the profile's
// `source`, a command line that measures it again.
std::string profileCommandLine(const ProfileOptions& options);

}  // namespace gradsync
