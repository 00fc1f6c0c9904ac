// A subset of a transport's ranks as a transport of their own: a host's local group or a cross
// group (gradsync/topology.h), on which hierarchical collectives run the ordinary ring
// collectives; the replicas of one pipeline stage, which synchronize their gradients among
// themselves while the whole job carries activations between stages; a user's process set
// (gradsync::subsetTransport, which checks the ranks first). Rank i of the group is parent rank
// members[i]; messages pass through unchanged (same tags), so a group's collective and the
// parent's never meet as long as they are called one after the other by every rank, as a
// hierarchical collective does, and groups that share ranks at once must use distinct tags.
// Holds a reference to the parent, which must outlive it. Thread-safe as the parent is.
#pragma once

#include <vector>

#include "gradsync/transport.h"

namespace gradsync {

class GroupTransport final : public Transport {
 public:
  // `members`: parent ranks, distinct, including the parent's own rank.
  GroupTransport(Transport& parent, std::vector<int> members);

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(members_.size()); }
  const TransportOptions& options() const override { return parent_.options(); }
  WorkPtr send(int peer, uint64_t tag, const void* data, size_t bytes) override;
  WorkPtr recv(int peer, uint64_t tag, void* data, size_t bytes) override;
  // Aborts the parent: a failure in a group breaks the whole job's communication anyway.
  void abort(std::exception_ptr error) override { parent_.abort(std::move(error)); }
  // Everything the process sent, through any group.
  uint64_t bytesSent() const override { return parent_.bytesSent(); }

  const std::vector<int>& members() const { return members_; }

 private:
  int parentRank(int peer) const;

  Transport& parent_;
  const std::vector<int> members_;
  int rank_ = -1;
};

}  // namespace gradsync
