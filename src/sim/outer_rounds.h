// localsgd and the DiLoCo family in the simulator (docs/simulator.md, "Outer rounds"): local
// steps that communicate nothing, and every H steps an outer sync, as the outer optimizer runs
// it (torch/api/outer_optimizer.h):
//  - a sync exchanges each compressed tensor through its compressor (`--compress`: its encoding
//    and aggregation, as sim/unit_costs.h prices them), then every dense one in a single
//    all-reduce, fp32 or (quantize=int8) the int8 ring; then diloco's outer step on the training
//    thread (priced as the profile's optimizer step over the tensors synced; localsgd's average
//    has none);
//  - Streaming DiLoCo: fragments=P syncs one fragment (sync/fragments.h) every H/P steps; with
//    delay=τ (eager: τ = H/P) its all-reduce runs while τ more local steps go on, and the merge
//    waits only for what it has not hidden;
//  - group=host: a local step is a data-parallel ssgd step among the host's devices (the
//    simulator's own ring model on one host), and the outer sync spans every device.
// One representative worker's timeline, in closed form step by step (no event queue: nothing
// inside a local step overlaps the outer sync but the delayed fragment's all-reduce). Pure
// function; thread-safe.
#pragma once

#include "sim/simulator.h"

namespace gradsync::sim {

// `options.sync` is localsgd:H or diloco:H[,...]; throws ConfigError for what train refuses
// (compression with localsgd, parameter servers, more fragments than tensors). The result's
// scalingEfficiency is left 0 (simulate() sets it).
SimResult simulateOuterRounds(const SimOptions& options);

}  // namespace gradsync::sim
