#include "sync/staleness_report.h"

#include <array>
#include <cstring>

#include <fmt/format.h>

#include "gradsync/collectives.h"

namespace gradsync {

std::vector<RankStaleness> gatherStaleness(Transport& workers, const SyncStrategy& strategy,
                                           StalenessCounts mine, uint64_t tag) {
  using K = SyncStrategy::Kind;
  if (strategy.kind != K::kAsgd && strategy.kind != K::kSsp) return {};
  constexpr size_t kFields = 3;
  const auto size = static_cast<size_t>(workers.size());
  std::vector<uint64_t> all(kFields * size);
  const std::array<uint64_t, kFields> own = {mine.pushes, mine.sum, mine.max};
  std::memcpy(all.data() + kFields * static_cast<size_t>(workers.rank()), own.data(), sizeof own);
  std::vector<size_t> counts(size, sizeof own);
  allgatherv(workers, {reinterpret_cast<uint8_t*>(all.data()), all.size() * sizeof(uint64_t)},
             counts, CollectiveOptions{.tag = tag});
  std::vector<RankStaleness> ranks;
  for (size_t r = 0; r < size; ++r) {
    const uint64_t pushes = all[kFields * r];
    const double mean =
        pushes > 0 ? static_cast<double>(all[kFields * r + 1]) / static_cast<double>(pushes) : 0;
    ranks.push_back({static_cast<int>(r), pushes, mean, all[kFields * r + 2]});
  }
  return ranks;
}

std::string describe(std::span<const RankStaleness> ranks) {
  std::string text = "staleness per rank (updates between a pull and its push's update):";
  for (const RankStaleness& r : ranks) {
    text += fmt::format("{} rank {} mean {:.2f}, max {} over {} pushes",
                        &r == ranks.data() ? "" : ";", r.rank, r.mean, r.max, r.pushes);
  }
  return text;
}

std::string summarize(std::span<const RankStaleness> ranks) {
  std::string text;
  for (const RankStaleness& r : ranks) {
    text += fmt::format("{}{:.2f}/{}", text.empty() ? "" : " ", r.mean, r.max);
  }
  return text;
}

}  // namespace gradsync
