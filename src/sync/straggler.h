// Straggler detection: which rank is persistently slower than the others, by how much, and
// since which step. Synchronous data parallelism runs at the pace of its slowest rank, so one
// slow host (a noisy neighbour, thermal throttling, a failing disk under the data loader)
// slows every rank; the waits it causes show up on the *other* ranks as communication, which
// is why each rank's own compute time is compared, not its step time.
//
// StragglerDetector is the decision, on numbers only; StragglerWatch feeds it from a job:
// every `windowSteps` steps the ranks allgather their compute time over the window (one
// collective of 8 bytes per rank), so every rank reaches the same verdict at the same step.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "gradsync/transport.h"

namespace gradsync {

struct StragglerOptions {
  int64_t windowSteps = 10;  // steps between exchanges
  double slowerRatio = 1.5;  // a rank's compute per step against the median of the others'
  double minExcessMs = 1.0;  // and at least this much more per step (noise on tiny steps)
  int windowsToConfirm = 2;  // consecutive slow windows before a rank is named
};

struct StragglerReport {
  int rank = 0;
  double slower = 0;       // its compute per step over the median of the other ranks'
  double computeMs = 0;    // its compute per step in the window that named it
  double othersMs = 0;     // the median of the other ranks' in that window
  int64_t sinceStep = 0;   // first step of its first slow window (steps count from 0)
  int64_t namedAfter = 0;  // steps completed when it was named
};

// "rank 2 is 3.1x slower than the others (compute 31.2 ms per step against their 10.1 ms) since
// step 10", for the log and the trace.
std::string describe(const StragglerReport& report);

// Not thread-safe (one caller).
class StragglerDetector {
 public:
  StragglerDetector(int worldSize, StragglerOptions options);

  // One window, steps firstStep to stepsDone - 1, with every rank's compute ms per step (the
  // median step of its window, from StragglerWatch).
  // Returns the ranks named in this window: slow in `windowsToConfirm` consecutive windows
  // and not named since they were last fast. REQUIRES: one value per rank.
  std::vector<StragglerReport> observe(int64_t firstStep, int64_t stepsDone,
                                       std::span<const double> computeMsPerStep);

 private:
  bool isSlow(int rank, std::span<const double> computeMs, double& othersMs) const;

  StragglerOptions options_;
  std::vector<int> slowWindows_;    // consecutive slow windows per rank
  std::vector<int64_t> slowSince_;  // first step of the current slow run per rank
  std::vector<bool> named_;         // named during the current slow run
};

// Every rank of `transport` calls afterStep after each training step, at the same steps; not
// thread-safe. Blocking: at the end of each window it runs one allgather on `tag` (throws the
// transport's errors, e.g. PeerLostError naming the rank).
class StragglerWatch {
 public:
  StragglerWatch(Transport& transport, StragglerOptions options, uint64_t tag);

  // `step`: steps completed; `computeMs`: this rank's compute time of that step. Returns the
  // ranks named at this step (the same on every rank), usually none.
  std::vector<StragglerReport> afterStep(int64_t step, double computeMs);
  // Every rank named so far, in the order named.
  const std::vector<StragglerReport>& reports() const { return reports_; }

 private:
  Transport& transport_;
  StragglerOptions options_;
  uint64_t tag_;
  StragglerDetector detector_;
  std::vector<double> windowMs_;  // this rank's compute per step in the open window
  int64_t windowFirst_ = -1;      // first step of the open window
  std::vector<StragglerReport> reports_;
};

}  // namespace gradsync
