#include "transport/tcp/rate_limiter.h"

#include <gtest/gtest.h>

namespace gradsync::tcp {

using std::chrono::milliseconds;

TEST(RateLimiter, UnlimitedAllowsEverything) {
  RateLimiter limiter(0, Nanos{0});
  EXPECT_TRUE(limiter.unlimited());
  EXPECT_EQ(limiter.allowance(Nanos{0}), SIZE_MAX);
}

// Simulates a sender that writes all it may, and sleeps until readyAt (plus `lateness`: a late
// wake-up) when the limiter says wait. Returns the simulated seconds to send `total` bytes.
double secondsToSend(RateLimiter& limiter, size_t total, Nanos lateness) {
  Nanos now{0};
  size_t sent = 0;
  while (sent < total) {
    size_t allowed = limiter.allowance(now);
    if (allowed >= limiter.quantum() || allowed >= total - sent) {
      size_t n = std::min(allowed, total - sent);
      limiter.consume(n);
      sent += n;
    } else {
      now = limiter.readyAt(total - sent) + lateness;
    }
  }
  return std::chrono::duration<double>(now).count();
}

// A sender that always writes all it may must average exactly the configured rate.
TEST(RateLimiter, LongRunRateMatchesConfiguredRate) {
  const double rate = 125e6;  // 1 Gbit/s
  RateLimiter limiter(rate, Nanos{0});
  const size_t total = 64u << 20;
  double expected = (total - rate * 2e-3) / rate;  // the first burst (2 ms) is free
  EXPECT_NEAR(secondsToSend(limiter, total, Nanos{0}), expected, expected * 0.001);
}

// A sender that wakes late keeps the full rate as long as it is late by less than 3/4 of a burst
// (1.5 ms at 1 Gbit/s): tokens must not overflow while it sleeps.
TEST(RateLimiter, LateWakeUpsLoseNoLinkTime) {
  const double rate = 125e6;
  RateLimiter limiter(rate, Nanos{0});
  const size_t total = 64u << 20;
  EXPECT_LT(secondsToSend(limiter, total, std::chrono::microseconds(500)), total / rate * 1.01);
}

TEST(RateLimiter, ReadyAtIsWhenTokensSuffice) {
  RateLimiter limiter(1e6, Nanos{0});  // 1 MB/s, burst 16 KiB
  limiter.consume(limiter.allowance(Nanos{0}));
  Nanos ready = limiter.readyAt(10'000);
  EXPECT_NEAR(std::chrono::duration<double>(ready).count(), 0.01, 1e-6);
  EXPECT_GE(limiter.allowance(ready), 10'000u);
}

}  // namespace gradsync::tcp
