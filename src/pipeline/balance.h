// Stage boundaries: which consecutive layers of a model's chain each pipeline stage runs.
// Torch-free, pure functions.
#pragma once

#include <span>
#include <string_view>
#include <vector>

namespace gradsync {

// Layers per stage (each ≥ 1, summing to costs.size()) that minimise the most expensive
// stage's summed cost: the pipeline's tick is its slowest stage. Exact (dynamic programming over
// every contiguous split); among equal splits, the one whose earlier stages take fewer layers.
// Throws ConfigError when there are fewer layers than stages or a cost is negative.
std::vector<int> balanceStages(std::span<const double> costs, int stages);

// `--stage-layers 3,4,2,2`: layers per stage by hand. Throws ConfigError unless there are
// `stages` positive counts that sum to `layers`.
std::vector<int> parseStageLayers(std::string_view text, size_t layers, int stages);

// The slowest stage's summed cost under `split` (what balanceStages minimises).
double slowestStage(std::span<const double> costs, std::span<const int> split);

}  // namespace gradsync
