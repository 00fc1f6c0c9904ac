// subsetTransport (gradsync/transport.h): the checks a caller's list of ranks must pass before
// it becomes a SubsetTransport.
#include "transport/subset_transport.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "gradsync/error.h"

namespace gradsync {

std::unique_ptr<Transport> subsetTransport(Transport& parent, std::vector<int> ranks) {
  std::vector<int> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  const bool distinct = std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end();
  const bool inRange = sorted.empty() || (sorted.front() >= 0 && sorted.back() < parent.size());
  const bool mine = std::binary_search(sorted.begin(), sorted.end(), parent.rank());
  if (!distinct || !inRange || !mine) {
    throw ConfigError(
        fmt::format("a group of ranks [{}] of a job of {}: the ranks must be distinct, between 0 "
                    "and {}, and include this rank ({})",
                    fmt::join(ranks, ", "), parent.size(), parent.size() - 1, parent.rank()),
        {.rank = parent.rank()});
  }
  return std::make_unique<SubsetTransport>(parent, std::move(ranks));
}

}  // namespace gradsync
