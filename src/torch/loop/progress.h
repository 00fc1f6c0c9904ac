// Rank 0's progress display: a bar redrawn in place on a terminal, plain periodic lines
// otherwise (logs, CI), never both. Torch-free.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "torch/loop/options.h"

namespace gradsync {

// The line an epoch ends with: "epoch 1/2: train loss 0.6103, test accuracy 85.10%, 9000
// samples/s", or for a language model (`windowTokens` > 0, a sample being a window of that many
// byte tokens) its held-out loss in nats per token and bits per byte, and tokens/s.
std::string describeEpoch(const EpochRecord& record, int epochs, size_t windowTokens);

class Progress {
 public:
  Progress(bool enabled, int64_t totalSteps, int epochs);
  // After each step: global step (1-based), epoch (1-based), loss, global samples/s.
  void step(int64_t step, int epoch, int64_t stepInEpoch, int64_t stepsPerEpoch, double loss,
            double samplesPerSecond);
  // Ends the bar's line and prints a line of its own.
  void line(const std::string& text);

 private:
  bool enabled_;
  bool terminal_;
  int64_t totalSteps_;
  int epochs_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point lastPrint_;
  bool barOpen_ = false;
};

}  // namespace gradsync
