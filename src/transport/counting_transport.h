// A view of a transport that counts what its own sends put on the network, so that operations
// running at the same time on one transport (p3's concurrent slices) each know their bytes;
// Transport::bytesSent counts everyone's together. Counts as the transport does: the payload plus
// the transport's per-message overhead, messages to oneself excluded. Everything else passes
// through unchanged (ranks, tags, buffers' ownership, errors, the topology: without it the
// hierarchical collectives and hitopk would run flat behind this view). Thread-safe like the
// transport.
#pragma once

#include <atomic>

#include "gradsync/transport.h"

namespace gradsync {

class CountingTransport final : public Transport {
 public:
  explicit CountingTransport(Transport& inner) : inner_(inner) {}

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  const TransportOptions& options() const override { return inner_.options(); }
  WorkPtr send(int peer, uint64_t tag, const void* data, size_t bytes) override {
    if (peer != inner_.rank()) {
      bytes_.fetch_add(bytes + inner_.messageOverheadBytes(), std::memory_order_relaxed);
    }
    return inner_.send(peer, tag, data, bytes);
  }
  WorkPtr recv(int peer, uint64_t tag, void* data, size_t bytes) override {
    return inner_.recv(peer, tag, data, bytes);
  }
  void abort(std::exception_ptr error) override { inner_.abort(std::move(error)); }
  // What this view's sends put on the network.
  uint64_t bytesSent() const override { return bytes_.load(std::memory_order_relaxed); }
  size_t messageOverheadBytes() const override { return inner_.messageOverheadBytes(); }
  const Topology* topology() const override { return inner_.topology(); }

 private:
  Transport& inner_;
  std::atomic<uint64_t> bytes_{0};
};

}  // namespace gradsync
