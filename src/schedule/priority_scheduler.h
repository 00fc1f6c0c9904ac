// P3's sender queue as a pure policy (no threads, no I/O): ready units wait in a priority
// queue, and a credit window bounds how many are committed to the wire ahead of completion.
//
// Why a window: once a unit is handed to the wire it can no longer be overtaken (sockets and
// the ring are FIFO), so the fewer units are committed ahead, the sooner a newly ready, more
// urgent unit goes out. P3 bounds ZeroMQ's queue for the same reason. A window of 1 gives
// the finest preemption; 2 lets the next unit's decision travel while one is on the wire.
//
// The engine (sync/) drives one instance on rank 0 and broadcasts its picks; the simulator
// drives the same class on simulated time, so both produce one order for the same inputs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace gradsync {

class PriorityScheduler {
 public:
  struct Pick {
    size_t unit = 0;
    // Units that were ready before this one but are still queued: how many it overtook.
    size_t overtook = 0;
  };

  // `priorities` by unit (lower is more urgent; ties go to the lower unit index).
  PriorityScheduler(std::vector<int> priorities, size_t window);

  // The unit's data is ready to send. Each unit once per round.
  void ready(size_t unit);
  // The most urgent ready unit, if a credit is free (taking it); none otherwise.
  std::optional<Pick> next();
  // A committed unit is done: its credit is free again.
  void completed(size_t unit);
  // Starts a new round (a training step): nothing ready, nothing committed.
  void reset();

  size_t inFlight() const { return inFlight_; }

 private:
  bool lessUrgent(size_t a, size_t b) const;
  void addQueued(uint64_t order, int delta);
  void renumberQueued();
  size_t queuedBefore(uint64_t order) const;  // queued units with a smaller ready order

  const std::vector<int> priorities_;
  const size_t window_;
  std::vector<size_t> queue_;         // ready, not committed (a heap: the most urgent first)
  std::vector<uint64_t> readyOrder_;  // by unit: the sequence number of its ready() call
  std::vector<int64_t> queuedTree_;   // Fenwick tree of queued units, by ready order
  uint64_t readyCount_ = 0;
  size_t inFlight_ = 0;
};

// The order in which units go on one wire that carries one unit at a time, each taking
// `seconds[u]`, when unit u becomes ready at `readyAt[u]`: the scheduler's picks replayed on a
// simulated clock (tests and the simulator). Returns the units in the order they were picked.
std::vector<size_t> simulatePriorityOrder(const std::vector<int>& priorities,
                                          const std::vector<double>& readyAt,
                                          const std::vector<double>& seconds, size_t window);

}  // namespace gradsync
