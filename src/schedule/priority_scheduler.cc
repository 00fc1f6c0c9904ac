#include "schedule/priority_scheduler.h"

#include <algorithm>
#include <deque>
#include <limits>
#include <numeric>

#include "common/check.h"

namespace gradsync {

PriorityScheduler::PriorityScheduler(std::vector<int> priorities, size_t window)
    : priorities_(std::move(priorities)), window_(window), readyOrder_(priorities_.size(), 0) {
  GS_CHECK(window_ >= 1);
}

void PriorityScheduler::ready(size_t unit) {
  GS_CHECK(unit < priorities_.size());
  readyOrder_[unit] = readyCount_++;
  queue_.push_back(unit);
  std::push_heap(queue_.begin(), queue_.end(),
                 [this](size_t a, size_t b) { return lessUrgent(a, b); });
}

// The heap keeps its "largest" element first: the most urgent must compare largest.
bool PriorityScheduler::lessUrgent(size_t a, size_t b) const {
  return priorities_[a] != priorities_[b] ? priorities_[a] > priorities_[b] : a > b;
}

std::optional<PriorityScheduler::Pick> PriorityScheduler::next() {
  if (queue_.empty() || inFlight_ >= window_) return std::nullopt;
  std::pop_heap(queue_.begin(), queue_.end(),
                [this](size_t a, size_t b) { return lessUrgent(a, b); });
  Pick pick{.unit = queue_.back()};
  queue_.pop_back();
  for (size_t other : queue_) pick.overtook += readyOrder_[other] < readyOrder_[pick.unit];
  ++inFlight_;
  return pick;
}

void PriorityScheduler::completed(size_t /*unit*/) {
  GS_CHECK(inFlight_ > 0);
  --inFlight_;
}

void PriorityScheduler::reset() {
  queue_.clear();
  readyCount_ = 0;
  inFlight_ = 0;
}

// Events in time order: units becoming ready, and the wire finishing its current unit. At each
// event the scheduler commits what its credits allow; committed units use the wire in the order
// they were committed.
std::vector<size_t> simulatePriorityOrder(const std::vector<int>& priorities,
                                          const std::vector<double>& readyAt,
                                          const std::vector<double>& seconds, size_t window) {
  const size_t n = priorities.size();
  GS_CHECK(readyAt.size() == n && seconds.size() == n);
  PriorityScheduler scheduler(priorities, window);
  std::vector<size_t> byReadyTime(n);
  std::iota(byReadyTime.begin(), byReadyTime.end(), size_t{0});
  std::stable_sort(byReadyTime.begin(), byReadyTime.end(),
                   [&](size_t a, size_t b) { return readyAt[a] < readyAt[b]; });
  std::vector<size_t> order;
  std::deque<size_t> committed;  // front: on the wire (if the wire is busy)
  double wireFreeAt = std::numeric_limits<double>::infinity();  // when the front finishes
  size_t nextReady = 0;
  while (order.size() < n || !committed.empty()) {
    double readyTime =
        nextReady < n ? readyAt[byReadyTime[nextReady]] : std::numeric_limits<double>::infinity();
    double now = std::min(readyTime, wireFreeAt);
    if (wireFreeAt == now) {  // the wire finishes its unit (before a tie's readies are picked)
      scheduler.completed(committed.front());
      committed.pop_front();
      wireFreeAt = std::numeric_limits<double>::infinity();
    }
    // Every unit ready at this instant is queued before the scheduler picks.
    while (nextReady < n && readyAt[byReadyTime[nextReady]] == now) {
      scheduler.ready(byReadyTime[nextReady++]);
    }
    while (auto pick = scheduler.next()) {
      order.push_back(pick->unit);
      committed.push_back(pick->unit);
    }
    if (wireFreeAt == std::numeric_limits<double>::infinity() && !committed.empty()) {
      wireFreeAt = now + seconds[committed.front()];
    }
  }
  return order;
}

}  // namespace gradsync
