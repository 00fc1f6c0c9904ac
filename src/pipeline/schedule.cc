#include "pipeline/schedule.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/check.h"
#include "gradsync/error.h"

namespace gradsync {

PipelineMode parsePipelineMode(std::string_view text) {
  if (text == "fill-drain") return PipelineMode::kFillDrain;
  if (text == "pb") return PipelineMode::kPipelined;
  throw ConfigError(fmt::format("unknown pipeline mode '{}'", text),
                    {.hint = "choose fill-drain (GPipe) or pb (pipelined backprop)"});
}

const char* pipelineModeName(PipelineMode mode) {
  return mode == PipelineMode::kFillDrain ? "fill-drain" : "pb";
}

int64_t PipelineShape::slots(int64_t steps) const {
  if (steps <= 0) return 0;
  return mode == PipelineMode::kFillDrain ? steps : steps + 2 * (stages - 1);
}

std::vector<StageOp> PipelineShape::opsAt(int stage, int64_t slot, int64_t steps) const {
  GS_CHECK(stage >= 0 && stage < stages && microBatches >= 1);
  using Kind = StageOp::Kind;
  std::vector<StageOp> ops;
  if (mode == PipelineMode::kFillDrain) {
    if (slot < 0 || slot >= steps) return ops;
    const int64_t first = slot * microBatches;
    for (int m = 0; m < microBatches; ++m) ops.push_back({Kind::kForward, first + m});
    for (int m = 0; m < microBatches; ++m) ops.push_back({Kind::kBackward, first + m});
    ops.push_back({Kind::kUpdate, first + microBatches - 1});
    return ops;
  }
  const int64_t forward = slot - stage;
  const int64_t backward = slot - 2 * (stages - 1) + stage;
  if (forward >= 0 && forward < steps) ops.push_back({Kind::kForward, forward});
  if (backward >= 0 && backward < steps) {
    ops.push_back({Kind::kBackward, backward});
    ops.push_back({Kind::kUpdate, backward});
  }
  return ops;
}

std::vector<StageOp> PipelineShape::stageOps(int stage, int64_t steps) const {
  std::vector<StageOp> all;
  for (int64_t slot = 0; slot < slots(steps); ++slot) {
    std::vector<StageOp> ops = opsAt(stage, slot, steps);
    all.insert(all.end(), ops.begin(), ops.end());
  }
  return all;
}

int PipelineShape::nominalDelay(int stage) const {
  return mode == PipelineMode::kFillDrain ? 0 : 2 * (stages - 1 - stage);
}

// Micro-batch i's forward at stage s is at tick i + s; the updates there before its own are
// those of micro-batches j < i whose backward tick j + 2(S − 1) − s is at or after i + s.
int64_t PipelineShape::delay(int stage, int64_t micro) const {
  return std::min<int64_t>(micro, nominalDelay(stage));
}

void runInterleaved(const PipelineShape& shape, int64_t steps,
                    const std::function<void(int stage, const StageOp& op)>& run) {
  const int stages = shape.stages;
  std::vector<std::vector<StageOp>> ops(stages);
  for (int s = 0; s < stages; ++s) ops[s] = shape.stageOps(s, steps);
  std::vector<size_t> next(stages, 0);
  // Per stage, the highest micro-batch whose forward / backward is done (each stage runs them
  // in increasing order).
  std::vector<int64_t> forwarded(stages, -1);
  std::vector<int64_t> backwarded(stages, -1);
  auto ready = [&](int s, const StageOp& op) {
    if (op.kind == StageOp::Kind::kForward) return s == 0 || forwarded[s - 1] >= op.micro;
    if (op.kind == StageOp::Kind::kBackward) {
      return s == stages - 1 || backwarded[s + 1] >= op.micro;
    }
    return true;
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < stages; ++s) {
      while (next[s] < ops[s].size() && ready(s, ops[s][next[s]])) {
        const StageOp& op = ops[s][next[s]++];
        run(s, op);
        if (op.kind == StageOp::Kind::kForward) forwarded[s] = op.micro;
        if (op.kind == StageOp::Kind::kBackward) backwarded[s] = op.micro;
        progress = true;
      }
    }
  }
  for (int s = 0; s < stages; ++s) GS_CHECK(next[s] == ops[s].size());  // no cycle left work
}

std::string PipelineShape::describe() const {
  if (mode == PipelineMode::kFillDrain) {
    return fmt::format("fill-drain, {} stages x {} micro-batches", stages, microBatches);
  }
  return fmt::format("pb, {} stages", stages);
}

}  // namespace gradsync
