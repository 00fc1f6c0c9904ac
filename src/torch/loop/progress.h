// Rank 0's progress display: a bar redrawn in place on a terminal, plain periodic lines
// otherwise (logs, CI), never both. Torch-free.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace gradsync {

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
