#include "gradsync/clock.h"

namespace gradsync {

Nanos SteadyClock::now() const {
  return std::chrono::duration_cast<Nanos>(std::chrono::steady_clock::now().time_since_epoch());
}

const SteadyClock& SteadyClock::instance() {
  static const SteadyClock kClock;
  return kClock;
}

Nanos ManualClock::now() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return now_;
}

void ManualClock::advance(Nanos delta) {
  std::lock_guard<std::mutex> lock(mutex_);
  now_ += delta;
}

void ManualClock::set(Nanos t) {
  std::lock_guard<std::mutex> lock(mutex_);
  now_ = t;
}

}  // namespace gradsync
