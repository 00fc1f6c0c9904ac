// The simulator's event loop: actions scheduled at simulated times, run in time order (ties in
// the order they were scheduled); time jumps from event to event. Time is a double of seconds,
// not a Clock: the real code the simulator runs (planner, scheduler, compressors' sizes) is pure
// policy that reads no clock, and closed-form checks need more than nanosecond resolution.
// Single-threaded; not thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <queue>
#include <vector>

namespace gradsync::sim {

class EventQueue {
 public:
  using Action = std::function<void()>;

  // Seconds since the start of the simulation.
  double now() const { return now_; }
  // Runs `action` at time `at` (>= now()).
  void at(double at, Action action);
  // Runs every event, including those the actions schedule, until none is left.
  void run();
  uint64_t eventsRun() const { return eventsRun_; }

 private:
  struct Event {
    double time;
    uint64_t sequence;
    Action action;
  };
  struct Later {
    bool operator()(const Event& a, const Event& b) const {
      return a.time != b.time ? a.time > b.time : a.sequence > b.sequence;
    }
  };

  double now_ = 0;
  uint64_t scheduled_ = 0;
  uint64_t eventsRun_ = 0;
  std::priority_queue<Event, std::vector<Event>, Later> events_;
};

}  // namespace gradsync::sim
