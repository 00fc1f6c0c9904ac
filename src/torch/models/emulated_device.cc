#include "torch/models/emulated_device.h"

#include <sys/prctl.h>
#include <time.h>

#include <algorithm>
#include <cerrno>

namespace gradsync {
namespace {

using DeviceClock = EmulatedDevice::Clock;

DeviceClock::duration toDuration(double seconds) {
  return std::chrono::duration_cast<DeviceClock::duration>(std::chrono::duration<double>(seconds));
}

// Linux wakes a sleeping thread up to 50 us late by default (timer slack), which would make every
// emulated layer that much longer; 1 ns asks for the timer's own resolution. Per thread.
void tightenTimerSlack() {
  thread_local bool done = false;
  if (done) return;
  ::prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
  done = true;
}

// Sleeps until `end` on the monotonic clock steady_clock reads (absolute, so an interrupted
// sleep resumes towards the same deadline).
void sleepUntil(DeviceClock::time_point end) {
  const auto since = std::chrono::duration_cast<std::chrono::nanoseconds>(end.time_since_epoch());
  timespec at{};
  at.tv_sec = static_cast<time_t>(since.count() / 1'000'000'000);
  at.tv_nsec = static_cast<long>(since.count() % 1'000'000'000);
  while (::clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, nullptr) == EINTR) {
  }
}

}  // namespace

void EmulatedDevice::beginStep() {
  tightenTimerSlack();
  free_ = std::max(free_, DeviceClock::now());
}

void EmulatedDevice::forward(double seconds, DeviceClock::duration waited) {
  busy_ += seconds;
  runUntil(free_ + waited + toDuration(seconds));
}

// From the moment the host asks: a wait of the host's between forward and backward (a drain of
// the engine) delays the device as it would a GPU's. Up to kHostSlack of host time is not
// counted: the last forward sleep's overshoot and the loss, which a GPU's queue would hide (a
// wait is then short by at most that much).
void EmulatedDevice::beginBackward() {
  constexpr auto kHostSlack = std::chrono::microseconds(500);
  free_ = std::max(free_, DeviceClock::now() - kHostSlack);
}

void EmulatedDevice::backward(double seconds) {
  busy_ += seconds;
  runUntil(free_ + toDuration(seconds));
}

void EmulatedDevice::update(double seconds) {
  busy_ += seconds;
  runUntil(std::max(free_, DeviceClock::now()) + toDuration(seconds));
}

void EmulatedDevice::runUntil(DeviceClock::time_point end) {
  if (end > DeviceClock::now()) sleepUntil(end);
  free_ = end;
}

}  // namespace gradsync
