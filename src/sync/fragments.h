// Streaming DiLoCo's fragments (sync/strategy.h, OuterOptions::fragments): which parameter
// tensors form each fragment and when each is synced. Shared by the outer optimizer that runs
// them (torch/api/outer_optimizer.h) and the simulator that predicts them (sim/outer_rounds.h),
// so both see the same fragments. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace gradsync {

// The fragment of each tensor (by registration index), from the tensors' element counts only (so
// every rank computes the same): largest tensor first (model order on ties), each to the fragment
// with the fewest elements so far. `fragments` >= 1; a fragment may stay empty when there are
// fewer tensors than fragments (callers refuse that first).
std::vector<int> assignFragments(std::span<const int64_t> elements, int fragments);

// The fragment synced after local step `step` (1, 2, ...) with `fragments` fragments over a
// period of `period` local steps, or -1: fragment p at steps (p + 1)·H/P + k·H, so that one
// fragment syncs every H/P steps (`fragments` divides `period`).
int fragmentSyncedAfter(int64_t step, int period, int fragments);

}  // namespace gradsync
