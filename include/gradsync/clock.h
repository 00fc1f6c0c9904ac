// Time source. Everything that measures or waits on time takes a Clock, so the simulator and
// tests can run the real code against simulated time (ManualClock).
#pragma once

#include <chrono>
#include <mutex>

namespace gradsync {

using Nanos = std::chrono::nanoseconds;

class Clock {
 public:
  virtual ~Clock() = default;
  // Monotonic time since an arbitrary epoch. Thread-safe.
  virtual Nanos now() const = 0;
};

// The real monotonic clock (std::chrono::steady_clock).
class SteadyClock final : public Clock {
 public:
  Nanos now() const override;
  // A shared instance: stateless, so sharing it is not global mutable state.
  static const SteadyClock& instance();
};

// Seconds elapsed on `clock` since `start`, one of its earlier readings.
inline double secondsSince(const Clock& clock, Nanos start) {
  return std::chrono::duration<double>(clock.now() - start).count();
}

// A clock that moves only when told to. Thread-safe.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(Nanos start = Nanos{0}) : now_(start) {}
  Nanos now() const override;
  void advance(Nanos delta);
  void set(Nanos t);

 private:
  mutable std::mutex mutex_;
  Nanos now_;
};

}  // namespace gradsync
