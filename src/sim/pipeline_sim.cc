#include "sim/pipeline_sim.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <utility>

#include "gradsync/error.h"

namespace gradsync::sim {
namespace {

void validate(const PipelineSimOptions& o) {
  if (static_cast<int>(o.stages.size()) != o.shape.stages)
    throw ConfigError(fmt::format("pipeline simulation: {} stage costs for {} stages",
                                  o.stages.size(), o.shape.stages));
  if (o.steps < 1)
    throw ConfigError(fmt::format("pipeline simulation: {} steps (at least 1)", o.steps));
  if (o.hopSeconds < 0) throw ConfigError("pipeline simulation: a negative hop time");
  for (const PipelineStageCosts& c : o.stages) {
    if (c.forwardSeconds < 0 || c.backwardSeconds < 0 || c.updateSeconds < 0)
      throw ConfigError("pipeline simulation: a negative stage cost");
  }
}

double duration(const PipelineStageCosts& costs, StageOp::Kind kind) {
  switch (kind) {
    case StageOp::Kind::kForward:
      return costs.forwardSeconds;
    case StageOp::Kind::kBackward:
      return costs.backwardSeconds;
    case StageOp::Kind::kUpdate:
      return costs.updateSeconds;
  }
  return 0;
}

}  // namespace

PipelineSimResult simulatePipeline(const PipelineSimOptions& o) {
  validate(o);
  const int stages = o.shape.stages;
  std::vector<double> free(stages, 0.0);
  // (stage, micro-batch) → when its forward / backward there ended.
  std::map<std::pair<int, int64_t>, double> forwardEnd, backwardEnd;
  PipelineSimResult result;
  result.busySeconds.assign(stages, 0.0);
  result.peakActivations.assign(stages, 0);
  // Per stage, when each kept activation appears (a forward's end) and goes (its backward's
  // end); the peak is counted over these events in time order.
  std::vector<std::vector<std::pair<double, int>>> changes(stages);
  // runInterleaved hands each operation over after its input's producer: its end is known.
  runInterleaved(o.shape, o.steps, [&](int s, const StageOp& op) {
    double start = free[s];
    if (op.kind == StageOp::Kind::kForward && s > 0)
      start = std::max(start, forwardEnd.at({s - 1, op.micro}) + o.hopSeconds);
    if (op.kind == StageOp::Kind::kBackward && s < stages - 1)
      start = std::max(start, backwardEnd.at({s + 1, op.micro}) + o.hopSeconds);
    const double cost = duration(o.stages[s], op.kind);
    free[s] = start + cost;
    result.busySeconds[s] += cost;
    if (op.kind == StageOp::Kind::kForward) {
      forwardEnd[{s, op.micro}] = free[s];
      changes[s].push_back({free[s], +1});
    }
    if (op.kind == StageOp::Kind::kBackward) {
      backwardEnd[{s, op.micro}] = free[s];
      changes[s].push_back({free[s], -1});  // held until the backward ends
    }
  });
  for (int s = 0; s < stages; ++s) {
    std::sort(changes[s].begin(), changes[s].end());  // at a tie, releases (−1) first
    int64_t held = 0;
    for (const auto& change : changes[s]) {
      held += change.second;
      result.peakActivations[s] = std::max(result.peakActivations[s], held);
    }
  }
  result.finishSeconds = free;
  result.makespanSeconds = *std::max_element(free.begin(), free.end());
  result.secondsPerStep = result.makespanSeconds / static_cast<double>(o.steps);
  double busy = 0;
  for (double b : result.busySeconds) busy += b;
  if (result.makespanSeconds > 0) result.utilisation = busy / (stages * result.makespanSeconds);
  return result;
}

}  // namespace gradsync::sim
