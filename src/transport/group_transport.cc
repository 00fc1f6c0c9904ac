#include "transport/group_transport.h"

#include <algorithm>

#include "common/check.h"
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

}  // namespace gradsync
