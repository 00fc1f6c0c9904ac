// Emulated egress link for --bandwidth: a token bucket at `bytesPerSec` with a burst of two
// milliseconds of traffic (at least 64 KiB, like tc tbf's usual 128 kbit-ish bursts). It shapes a
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
  // When the sender should try again to write `bytes`: once a quarter of the burst (or all of
  // `bytes`, if fewer) is available. Waking before the bucket is full leaves slack for a late
  // wake-up; waking only when full would let tokens overflow the cap and lose link time.
  Nanos readyAt(size_t bytes) const;
  // Smallest write worth waking up for.
  size_t quantum() const { return static_cast<size_t>(burst_ / 4); }

 private:
  double rate_;
  double burst_;
  double tokens_;
  Nanos last_;
};

}  // namespace gradsync::tcp
