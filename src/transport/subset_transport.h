// Some ranks of a transport as a transport of their own (rank i here is ranks[i] there): the
// replicas of one pipeline stage, which synchronize their gradients among themselves while the
// whole job carries activations between stages. Messages pass through unchanged (same tags), so
// two subsets that share no rank never meet; subsets that share ranks must use distinct tags.
#pragma once

#include <algorithm>
#include <vector>

#include "common/check.h"
#include "gradsync/transport.h"

namespace gradsync {

class SubsetTransport final : public Transport {
 public:
  // `ranks`: distinct ranks of `parent`, in the order they get here; the caller's must be one.
  SubsetTransport(Transport& parent, std::vector<int> ranks)
      : parent_(parent), ranks_(std::move(ranks)) {
    auto mine = std::find(ranks_.begin(), ranks_.end(), parent.rank());
    GS_CHECK(mine != ranks_.end());
    rank_ = static_cast<int>(mine - ranks_.begin());
    for (int r : ranks_) GS_CHECK(r >= 0 && r < parent.size());
  }

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(ranks_.size()); }
  const TransportOptions& options() const override { return parent_.options(); }
  WorkPtr send(int peer, uint64_t tag, const void* data, size_t bytes) override {
    return parent_.send(parentRank(peer), tag, data, bytes);
  }
  WorkPtr recv(int peer, uint64_t tag, void* data, size_t bytes) override {
    return parent_.recv(parentRank(peer), tag, data, bytes);
  }
  void abort(std::exception_ptr error) override { parent_.abort(std::move(error)); }
  // Everything the process sent (its other links too).
  uint64_t bytesSent() const override { return parent_.bytesSent(); }
  int parentRank(int peer) const {
    GS_CHECK(peer >= 0 && peer < size());
    return ranks_[static_cast<size_t>(peer)];
  }

 private:
  Transport& parent_;
  const std::vector<int> ranks_;
  int rank_ = 0;
};

}  // namespace gradsync
