// Emulated egress link for --bandwidth: a token bucket at `bytesPerSec` with a burst of about
// one millisecond of traffic (at least 16 KiB, so small messages are not split). It shapes a
// rank's whole egress, as `tc tbf` on a host's interface does, so quick runs with --bandwidth
// and runs on scripts/netem hosts are comparable. Not thread-safe: owned by the loop thread.
#pragma once

#include <algorithm>
#include <cstddef>

#include "gradsync/clock.h"

namespace gradsync::tcp {

class RateLimiter {
 public:
  // bytesPerSec == 0 means unlimited.
  RateLimiter(double bytesPerSec, Nanos now);

  bool unlimited() const { return rate_ <= 0; }
  // Bytes that may be written at `now`.
  size_t allowance(Nanos now);
  void consume(size_t bytes) { tokens_ -= static_cast<double>(bytes); }
  // The earliest time at which min(bytes, burst) bytes will be allowed.
  Nanos readyAt(size_t bytes) const;

 private:
  double rate_;
  double burst_;
  double tokens_;
  Nanos last_;
};

}  // namespace gradsync::tcp
