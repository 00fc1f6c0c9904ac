// A doorbell in shared memory: how one process wakes the threads of another that wait for its
// messages, without busy spinning. The word counts rings; sleepers wait on it with FUTEX_WAIT
// (the shared, not private, futex: the word lives in a MAP_SHARED mapping seen by several
// processes), and a ringer only makes the wake system call (waking every sleeper) when some
// sleeper said it is asleep.
//
// The sleeper's protocol (an eventcount): read `epoch()`, look for work, and only if there is
// none call `sleep(epoch, timeout)`, which returns at once if anyone rang in between. A ringer
// makes its work visible first (release stores), then calls `ring()`. No wake-up is lost.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>

namespace gradsync::shm {

struct Doorbell {
  std::atomic<uint32_t> epoch{0};
  std::atomic<uint32_t> sleepers{0};

  uint32_t current() const { return epoch.load(std::memory_order_seq_cst); }

  void ring() {
    epoch.fetch_add(1, std::memory_order_seq_cst);
    if (sleepers.load(std::memory_order_seq_cst) != 0) {
      syscall(SYS_futex, reinterpret_cast<uint32_t*>(&epoch), FUTEX_WAKE, INT32_MAX, nullptr,
              nullptr, 0);
    }
  }

  // Waits until the epoch moves past `seen` or `timeout` passes (or a spurious wake-up).
  void sleep(uint32_t seen, std::chrono::microseconds timeout) {
    sleepers.fetch_add(1, std::memory_order_seq_cst);
    if (epoch.load(std::memory_order_seq_cst) == seen) {
      timespec ts{static_cast<time_t>(timeout.count() / 1'000'000),
                  static_cast<long>(timeout.count() % 1'000'000) * 1000};
      syscall(SYS_futex, reinterpret_cast<uint32_t*>(&epoch), FUTEX_WAIT, seen, &ts, nullptr, 0);
    }
    sleepers.fetch_sub(1, std::memory_order_seq_cst);
  }
};

static_assert(std::atomic<uint32_t>::is_always_lock_free && sizeof(Doorbell) == 8,
              "the doorbell's words are shared between processes: lock-free and plain");

}  // namespace gradsync::shm
