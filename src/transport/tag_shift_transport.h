// A transport's ranks with every tag shifted by a constant: the streams of one of several
// copies of the same protocol (Wavelet's waves, each with its own DistributedOptimizer) kept
// apart on one transport. Sends and receives pass through with tag + shift; ranks, topology,
// options and byte counts are the parent's. Thread-safe as the parent is; the parent must
// outlive it. A shift that makes a tag overflow is a bug (GS_CHECK).
#pragma once

#include <cstdint>
#include <exception>

#include "common/check.h"
#include "gradsync/transport.h"

namespace gradsync {

class TagShiftTransport final : public Transport {
 public:
  TagShiftTransport(Transport& parent, uint64_t shift) : parent_(parent), shift_(shift) {}

  int rank() const override { return parent_.rank(); }
  int size() const override { return parent_.size(); }
  const TransportOptions& options() const override { return parent_.options(); }
  WorkPtr send(int peer, uint64_t tag, const void* data, size_t bytes) override {
    return parent_.send(peer, shifted(tag), data, bytes);
  }
  WorkPtr recv(int peer, uint64_t tag, void* data, size_t bytes) override {
    return parent_.recv(peer, shifted(tag), data, bytes);
  }
  void abort(std::exception_ptr error) override { parent_.abort(std::move(error)); }
  uint64_t bytesSent() const override { return parent_.bytesSent(); }
  size_t messageOverheadBytes() const override { return parent_.messageOverheadBytes(); }
  const Topology* topology() const override { return parent_.topology(); }

 private:
  uint64_t shifted(uint64_t tag) const {
    GS_CHECK(tag <= UINT64_MAX - shift_);
    return tag + shift_;
  }

  Transport& parent_;
  const uint64_t shift_;
};

}  // namespace gradsync
