// The first `size` ranks of a transport as a transport of their own: the workers' collectives
// when separate parameter servers are the ranks after them. Messages pass through unchanged,
// so the workers' ranks and tags mean the same in both, and so do their hosts: the topology is
// the parent's, restricted to the first `size` ranks (hierarchical collectives and hitopk follow
// it; the workers of a job with servers may make an irregular one, and those then run flat).
#pragma once

#include <optional>
#include <vector>

#include "common/check.h"
#include "gradsync/topology.h"
#include "gradsync/transport.h"

namespace gradsync {

class PrefixTransport final : public Transport {
 public:
  PrefixTransport(Transport& parent, int size) : parent_(parent), size_(size) {
    GS_CHECK(size >= 1 && size <= parent.size() && parent.rank() < size);
    if (const Topology* whole = parent.topology()) {
      std::vector<int> hostOf(size);  // a prefix keeps hosts numbered by their lowest rank
      for (int r = 0; r < size; ++r) hostOf[r] = whole->hostOf(r);
      topology_.emplace(Topology(std::move(hostOf)).withHostLinks(whole->hostLinks()));
    }
  }

  int rank() const override { return parent_.rank(); }
  int size() const override { return size_; }
  const TransportOptions& options() const override { return parent_.options(); }
  WorkPtr send(int peer, uint64_t tag, const void* data, size_t bytes) override {
    GS_CHECK(peer >= 0 && peer < size_);
    return parent_.send(peer, tag, data, bytes);
  }
  WorkPtr recv(int peer, uint64_t tag, void* data, size_t bytes) override {
    GS_CHECK(peer >= 0 && peer < size_);
    return parent_.recv(peer, tag, data, bytes);
  }
  void abort(std::exception_ptr error) override { parent_.abort(std::move(error)); }
  // Everything the process sent, to the servers too.
  uint64_t bytesSent() const override { return parent_.bytesSent(); }
  size_t messageOverheadBytes() const override { return parent_.messageOverheadBytes(); }
  const Topology* topology() const override { return topology_ ? &*topology_ : nullptr; }

 private:
  Transport& parent_;
  const int size_;
  std::optional<Topology> topology_;  // the parent's first size_ ranks; none if it has none
};

}  // namespace gradsync
