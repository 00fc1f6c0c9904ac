// GuardEvent: the compression guardrail made a communication unit dense (docs/algorithms.md,
// "The compression guardrail"; SyncOptions::guard). Torch-free plain values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gradsync {

struct GuardEvent {
  int64_t step = 0;                  // the first step the unit went dense (steps count from 0)
  size_t unit = 0;                   // the communication unit (the engine's layout)
  std::vector<std::string> tensors;  // its parameters
  std::string method;                // the compression it left, e.g. "randomk:0.01"
  // What tripped, the worst over the ranks: "alignment" (cos(sent, gradient) fell below the
  // threshold), "residual" (the error-feedback residual's norm over the gradient's) or "sent"
  // (the norm of what the unit sent over the gradient's) rose above it, or "loss" (the mean
  // training loss over the ranks, over the dense warm-up's last window: every unit at once), or
  // "optimizer" (its method fails under the run's Adam-family optimizer: dense from the end of
  // the warm-up on, decided at the start; ratio and threshold 0).
  std::string signal;
  double ratio = 0;      // the signal in the window that confirmed the trip (the cosine)
  double threshold = 0;  // the threshold it passed
  std::string reason;    // the log line: "guard: unit 3 (tensors ...) -> dense at step 67: ..."
  // The rank that decided alone: a worker pushing to parameter servers decides for its own
  // pushes (its signals and losses only). -1 over the ring, where every rank decides alike.
  int rank = -1;
};

}  // namespace gradsync
