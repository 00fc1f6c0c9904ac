#include "pipeline/balance.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <limits>
#include <numeric>

#include "gradsync/error.h"

namespace gradsync {

// best[k][i]: the smallest slowest-stage cost of layers [0, i) in k stages; cut[k][i] the start
// of the k-th stage in it. O(S·L²) with L layers: microseconds for any model here.
std::vector<int> balanceStages(std::span<const double> costs, int stages) {
  const size_t layers = costs.size();
  if (stages < 1 || static_cast<size_t>(stages) > layers) {
    throw ConfigError(fmt::format("cannot split {} layers into {} pipeline stages", layers, stages),
                      {.hint = "a stage needs at least one layer: use fewer stages"});
  }
  if (std::any_of(costs.begin(), costs.end(), [](double c) { return !(c >= 0); })) {
    throw ConfigError("a layer's cost in the stage profile is negative or not a number");
  }
  std::vector<double> prefix(layers + 1, 0.0);
  std::partial_sum(costs.begin(), costs.end(), prefix.begin() + 1);
  const double kInf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(stages + 1, std::vector<double>(layers + 1, kInf));
  std::vector<std::vector<size_t>> cut(stages + 1, std::vector<size_t>(layers + 1, 0));
  best[0][0] = 0;
  for (int k = 1; k <= stages; ++k) {
    for (size_t i = static_cast<size_t>(k); i <= layers; ++i) {
      for (size_t j = static_cast<size_t>(k - 1); j < i; ++j) {
        const double cost = std::max(best[k - 1][j], prefix[i] - prefix[j]);
        if (cost < best[k][i]) {
          best[k][i] = cost;
          cut[k][i] = j;
        }
      }
    }
  }
  std::vector<int> split(stages);
  size_t end = layers;
  for (int k = stages; k >= 1; --k) {
    split[k - 1] = static_cast<int>(end - cut[k][end]);
    end = cut[k][end];
  }
  return split;
}

std::vector<int> parseStageLayers(std::string_view text, size_t layers, int stages) {
  std::vector<int> split;
  auto bad = [&](const std::string& why) {
    return ConfigError(fmt::format("--stage-layers '{}': {}", text, why),
                       {.hint = fmt::format("give {} positive layer counts that sum to {}, e.g. {}",
                                            stages, layers, "3,4,2,2")});
  };
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    int count = 0;
    const char* first = text.data() + start;
    const char* last = text.data() + comma;
    auto [end, error] = std::from_chars(first, last, count);
    if (error != std::errc() || end != last || count < 1) throw bad("not a positive count");
    split.push_back(count);
    start = comma + 1;
  }
  if (static_cast<int>(split.size()) != stages) {
    throw bad(fmt::format("{} counts for {} stages", split.size(), stages));
  }
  if (std::accumulate(split.begin(), split.end(), size_t{0}) != layers) {
    throw bad(fmt::format("the model has {} layers", layers));
  }
  return split;
}

double slowestStage(std::span<const double> costs, std::span<const int> split) {
  double slowest = 0;
  size_t layer = 0;
  for (int count : split) {
    double sum = 0;
    for (int i = 0; i < count && layer < costs.size(); ++i) sum += costs[layer++];
    slowest = std::max(slowest, sum);
  }
  return slowest;
}

}  // namespace gradsync
