#include "schedule/priority_scheduler.h"

#include <algorithm>
#include <deque>
#include <limits>
#include <numeric>

#include "common/check.h"

namespace gradsync {

PriorityScheduler::PriorityScheduler(std::vector<int> priorities, size_t window)
    : priorities_(std::move(priorities)),
      window_(window),
      readyOrder_(priorities_.size(), 0),
      queuedTree_(priorities_.size() + 1, 0) {
  GS_CHECK(window_ >= 1);
}

// A Fenwick tree over ready order: how many queued units became ready before a given one, in
// O(log n), so counting what a pick overtook does not make a round quadratic in its units.
void PriorityScheduler::addQueued(uint64_t order, int delta) {
  for (size_t i = order + 1; i < queuedTree_.size(); i += i & (~i + 1)) queuedTree_[i] += delta;
}

size_t PriorityScheduler::queuedBefore(uint64_t order) const {
  int64_t count = 0;
  for (size_t i = order; i > 0; i -= i & (~i + 1)) count += queuedTree_[i];
  return static_cast<size_t>(count);
}

// Only the queued units' relative ready order matters (what a pick overtook), so when the
// numbering reaches the tree's size (a caller that never calls reset() goes on numbering across
// rounds) the queued units are renumbered 0..q-1 in their order.
void PriorityScheduler::renumberQueued() {
  std::vector<size_t> queued = queue_;
  std::sort(queued.begin(), queued.end(),
            [this](size_t a, size_t b) { return readyOrder_[a] < readyOrder_[b]; });
  std::fill(queuedTree_.begin(), queuedTree_.end(), 0);
  for (size_t i = 0; i < queued.size(); ++i) {
    readyOrder_[queued[i]] = i;
    addQueued(i, 1);
  }
  readyCount_ = queued.size();
}

void PriorityScheduler::ready(size_t unit) {
  GS_CHECK(unit < priorities_.size());
  if (readyCount_ == priorities_.size()) renumberQueued();
  GS_CHECK(readyCount_ < priorities_.size());  // a unit queued twice
  readyOrder_[unit] = readyCount_++;
  addQueued(readyOrder_[unit], 1);
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
  addQueued(readyOrder_[pick.unit], -1);
  pick.overtook = queuedBefore(readyOrder_[pick.unit]);
  ++inFlight_;
  return pick;
}

void PriorityScheduler::completed(size_t /*unit*/) {
  GS_CHECK(inFlight_ > 0);
  --inFlight_;
}

void PriorityScheduler::reset() {
  queue_.clear();
  std::fill(queuedTree_.begin(), queuedTree_.end(), 0);
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
