// gradsync tune --verify N: runs the top candidates for N steps of `gradsync train` (emulated
// compute from the tuned profile, or real training of --verify-model) as subprocesses of this
// executable, and re-ranks them by measured step time x the same convergence factor. Blocking:
// one run at a time.
#pragma once

#include <string>
#include <vector>

#include "sim/tune.h"

namespace gradsync {

struct VerifyOptions {
  int steps = 0;  // per run (--verify N)
  int workers = 0;
  std::string profile;  // --model-profile, run as --compute emulate:PROFILE
  double computeScale = 1;
  std::string model;               // --verify-model: train this model for real instead of emulating
  std::string bandwidth, latency;  // passed to train's link emulation
};

struct VerifiedCandidate {
  const sim::TuneCandidate* candidate = nullptr;  // into the ranking
  size_t predictedRank = 0;                       // 1-based
  double measuredStepMs = 0;                      // metrics JSON per_step.step_ms
  double measuredTimeToAccuracy() const { return measuredStepMs * candidate->cost.factor; }
};

// The candidates `result.ranked[i]` for i in `ranks` (0-based), each run once, sorted by measured
// time to accuracy. Throws Error naming the candidate when a run fails.
std::vector<VerifiedCandidate> verifyCandidates(const sim::TuneResult& result,
                                                const std::vector<size_t>& ranks,
                                                const VerifyOptions& options);

}  // namespace gradsync
