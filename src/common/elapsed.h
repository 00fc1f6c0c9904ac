// Seconds elapsed since a time point of any std::chrono clock, on that clock: the one helper
// for the trainers' and servers' own timings (gradsync/clock.h's secondsSince is for the
// injectable Clock the engine uses).
#pragma once

#include <chrono>

namespace gradsync {

template <class TimePoint>
double secondsSince(TimePoint start) {
  return std::chrono::duration<double>(TimePoint::clock::now() - start).count();
}

}  // namespace gradsync
