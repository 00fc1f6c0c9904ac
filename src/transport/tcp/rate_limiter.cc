#include "transport/tcp/rate_limiter.h"

namespace gradsync::tcp {

RateLimiter::RateLimiter(double bytesPerSec, Nanos now)
    : rate_(bytesPerSec),
      burst_(std::max(64.0 * 1024, bytesPerSec * 2e-3)),
      tokens_(burst_),
      last_(now) {}

size_t RateLimiter::allowance(Nanos now) {
  if (unlimited()) return SIZE_MAX;
  double elapsed = std::chrono::duration<double>(now - last_).count();
  tokens_ = std::min(burst_, tokens_ + elapsed * rate_);
  last_ = now;
  return tokens_ > 0 ? static_cast<size_t>(tokens_) : 0;
}

Nanos RateLimiter::readyAt(size_t bytes) const {
  double needed = std::min(static_cast<double>(bytes), burst_ / 4) - tokens_;
  if (needed <= 0) return last_;
  return last_ + Nanos(static_cast<int64_t>(needed / rate_ * 1e9) + 1);
}

}  // namespace gradsync::tcp
