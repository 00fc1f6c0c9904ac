#include "transport/group_transport.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "common/check.h"
#include "gradsync/error.h"
#include "transport/checks.h"

namespace gradsync {

GroupTransport::GroupTransport(Transport& parent, std::vector<int> members)
    : parent_(parent), members_(std::move(members)) {
  auto own = std::find(members_.begin(), members_.end(), parent.rank());
  GS_CHECK(own != members_.end());
  rank_ = static_cast<int>(own - members_.begin());
  for (int member : members_) GS_CHECK(member >= 0 && member < parent.size());
}

int GroupTransport::parentRank(int peer) const {
  checkPeerRank(rank_, size(), peer);
  return members_[peer];
}

WorkPtr GroupTransport::send(int peer, uint64_t tag, const void* data, size_t bytes) {
  return parent_.send(parentRank(peer), tag, data, bytes);
}

WorkPtr GroupTransport::recv(int peer, uint64_t tag, void* data, size_t bytes) {
  return parent_.recv(parentRank(peer), tag, data, bytes);
}

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
  return std::make_unique<GroupTransport>(parent, std::move(ranks));
}

}  // namespace gradsync
