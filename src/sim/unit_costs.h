// What each communication unit of a step costs on the simulated cluster: the real compressor's
// encoding size and aggregation (compress/), costed with the collectives' step structure
// (cluster.h). A pure function of the options; no simulated time.
#pragma once

#include <cstddef>
#include <vector>

#include "compress/policy.h"
#include "schedule/schedule.h"
#include "sim/cluster.h"
#include "sim/simulator.h"

namespace gradsync::sim {

// Placeholders where only a strategy's shape matters to the simulator, not its optimizer's values
// (the checks and plans that take a learning rate or momentum).
inline constexpr double kAnyLr = 0.1;
inline constexpr double kAnyMomentum = 0.9;

struct UnitCost {
  double allreduceSeconds = 0;  // the unit's exchange: ring allreduce, allgatherv or gtopk tree
  double bytesSent = 0;         // by one worker in that exchange
  double codecSeconds = 0;      // encode + decode (compressed units only)
  size_t wireBytes = 0;         // the unit's encoding (dense: elements x 4)
  bool compressed = false;
};

// By unit of `layout`. `codecCost` (null: free) prices each compressed unit's encode and
// decodes (simulator.h).
std::vector<UnitCost> unitCosts(const ClusterSpec& cluster, const GradientLayout& layout,
                                const std::vector<TensorShape>& tensors,
                                const CompressionPlan& plan, const CodecCostFn& codecCost);

}  // namespace gradsync::sim
