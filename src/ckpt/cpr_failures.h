// Failures of embedding servers, injected reproducibly (`--inject-failures mtbf=...,seed=...`),
// and the bookkeeping of what checkpointing and recovery cost (docs/algorithms.md, "Partial
// recovery (CPR)"). Torch-free, pure or plain data; thread-compatible.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gradsync {

struct FailureSpec {
  double mtbf = 0;        // mean time between failures of the job (any server)
  bool duration = false;  // mtbf is a duration in seconds (simulated clock), else in steps
  uint64_t seed = 0;
  int maxFailures = -1;  // at most this many (-1: no limit)
};

// "mtbf=300,seed=2" (steps), "mtbf=8h,seed=2,max=5" (a duration: 90s, 30min, 8h). ConfigError
// naming `what` and the accepted form otherwise.
FailureSpec parseFailureSpec(std::string_view text, std::string_view what = "--inject-failures");

struct FailureEvent {
  double time = 0;  // in the spec's unit, from the start of the run
  int shard = 0;    // the server that fails
};

// The failures before `horizon`: exponential inter-arrival times of mean mtbf (a Poisson
// process, the usual model of independent node failures) and a uniformly drawn server each,
// from the seed alone (the same trace for every recovery mode compared on it).
std::vector<FailureEvent> failureTrace(const FailureSpec& spec, int shards, double horizon);
// When server `shard` fails for the n-th time (n >= 1), if it does.
std::optional<double> nthFailureOf(const std::vector<FailureEvent>& trace, int shard, int n);
// The same from the spec, drawing the trace only as far as needed (no horizon).
std::optional<double> nthFailureOf(const FailureSpec& spec, int shards, int shard, int n);

// What checkpointing and failures cost a run, on its clock (measured seconds, or simulated).
struct RecoveryLedger {
  double trainingTime = 0;  // steps that count (each step once)
  double saveTime = 0;      // training waited for saves
  double loadTime = 0;      // loading checkpoints after failures
  double restartTime = 0;   // from a failure until the replacement served again, loading excluded
  double redoneTime = 0;    // full recovery: steps trained again after a rollback
  int fullSaves = 0;
  int partialSaves = 0;
  uint64_t savedRows = 0;  // rows written by all saves
  int failures = 0;        // servers that failed
  int recoveries = 0;      // recoveries made (servers failing together are recovered together)
  uint64_t redoneSteps = 0;
  // Per shard: lost samples (samples trained since the restored state was saved, summed over
  // the shard's failures) and lost accesses (row updates of those samples that the restored
  // rows do not hold).
  std::vector<uint64_t> lostSamples;
  std::vector<uint64_t> lostAccesses;
  uint64_t totalAccesses = 0;  // row updates pushed to every shard

  explicit RecoveryLedger(int shards = 0) : lostSamples(shards, 0), lostAccesses(shards, 0) {}
  double totalTime() const { return trainingTime + saveTime + loadTime + restartTime + redoneTime; }
  // (saving + loading + restarting + redone work) / total time.
  double overheadFraction() const;
  // The portion of lost samples: lost row updates over all row updates.
  double pls() const;
};

}  // namespace gradsync
