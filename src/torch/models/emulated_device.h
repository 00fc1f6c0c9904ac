// The accelerator of emulated compute (emulated_model.h): a timeline of compute that runs beside
// the host, as a GPU does, and that the host waits for by sleeping, never by spinning, so the
// cores stay free for communication. Torch-free.
//
// The device runs one piece of work after another: a forward layer starts once the previous
// work is done and the host has waited for the layer's parameters (P3's and sharded's
// pre-forward waits delay the device as they would delay a GPU's kernels); backward starts once
// the host has asked for it (after whatever it waited for between forward and backward), and
// each later backward layer right after the previous one, whatever the host does between them
// (a GPU queues backward's kernels ahead of the host, which is only late with a layer's
// gradients when its own work between layers is longer than the device's). Each call blocks
// until its work ends, so a
// backward layer's gradients reach the engine at the time the device produced them. Deadlines
// chain from the previous deadline, not from the moment the host woke up, so a sleep's overshoot
// does not accumulate over a step's layers.
//
// Not thread-safe: the training thread drives it.
#pragma once

#include <chrono>

namespace gradsync {

class EmulatedDevice {
 public:
  using Clock = std::chrono::steady_clock;

  // A step's forward begins: the device, idle between steps, is free from now on (or when the
  // previous work ends, if that is later).
  void beginStep();
  // A forward layer of `seconds`, whose parameters the host had to wait `waited` for first.
  // Blocks until the layer's end.
  void forward(double seconds, Clock::duration waited);
  // Backward begins: the host launches it now (the device cannot start it earlier).
  void beginBackward();
  // A backward layer of `seconds`, run right after the device's previous work. Blocks until its
  // end (no wait when the host is already past it).
  void backward(double seconds);
  // The optimizer step of gradient mode: starts once the host asks for it. Blocks until its end.
  void update(double seconds);

  // Seconds of work given to the device so far (the profile's times it was asked to run).
  double busySeconds() const { return busy_; }

 private:
  // Sleeps until `end` (at once if it has passed) and makes it the device's next free time.
  void runUntil(Clock::time_point end);

  Clock::time_point free_{};
  double busy_ = 0;
};

}  // namespace gradsync
