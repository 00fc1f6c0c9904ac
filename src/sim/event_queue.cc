#include "sim/event_queue.h"

#include "common/check.h"

namespace gradsync::sim {

void EventQueue::at(double time, Action action) {
  GS_CHECK_LE(now_, time);
  events_.push(Event{time, scheduled_++, std::move(action)});
}

void EventQueue::run() {
  while (!events_.empty()) {
    // Moved out before popping: the action may schedule more events.
    Event event = std::move(const_cast<Event&>(events_.top()));
    events_.pop();
    now_ = event.time;
    ++eventsRun_;
    event.action();
  }
}

}  // namespace gradsync::sim
