// Streaming DiLoCo's fragments (sync/strategy.h, OuterOptions::fragments): which parameter
// tensors form each fragment and when each is synced; and how a sync lays out its dense
// pseudo-gradients in one buffer. Shared by the outer optimizer that runs
// them (torch/api/outer_optimizer.h) and the simulator that predicts them (sim/outer_rounds.h),
// so both see the same fragments. Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace gradsync {

// Throws ConfigError when a model of `tensors` parameter tensors cannot form `fragments`
// fragments (fewer tensors than fragments): the outer optimizer and the simulator refuse alike.
void checkFragmentsFit(int fragments, size_t tensors);

// The fragment of each tensor (by registration index), from the tensors' element counts only (so
// every rank computes the same): largest tensor first (model order on ties), each to the fragment
// with the fewest elements so far. `fragments` >= 1; a fragment may stay empty when there are
// fewer tensors than fragments (callers refuse that first).
std::vector<int> assignFragments(std::span<const int64_t> elements, int fragments);

// The fragment synced after local step `step` (1, 2, ...) with `fragments` fragments over a
// period of `period` local steps, or -1: fragment p at steps (p + 1)·H/P + k·H, so that one
// fragment syncs every H/P steps (`fragments` divides `period`).
int fragmentSyncedAfter(int64_t step, int period, int fragments);

// Whether the outer state settles after local step `step`: an outer update was merged then and
// none is in flight, so θ_global holds every outer update launched so far and every rank could
// restart from it (an elastic round's commits, docs/cluster.md). Without fragments or delay the
// outer steps (every H steps); with them each fragment's merge, `delay` steps after its sync;
// with `eager` never (after the first launch an all-reduce is always in flight).
bool outerStateSettlesAfter(int64_t step, int period, int fragments, int delay, bool eager);

// One buffer for the dense pseudo-gradients of a sync, all-reduced at once: tensor k (of
// `elements[k]` elements; 0 for one that travels otherwise) at offsets[k], a multiple of
// `align`; the buffer's `elements` a multiple of `align` x `ranks`. With the int8 ring's chunk as
// `align`, the ring's blocks and the chunks it scales from each block's start never span two
// tensors (the padding is zeros); align 1 packs the tensors.
struct FusedLayout {
  std::vector<int64_t> offsets;
  int64_t elements = 0;
};
FusedLayout fusedLayout(std::span<const int64_t> elements, int64_t align, int ranks);

}  // namespace gradsync
