// What each pipeline stage does, and in which order (docs/algorithms.md, "Pipelined
// backpropagation"). The single-process emulator and the real multi-rank pipeline both run
// exactly these per-stage operation lists, so they compute the same thing in the same order:
// the emulator interleaves the stages on one thread, each rank of the real pipeline runs its
// own stage's list and waits for its inputs on the transport.
//
// Stages s = 0 .. S − 1 (0 holds the input, S − 1 the loss). A run is cut into segments of
// `steps` steps (an epoch, or up to an evaluation); the pipeline is empty at a segment's ends.
// A step is one update of every stage.
//   fill-drain  (GPipe) step t: F of micro-batches tM .. tM + M − 1, B of the same, then U with
//               their summed gradients. Consistent SGD: no stage ever sees a stale weight.
//   pb          (pipelined backprop, Kosson et al.) tick t: F of micro-batch t − s, B of
//               micro-batch t − 2(S − 1) + s, then U with its gradient at once. Micro-batch i's
//               forward at stage s comes 2(S − 1 − s) updates before its update there: the
//               first stage's delay is the largest, the last stage's is 0.
// Torch-free, pure functions: thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace gradsync {

enum class PipelineMode { kFillDrain, kPipelined };
// "fill-drain" or "pb"; ConfigError listing both.
PipelineMode parsePipelineMode(std::string_view text);
const char* pipelineModeName(PipelineMode mode);

struct StageOp {
  enum class Kind { kForward, kBackward, kUpdate };
  Kind kind = Kind::kForward;
  int64_t micro = 0;  // the micro-batch (numbered within the segment); for kUpdate the last one
  bool operator==(const StageOp&) const = default;
};

struct PipelineShape {
  PipelineMode mode = PipelineMode::kPipelined;
  int stages = 1;
  int microBatches = 1;  // per step (fill-drain); pb has one per step

  // Slots (fill-drain steps, pb ticks) until every micro-batch of `steps` steps is updated.
  int64_t slots(int64_t steps) const;
  // The operations of `stage` in slot `slot` of a segment of `steps` steps, in order.
  std::vector<StageOp> opsAt(int stage, int64_t slot, int64_t steps) const;
  // Every operation of `stage` over a segment of `steps` steps, slot after slot.
  std::vector<StageOp> stageOps(int stage, int64_t steps) const;
  // The updates `stage` applies between micro-batch `micro`'s forward and its own update:
  // 2(S − 1 − s) in pb's steady state (fewer while the pipeline fills), 0 with fill-drain.
  int64_t delay(int stage, int64_t micro) const;
  // pb's steady-state delay of `stage`, 2(S − 1 − s); 0 with fill-drain.
  int nominalDelay(int stage) const;
  std::string describe() const;  // "pb, 4 stages" / "fill-drain, 4 stages x 8 micro-batches"
};

// The emulator's order: runs every stage's operations (stageOps) on the calling thread, each
// stage's in its own order, interleaved as the data allows, exactly as the real pipeline's ranks
// run them while waiting for their inputs: a forward of micro-batch i at stage s > 0 after stage
// s − 1's, a backward at s < S − 1 after stage s + 1's. `run(stage, op)` carries one out; its
// exceptions propagate.
void runInterleaved(const PipelineShape& shape, int64_t steps,
                    const std::function<void(int stage, const StageOp& op)>& run);

}  // namespace gradsync
