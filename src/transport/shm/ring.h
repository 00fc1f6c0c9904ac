// A single-producer single-consumer byte stream in shared memory: one per ordered pair of ranks
// on a host, living in the receiver's segment (segment.h). The sender's transport thread is the
// only writer, the receiver's the only reader; neither ever blocks on the other: a full ring
// makes the writer stop and ask to be woken (writerWaiting), an empty one makes the reader
// move on.
//
// head and tail count bytes since the start (64-bit: they never wrap), so head - tail is the
// fill and data[pos % capacity] the place of a byte. The writer publishes bytes with a release
// store of head after copying them, the reader frees space with a release store of tail after
// copying them out. `state` says whether the sender is still there: it moves from kOpen to
// kGoodbye (the sender's transport closed after its last byte) or kAbort (it broke; `reason`
// says why, `origin` where the failure began), once, after the sender's last write, so a reader
// that sees it and then an empty ring has seen everything.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>

namespace gradsync::shm {

enum RingState : uint32_t { kOpen = 0, kGoodbye = 1, kAbort = 2 };

struct alignas(64) RingControl {
  std::atomic<uint64_t> head{0};              // written by the sender
  alignas(64) std::atomic<uint64_t> tail{0};  // written by the receiver
  alignas(64) std::atomic<uint32_t> writerWaiting{0};
  std::atomic<uint32_t> state{kOpen};
  int32_t origin = -1;  // kAbort: the rank where the failure began (-1: unknown)
  char reason[240] = {};
};

static_assert(std::atomic<uint64_t>::is_always_lock_free);

// A view of one ring: its control block and `capacity` bytes of data, both in shared memory.
class Ring {
 public:
  Ring() = default;
  Ring(RingControl* control, uint8_t* data, uint64_t capacity)
      : control_(control), data_(data), capacity_(capacity) {}

  RingControl& control() { return *control_; }

  // Writer side. Bytes that fit now (<= n), copied and published.
  size_t write(const uint8_t* src, size_t n) {
    const uint64_t head = control_->head.load(std::memory_order_relaxed);
    const uint64_t tail = control_->tail.load(std::memory_order_acquire);
    const size_t count = std::min<uint64_t>(n, capacity_ - (head - tail));
    copyIn(head, src, count);
    control_->head.store(head + count, std::memory_order_release);
    return count;
  }
  size_t writable() const {
    return capacity_ - (control_->head.load(std::memory_order_relaxed) -
                        control_->tail.load(std::memory_order_acquire));
  }

  // Reader side. Bytes available to read.
  size_t readable() const {
    return control_->head.load(std::memory_order_acquire) -
           control_->tail.load(std::memory_order_relaxed);
  }
  // Copies up to n available bytes out and frees their space; returns how many.
  size_t read(uint8_t* dst, size_t n) {
    const uint64_t tail = control_->tail.load(std::memory_order_relaxed);
    const size_t count = std::min(n, readable());
    copyOut(tail, dst, count);
    control_->tail.store(tail + count, std::memory_order_release);
    return count;
  }

  // The sender's farewell (after its last write).
  void close(RingState state, const std::string& reason, int origin = -1) {
    control_->origin = origin;
    const size_t n = std::min(reason.size(), sizeof(control_->reason) - 1);
    std::memcpy(control_->reason, reason.data(), n);
    control_->reason[n] = 0;
    control_->state.store(state, std::memory_order_release);
  }
  RingState state() const {
    return static_cast<RingState>(control_->state.load(std::memory_order_acquire));
  }
  int origin() const { return control_->origin; }  // after state() said kAbort
  std::string reason() const {
    return std::string(control_->reason, strnlen(control_->reason, sizeof(control_->reason)));
  }

 private:
  void copyIn(uint64_t at, const uint8_t* src, size_t n) {
    if (n == 0) return;
    const size_t pos = at % capacity_;
    const size_t first = std::min<size_t>(n, capacity_ - pos);
    std::memcpy(data_ + pos, src, first);
    std::memcpy(data_, src + first, n - first);
  }
  void copyOut(uint64_t at, uint8_t* dst, size_t n) const {
    if (n == 0) return;
    const size_t pos = at % capacity_;
    const size_t first = std::min<size_t>(n, capacity_ - pos);
    std::memcpy(dst, data_ + pos, first);
    std::memcpy(dst + first, data_, n - first);
  }

  RingControl* control_ = nullptr;
  uint8_t* data_ = nullptr;
  uint64_t capacity_ = 0;
};

}  // namespace gradsync::shm
