// Wavelet's tick-tock gates (Wang et al., MLSys 2021), exactly as the Orion implementation of
// Tick-Tock orders its two training threads (docs/algorithms.md "Wavelet"): one gate for the
// forwards and one for the backwards, each passed by the waves in turn, wave 0 (tick) first. So
// no two forwards overlap, no two backwards overlap, and wave w + 1 starts its forward when wave
// w's forward ends, i.e. while wave w runs its backward: the waves run half an iteration apart,
// one's forward (and its communication) beside the other's backward. Torch-free.
//
// Thread-safe: every wave's thread calls enter/leave for its own wave. Nothing waits forever:
// a wait ends with TimeoutError after `timeout`, or with the error given to abort() (a failed
// wave aborts the gates so that the others stop too).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <vector>

#include "torch/loop/options.h"

namespace gradsync {

class WaveGates {
 public:
  WaveGates(int waves, std::chrono::milliseconds timeout, int rank);

  // Blocks until it is `wave`'s turn at `phase`'s gate (round robin from wave 0).
  void enter(WavePhase phase, int wave, int64_t step);
  // Passes the gate on to the next wave; records the interval.
  void leave(WavePhase phase, int wave);
  // Wakes every waiter, which throws `error`; later enters throw it too.
  void abort(std::exception_ptr error);
  // Every pass so far, in the order the passes ended.
  std::vector<WaveInterval> intervals() const;

  // enter() in the constructor, leave() in the destructor (also when the phase throws).
  class Pass {
   public:
    Pass(WaveGates& gates, WavePhase phase, int wave, int64_t step);
    ~Pass();
    Pass(const Pass&) = delete;
    Pass& operator=(const Pass&) = delete;

   private:
    WaveGates& gates_;
    const WavePhase phase_;
    const int wave_;
  };

 private:
  struct Gate {
    int turn = 0;  // the wave whose pass is next
    WaveInterval current;
  };
  Gate& gate(WavePhase phase) { return phase == WavePhase::kForward ? forward_ : backward_; }
  double now() const;

  const int waves_;
  const std::chrono::milliseconds timeout_;
  const int rank_;
  const std::chrono::steady_clock::time_point origin_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  Gate forward_, backward_;
  std::exception_ptr error_;
  std::vector<WaveInterval> intervals_;
};

}  // namespace gradsync
