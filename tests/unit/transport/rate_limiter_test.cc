#include "transport/tcp/rate_limiter.h"

#include <gtest/gtest.h>

namespace gradsync::tcp {

using std::chrono::milliseconds;

TEST(RateLimiter, UnlimitedAllowsEverything) {
  RateLimiter limiter(0, Nanos{0});
  EXPECT_TRUE(limiter.unlimited());
  EXPECT_EQ(limiter.allowance(Nanos{0}), SIZE_MAX);
}

// A simulated sender that always writes all it may must average exactly the configured rate.
TEST(RateLimiter, LongRunRateMatchesConfiguredRate) {
  const double rate = 125e6;  // 1 Gbit/s
  RateLimiter limiter(rate, Nanos{0});
  Nanos now{0};
  size_t sent = 0;
  const size_t total = 64u << 20;
  while (sent < total) {
    size_t allowed = limiter.allowance(now);
    if (allowed >= 16 * 1024 || allowed >= total - sent) {
      size_t n = std::min(allowed, total - sent);
      limiter.consume(n);
      sent += n;
    } else {
      now = limiter.readyAt(total - sent);
    }
  }
  double seconds = std::chrono::duration<double>(now).count();
  double expected = (total - 125e3) / rate;  // the first burst is free
  EXPECT_NEAR(seconds, expected, expected * 0.01);
}

TEST(RateLimiter, ReadyAtIsWhenTokensSuffice) {
  RateLimiter limiter(1e6, Nanos{0});  // 1 MB/s, burst 16 KiB
  limiter.consume(limiter.allowance(Nanos{0}));
  Nanos ready = limiter.readyAt(10'000);
  EXPECT_NEAR(std::chrono::duration<double>(ready).count(), 0.01, 1e-6);
  EXPECT_GE(limiter.allowance(ready), 10'000u);
}

}  // namespace gradsync::tcp
