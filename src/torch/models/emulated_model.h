// Emulated accelerator compute (`gradsync train --compute emulate:PROFILE`, docs/trainer.md):
// a Model whose parameters have a model profile's names and shapes (sim/model_profile.h) and
// whose layers, instead of computing, keep an emulated device (emulated_device.h) busy for the
// profile's time while the host thread sleeps. Everything else is real: DistributedOptimizer's
// hooks, the engine, planner, transports, compressors and servers see real gradient tensors at
// the times backward would produce them, so a step overlaps communication as on a GPU cluster,
// where the host's cores are free to communicate.
//
//  - forward: layer by layer in the profile's order, each after the pre-forward hook of the
//    modules holding its parameters (p3, sharded and servers wait there for the layer's
//    parameters), then the layer's forward time on the device;
//  - backward (autograd, one node per layer, in reverse): the layer's backward time, then its
//    parameters' gradients, which fire DistributedModel's hooks one layer at a time;
//  - gradients are views into a per-rank pool of gradient-like values (Gaussian, scaled per block
//    of 4096 by a log-normal factor) drawn once from a seeded generator, at an offset that
//    changes with the step, tensor and rank: real data for compressors, at no cost per step;
//  - optimizerStep (gradient mode) spends the profile's update time on the device; update mode
//    (p3, sharded, servers) updates in the engine as in real training;
//  - the output is a placeholder: predicts() is false and the trainer skips evaluations.
//
// After backward the parameters' .grad hold nothing the emulation needs: in gradient mode they
// are buffers kept across steps (the averages land there, as DistributedModel writes them), in
// update mode they are undefined, so no step pays for zeroing or accumulating gradients that
// are not used (a GPU would do both at its memory bandwidth, inside the profile's times).
#pragma once

#include <memory>
#include <string>

#include "sim/model_profile.h"
#include "torch/models/models.h"

namespace gradsync {

// The model of `profile` (times already scaled). `rank` and `seed` choose its gradients' content;
// parameters start at zero (broadcast from rank 0 like any model's). Throws ConfigError for a
// profile whose tensor names cannot form a module tree.
std::shared_ptr<Model> makeEmulatedModel(const ModelProfile& profile, int rank, uint64_t seed);

}  // namespace gradsync
